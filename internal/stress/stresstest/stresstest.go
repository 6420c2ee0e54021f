// Package stresstest holds the helpers the tests of the stress packages
// share: a URL where nothing listens, golden files and a Validate result's
// check.
package stresstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/porthold"
	"github.com/inferrail/inferrail/internal/procs"
)

// DeadURL is a loopback URL where nothing listens until the test ends:
// its port is held without listening, so nothing started meanwhile gets it.
func DeadURL(t *testing.T) string {
	t.Helper()
	hold, port := porthold.Free()
	t.Cleanup(hold.Release)
	if port == 0 {
		var err error
		if port, err = procs.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	return "http://127.0.0.1:" + strconv.Itoa(port)
}

// FirstDiff describes the first line where got departs from want.
func FirstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, wl, gl)
		}
	}
	return "no line"
}

// CheckValidate checks a Validate result: nil when want is nil, else an
// error naming every problem in want.
func CheckValidate(t *testing.T, err error, want []string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Errorf("Validate() = %v, want nil", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Validate() = nil, want %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %q, want it to contain %q", err, w)
		}
	}
}

// Golden checks got against the golden file at path, writing it first
// when update is set (the tests' -update flag).
func Golden(t *testing.T, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs at %s (run with -update to accept)", path, FirstDiff(string(want), string(got)))
	}
}

package auth

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

type reloads struct {
	mu     sync.Mutex
	good   []int // key counts put in effect
	failed []string
}

func (r *reloads) record(_, next *Set, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed = append(r.failed, err.Error())
		return
	}
	r.good = append(r.good, next.Len())
}

func writeKeys(t *testing.T, path string, keys ...*Key) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(FormatFile(keys)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestSource(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	a := &Key{Name: "a", Hash: hashFor("a")}
	b := &Key{Name: "b", Hash: hashFor("b")}
	if _, err := Open(path, Options{}, nil, nil); err == nil {
		t.Fatal("Open of a missing file succeeded")
	}
	writeKeys(t, path, a)
	var logs bytes.Buffer
	var r reloads
	src, err := Open(path, Options{}, slog.New(slog.NewTextHandler(&logs, nil)), r.record)
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(name string) bool { return src.Keys().Lookup("irk-test-"+name) != nil }
	if !lookup("a") || lookup("b") {
		t.Fatal("the first read does not hold exactly a")
	}

	steps := []struct {
		name   string
		do     func()
		err    bool
		a, b   bool
		good   int // reloads put in effect so far
		failed int // failures reported so far
	}{
		{"unchanged", func() {}, false, true, false, 0, 0},
		{"b_added", func() { writeKeys(t, path, a, b) }, false, true, true, 1, 0},
		{"a_revoked", func() { writeKeys(t, path, b) }, false, false, true, 2, 0},
		{"bad_file_keeps_keys", func() { os.WriteFile(path, []byte("keys: [oops"), 0o600) }, true, false, true, 2, 1},
		{"same_bad_file_reported_once", func() {}, true, false, true, 2, 1},
		{"removed_keeps_keys", func() { os.Remove(path) }, true, false, true, 2, 2},
		{"still_missing_reported_once", func() {}, true, false, true, 2, 2},
		{"back", func() { writeKeys(t, path, a) }, false, true, false, 3, 2},
	}
	for _, s := range steps {
		s.do()
		err := src.Check()
		if (err != nil) != s.err {
			t.Errorf("%s: Check() = %v, want an error %v", s.name, err, s.err)
		}
		if lookup("a") != s.a || lookup("b") != s.b {
			t.Errorf("%s: a found %v, b found %v; want %v, %v", s.name, lookup("a"), lookup("b"), s.a, s.b)
		}
		if len(r.good) != s.good || len(r.failed) != s.failed {
			t.Errorf("%s: %d reloads and %d failures reported, want %d and %d", s.name, len(r.good), len(r.failed), s.good, s.failed)
		}
	}
	if strings.Contains(logs.String(), "irk-") || strings.Contains(logs.String(), hashFor("a").String()[7:20]) {
		t.Errorf("the log quotes a key or a hash:\n%s", logs.String())
	}
}

// TestSourceRetriesARefusedFile: a file refused for a model the config
// does not have is parsed again, unchanged, once the config has it.
func TestSourceRetriesARefusedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path)
	var mu sync.Mutex
	models := map[string]bool{"old": true}
	resolve := func(name string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		return name, models[name]
	}
	src, err := Open(path, Options{Resolve: resolve}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeKeys(t, path, &Key{Name: "a", Hash: hashFor("a"), Models: []string{"new"}})
	if err := src.Check(); err == nil || src.Keys().Len() != 0 {
		t.Fatalf("a key for a model the config lacks: %v, %d keys", err, src.Keys().Len())
	}
	mu.Lock()
	models["new"] = true // the config gained it
	mu.Unlock()
	if err := src.Check(); err != nil || src.Keys().Lookup("irk-test-a") == nil {
		t.Errorf("the same file once the model exists: %v, key a found %v", err, src.Keys().Lookup("irk-test-a") != nil)
	}
}

// TestSourceRun: Run picks a change up within its interval and stops with
// its context.
func TestSourceRun(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	writeKeys(t, path, &Key{Name: "a", Hash: hashFor("a")})
	src, err := Open(path, Options{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { src.Run(ctx, time.Second); close(done) }()
		writeKeys(t, path, &Key{Name: "b", Hash: hashFor("b")})
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if src.Keys().Lookup("irk-test-b") == nil {
			t.Error("a second after the file changed, its keys are not in effect")
		}
		cancel()
		<-done
	})
}

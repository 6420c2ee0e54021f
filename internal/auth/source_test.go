package auth

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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

// TestSourceUnknownModels: a name no model or alias has is refused when
// the file is opened, but not on a reread, where the config may have
// dropped it after the file was written: it grants nothing, is logged, and
// the rest of the file (here a revocation) takes effect. A grant follows
// the resolver as it changes, without a reread.
func TestSourceUnknownModels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	var mu sync.Mutex
	aliases := map[string]string{"m1": "m1", "m2": "m2", "fast": "m1"}
	resolve := func(name string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		m, ok := aliases[name]
		return m, ok
	}
	a := &Key{Name: "a", Hash: hashFor("a"), Models: []string{"fast"}}
	b := &Key{Name: "b", Hash: hashFor("b")}
	writeKeys(t, path, a, &Key{Name: "c", Hash: hashFor("c"), Models: []string{"nope"}})
	if _, err := Open(path, Options{Resolve: resolve}, nil, nil); err == nil || !strings.Contains(err.Error(), `keys[1].models[0]: "nope" is not a configured model or alias`) {
		t.Fatalf("Open of a file naming an unknown model: %v", err)
	}
	writeKeys(t, path, a, b)
	var logs bytes.Buffer
	src, err := Open(path, Options{Resolve: resolve}, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		aliases map[string]string
		keys    []*Key
		m1, m2  bool // what key a may use
		b       bool // key b is in effect
	}{
		{"at_start", nil, nil, true, false, true},
		{"alias_moved", map[string]string{"m1": "m1", "m2": "m2", "fast": "m2"}, nil, false, true, true},
		{"alias_removed", map[string]string{"m1": "m1", "m2": "m2"}, nil, false, false, true},
		{"b_revoked", nil, []*Key{a}, false, false, false},
		{"alias_back", map[string]string{"m1": "m1", "m2": "m2", "fast": "m1"}, nil, true, false, false},
	}
	for _, s := range steps {
		if s.aliases != nil {
			mu.Lock()
			aliases = s.aliases
			mu.Unlock()
		}
		if s.keys != nil {
			writeKeys(t, path, s.keys...)
		}
		if err := src.Check(); err != nil {
			t.Errorf("%s: Check() = %v", s.name, err)
		}
		k := src.Keys().Lookup("irk-test-a")
		if k == nil {
			t.Fatalf("%s: key a is gone", s.name)
		}
		if got1, got2 := k.Allows("m1", resolve), k.Allows("m2", resolve); got1 != s.m1 || got2 != s.m2 {
			t.Errorf("%s: a may use m1 %v, m2 %v; want %v, %v", s.name, got1, got2, s.m1, s.m2)
		}
		if got := src.Keys().Lookup("irk-test-b") != nil; got != s.b {
			t.Errorf("%s: b in effect %v, want %v", s.name, got, s.b)
		}
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "model=fast") {
		t.Errorf("the reread with an unknown name logged no warning:\n%s", logs.String())
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
		time.Sleep(time.Second + SettleTime + time.Millisecond) // the tick, then the second read
		synctest.Wait()
		if src.Keys().Lookup("irk-test-b") == nil {
			t.Error("a second after the file changed, and the settling read, its keys are not in effect")
		}
		cancel()
		<-done
	})
}

// TestSourceSettles: a keys file caught midway through a rewrite, a good
// file with fewer keys, is not put in effect: Check rereads it SettleTime
// later and takes the bytes that stayed (a review's finding: a writer that
// paused after three of eight entries had five keys refused meanwhile).
func TestSourceSettles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	var all []*Key
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		all = append(all, &Key{Name: name, Hash: hashFor(name)})
	}
	writeKeys(t, path, all[0])
	var applied []int
	src, err := Open(path, Options{}, nil, func(_, next *Set, err error) {
		if err == nil {
			applied = append(applied, next.Len())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		writeKeys(t, path, all[:3]...) // the rewrite, caught midway
		done := make(chan error)
		go func() { done <- src.Check() }()
		synctest.Wait() // Check waits to read it again
		writeKeys(t, path, all...)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	if !slices.Equal(applied, []int{8}) || src.Keys().Len() != 8 {
		t.Errorf("key counts put in effect %v, now %d; want only the whole file's 8", applied, src.Keys().Len())
	}
}

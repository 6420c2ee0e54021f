package filewatch

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	setTime := func(tm time.Time) {
		t.Helper()
		if err := os.Chtimes(path, tm, tm); err != nil {
			t.Fatal(err)
		}
	}
	f := New(path, 16)
	type step struct {
		name    string
		do      func()
		data    string
		changed bool
		err     error
	}
	steps := []step{
		{"missing", func() {}, "", false, os.ErrNotExist},
		{"first_read", func() { write("one"); setTime(old) }, "one", true, nil},
		{"unchanged", func() {}, "", false, nil},
		{"touched_same_content", func() { setTime(old.Add(time.Minute)) }, "", false, nil},
		{"new_content", func() { write("two"); setTime(old.Add(2 * time.Minute)) }, "two", true, nil},
		{"same_size_same_mtime_recent", func() { write("six"); setTime(time.Now()) }, "six", true, nil},
		{"rewritten_within_the_tick", func() { mt, _ := os.Stat(path); write("ten"); setTime(mt.ModTime()) }, "ten", true, nil},
		{"too_large_keeps_last", func() { write("0123456789abcdefXYZ") }, "", false, ErrTooLarge},
		{"removed", func() { os.Remove(path) }, "", false, os.ErrNotExist},
		{"back_as_before", func() { write("ten") }, "", false, nil},
		{"swapped_by_rename", func() {
			tmp := filepath.Join(dir, "tmp")
			if err := os.WriteFile(tmp, []byte("new"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, "new", true, nil},
	}
	for _, s := range steps {
		s.do()
		data, changed, err := f.Poll()
		if string(data) != s.data || changed != s.changed || !errors.Is(err, s.err) {
			t.Errorf("%s: Poll() = %q, %v, %v; want %q, %v, %v", s.name, data, changed, err, s.data, s.changed, s.err)
		}
	}
}

package linelog

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWritable: Writable passes a file that can be appended to and a new
// file in a directory that takes one (or, when the writer makes them, in
// directories yet to be made), and refuses, naming the path, what cannot
// be written; it never waits on a named pipe, and leaves no file behind.
func TestWritable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		path      string
		makesDirs bool
		wantErr   bool
	}{
		{name: "existing_file", path: file},
		{name: "new_file", path: filepath.Join(dir, "new")},
		{name: "missing_directory", path: filepath.Join(dir, "a", "b", "new"), wantErr: true},
		{name: "missing_directory_made_by_the_writer", path: filepath.Join(dir, "a", "b", "new"), makesDirs: true},
		{name: "directory", path: dir, wantErr: true},
		{name: "under_a_file", path: filepath.Join(file, "new"), makesDirs: true, wantErr: true},
		{name: "pipe_without_a_reader", path: fifo, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Writable(tc.path, Appends, tc.makesDirs)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Writable(%s, %v) = %v, want an error: %v", tc.path, tc.makesDirs, err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.path) {
				t.Errorf("the error does not name the path: %v", err)
			}
		})
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("the probes left %v, want only file and fifo", entries)
	}
	if b, _ := os.ReadFile(file); string(b) != "kept\n" {
		t.Errorf("the file holds %q after its probe", b)
	}
}

// TestWritableByUse: what Writable asks of a file already there and of its
// directory follows what the writer does with the file. The capture moves
// a read-only file aside and writes a new one, so only its directory
// matters; the decision log appends to it, so it is refused; the shadow
// log, never rotated, needs its file open for reading and appending and
// no new file in its directory (found by a review: a read-only file was
// refused for every log, and an existing shadow log in a directory that
// takes no new files too, though its start succeeds).
func TestWritableByUse(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes a read-only file")
	}
	dir := t.TempDir()
	mk := func(name string, perm os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("kept\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, perm); err != nil {
			t.Fatal(err)
		}
		return path
	}
	readOnly := mk("read-only", 0o444)
	writeOnly := mk("write-only", 0o200)
	locked := filepath.Join(dir, "locked")
	if err := os.Mkdir(locked, 0o755); err != nil {
		t.Fatal(err)
	}
	inLocked := filepath.Join(locked, "file")
	if err := os.WriteFile(inLocked, []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(locked, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(locked, 0o755) })
	for _, tc := range []struct {
		name    string
		path    string
		use     Use
		wantErr bool
	}{
		{"read_only_file_appended", readOnly, Appends, true},
		{"read_only_file_moved_aside", readOnly, MovesAside, false},
		{"read_only_file_in_place", readOnly, AppendsInPlace, true},
		{"write_only_file_in_place", writeOnly, AppendsInPlace, true}, // read for its last line
		{"write_only_file_appended", writeOnly, Appends, false},
		{"file_in_a_locked_directory_appended", inLocked, Appends, true}, // its rotation makes files
		{"file_in_a_locked_directory_moved_aside", inLocked, MovesAside, true},
		{"file_in_a_locked_directory_in_place", inLocked, AppendsInPlace, false},
		{"new_file_in_a_locked_directory_in_place", filepath.Join(locked, "new"), AppendsInPlace, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Writable(tc.path, tc.use, false)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Writable(%s, %v) = %v, want an error: %v", tc.path, tc.use, err, tc.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tc.path) {
				t.Errorf("the error does not name the path: %v", err)
			}
		})
	}
}

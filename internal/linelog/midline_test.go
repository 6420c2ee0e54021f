package linelog

import (
	"bytes"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func encodeString(s string, b []byte) []byte { return append(append(b, s...), '\n') }

// fullDisk is a sink whose first write waits for release, and whose
// second writes cut(p) bytes of p and fails with ENOSPC, as a disk that
// filled during a write; every other write succeeds.
type fullDisk struct {
	cut      func(p []byte) int
	entered  chan struct{} // closed when the first write starts
	release  chan struct{} // closed by the test to let the first write end
	failed   chan struct{} // closed when the second write has failed
	mu       sync.Mutex
	writes   int
	contents bytes.Buffer
}

func newFullDisk(cut func(p []byte) int) *fullDisk {
	return &fullDisk{cut: cut, entered: make(chan struct{}), release: make(chan struct{}), failed: make(chan struct{})}
}

func (d *fullDisk) Write(p []byte) (int, error) {
	d.mu.Lock()
	d.writes++
	n := d.writes
	d.mu.Unlock()
	switch n {
	case 1:
		close(d.entered)
		<-d.release
	case 2:
		k := d.cut(p)
		d.mu.Lock()
		d.contents.Write(p[:k])
		d.mu.Unlock()
		close(d.failed)
		return k, syscall.ENOSPC
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.contents.Write(p)
}

func (d *fullDisk) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.contents.String()
}

// waitFor fails the test when ch is not closed within a generous time.
func waitFor(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
	}
}

// TestPartialWriteEndsTheCutLine: a batch whose write fails partway (a
// full disk) leaves the file inside a line; the next batch ends that
// line before its own, so that its first record is a line of its own,
// and the lines that reached the file whole count as written.
func TestPartialWriteEndsTheCutLine(t *testing.T) {
	tests := []struct {
		name  string
		cut   func(p []byte) int // how much of the batch "record a\nrecord b\n" reaches the file
		want  string
		stats Stats
	}{
		{"inside_the_second_line", func(p []byte) int { return len("record a\nrec") },
			"record 0\nrecord a\nrec\nrecord c\n", Stats{Written: 3, Failed: 1}},
		{"at_a_line_end", func(p []byte) int { return len("record a\n") },
			"record 0\nrecord a\nrecord c\n", Stats{Written: 3, Failed: 1}},
		{"inside_the_first_line", func(p []byte) int { return len("rec") },
			"record 0\nrec\nrecord c\n", Stats{Written: 2, Failed: 2}},
		{"nothing", func(p []byte) int { return 0 },
			"record 0\nrecord c\n", Stats{Written: 2, Failed: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			disk := newFullDisk(tt.cut)
			w := Open(Options{Sink: disk}, encodeString)
			// The first write holds the goroutine while a and b queue, so
			// that they are written, and cut, as one batch.
			w.Log("record 0")
			waitFor(t, "the first write", disk.entered)
			w.Log("record a")
			w.Log("record b")
			close(disk.release)
			waitFor(t, "the failed write", disk.failed)
			w.Log("record c")
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if got := disk.String(); got != tt.want {
				t.Errorf("file %q, want %q", got, tt.want)
			}
			if got := w.Stats(); got != tt.stats {
				t.Errorf("stats %+v, want %+v", got, tt.stats)
			}
		})
	}
}

// TestOpenOnACutFile: a file a previous run left inside a line (it
// stopped while writing, or its disk filled) gets the next record on a
// line of its own; a writer that writes nothing leaves it as it was.
func TestOpenOnACutFile(t *testing.T) {
	tests := []struct {
		name   string
		before string // "" for no file
		fresh  bool
		log    bool
		want   string
	}{
		{"no_file", "", false, true, "x\n"},
		{"whole_line", "whole\n", false, true, "whole\nx\n"},
		{"cut_line", "cut sh", false, true, "cut sh\nx\n"},
		{"cut_line_nothing_logged", "cut sh", false, false, "cut sh"},
		{"cut_line_fresh", "cut sh", true, true, "x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "lines.jsonl")
			if tt.before != "" {
				if err := os.WriteFile(path, []byte(tt.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			w := Open(Options{Path: path, Fresh: tt.fresh}, encodeString)
			if tt.log {
				w.Log("x")
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(path); string(got) != tt.want {
				t.Errorf("file %q, want %q", got, tt.want)
			}
			if tt.fresh {
				// The file moved aside keeps its cut line as it was.
				rotated, _ := filepath.Glob(filepath.Join(dir, "lines-*.jsonl"))
				if len(rotated) != 1 {
					t.Fatalf("rotated files %q, want one", rotated)
				}
				if got, _ := os.ReadFile(rotated[0]); string(got) != tt.before {
					t.Errorf("rotated file %q, want %q", got, tt.before)
				}
			}
		})
	}
}

// TestCutLineAtTheSizeLimit: a file left inside a line at its rotation
// size gets the ending newline itself, before the next batch rotates it;
// the newline must not become the first byte of the new file.
func TestCutLineAtTheSizeLimit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lines.jsonl")
	before := bytes.Repeat([]byte("a"), 1<<20)
	if err := os.WriteFile(path, before, 0o644); err != nil {
		t.Fatal(err)
	}
	w := Open(Options{Path: path, MaxSizeMB: 1}, encodeString)
	w.Log("x")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "x\n" {
		t.Errorf("new file %q, want %q", got, "x\n")
	}
	rotated, _ := filepath.Glob(filepath.Join(dir, "lines-*.jsonl"))
	if len(rotated) != 1 {
		t.Fatalf("rotated files %q, want one", rotated)
	}
	got, _ := os.ReadFile(rotated[0])
	if want := append(before, '\n'); !bytes.Equal(got, want) {
		t.Errorf("rotated file is %d bytes ending %q, want %d ending %q", len(got), got[max(0, len(got)-3):], len(want), want[len(want)-3:])
	}
}

// TestCutLineOnItsOwnFile: on a file the writer made itself, a write the
// disk cuts short (here the file size limit, as a full disk) is followed,
// once there is room, by a record on a line of its own. The newline that
// ends the cut line goes straight to the file; the rotating writer opened
// its own file without O_APPEND and wrote the next record over it (found
// by a review: a glued line in the decision log and the capture, each
// counted as written).
func TestCutLineOnItsOwnFile(t *testing.T) {
	signal.Ignore(syscall.SIGXFSZ) // past the limit, write fails with EFBIG rather than ending the process
	defer signal.Reset(syscall.SIGXFSZ)
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lines.jsonl")
	w := Open(Options{Path: path}, encodeString)
	line := strings.Repeat("x", 99) // 100 bytes with its newline
	written := func(n uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for s := w.Stats(); s.Written+s.Failed < n; s = w.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("stats %+v: waited for %d records", s, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	w.Log(line)
	written(1)
	full := limit
	full.Cur = 150 // the second line is cut after 50 bytes
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &full); err != nil {
		t.Fatal(err)
	}
	w.Log(line)
	written(2)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limit); err != nil {
		t.Fatal(err)
	}
	w.Log(line)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if want := line + "\n" + line[:50] + "\n" + line + "\n"; string(got) != want {
		t.Errorf("file %q,\nwant %q", got, want)
	}
	if s := w.Stats(); s != (Stats{Written: 2, Failed: 1}) {
		t.Errorf("stats %+v, want 2 written and 1 failed", s)
	}
}

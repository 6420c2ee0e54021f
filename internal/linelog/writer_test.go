package linelog

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"pgregory.net/rapid"

	"github.com/inferrail/inferrail/internal/syncbuf"
)

// The writer's drops, failures and rotation are tested through the
// decision log (internal/decisionlog), its first user; these tests cover
// what is its own: any item type, with its encoder called in order on one
// goroutine, and the name in its warnings.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun"))
}

// TestEncoderOwnsItsState: the encoder keeps a counter without a lock
// (the race detector would see two goroutines), and the lines come out in
// the order logged.
func TestEncoderOwnsItsState(t *testing.T) {
	var out syncbuf.Buffer
	seen := 0 // the encoder's own state
	w := Open(Options{Sink: &out}, func(n int, b []byte) []byte {
		seen++
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(seen), 10)
		return append(b, '\n')
	})
	var want strings.Builder
	for i := range 500 {
		for !w.Log(i) {
			time.Sleep(time.Millisecond)
		}
		want.WriteString(strconv.Itoa(i) + " " + strconv.Itoa(i+1) + "\n")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if out.String() != want.String() {
		t.Errorf("lines out of order or miscounted:\n%.200s", out.String())
	}
	if st := w.Stats(); st != (Stats{Written: 500}) {
		t.Errorf("stats %+v", st)
	}
}

type brokenDisk struct{}

func (brokenDisk) Write([]byte) (int, error) { return 0, errors.New("disk gone") }

// TestNameInWarnings: the warning names what is being lost.
func TestNameInWarnings(t *testing.T) {
	for _, tt := range []struct{ name, want string }{{"", "line log write failing"}, {"traffic capture", "traffic capture write failing"}} {
		var logs syncbuf.Buffer
		w := Open(Options{Name: tt.name, Sink: brokenDisk{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
			func(s string, b []byte) []byte { return append(append(b, s...), '\n') })
		w.Log("x")
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), tt.want) || w.Stats().Failed != 1 {
			t.Errorf("name %q: logs %q, stats %+v; want %q", tt.name, logs.String(), w.Stats(), tt.want)
		}
	}
}

// TestCheckPath: only a regular file, or nothing yet, may be a log's path;
// a directory, a device or a pipe (links followed) is refused, since
// rotation would move it aside.
func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.jsonl")
	if err := os.WriteFile(file, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	linkToDir := filepath.Join(dir, "link")
	if err := os.Symlink(dir, linkToDir); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path, refused string // refused: what the error names; "" for none
	}{
		{filepath.Join(dir, "new.jsonl"), ""},
		{file, ""},
		{dir, "directory"},
		{linkToDir, "directory"},
		{os.DevNull, "device"},
		{fifo, "named pipe"},
	} {
		err := CheckPath(tt.path)
		if (err != nil) != (tt.refused != "") || err != nil && !strings.Contains(err.Error(), "is a "+tt.refused) {
			t.Errorf("CheckPath(%s) = %v, want refused as %q", tt.path, err, tt.refused)
		}
	}
}

// TestScannerAgainstScanLines: NewScanner gives the lines bufio.ScanLines
// gives, whatever the reads' sizes, and refuses a line past its bound.
func TestScannerAgainstScanLines(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := rapid.StringMatching(`(aaaa|a|\r|\n|\r\n|b)*`).Draw(t, "text")
		chunk := rapid.IntRange(1, 7).Draw(t, "chunk")
		var want, got []string
		ref := bufio.NewScanner(strings.NewReader(text))
		for ref.Scan() {
			want = append(want, ref.Text())
		}
		sc := NewScanner(&chunked{s: text, n: chunk}, 1<<20)
		for sc.Scan() {
			got = append(got, sc.Text())
		}
		if sc.Err() != nil || !slices.Equal(got, want) {
			t.Fatalf("lines %q (%v), want %q", got, sc.Err(), want)
		}
	})
	sc := NewScanner(strings.NewReader(strings.Repeat("x", 100)+"\n"), 64)
	if sc.Scan() || !errors.Is(sc.Err(), bufio.ErrTooLong) {
		t.Errorf("a line of 100 bytes with a bound of 64: %v", sc.Err())
	}
}

// chunked reads s at most n bytes at a time.
type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[k:]
	return k, nil
}

// TestOpenFreshOnAReadOnlyFile: a Fresh writer moves a file it cannot
// append to (read-only) aside as it does any other, and writes a new one
// it can. Lumberjack's rotation gave the new file the read-only mode, so
// every write failed and rotated again, each making an empty rotated file
// that counted against MaxFiles until the earlier capture was deleted
// (found by a review).
func TestOpenFreshOnAReadOnlyFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes a read-only file")
	}
	for _, before := range []string{"earlier capture\n", ""} {
		t.Run(map[bool]string{true: "empty", false: "with_lines"}[before == ""], func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "lines.jsonl")
			if err := os.WriteFile(path, []byte(before), 0o444); err != nil {
				t.Fatal(err)
			}
			w := Open(Options{Path: path, Fresh: true, MaxFiles: 2}, encodeString)
			for range 3 {
				w.Log("x")
				time.Sleep(2 * drainEvery) // each line a write of its own, as a failing write rotated again
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if s := w.Stats(); s != (Stats{Written: 3}) {
				t.Errorf("stats %+v, want 3 written", s)
			}
			if got, _ := os.ReadFile(path); string(got) != "x\nx\nx\n" {
				t.Errorf("new file %q, want three lines", got)
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm()&0o200 == 0 {
				t.Errorf("new file %v, %v: want it writable by its owner", st, err)
			}
			rotated, _ := filepath.Glob(filepath.Join(dir, "lines-*.jsonl"))
			if len(rotated) != 1 {
				t.Fatalf("rotated files %q, want one", rotated)
			}
			if got, _ := os.ReadFile(rotated[0]); string(got) != before {
				t.Errorf("rotated file %q, want %q", got, before)
			}
		})
	}
}

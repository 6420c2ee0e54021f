package linelog

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

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

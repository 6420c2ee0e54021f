package linelog

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
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

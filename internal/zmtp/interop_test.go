package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// venvPython is the e2e venv's interpreter, which has pyzmq (and so real
// libzmq). Without it the interop tests skip, except in CI or with
// INFERRAIL_REQUIRE_INTEROP=1, where a missing venv is a failure: make test
// builds it before the tests run.
func venvPython(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	py := filepath.Join(dir, ".venv", "e2e", "bin", "python")
	// run.sh stamps the venv with the sha256 of the requirements it was
	// built from; a venv built before pyzmq was pinned lacks it.
	want, err := os.ReadFile(filepath.Join(dir, "tests", "e2e", "requirements.txt"))
	if err != nil {
		t.Fatal(err)
	}
	stamp, _ := os.ReadFile(filepath.Join(dir, ".venv", "e2e", "requirements.sha256"))
	if _, err := os.Stat(py); err != nil || strings.TrimSpace(string(stamp)) != fmt.Sprintf("%x", sha256.Sum256(want)) {
		msg := fmt.Sprintf("interop with libzmq needs %s (pyzmq), built from tests/e2e/requirements.txt as it is: (re)build it with tests/e2e/run.sh --venv", py)
		if os.Getenv("CI") != "" || os.Getenv("INFERRAIL_REQUIRE_INTEROP") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// pyProc is a running testdata script.
type pyProc struct {
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startPy runs testdata/<script> with args; the test's cleanup kills it.
func startPy(t *testing.T, ctx context.Context, script string, args ...string) *pyProc {
	t.Helper()
	py := venvPython(t)
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("testdata", script)}, args...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	out := bufio.NewScanner(stdout)
	out.Buffer(nil, 1<<20)
	return &pyProc{stdin: stdin, out: out}
}

// line returns the script's next line of output.
func (p *pyProc) line(t *testing.T) string {
	t.Helper()
	if !p.out.Scan() {
		t.Fatalf("script ended early: %v", p.out.Err())
	}
	return p.out.Text()
}

func hexLine(frames [][]byte) string {
	var parts []string
	for _, f := range frames {
		if len(f) == 0 {
			parts = append(parts, "-")
		} else {
			parts = append(parts, hex.EncodeToString(f))
		}
	}
	return strings.Join(parts, " ")
}

// TestInteropPyzmqSubReadsOurPub: libzmq's SUB gets our PUB's multipart
// messages, filtered by its subscription, which it sends as a SUBSCRIBE
// command when we advertise ZMTP 3.1 and as a message when we say 3.0.
func TestInteropPyzmqSubReadsOurPub(t *testing.T) {
	for _, tc := range []struct {
		name      string
		zmtp30    bool
		byCommand bool
	}{{"ZMTP 3.1", false, true}, {"ZMTP 3.0", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			pub := mustListenPub(t, ctx, loopback, Options{zmtp30: tc.zmtp30})
			msgs := [][][]byte{
				seqMsg("kv-events", 0, []byte("first")),
				seqMsg("other", 1, []byte("filtered out")),
				seqMsg("kv", 2, nil),
				seqMsg("kv-events", 3, bytes.Repeat([]byte{0x93}, 70000)), // long frames
				seqMsg("k", 4, []byte("filtered out")),
				seqMsg("kv-events", 5, []byte("last")),
			}
			py := startPy(t, ctx, "sub.py", pub.Endpoint(), "kv", "4")
			eventually(t, "pyzmq's subscription", func() bool { return pub.subscribers("kv") == 1 })
			pub.mu.Lock()
			for peer := range pub.peers {
				if peer.byCommand.Load() != tc.byCommand || peer.byMessage.Load() == tc.byCommand {
					t.Errorf("subscription by command %v, by message %v; want by command %v",
						peer.byCommand.Load(), peer.byMessage.Load(), tc.byCommand)
				}
			}
			pub.mu.Unlock()
			for _, m := range msgs {
				if err := pub.Send(m); err != nil {
					t.Fatal(err)
				}
			}
			for _, i := range []int{0, 2, 3, 5} {
				if got, want := py.line(t), hexLine(msgs[i]); got != want {
					t.Fatalf("pyzmq got %.80s..., want %.80s...", got, want)
				}
			}
		})
	}
}

// TestInteropOurSubReadsPyzmqPub: our SUB subscribes to and reads a
// libzmq PUB publishing vLLM-shaped messages on two topics.
func TestInteropOurSubReadsPyzmqPub(t *testing.T) {
	ctx := testCtx(t)
	py := startPy(t, ctx, "pub.py")
	endpoint := py.line(t)
	sub := mustDialSub(t, ctx, endpoint, Options{}, "kv")
	var last uint64
	for i := range 20 {
		topic, seq := recvSeq(t, ctx, sub)
		if topic != "kv-events" || seq%2 != 0 || (i > 0 && seq != last+2) {
			t.Fatalf("message %d: %s/%d after %d", i, topic, seq, last)
		}
		last = seq
	}
}

// TestInteropPyzmqDealerOurRouter: a libzmq DEALER gets a replay from our
// ROUTER in vLLM's framing, end marker included.
func TestInteropPyzmqDealerOurRouter(t *testing.T) {
	ctx := testCtx(t)
	r, err := ListenRouter(ctx, loopback, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- serveReplay(sctx, r, 3) }()
	defer func() { stop(); <-served }()

	py := startPy(t, ctx, "dealer.py", r.Endpoint(), "42")
	for _, want := range []string{"seq 42 kv batch 42", "seq 43 kv batch 43", "seq 44 kv batch 44", "end"} {
		if got := py.line(t); got != want {
			t.Fatalf("pyzmq DEALER printed %q, want %q", got, want)
		}
	}
}

// TestInteropOurDealerPyzmqRouter: our DEALER asks a libzmq ROUTER that
// answers like vLLM for a replay.
func TestInteropOurDealerPyzmqRouter(t *testing.T) {
	ctx := testCtx(t)
	py := startPy(t, ctx, "router.py")
	endpoint := py.line(t)
	d, err := DialDealer(ctx, endpoint, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seqs, err := replay(ctx, d, 7)
	if err != nil || len(seqs) != 3 || seqs[0] != 7 || seqs[2] != 9 {
		t.Fatalf("replay from a pyzmq ROUTER: %v, %v", seqs, err)
	}
	id, err := hex.DecodeString(strings.TrimPrefix(py.line(t), "identity "))
	if err != nil || len(id) != 5 || id[0] != 0 {
		t.Fatalf("libzmq named our DEALER %x, want a generated 5-byte identity", id)
	}
}

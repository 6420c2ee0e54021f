package decisionlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestMain checks no test leaves a goroutine behind, but for lumberjack's
// file pruner, which it starts with the first file and never stops.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun"))
}

func TestSampler(t *testing.T) {
	ids := make([]string, 100_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", uint64(i)*0x9e3779b97f4a7c15)
	}
	rates := []float64{0, 1e-9, 0.01, 0.1, 0.5, 0.9, 1}
	prev := map[string]bool{}
	for _, rate := range rates {
		s := NewSampler(rate)
		if s.On() != (rate > 0) {
			t.Errorf("NewSampler(%v).On() = %v", rate, s.On())
		}
		n := 0
		for _, id := range ids {
			got := s.Sampled(id)
			if got != NewSampler(rate).Sampled(id) {
				t.Fatalf("rate %v: %s sampled differently by two samplers", rate, id)
			}
			if prev[id] && !got {
				t.Fatalf("rate %v: %s was sampled at a lower rate and not at this one", rate, id)
			}
			prev[id] = got
			if got {
				n++
			}
		}
		// The share is within five standard deviations of the rate.
		share, sd := float64(n)/float64(len(ids)), math.Sqrt(rate*(1-rate)/float64(len(ids)))
		if math.Abs(share-rate) > 5*sd+1e-12 {
			t.Errorf("rate %v: sampled %.4f of requests", rate, share)
		}
	}
	var zero Sampler
	if zero.On() || zero.Sampled("x") {
		t.Error("the zero Sampler samples")
	}
}

// sample is a record with every field set.
func sample() *Record {
	running, usage, waiting, cached, priced, est := int64(3), 0.25, 2.0, 1024, 2048, 0.042
	return &Record{
		Time: time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC), RequestID: "req-1", Model: "m", Policy: "cost_model",
		Attempt: 2, PromptTokens: 2100, Blocks: 131, Tokenized: "tokenized", Winner: "gpu-1", EstimatedTTFTSecs: 0.042,
		PrefillSecs: 0.012, Steered: "session", DecidedBy: "queue", Guards: []string{"bounded_load"}, HotOwners: 2, DecisionSecs: 0.000012,
		Candidates: []Candidate{
			{Replica: "gpu-1", State: StateOffered, InFlight: 4, Running: &running, KVUsage: &usage, Waiting: &waiting, QueuedPrefillSecs: 0.03,
				CachedTokens: &cached, PricedCachedTokens: &priced, EstimatedTTFTSecs: &est},
			{Replica: "gpu-2", State: StateOffered, SetAside: "bounded_load", InFlight: 9, QueuedPrefillSecs: 0.5,
				CachedTokens: new(int), PricedCachedTokens: new(int), EstimatedTTFTSecs: &est, Score: 0.5},
			{Replica: "gpu-3", State: StateTried, InFlight: 1},
			{Replica: "gpu-4", State: "unhealthy"},
		},
	}
}

// TestRecordGolden pins the JSON of a record: the decision log's schema.
func TestRecordGolden(t *testing.T) {
	var buf bytes.Buffer
	w := Open(Options{Sink: &buf})
	w.Log(sample())
	w.Log(&Record{RequestID: "req-2", Attempt: 1, Tokenized: "no_tokenizer"}) // the zero values
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "records.golden")
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if buf.String() != string(want) {
		t.Errorf("records changed:\n--- got\n%s--- want\n%s", buf.String(), want)
	}
	var back Record
	if err := json.Unmarshal(bytes.SplitN(buf.Bytes(), []byte("\n"), 2)[0], &back); err != nil {
		t.Fatal(err)
	}
	if back.Candidates[0].Running == nil || *back.Candidates[0].Running != 3 || back.Candidates[3].Running != nil {
		t.Errorf("round trip: %+v", back.Candidates)
	}
}

// stuckSink blocks every write until released, then keeps what it got.
type stuckSink struct {
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (s *stuckSink) Write(p []byte) (int, error) {
	s.entered <- struct{}{}
	<-s.release
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// TestDropsWhenTheDiskIsStuck: with the writer stuck in a write, records
// beyond the queue are dropped and counted, Log never waits, and every
// record queued is written once the disk moves.
func TestDropsWhenTheDiskIsStuck(t *testing.T) {
	const queue, more = 16, 1000
	sink := &stuckSink{entered: make(chan struct{}, 100), release: make(chan struct{})}
	w := Open(Options{Sink: sink, QueueSize: queue})
	w.Log(&Record{RequestID: "first"})
	<-sink.entered // the writer holds the first record, stuck writing it
	queued := 0
	for i := range more {
		if w.Log(&Record{RequestID: fmt.Sprint(i)}) {
			queued++
		}
	}
	if st := w.Stats(); queued != queue || st.Dropped != more-queue || st.Written != 0 {
		t.Errorf("while stuck: %d queued, stats %+v; want %d queued, %d dropped", queued, st, queue, more-queue)
	}
	close(sink.release)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Count(sink.buf.String(), "\n")
	if st := w.Stats(); st.Written != 1+queue || lines != 1+queue || st.Dropped != more-queue {
		t.Errorf("after: %d lines, stats %+v; want %d written", lines, st, 1+queue)
	}
	if w.Log(&Record{}) || w.Stats().Dropped != more-queue+1 {
		t.Error("a record logged after Close was not dropped and counted")
	}
}

// failingSink fails its writes while failing is set.
type failingSink struct {
	mu      sync.Mutex
	failing bool
	buf     bytes.Buffer
}

func (s *failingSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return 0, errors.New("disk full")
	}
	return s.buf.Write(p)
}

func (s *failingSink) set(failing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = failing
}

func TestWriteFailures(t *testing.T) {
	sink := &failingSink{failing: true}
	var logs bytes.Buffer
	w := Open(Options{Sink: sink, Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil))})
	wait := func(want Stats) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for w.Stats() != want {
			if time.Now().After(deadline) {
				t.Fatalf("stats %+v, want %+v", w.Stats(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range 3 {
		w.Log(&Record{RequestID: "lost"})
		wait(Stats{Failed: uint64(i + 1)})
	}
	sink.set(false)
	w.Log(&Record{RequestID: "kept"})
	wait(Stats{Failed: 3, Written: 1})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if strings.Count(out, "decision log write failing") != 1 || strings.Count(out, "decision log write recovered") != 1 {
		t.Errorf("log:\n%s", out)
	}
	if !strings.Contains(sink.buf.String(), `"kept"`) || strings.Contains(sink.buf.String(), `"lost"`) {
		t.Errorf("file:\n%s", sink.buf.String())
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestRotation writes past the size limit thrice: the file rotates, no
// file outgrows the limit, and every line of every file is a whole record.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "decisions.jsonl")
	w := Open(Options{Path: path, MaxSizeMB: 1})
	r := sample()
	n := 0
	for written := 0; written < 3500<<10; written += 900 { // a record is about 900 bytes
		rec := *r
		rec.RequestID = fmt.Sprint("req-", n)
		for !w.Log(&rec) {
			time.Sleep(time.Millisecond) // the disk is behind; this test wants every record
		}
		n++
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "sub", "decisions*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("files %v: want the log and at least three rotated ones", files)
	}
	lines := 0
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s has %d bytes, over 1 MB", f, st.Size())
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var rec Record
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Errorf("%s: a line is not a record: %v", f, err)
			}
			lines++
		}
		fh.Close()
	}
	if st := w.Stats(); lines != n || st.Written != uint64(n) || st.Dropped != 0 {
		t.Errorf("%d lines in the files, stats %+v; want %d records", lines, st, n)
	}
}

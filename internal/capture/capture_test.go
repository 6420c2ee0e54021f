package capture

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/linelog"
	"github.com/inferrail/inferrail/internal/syncbuf"
	"github.com/inferrail/inferrail/internal/workload"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gopkg.in/natefinch/lumberjack%2ev2.(*Logger).millRun"))
}

// sent is a request as its client sent it: its prompt's tokens, by model.
type sent struct {
	at     time.Duration
	model  string
	tokens []int
	output int
}

// prompts builds n requests over a few shared prefixes of two models,
// each with a tail of its own, some shorter than a block.
func prompts(n int, seed uint64) []sent {
	r := rand.New(rand.NewPCG(seed, 1))
	prefixes := make([][]int, 4)
	for i := range prefixes {
		for range 16 * (1 + r.IntN(6)) {
			prefixes[i] = append(prefixes[i], r.IntN(50_000))
		}
	}
	out := make([]sent, n)
	for i := range out {
		p := slices.Clone(prefixes[r.IntN(len(prefixes))])
		for range r.IntN(60) {
			p = append(p, r.IntN(50_000))
		}
		if len(p) == 0 {
			p = append(p, 1)
		}
		out[i] = sent{at: time.Duration(i) * 1500 * time.Microsecond, model: []string{"a", "b"}[r.IntN(2)], tokens: p, output: 1 + r.IntN(300)}
	}
	return out
}

// record is the capture's record of s, as the gateway makes it.
func record(start time.Time, s sent, blockSize int) *Record {
	seed := blockhash.Seed(s.model, "", "")
	return &Record{Arrived: start.Add(s.at), Model: s.model, InputTokens: len(s.tokens), InputSource: SourceTokenizer,
		OutputTokens: s.output, OutputSource: SourceUsage, BlockSize: blockSize, Blocks: blockhash.Extend(nil, seed, s.tokens, blockSize)}
}

// TestRoundTrip writes the records of requests through a Writer and reads
// the lines back with the trace reader inferrail-bench replays: the same
// arrivals, lengths and block size, and hash ids that name the same
// blocks the requests' hash chains name, one to one within a model.
func TestRoundTrip(t *testing.T) {
	const blockSize = 16
	reqs := prompts(400, 7)
	var buf syncbuf.Buffer
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	w := Open(Options{Lines: linelog.Options{Sink: &buf}, Start: start})
	for _, s := range reqs {
		if !w.Log(record(start, s, blockSize)) {
			t.Fatal("a record was dropped")
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := workload.ParseTrace(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(reqs) {
		t.Fatalf("%d lines, want %d", len(recs), len(reqs))
	}
	idOf := map[string]map[blockhash.Hash]int{} // by model: what each hash was named
	hashOf := map[string]map[int]blockhash.Hash{}
	for i, got := range recs {
		s := reqs[i]
		want := record(start, s, blockSize)
		if got.Timestamp != float64(s.at.Microseconds())/1e3 || got.InputLength != len(s.tokens) || got.OutputLength != s.output ||
			got.BlockTokens != blockSize || got.Model != s.model || len(got.HashIDs) != len(want.Blocks) {
			t.Fatalf("line %d = %+v, want %v ms, %d in, %d out, %d ids of model %s", i, got, s.at, len(s.tokens), s.output, len(want.Blocks), s.model)
		}
		if idOf[s.model] == nil {
			idOf[s.model], hashOf[s.model] = map[blockhash.Hash]int{}, map[int]blockhash.Hash{}
		}
		for k, id := range got.HashIDs {
			h := want.Blocks[k]
			if prev, ok := idOf[s.model][h]; ok && prev != id {
				t.Fatalf("line %d block %d: id %d, the same block was %d before", i, k, id, prev)
			}
			if prev, ok := hashOf[s.model][id]; ok && prev != h {
				t.Fatalf("line %d block %d: id %d names two blocks", i, k, id)
			}
			idOf[s.model][h], hashOf[s.model][id] = id, h
		}
	}
	// Ids are small: numbered from 0 per model, in the order first seen.
	for m, ids := range hashOf {
		for id := range len(ids) {
			if _, ok := ids[id]; !ok {
				t.Errorf("model %s: %d ids, but not %d", m, len(ids), id)
			}
		}
	}
	if strings.Contains(buf.String(), `"block_size":0`) {
		t.Error("a line says block_size 0")
	}
}

// TestEstimateLine: a request without a tokenizer's count has no hash ids
// and no block size, and says its input is estimated.
func TestEstimateLine(t *testing.T) {
	var buf syncbuf.Buffer
	start := time.Unix(1000, 0)
	w := Open(Options{Lines: linelog.Options{Sink: &buf}, Start: start})
	w.Log(&Record{Arrived: start.Add(-time.Second), Model: `q"m`, InputTokens: 12, InputSource: SourceEstimate, OutputTokens: 3, OutputSource: "bytes"})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := `{"timestamp":0.000,"input_length":12,"output_length":3,"hash_ids":[],"model":"q\"m","input_source":"estimate","output_source":"bytes"}` + "\n"
	if buf.String() != want {
		t.Errorf("line %q, want %q", buf.String(), want)
	}
}

// TestIDMapBound checks the id map against a naive model of it, an exact
// least-recently-used order, on random traffic: it holds at most its
// bound, never gives one id to two hashes, gives a hash it holds the id
// it had, and forgets only hashes the exact LRU of half the bound would
// have forgotten too.
func TestIDMapBound(t *testing.T) {
	const half = 64
	r := rand.New(rand.NewPCG(1, 2))
	m := &idMap{cur: map[blockhash.Hash]int{}}
	var forgotten atomic.Uint64
	given := map[int]blockhash.Hash{}
	var lru []blockhash.Hash // most recent last
	for step := range 20_000 {
		h := blockhash.Hash{Lo: uint64(r.IntN(400))}
		if r.IntN(4) == 0 {
			h.Lo = uint64(r.IntN(20)) // a hot few
		}
		held := m.cur[h]
		_, inCur := m.cur[h]
		oldID, inOld := m.old[h]
		id := m.id(h, half, &forgotten)
		switch {
		case inCur && id != held, inOld && id != oldID:
			t.Fatalf("step %d: hash %v held as %d/%d, now %d", step, h, held, oldID, id)
		case !inCur && !inOld:
			if _, ok := given[id]; ok {
				t.Fatalf("step %d: id %d given again", step, id)
			}
			// A hash the exact LRU of half would still hold is never
			// forgotten.
			if k := slices.Index(lru, h); k >= 0 && len(lru)-k <= half {
				t.Fatalf("step %d: hash %v forgotten though among the %d most recent", step, h, half)
			}
		}
		given[id] = h
		if k := slices.Index(lru, h); k >= 0 {
			lru = slices.Delete(lru, k, k+1)
		}
		lru = append(lru, h)
		if m.held() > 2*half {
			t.Fatalf("step %d: %d hashes held, bound %d", step, m.held(), 2*half)
		}
	}
	if forgotten.Load() == 0 {
		t.Error("nothing forgotten over 400 hashes with room for 128")
	}
}

// TestDropsCounted: records that find the queue full are dropped and
// counted, and the lines written are whole.
func TestDropsCounted(t *testing.T) {
	sink := &blockingSink{release: make(chan struct{})}
	w := Open(Options{Lines: linelog.Options{Sink: sink, QueueSize: 4}})
	start := time.Now()
	n := 0
	for i := range 50 {
		if w.Log(record(start, sent{at: time.Duration(i), model: "a", tokens: []int{1, 2, 3}, output: 1}, 2)) {
			n++
		}
	}
	close(sink.release)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Dropped == 0 || st.Written != uint64(n) || st.Written+st.Dropped != 50 {
		t.Errorf("stats %+v with %d queued of 50", st, n)
	}
	if lines := bytes.Count(sink.buf.Bytes(), []byte("\n")); lines != n {
		t.Errorf("%d lines, want %d", lines, n)
	}
}

// blockingSink holds every write until release is closed.
type blockingSink struct {
	release chan struct{}
	buf     bytes.Buffer
}

func (s *blockingSink) Write(p []byte) (int, error) {
	<-s.release
	return s.buf.Write(p)
}

func ExampleWriter() {
	var out bytes.Buffer
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	w := Open(Options{Lines: linelog.Options{Sink: &out}, Start: start})
	blocks := blockhash.Extend(nil, blockhash.Seed("m", "", ""), make([]int, 40), 16)
	w.Log(&Record{Arrived: start.Add(1500 * time.Millisecond), Model: "m", InputTokens: 40, InputSource: SourceTokenizer,
		OutputTokens: 7, OutputSource: SourceUsage, BlockSize: 16, Blocks: blocks})
	w.Log(&Record{Arrived: start.Add(2 * time.Second), Model: "m", InputTokens: 20, InputSource: SourceTokenizer,
		OutputTokens: 3, OutputSource: SourceUsage, BlockSize: 16, Blocks: blocks[:1]})
	_ = w.Close()
	fmt.Print(out.String())
	// Output:
	// {"timestamp":1500.000,"input_length":40,"output_length":7,"hash_ids":[0,1],"model":"m","block_size":16,"input_source":"tokenizer","output_source":"usage"}
	// {"timestamp":2000.000,"input_length":20,"output_length":3,"hash_ids":[0],"model":"m","block_size":16,"input_source":"tokenizer","output_source":"usage"}
}

// FuzzLine checks that whatever a record holds (a model name is whatever
// the config named), its line is one line of JSON the trace reader takes
// back with the same lengths, model (invalid UTF-8 aside, which JSON
// cannot carry) and block size.
func FuzzLine(f *testing.F) {
	f.Add("inferrail/sim-8b", 100, 7, 16, 40, 3)
	f.Add("q\"m\u2028\x00<>&", 1, 1, 1, 0, 0)
	f.Add("", 5, 5, 0, 3, 1)
	f.Fuzz(func(t *testing.T, model string, in, out, blockSize, tokens, ms int) {
		// The gateway hashes the prompt it counts: never more tokens of
		// blocks than input tokens (a trace reader keeps only the blocks an
		// input length can have).
		if in < 1 || out < 1 || in > 1<<24 || out > 1<<24 || blockSize < 0 || blockSize > 1<<16 || tokens < 0 || tokens > 4096 || tokens > in || ms < 0 || ms > 1e9 || len(model) > 256 {
			return
		}
		start := time.Unix(0, 0)
		r := &Record{Arrived: start.Add(time.Duration(ms) * time.Millisecond), Model: model, InputTokens: in, InputSource: SourceEstimate,
			OutputTokens: out, OutputSource: SourceUsage, BlockSize: blockSize}
		if blockSize > 0 {
			r.InputSource, r.Blocks = SourceTokenizer, blockhash.Extend(nil, blockhash.Seed(model, "", ""), make([]int, tokens), blockSize)
		}
		w := &Writer{start: start, half: 8, models: map[string]*idMap{}}
		line := w.appendLine(r, nil)
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("not one line: %q", line)
		}
		recs, err := workload.ParseTrace(bytes.NewReader(line))
		if err != nil || len(recs) != 1 {
			t.Fatalf("ParseTrace(%q) = %v, %v", line, recs, err)
		}
		got := recs[0]
		if got.Model != model && utf8.ValidString(model) || got.InputLength != in || got.OutputLength != out || got.BlockTokens != blockSize ||
			got.Timestamp != float64(ms) || len(got.HashIDs) != len(r.Blocks) {
			t.Errorf("line %q read back as %+v", line, got)
		}
	})
}

// TestFreshFile: a capture never appends to the file an earlier one left
// at its path (its ids and timestamps start again); that file is kept
// beside it, rotated.
func TestFreshFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "capture.jsonl")
	old := `{"timestamp":0.000,"input_length":1,"output_length":1,"hash_ids":[0]}` + "\n"
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := Open(Options{Lines: linelog.Options{Path: path}, Start: start})
	w.Log(record(start, sent{model: "m", tokens: make([]int, 40), output: 2}, 16))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := workload.ParseTrace(bytes.NewReader(data)); err != nil || len(recs) != 1 || recs[0].Model != "m" {
		t.Errorf("the new capture holds %q, %v", data, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "capture-*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("rotated files %v, want the earlier capture", files)
	}
	if kept, _ := os.ReadFile(files[0]); string(kept) != old {
		t.Errorf("the earlier capture became %q", kept)
	}
}

// TestLinesInCompletionOrder pins what the README says of line order:
// a record is logged when its response ends, so a request that arrived
// first and ended last comes last, its timestamp still its arrival; a
// replayer sorts by timestamp (inferrail-bench does).
func TestLinesInCompletionOrder(t *testing.T) {
	var buf syncbuf.Buffer
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	w := Open(Options{Lines: linelog.Options{Sink: &buf}, Start: start})
	long := sent{at: 10 * time.Millisecond, model: "a", tokens: []int{1}, output: 500}
	short := sent{at: 20 * time.Millisecond, model: "a", tokens: []int{2}, output: 1}
	for _, s := range []sent{short, long} { // short ended first
		if !w.Log(record(start, s, 16)) {
			t.Fatal("a record was dropped")
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := workload.ParseTrace(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, r := range recs {
		got = append(got, r.Timestamp)
	}
	if want := []float64{20, 10}; !slices.Equal(got, want) {
		t.Errorf("timestamps in file order %v, want %v", got, want)
	}
}

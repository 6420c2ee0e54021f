package workload

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// eagerTraceRequests is traceRequests as it was when every prompt was
// made before the run: the reference the lazy requests must equal, byte
// for byte. Kept verbatim so that a change to how prompts are made shows
// up here.
func eagerTraceRequests(ctx context.Context, spec Spec, recs []TraceRecord) ([]Request, error) {
	order := make([]int, len(recs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch ta, tb := recs[a].Timestamp, recs[b].Timestamp; {
		case ta < tb:
			return -1
		case ta > tb:
			return 1
		}
		return 0
	})
	g := newGen(spec)
	scale := spec.TimeScale / spec.RateMultiplier
	var reqs []Request
	var block []byte
	for n, i := range order {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec := recs[i]
		if spec.Requests > 0 && n >= spec.Requests {
			break
		}
		var after float64 // seconds after the first arrival
		if d := rec.Timestamp - recs[order[0]].Timestamp; d > 0 {
			after = d * scale / 1000
		}
		if spec.Duration > 0 && after >= spec.Duration.Seconds() {
			break
		}
		if !(after < maxTraceSchedule.Seconds()) {
			return nil, fmt.Errorf("trace %s: line %d: timestamp %.0f is %.3g s after the first, scaled: past the longest schedule (%v)",
				spec.TracePath, rec.Line, rec.Timestamp, after, maxTraceSchedule)
		}
		at := seconds(after)
		if spec.Duration > 0 && at >= spec.Duration {
			break
		}
		input := rec.InputLength
		if spec.MaxPromptTokens > 0 {
			input = min(input, spec.MaxPromptTokens)
		}
		content := make([]byte, 0, input*3)
		bs, blockSeed := rec.Block(), spec.Seed
		if rec.Model != "" {
			h := fnv.New64a()
			h.Write([]byte(rec.Model))
			blockSeed ^= h.Sum64()
		}
		for k := 0; k*bs < input; k++ {
			var seed uint64
			if k < len(rec.HashIDs) {
				seed = textSeed(blockSeed, textTraceBlock, uint64(rec.HashIDs[k]))
			} else {
				seed = textSeed(spec.Seed, textTraceTail, uint64(i)<<24+uint64(k))
			}
			want := min(bs, input-k*bs)
			if want == bs {
				content = appendWords(content, seed, want)
				continue
			}
			block = appendWords(block[:0], seed, bs)
			ids := simTok.Encode(nil, string(block))
			content = simTok.AppendDecoded(content, ids[:want], false)
		}
		c := &chat{model: spec.Model, messages: []message{newMessage("user", text{string(content), input, true})}}
		out := rec.OutputLength
		if spec.OutputTokens > 0 {
			out = spec.OutputTokens
		}
		reqs = append(reqs, g.request(at, Trace, c, out))
	}
	return reqs, nil
}

// randomTrace writes n records drawn from r: a few groups whose hash ids
// share a prefix, timestamps with ties and out of order, some records
// with a model or a block size of their own, inputs that end inside a
// block and past their ids.
func randomTrace(r *rand.Rand, n int) string {
	var b strings.Builder
	models := []string{"", "", "a", "b"}
	sizes := []int{0, 0, 16, 64, 100}
	for i := range n {
		group := r.IntN(4)
		bs := sizes[r.IntN(len(sizes))]
		block := bs
		if block == 0 {
			block = TraceBlockTokens
		}
		input := 1 + r.IntN(6*block)
		var ids []string
		for k := range r.IntN(input/block + 3) {
			id := 1000*group + k // shared with the group's other records
			if k >= 2 && r.IntN(2) == 0 {
				id = 100000 + i*100 + k // this record's own
			}
			ids = append(ids, fmt.Sprint(id))
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]`,
			r.IntN(n)*250, input, 1+r.IntN(50), strings.Join(ids, ", "))
		if m := models[r.IntN(len(models))]; m != "" {
			fmt.Fprintf(&b, `, "model": %q`, m)
		}
		if bs > 0 {
			fmt.Fprintf(&b, `, "block_size": %d`, bs)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// requestsDigest hashes every field of reqs, in order.
func requestsDigest(reqs []Request) string {
	h := sha256.New()
	for _, r := range reqs {
		var n [8]byte
		for _, v := range []int64{int64(r.At), int64(r.MaxTokens), int64(r.PromptTokens), int64(len(r.Body))} {
			binary.LittleEndian.PutUint64(n[:], uint64(v))
			h.Write(n[:])
		}
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00", r.Path, r.Kind, r.Session)
		h.Write(r.Body)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// traceSpecs are the replays the lazy requests are checked on: every knob
// that changes a prompt, a length or a time.
var traceSpecs = []struct {
	name string
	spec Spec
}{
	{"plain", Spec{Seed: 1}},
	{"seed", Spec{Seed: 7}},
	{"cut_prompts", Spec{Seed: 2, MaxPromptTokens: 700}},
	{"output", Spec{Seed: 3, OutputTokens: 9}},
	{"requests", Spec{Seed: 4, Requests: 20}},
	{"duration", Spec{Seed: 5, Duration: 3 * time.Second, TimeScale: 2, RateMultiplier: 3}},
}

// TestTraceGolden pins the requests of a few replays to what the eager
// replay made before prompts were made lazily.
func TestTraceGolden(t *testing.T) {
	want := map[string]string{
		"plain":       "4e06f529685c3336",
		"seed":        "7a4ebeb579547601",
		"cut_prompts": "86cb51ad4109ce35",
		"output":      "ce152666e28fb44b",
		"requests":    "02102100e56b7057",
		"duration":    "28fdb838d1ec674c",
	}
	recs, err := ParseTrace(strings.NewReader(randomTrace(rand.New(rand.NewPCG(1, 2)), 60)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range traceSpecs {
		spec := tt.spec
		spec.Workload, spec.Model, spec.TracePath = Trace, "m", "golden.jsonl"
		lazy, err := GenerateTrace(t.Context(), spec, recs)
		if err != nil {
			t.Fatal(err)
		}
		reqs, err := lazy.All(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n := len(reqs); n == 0 || n == len(recs) && (spec.Requests > 0 || spec.Duration > 0) {
			t.Errorf("%s: %d requests of %d records", tt.name, n, len(recs))
		}
		if old, _ := eagerTraceRequests(t.Context(), spec.WithDefaults(), recs); requestsDigest(old) != want[tt.name] {
			t.Errorf("%s: the eager reference no longer makes the golden requests", tt.name)
		}
		if got := requestsDigest(reqs); want[tt.name] != got {
			t.Errorf("%s: digest %s, want %s", tt.name, got, want[tt.name])
		}
	}
}

// TestLazyTraceEqualsEager: whatever the trace and the spec, the lazy
// replay schedules the requests the eager one made, and makes each one's
// body the same, in whatever order the bodies are asked for (a run asks
// in order; the oracle, from several goroutines).
func TestLazyTraceEqualsEager(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seed := rapid.Uint64().Draw(t, "trace_seed")
		n := rapid.IntRange(1, 40).Draw(t, "records")
		recs, err := ParseTrace(strings.NewReader(randomTrace(rand.New(rand.NewPCG(seed, 0)), n)))
		if err != nil {
			t.Fatal(err)
		}
		spec := traceSpecs[rapid.IntRange(0, len(traceSpecs)-1).Draw(t, "spec")].spec
		spec.Seed = rapid.Uint64Range(0, 3).Draw(t, "seed")
		spec.Workload, spec.Model, spec.TracePath = Trace, "m", "random.jsonl"
		want, err := eagerTraceRequests(t.Context(), spec.WithDefaults(), recs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := GenerateTrace(t.Context(), spec, recs)
		if err != nil {
			t.Fatal(err)
		}
		if got.Len() != len(want) {
			t.Fatalf("%d requests, want %d", got.Len(), len(want))
		}
		for _, i := range rand.New(rand.NewPCG(seed, 1)).Perm(len(want)) {
			head, r := got.Head(i), got.Request(i)
			if head.Body != nil {
				t.Fatalf("request %d: the head holds its body", i)
			}
			if head.Body = r.Body; requestsDigest([]Request{head}) != requestsDigest([]Request{r}) {
				t.Fatalf("request %d: head %+v differs from the request %+v", i, head, r)
			}
			if requestsDigest([]Request{r}) != requestsDigest(want[i:i+1]) {
				t.Fatalf("request %d: lazy %+v\n%.300s\neager %+v\n%.300s", i, r, r.Body, want[i], want[i].Body)
			}
		}
		a, err := AnalyzeRequests(got, 16)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Analyze(want, 16)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.PromptTokens, b.PromptTokens) || !slices.Equal(a.CachedTokens, b.CachedTokens) {
			t.Fatalf("AnalyzeRequests %+v, Analyze of the eager requests %+v", a, b)
		}
	})
}

// A trace's errors are reported before any prompt is made, as they were.
func TestLazyTraceErrors(t *testing.T) {
	recs, err := ParseTrace(strings.NewReader(randomTrace(rand.New(rand.NewPCG(3, 0)), 20)))
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{Workload: Trace, Model: "m", TracePath: "t.jsonl", RateMultiplier: 1e-300}
	_, errLazy := GenerateTrace(t.Context(), spec, recs)
	_, errEager := eagerTraceRequests(t.Context(), spec.WithDefaults(), recs)
	if errLazy == nil || errEager == nil || errLazy.Error() != errEager.Error() {
		t.Errorf("lazy %v, eager %v", errLazy, errEager)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := GenerateRequests(ctx, Spec{Workload: Trace, Model: "m", TracePath: writeTrace(t, sampleTrace)}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled replay: %v", err)
	}
}

package decisionlog

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// genRecord draws records whose texts come from text.
func genRecord(text *rapid.Generator[string]) *rapid.Generator[*Record] {
	num := rapid.OneOf(rapid.Float64(), rapid.Float64Range(-1, 1), rapid.Float64Range(-1e-5, 1e-5),
		rapid.SampledFrom([]float64{0, 1e-6, 1e-7, 1e21, 9.99e20, -1e-7, 123456789.125}))
	count := rapid.IntRange(-1, 1<<40)
	return rapid.Custom(func(t *rapid.T) *Record {
		r := &Record{
			Time:      time.Unix(rapid.Int64Range(-1e10, 1e10).Draw(t, "sec"), rapid.Int64Range(0, 999_999_999).Draw(t, "nsec")).UTC(),
			RequestID: text.Draw(t, "id"), Model: text.Draw(t, "model"), Policy: text.Draw(t, "policy"), Arm: text.Draw(t, "arm"),
			Attempt: count.Draw(t, "attempt"), PromptTokens: count.Draw(t, "prompt"), Blocks: count.Draw(t, "blocks"),
			Tokenized: text.Draw(t, "tokenized"), Winner: text.Draw(t, "winner"), EstimatedTTFTSecs: num.Draw(t, "est"),
			PrefillSecs: num.Draw(t, "prefill"), Steered: text.Draw(t, "steered"), DecidedBy: text.Draw(t, "by"),
			HotOwners: count.Draw(t, "owners"), DecisionSecs: num.Draw(t, "secs"),
		}
		if rapid.Bool().Draw(t, "guards") {
			r.Guards = rapid.SliceOf(text).Draw(t, "guard_list")
		}
		if rapid.Bool().Draw(t, "cands") {
			r.Candidates = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Candidate {
				c := Candidate{Replica: text.Draw(t, "replica"), State: text.Draw(t, "state"), SetAside: text.Draw(t, "aside"),
					InFlight: int64(count.Draw(t, "in_flight")), QueuedPrefillSecs: num.Draw(t, "queued"), Score: num.Draw(t, "score")}
				if rapid.Bool().Draw(t, "report") {
					running, usage, waiting := int64(count.Draw(t, "running")), num.Draw(t, "usage"), num.Draw(t, "waiting")
					c.Running, c.KVUsage, c.Waiting = &running, &usage, &waiting
				}
				if rapid.Bool().Draw(t, "priced") {
					cached, priced, est := count.Draw(t, "cached"), count.Draw(t, "priced_tokens"), num.Draw(t, "cand_est")
					c.CachedTokens, c.PricedCachedTokens, c.EstimatedTTFTSecs = &cached, &priced, &est
				}
				return c
			}), 0, 5).Draw(t, "candidates")
		}
		return r
	})
}

// TestAppendJSONAgreesWithEncodingJSON: with plain texts, a record's line
// is byte for byte what encoding/json writes.
func TestAppendJSONAgreesWithEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRecord(rapid.StringMatching(`[a-z0-9_./-]{0,12}`)).Draw(t, "record")
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON(nil); string(got) != want.String() {
			t.Fatalf("AppendJSON:\n%s\nencoding/json:\n%s", got, want.String())
		}
	})
}

// TestAppendJSONRoundTrips: with any texts (quotes, control characters,
// any Unicode) and numbers, a line reads back as the record, NaN and
// infinities as 0 (null).
func TestAppendJSONRoundTrips(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := genRecord(rapid.String()).Draw(t, "record")
		if rapid.Bool().Draw(t, "inf") {
			r.EstimatedTTFTSecs = math.Inf(1)
		}
		line := r.AppendJSON(nil)
		if !json.Valid(line) || bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("not one line of JSON: %q", line)
		}
		var back Record
		if err := json.Unmarshal(line, &back); err != nil {
			t.Fatal(err)
		}
		want := *r
		if math.IsInf(want.EstimatedTTFTSecs, 0) {
			want.EstimatedTTFTSecs = 0
		}
		if diff := cmp.Diff(want, back); diff != "" {
			t.Fatalf("read back differs (-want +got):\n%s", diff)
		}
	})
}

func BenchmarkAppendJSON(b *testing.B) {
	r := sample()
	buf := make([]byte, 0, 4096)
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = r.AppendJSON(buf[:0])
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		for b.Loop() {
			out.Reset()
			_ = enc.Encode(r)
		}
	})
}

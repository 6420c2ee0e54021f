package workload

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// naiveOracle is the reference for Analyze: a set of every full-block token
// prefix seen, keyed by its text.
func naiveOracle(t *rapid.T, reqs []Request, bs int) (prompt, cached int64) {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(reqs[x].At, reqs[y].At) })
	seen := map[string]bool{}
	for _, i := range order {
		ids, salt, err := promptIDs(&reqs[i])
		if err != nil {
			t.Fatal(err)
		}
		key := func(k int) string { return salt + "\x00" + fmt.Sprint(ids[:k*bs]) }
		hit := 0
		for hit < (len(ids)-1)/bs && seen[key(hit+1)] {
			hit++
		}
		for k := 1; k <= len(ids)/bs; k++ {
			seen[key(k)] = true
		}
		prompt += int64(len(ids))
		cached += int64(hit * bs)
	}
	return prompt, cached
}

func TestOracleMatchesNaive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// A few words and messages, so prompts often share prefixes.
		word := rapid.SampledFrom([]string{"a ", "to ", "the ", "model ", "x", "<|im_end|>", "\n", "request "})
		text := rapid.Custom(func(t *rapid.T) string {
			return strings.Join(rapid.SliceOfN(word, 0, 12).Draw(t, "words"), "")
		})
		pool := rapid.SliceOfN(text, 1, 4).Draw(t, "pool")
		n := rapid.IntRange(0, 40).Draw(t, "requests") // past a batch of analyze
		bs := rapid.IntRange(1, 8).Draw(t, "block size")
		reqs := make([]Request, n)
		for i := range reqs {
			at := time.Duration(rapid.IntRange(0, 5).Draw(t, "at"))
			salt := rapid.SampledFrom([]string{"", "", "s"}).Draw(t, "salt")
			if rapid.Bool().Draw(t, "completion") {
				prompt := rapid.SampledFrom(pool).Draw(t, "prefix") + text.Draw(t, "rest")
				b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "cache_salt": salt})
				reqs[i] = Request{At: at, Path: "/v1/completions", Body: b}
				continue
			}
			var msgs []map[string]string
			for range rapid.IntRange(1, 3).Draw(t, "messages") {
				role := rapid.SampledFrom([]string{"system", "user", "assistant"}).Draw(t, "role")
				msgs = append(msgs, map[string]string{"role": role, "content": rapid.SampledFrom(pool).Draw(t, "content")})
			}
			b, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "cache_salt": salt})
			reqs[i] = Request{At: at, Path: ChatPath, Body: b}
		}
		a, err := Analyze(reqs, bs)
		if err != nil {
			t.Fatal(err)
		}
		prompt, cached := naiveOracle(t, reqs, bs)
		if a.Prompt != prompt || a.Cached != cached {
			t.Fatalf("Analyze: %d of %d tokens cached, naive: %d of %d", a.Cached, a.Prompt, cached, prompt)
		}
	})
}

package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/policy"
)

// FuzzReplayShadow replays logs whose lines carry valid sums, so that the
// fuzzed records get past the sum check to the replay itself: a log is
// whatever the operator points the replay at, and a record the gateway
// would never write (no candidates, a foreign block size, picks out of
// range) must be an error naming its line, never a panic; a log that
// replays replays every line (one seed is a log of two decisions whose
// picks replay as logged, so that mutations reach past the first).
func FuzzReplayShadow(f *testing.F) {
	shadows := make([]loggedPolicy, 0, len(policy.Names()))
	for _, name := range policy.Names() {
		shadows = append(shadows, loggedPolicy{Model: "m", Policy: name, Seed: 1})
	}
	gen, err := json.Marshal(shadowRecord{Kind: recordGeneration, Generation: 1, Shadows: shadows,
		Config: json.RawMessage(`{"models":[{"name":"m"}],"replicas":[{"id":"r","url":"http://127.0.0.1:8000","models":["m"]}]}`)})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"kind":"decision","generation":1,"model":"m","request":{"id":"a","prompt_tokens":40,"blocks":["000102030405060708090a0b0c0d0e0f","101112131415161718191a1b1c1d1e1f"],"block_size":16,"at_unix_nano":5},` +
		`"candidates":[{"replica":"r","in_flight":1,"cached_tokens":32,"queued_prefill_secs":0.1,"running":-1,"kv_usage":-1,"kv_capacity_blocks":100},` +
		`{"replica":"s","in_flight":0,"cached_tokens":-1,"queued_prefill_secs":0,"running":3,"kv_usage":0.99,"kv_capacity_blocks":0}],` +
		`"picks":[{"policy":"cost_model","index":1,"replica":"s"},{"policy":"round_robin","index":1,"replica":"s"}]}`))
	f.Add([]byte(`{"kind":"decision","generation":1,"model":"m","request":{"id":"b","prompt_tokens":-7,"blocks":["000102030405060708090a0b0c0d0e0f"],"block_size":0,"at_unix_nano":-1},` +
		`"candidates":[{"replica":"r","in_flight":-5,"cached_tokens":900,"queued_prefill_secs":-1,"running":-9,"waiting":-2,"kv_usage":7,"kv_capacity_blocks":-3,"pace":-1}],` +
		`"picks":[{"policy":"least_request","index":3,"replica":"x"}]}`))
	f.Add([]byte(`{"kind":"decision","generation":1,"model":"m","request":{"id":"a","prompt_tokens":40,"blocks":["000102030405060708090a0b0c0d0e0f","101112131415161718191a1b1c1d1e1f"],"block_size":16,"at_unix_nano":5},` +
		`"candidates":[{"replica":"r","in_flight":1,"cached_tokens":32,"queued_prefill_secs":0.1,"running":-1,"kv_usage":-1,"kv_capacity_blocks":100},` +
		`{"replica":"s","in_flight":0,"cached_tokens":-1,"queued_prefill_secs":0,"running":3,"kv_usage":0.99,"kv_capacity_blocks":0}],` +
		`"picks":[{"policy":"cost_model","index":1,"replica":"s"},{"policy":"round_robin","index":0,"replica":"r"},{"policy":"least_request","index":1,"replica":"s"},{"policy":"kv_aware","index":1,"replica":"s"},{"policy":"prefix_hash","index":1,"replica":"s"}]}` + "\n" +
		`{"kind":"decision","generation":1,"model":"m","request":{"id":"b","prompt_tokens":8,"blocks":[],"block_size":16,"at_unix_nano":6},` +
		`"candidates":[{"replica":"r","in_flight":0,"cached_tokens":0,"queued_prefill_secs":0,"running":0,"kv_usage":0,"kv_capacity_blocks":100}],` +
		`"picks":[{"policy":"round_robin","index":0,"replica":"r"}]}`))
	f.Add([]byte(`{,"sum":"}`))
	f.Add([]byte(`{"kind":"generation","generation":2,"config":{"models":[]},"shadows":[{"model":"m","policy":"nope"}]}`))
	f.Fuzz(func(t *testing.T, records []byte) {
		var log bytes.Buffer
		prev := ""
		for _, body := range append([][]byte{gen}, bytes.Split(records, []byte("\n"))...) {
			if len(body) == 0 || body[len(body)-1] != '}' || bytes.Contains(body, []byte(`"sum"`)) {
				// No room for a sum, or a sum of its own (a short line
				// such as {,"sum":"} once panicked): as it is.
				log.Write(body)
				log.WriteByte('\n')
				continue
			}
			prev = chainSum(prev, body)
			log.Write(body[:len(body)-1])
			log.WriteString(sumField + prev + `"}` + "\n")
		}
		lines := bytes.Count(log.Bytes(), []byte("\n"))
		rep, err := ReplayShadow(&log)
		switch {
		case err != nil && !strings.HasPrefix(err.Error(), "line "):
			t.Fatalf("error %q does not name its line", err)
		case err == nil && rep.Generations < 1:
			t.Fatalf("replayed %+v without the generation record", rep)
		case err == nil && rep.Generations+rep.Decisions+len(rep.CutShort) != lines:
			// Every line is replayed, or cut short before a new start.
			t.Fatalf("replayed %+v from %d lines", rep, lines)
		}
	})
}

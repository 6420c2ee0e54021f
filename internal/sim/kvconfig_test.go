package sim

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestParseKVEventsConfig(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       KVEventsConfig
		err        string
	}{
		{name: "enable_only", json: `{"enable_kv_cache_events": true}`,
			want: KVEventsConfig{Enable: true, Publisher: "zmq", Endpoint: "tcp://*:5557", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}},
		{name: "disabled_is_null", json: `{}`,
			want: KVEventsConfig{Publisher: "null", Endpoint: "tcp://*:5557", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}},
		{name: "vllm_example", json: `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv-events"}`,
			want: KVEventsConfig{Enable: true, Publisher: "zmq", Endpoint: "tcp://*:5557", ReplayEndpoint: "tcp://*:5558", Topic: "kv-events", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}},
		{name: "explicit_null", json: `{"enable_kv_cache_events":true,"publisher":"null","endpoint":"tcp://127.0.0.1:1"}`,
			want: KVEventsConfig{Enable: true, Publisher: "null", Endpoint: "tcp://127.0.0.1:1", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}},
		{name: "unknown_key", json: `{"enable_kv_cache_events":true,"endpont":"x"}`, err: `unknown field "endpont"`},
		{name: "bad_publisher", json: `{"publisher":"kafka"}`, err: `publisher must be "zmq" or "null"`},
		{name: "zero_buffer", json: `{"buffer_steps":0}`, err: "buffer_steps must be positive"},
		{name: "negative_hwm", json: `{"hwm":-1}`, err: "hwm must be positive"},
		{name: "connect_endpoint", json: `{"enable_kv_cache_events":true,"endpoint":"tcp://10.0.0.1:5557"}`, err: "would be connected to"},
		{name: "ipc", json: `{"enable_kv_cache_events":true,"endpoint":"ipc:///tmp/x"}`, err: "only on tcp://"},
		{name: "bad_port", json: `{"enable_kv_cache_events":true,"endpoint":"tcp://*:99999"}`, err: "port must be within"},
		{name: "bad_replay", json: `{"enable_kv_cache_events":true,"replay_endpoint":"tcp://*"}`, err: "replay_endpoint"},
		{name: "not_json", json: `enable`, err: "--kv-events-config"},
		{name: "two_values", json: `{} {}`, err: "more than one JSON value"},
		{name: "wrong_type", json: `{"hwm":"many"}`, err: "hwm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKVEventsConfig(tc.json)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestBindAddrOffsetsByRank(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		rank     int
		want     string
		err      bool
	}{
		{"tcp://*:5557", 0, ":5557", false},
		{"tcp://*:5557", 1, ":5558", false},
		{"tcp://*:0", 3, ":0", false}, // any free port, whatever the rank
		{"tcp://[::]:5557", 2, "[::]:5559", false},
		{"tcp://*:65535", 1, "", true},
	} {
		got, err := bindAddr(tc.endpoint, "endpoint", tc.rank)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("bindAddr(%q, rank %d) = %q, %v; want %q (error %v)", tc.endpoint, tc.rank, got, err, tc.want, tc.err)
		}
	}
}

func TestFlagsTakeKVEvents(t *testing.T) {
	o, err := ParseFlags([]string{"--kv-events-config", `{"enable_kv_cache_events":true,"endpoint":"tcp://*:0"}`,
		"--prefix-caching-hash-algo", "xxhash_cbor", "--kv-events-encoding", "array", "--data-parallel-rank", "2"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !o.KVEvents.Publishing() || o.PrefixCachingHashAlgo != "xxhash_cbor" || o.KVEventsEncoding != "array" || o.DataParallelRank != 2 {
		t.Errorf("options %+v", o.Config)
	}
	for _, args := range [][]string{
		{"--kv-events-config", `{"hwm":0}`},
		{"--prefix-caching-hash-algo", "md5"},
		{"--kv-events-encoding", "json"},
		{"--data-parallel-rank", "-1"},
	} {
		if _, err := ParseFlags(args, nil); err == nil {
			t.Errorf("ParseFlags(%q) accepted", args)
		}
	}
	env := map[string]string{"PYTHONHASHSEED": "0", "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": "0"}
	o.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if !o.HashSeedSet || o.HashSeed != "0" || !o.BytesBlockHashes {
		t.Errorf("after ApplyEnv: seed %q set %v, bytes hashes %v", o.HashSeed, o.HashSeedSet, o.BytesBlockHashes)
	}
}

// FuzzKVEventsConfig feeds --kv-events-config arbitrary text: it is
// refused with an error naming the flag, or accepted with every setting
// usable, its endpoints bindable at any data-parallel rank or refused.
func FuzzKVEventsConfig(f *testing.F) {
	f.Add(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv-events"}`)
	f.Add(`{"enable_kv_cache_events":true,"endpoint":"tcp://[::1]:65535"}`)
	f.Add(`{"enable_kv_cache_events":true,"endpoint":"tcp://*:0","buffer_steps":1,"hwm":9223372036854775807}`)
	f.Add(`{"publisher":"null"} `)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseKVEventsConfig(s)
		if err != nil {
			if !strings.Contains(err.Error(), "--kv-events-config") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		if (c.Publisher != "zmq" && c.Publisher != "null") || c.BufferSteps <= 0 || c.HWM <= 0 || c.MaxQueueSize <= 0 {
			t.Fatalf("accepted %+v", c)
		}
		// Only vLLM's keys, spelled as vLLM spells them: its config class
		// refuses any other.
		var keys map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &keys) == nil {
			for k := range keys {
				if !slices.Contains([]string{"enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint", "buffer_steps", "hwm", "max_queue_size", "topic"}, k) {
					t.Fatalf("%s accepted with the key %q", s, k)
				}
			}
		}
		// What is accepted, written back, reads back the same.
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := ParseKVEventsConfig(string(out)); err != nil || again != c {
			t.Fatalf("%s read as %+v, written back as %s and read as %+v, %v", s, c, out, again, err)
		}
		if !c.Publishing() {
			return
		}
		for _, rank := range []int{0, 1, 65535} {
			for _, ep := range []string{c.Endpoint, c.ReplayEndpoint} {
				if ep == "" {
					continue
				}
				if addr, err := bindAddr(ep, "endpoint", rank); err == nil && addr == "" {
					t.Fatalf("bindAddr(%q, %d) gave no address", ep, rank)
				}
			}
		}
	})
}

// TestKVEventsConfigKeysAsVLLMSpellsThem: a key of another case is
// refused as unknown, as vLLM's config class refuses it; encoding/json
// matched it to the field (found by a fuzz target a review strengthened).
func TestKVEventsConfigKeysAsVLLMSpellsThem(t *testing.T) {
	for _, s := range []string{`{"ENABLE_KV_CACHE_EVENTS":true}`, `{"enable_kv_cache_events":true,"Endpoint":"tcp://*:6000"}`, `{"replAY_endpoint":"tcp://*:1"}`} {
		if c, err := ParseKVEventsConfig(s); err == nil || !strings.Contains(err.Error(), "unknown field") {
			t.Errorf("%s: %+v, %v; want refused as an unknown field", s, c, err)
		}
	}
	if c, err := ParseKVEventsConfig(`{"enable_kv_cache_events":true,"endpoint":"tcp://*:6000"}`); err != nil || !c.Enable || c.Endpoint != "tcp://*:6000" {
		t.Errorf("vLLM's spelling: %+v, %v", c, err)
	}
}

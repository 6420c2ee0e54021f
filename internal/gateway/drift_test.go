package gateway

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/events"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/sim"
	"github.com/inferrail/inferrail/internal/zmtp"
)

func TestUsageTailFindsCachedTokens(t *testing.T) {
	whole := `{"id":"x","usage":{"prompt_tokens":40,"total_tokens":44,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":32}},"kv_transfer_params":null}`
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"prompt_tokens_details\":{\"cached_tokens\": 16}}}\n\ndata: [DONE]\n\n"
	long := whole + strings.Repeat(" ", 2000)
	for _, tc := range []struct {
		name   string
		chunks []string
		want   int
		ok     bool
	}{
		{"whole", []string{whole}, 32, true},
		{"split_in_the_key", []string{whole[:80], whole[80:95], whole[95:]}, 32, true},
		{"byte_by_byte", strings.Split(whole, ""), 32, true},
		{"stream", []string{stream[:30], stream[30:]}, 16, true},
		{"null_details", []string{`{"usage":{"prompt_tokens":3,"prompt_tokens_details":null}}`}, 0, false},
		{"null_count", []string{`{"usage":{"prompt_tokens_details":{"cached_tokens":null}}}`}, 0, false},
		{"no_usage", []string{`{"id":"x"}`}, 0, false},
		{"usage_before_a_long_trailer", []string{long}, 32, true},
		{"scrolled_out_without_usage_key", []string{`{"cached_tokens":5}` + strings.Repeat(" ", 2000)}, 0, false},
		{"absurd_count", []string{`{"cached_tokens":99999999999}`}, 0, false},
		{"last_one_counts", []string{`"cached_tokens":1 ... "cached_tokens":7}`}, 7, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u usageTail
			for _, c := range tc.chunks {
				u.write([]byte(c))
			}
			got, ok := u.cachedTokens()
			if got != tc.want || ok != tc.ok {
				t.Errorf("cachedTokens = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestDriftAlarm(t *testing.T) {
	d := newDrift(slog.New(slog.DiscardHandler))
	for range driftMinSamples - 1 {
		d.observe("r", 32, 0) // all over, but too few to judge
	}
	if on, _ := d.alarmed("r"); on {
		t.Fatal("alarmed before the minimum of samples")
	}
	d.observe("r", 32, 0)
	if on, _ := d.alarmed("r"); !on {
		t.Fatal("not alarmed after a window of over-predictions")
	}
	// Exact predictions push the over share down; the alarm holds until
	// half the threshold (hysteresis).
	for range driftWindow - int(driftMaxOver*driftWindow) {
		d.observe("r", 16, 16)
	}
	if on, _ := d.alarmed("r"); !on {
		t.Error("the alarm ended at the threshold, before half of it")
	}
	for range driftWindow {
		d.observe("r", 16, 16)
	}
	if on, _ := d.alarmed("r"); on {
		t.Error("still alarmed after a window of exact predictions")
	}
	d.observe("r", 0, 48)
	st := d.status()
	if len(st) != 1 || st[0].Over != driftMinSamples || st[0].Under != 1 || st[0].UnderTokens != 48 ||
		st[0].OverTokens != 32*driftMinSamples || st[0].Exact != uint64(2*driftWindow-int(driftMaxOver*driftWindow)) {
		t.Errorf("status %+v", st)
	}
	d.restart("r")
	if st := d.status(); st[0].Window != 0 || st[0].Drifting {
		t.Errorf("after restart: %+v", st[0])
	}
	d.forget("r")
	if len(d.status()) != 0 {
		t.Error("forget left the replica")
	}
}

// TestDriftDropsAutoToApproximate: an engine that caches nothing behind a
// stream that claims every prompt is cached. In auto mode the gateway
// notices its predictions over-count, raises the alarm and stops
// following the stream.
func TestDriftDropsAutoToApproximate(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.ZeroLatency, cfg.MaxModelLen, cfg.NumGPUBlocks = true, 1024, 256
	cfg.EnablePromptTokensDetails, cfg.EnablePrefixCaching = true, false
	engine, err := sim.StartLocal(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(engine.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub, err := zmtp.ListenPub(ctx, "tcp://127.0.0.1:0", zmtp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()

	gcfg := testConfig(t, []*sim.Local{engine})
	gcfg.Index.Mode = config.IndexAuto
	gcfg.Replicas[0].KVEvents = config.ReplicaKVEvents{Endpoint: pub.Endpoint()}
	gw := startGateway(t, gcfg)
	waitFor(t, "the gateway to subscribe", 5*time.Second, func() bool { return pub.Stats().Subscribers == 1 })

	body := systemChat(strings.Repeat("a long shared system prompt ", 20), "question")
	tokens := adminTokens(t, gw, body)
	// The lying stream: the prompt's full blocks, stored.
	stored := events.Event{Kind: events.BlockStored, BlockSize: 16, Medium: "GPU", HasMedium: true}
	for i := 0; (i+1)*16 <= len(tokens); i++ {
		stored.Hashes = append(stored.Hashes, events.UintHash(uint64(1000+i)))
		for _, tok := range tokens[i*16 : (i+1)*16] {
			stored.Tokens = append(stored.Tokens, uint32(tok))
		}
	}
	payload := events.AppendBatch(nil, &events.Batch{Events: []events.Event{stored}, HasDPRank: true}, events.EncodingMap)
	if err := pub.Send([][]byte{{}, binary.BigEndian.AppendUint64(nil, 0), payload}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replica to follow the stream", 5*time.Second, func() bool {
		reps := adminIndex(t, gw.admin).Replicas // empty until the index first hears of it
		return len(reps) == 1 && reps[0].Source == index.SourceEvents
	})
	for i := range driftMinSamples + 5 {
		resp, out := chat(t, gw.url, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, out)
		}
		if i == 0 {
			if got, _ := strconv.Atoi(resp.Header.Get(openai.HeaderCachedTokens)); got == 0 {
				t.Fatal("the lying stream did not make the gateway predict a hit")
			}
		}
	}
	waitFor(t, "the drift alarm to drop the replica to approximate", 5*time.Second, func() bool {
		s := adminIndex(t, gw.admin)
		return len(s.Replicas) == 1 && s.Replicas[0].Source == index.SourceApproximate && len(s.KVEvents) == 1 && s.KVEvents[0].Reason == reasonDrift
	})
	s := adminIndex(t, gw.admin)
	if len(s.Predictions) != 1 || !s.Predictions[0].Drifting || s.Predictions[0].Over < driftMinSamples {
		t.Errorf("predictions %+v", s.Predictions)
	}
	if !strings.Contains(scrape(t, gw.admin), `inferrail_index_drift{replica="sim-1"} 1`) {
		t.Error("the metrics page does not show the drift")
	}
	if n := strings.Count(gw.logs.String(), "kv index drift: predictions over-count"); n != 1 {
		t.Errorf("the alarm was logged %d times, want once", n)
	}
}

// adminTokens is the gateway's tokenization of a chat body.
func adminTokens(t *testing.T, gw *running, body string) []int {
	t.Helper()
	resp, err := http.Post(gw.admin+"/admin/tokenize/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var tk struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.Unmarshal(b, &tk); err != nil || len(tk.Tokens) < 32 {
		t.Fatalf("tokenize: %v: %s", err, b)
	}
	return tk.Tokens
}

// otherTokenizer fronts a simulator as an engine whose tokenizer differs:
// its /tokenize adds a token to every answer; the rest passes through.
func otherTokenizer(t *testing.T, s *sim.Local) string {
	t.Helper()
	target, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" {
			proxy.ServeHTTP(w, r)
			return
		}
		resp, err := http.Post(s.URL()+"/tokenize", "application/json", r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var out struct {
			Tokens []int `json:"tokens"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Tokens = append(out.Tokens, 7)
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestTokenizationCheckedAtStartup: a model whose tokens differ from its
// engine's /tokenize is noticed at startup and routes without
// predictions, while a model that agrees keeps them.
func TestTokenizationCheckedAtStartup(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string
	}{{"agrees", tokAgrees}, {"disagrees", tokDisagrees}} {
		t.Run(tc.name, func(t *testing.T) {
			sims := fleetOf(t, 1, true)
			cfg := testConfig(t, sims)
			if tc.want == tokDisagrees {
				cfg.Replicas[0].URL = otherTokenizer(t, sims[0])
			}
			gw := startGateway(t, cfg)
			var got []tokenCheck
			waitFor(t, "the tokenization check", 5*time.Second, func() bool {
				got = adminIndex(t, gw.admin).Tokenization
				return len(got) == 1 && got[0].State != tokPending
			})
			if got[0].State != tc.want || got[0].Replica != "sim-1" {
				t.Fatalf("tokenization %+v, want %s", got[0], tc.want)
			}
			resp, body := chat(t, gw.url, chatBody("hello there", ""))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			predicted := resp.Header.Get(openai.HeaderCachedTokens) != ""
			if predicted != (tc.want == tokAgrees) {
				t.Errorf("prediction made: %v", predicted)
			}
			// Explain offers the policy what routing offers it: no
			// prediction either when the tokens differ (found by a review:
			// it tokenized anyway and named another replica).
			ans := explainAt(t, gw.admin, "/v1/chat/completions", chatBody("hello there", ""))
			wantTok := map[string]string{tokAgrees: tokOK, tokDisagrees: tokDisagree}[tc.want]
			if ans.Tokenized != wantTok {
				t.Errorf("explain: tokenized %q, want %q", ans.Tokenized, wantTok)
			}
			for _, r := range ans.Replicas {
				if (r.CachedTokens != nil) != (tc.want == tokAgrees) {
					t.Errorf("explain: replica %s's cached tokens %v, want a prediction only when the tokens agree", r.ID, r.CachedTokens)
				}
			}
			page := scrape(t, gw.admin)
			agrees := `inferrail_tokenizer_agrees{model="inferrail/sim-8b"} 1`
			if tc.want == tokDisagrees {
				agrees = `inferrail_tokenizer_agrees{model="inferrail/sim-8b"} 0`
				if !strings.Contains(page, `result="disagrees"} 1`) {
					t.Error("the request without a prediction is not counted as disagrees")
				}
			}
			if !strings.Contains(page, agrees) {
				t.Errorf("the metrics page lacks %s", agrees)
			}
		})
	}
}

// TestUnconfirmedSpeculationRaisesSuspicion: when the engine never stores
// the blocks routed to it (here the gateway cuts blocks of 32 tokens, the
// engine of 16, as a mismatched tokenizer would also make it), every
// speculation runs out unconfirmed and the gateway says so.
func TestUnconfirmedSpeculationRaisesSuspicion(t *testing.T) {
	sims, cfg := eventFleet(t, 1, 1024, config.IndexExact)
	cfg.Models[0].BlockSize = 32
	cfg.Index.SpeculativeTTL = config.Duration(50 * time.Millisecond)
	gw := startGateway(t, cfg)
	waitFor(t, "the replica to follow its events", 5*time.Second, func() bool {
		reps := adminIndex(t, gw.admin).Replicas // empty until the index first hears of it
		return len(reps) == 1 && reps[0].Source == index.SourceEvents
	})
	for i := range 30 {
		resp, body := chat(t, gw.url, systemChat(strings.Repeat(fmt.Sprintf("prompt %d says something new ", i), 20), "q"))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	catchUp(t, gw, sims)
	waitFor(t, "the tokenization suspicion", 5*time.Second, func() bool {
		s := adminIndex(t, gw.admin).KVEvents
		return len(s) == 1 && s[0].TokenizationSuspect
	})
	s := adminIndex(t, gw.admin).KVEvents[0]
	if s.Confirmed != 0 || s.Unconfirmed < speculationWindow || s.Mirror.Skipped == 0 {
		t.Errorf("stream %+v", s)
	}
	if !strings.Contains(gw.logs.String(), "its tokens likely differ") {
		t.Error("the suspicion was not logged")
	}
}

// TestKilledEngineRaisesNoSuspicion: an engine killed with streams it
// has answered the head of but not yet computed confirms none of their
// blocks, which says nothing of its tokens: the broken attempts' records
// are taken back, and no tokenization suspicion is raised.
func TestKilledEngineRaisesNoSuspicion(t *testing.T) {
	sims := simsWith(t, 1, func(_ int, c *sim.Config) {
		c.MaxModelLen = 1024
		c.NumGPUBlocks = 4096
		c.MaxNumSeqs = 1 // the others wait, their heads sent
		c.EnablePromptTokensDetails = true
		c.KVEvents = sim.DefaultKVEventsConfig()
		c.KVEvents.Enable, c.KVEvents.Publisher = true, "zmq"
		c.KVEvents.Endpoint, c.KVEvents.ReplayEndpoint = "tcp://*:0", "tcp://*:0"
	})
	cfg := testConfig(t, sims)
	cfg.Index.Mode = config.IndexExact
	// Longer than the streams take to be routed and the engine to be
	// killed, even under the race detector on a busy machine: speculation
	// that ran out before the break was taken back would count as
	// unconfirmed whatever the gateway does (50 ms did so under load).
	const ttl = 3 * time.Second
	cfg.Index.SpeculativeTTL = config.Duration(ttl)
	cfg.Health.Interval = config.Duration(time.Second)
	cfg.Health.Timeout = config.Duration(time.Second)
	cfg.Replicas[0].KVEvents = config.ReplicaKVEvents{Endpoint: sims[0].KVEventsEndpoint(), ReplayEndpoint: sims[0].KVReplayEndpoint()}
	gw := startGateway(t, cfg)
	waitFollowing(t, gw, 1)
	if resp, body := chat(t, gw.url, systemChat("a first prompt starts the stream", "q")); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	catchUp(t, gw, sims)
	var wg sync.WaitGroup
	for i := range 16 { // about 40 new blocks each, streamed, 300 tokens out
		wg.Go(func() {
			body := strings.TrimSuffix(systemChat(strings.Repeat(fmt.Sprintf("prompt %d says something new ", i), 40), "q"), "}") + `,"stream":true,"max_tokens":300}`
			resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	waitFor(t, "the streams in flight", 5*time.Second, func() bool {
		r := gw.g.Fleet().Snapshot().Get("sim-1")
		return r != nil && r.InFlight() == 16 && r.Pending() == 0
	})
	sims[0].Kill()
	wg.Wait()
	time.Sleep(ttl + time.Second) // the speculation's TTL and a few ticks past it
	s := adminIndex(t, gw.admin).KVEvents[0]
	if s.TokenizationSuspect || strings.Contains(gw.logs.String(), "its tokens likely differ") {
		t.Errorf("a killed engine raised the tokenization suspicion: %+v", s)
	}
	// A stream the engine ended with an error event and [DONE] as it
	// stopped is a whole answer, whose record stays: a few may run out.
	if s.Unconfirmed >= speculationWindow {
		t.Errorf("%d blocks of broken attempts ran out unconfirmed, want them taken back", s.Unconfirmed)
	}
}

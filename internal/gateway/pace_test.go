package gateway

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/pace"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/sim"
)

// TestPaceLearnsASlowEngine: two engines the cost model prices alike, one
// computing prefill four times slower. Streamed requests teach the
// gateway each engine's pace; the slow one's is far above the fast one's,
// it is exported and explain prices the slow engine by it; every response
// carries the decision's estimate. With routing.pace off, paces are still
// learned but estimates leave them out.
//
// Both engines, and the cost model, are three times slower than the
// simulator's default: what the gateway observes of a TTFT includes the
// machine's own time (proxying, tokenizing, waiting for a core), which the
// pace rightly counts; under the race detector on a busy machine it added
// some 50 ms to the fast engine's 30 ms prefills, a pace of 2.7 that the
// slow engine's, at the clamp of 4, was not well above.
func TestPaceLearnsASlowEngine(t *testing.T) {
	const slower = 3
	fast := sim.DefaultLatency()
	fast.PrefillToken *= slower
	fast.PrefillPair *= slower
	fast.PrefillFixed *= slower
	slow := fast
	slow.PrefillToken *= 4
	slow.PrefillFixed *= 4
	sims := simsWith(t, 2, func(i int, cfg *sim.Config) {
		cfg.Latency = []sim.LatencyModel{fast, slow}[i]
		cfg.MaxModelLen, cfg.NumGPUBlocks, cfg.EnablePromptTokensDetails = 4096, 1024, true
	})
	cfg := testConfig(t, sims) // round robin: both engines get samples
	cfg.Routing.Pace = true
	cm := &cfg.Routing.CostModel
	cm.PrefillTokenSecs *= slower
	cm.PrefillPairSecs *= slower
	cm.PrefillFixedSecs *= slower
	gw := startGateway(t, cfg)

	// Distinct prompts of about 200 tokens, so that prefill, not fixed
	// costs, makes up most of the time; eight at a time.
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	sem := make(chan struct{}, 8)
	for i := range 32 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body := chatBody(fmt.Sprintf("request %d: %s", i, strings.Repeat(fmt.Sprintf("w%d ", i), 80)), `,"stream":true`)
			resp, _ := chat(t, gw.url, body)
			e, err := strconv.ParseFloat(resp.Header.Get(openai.HeaderEstimatedTTFT), 64)
			switch {
			case resp.StatusCode != http.StatusOK:
				errs <- fmt.Errorf("status %d", resp.StatusCode)
			case err != nil || !(e > 0):
				errs <- fmt.Errorf("estimate header %q", resp.Header.Get(openai.HeaderEstimatedTTFT))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	page := scrape(t, gw.admin)
	pf, ps := metricValue(page, `inferrail_replica_pace{replica="sim-1"}`), metricValue(page, `inferrail_replica_pace{replica="sim-2"}`)
	if !(ps >= 2 && ps > 1.5*pf) {
		t.Fatalf("paces: fast engine %v, slow engine %v; want the slow one at least 2 and well above", pf, ps)
	}

	explainPace := func() (fastPace, slowPace float64) {
		var x struct {
			Replicas []struct {
				ID       string `json:"replica"`
				Estimate struct {
					Pace float64 `json:"pace"`
				} `json:"estimate"`
			} `json:"replicas"`
		}
		if code := adminDo(t, http.MethodPost, gw.admin+"/admin/explain/v1/chat/completions", chatBody("which one?", ""), &x); code != http.StatusOK {
			t.Fatalf("explain: %d", code)
		}
		for _, r := range x.Replicas {
			switch r.ID {
			case "sim-1":
				fastPace = r.Estimate.Pace
			case "sim-2":
				slowPace = r.Estimate.Pace
			}
		}
		return fastPace, slowPace
	}
	if f, s := explainPace(); f != pf || s != ps {
		t.Errorf("explain prices by paces %v and %v, the metrics say %v and %v", f, s, pf, ps)
	}
	if code, _, problems := patch(t, gw.admin, `{"routing":{"pace":false}}`); code != http.StatusOK {
		t.Fatalf("patch: %d %v", code, problems)
	}
	if f, s := explainPace(); f != 1 || s != 1 {
		t.Errorf("with routing.pace off, explain prices by paces %v and %v, want 1", f, s)
	}
	waitFor(t, "the paces to stay exported", time.Second, func() bool {
		return metricValue(scrape(t, gw.admin), `inferrail_replica_pace{replica="sim-2"}`) == ps
	})
}

// TestPoolPaces: paces within chance of the lowest (two standard errors
// of their difference) are priced as the lowest; an engine measured well
// apart keeps its own, as does one whose meter is not used. One with too
// few samples to judge is not taken for the lowest; priced above it, it is
// priced as it (kept apart, its one slow sample lost it every even
// decision, and with them the samples that would correct it), and priced
// below it keeps its own. A pooled candidate's queue is offered at the
// pace it is pooled to, so that its estimate still prices the real time it
// is busy.
func TestPoolPaces(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	mr, offered, cands := pacedFleet(t, at)
	own := slices.Clone(cands)
	poolPaces(mr, offered, cands, clock.Of(at))
	want := []float64{own[0].Pace, own[0].Pace, own[2].Pace, own[0].Pace, 0, own[5].Pace}
	cost := policy.CostParams{}
	for i := range cands {
		if cands[i].Pace != want[i] {
			t.Errorf("candidate %d: pace %v (its own %v), want %v", i, cands[i].Pace, own[i].Pace, want[i])
		}
		busy := own[i].Pace
		if busy == 0 {
			busy = 1 // no meter: the queue drains at the estimate's speed
		}
		if got := cost.Estimate(&policy.Request{}, &cands[i]).TTFTSecs; math.Abs(got-busy) > 1e-6 {
			t.Errorf("candidate %d: its queue prices %v s, want the %v it is busy", i, got, busy)
		}
	}
	if !(own[2].Pace > 3 && own[0].Pace < own[1].Pace && own[3].Pace > own[0].Pace && own[5].Pace < own[0].Pace) {
		t.Fatalf("the meters did not learn the paces the test means: %v", own)
	}
}

// TestPoolPacesWhileEveryEngineQueues: while every candidate's engine
// reports requests waiting, every paced candidate is priced at the lowest
// well-measured pace, however far apart the paces are (past the KV cache's
// edge a pace carries the wait for free blocks, which the estimate leaves
// out, and stays high after the pile is gone); one engine with nothing
// waiting leaves the paces to chance as before.
func TestPoolPacesWhileEveryEngineQueues(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	for _, tt := range []struct {
		name    string
		waiting []float64
		pooled  bool
	}{
		{"every engine queues", []float64{1, 2, 30, 1, 1, 4}, true},
		{"one engine does not", []float64{1, 2, 30, 1, 0, 4}, false},
		{"none does", []float64{0, 0, 0, 0, 0, 0}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			mr, offered, cands := pacedFleet(t, at)
			for i := range cands {
				cands[i].Waiting = tt.waiting[i]
			}
			own := slices.Clone(cands)
			poolPaces(mr, offered, cands, clock.Of(at))
			want := []float64{own[0].Pace, own[0].Pace, own[2].Pace, own[0].Pace, 0, own[5].Pace}
			if tt.pooled {
				want = []float64{own[0].Pace, own[0].Pace, own[0].Pace, own[0].Pace, 0, own[0].Pace}
			}
			for i := range cands {
				if cands[i].Pace != want[i] {
					t.Errorf("candidate %d: pace %v (its own %v), want %v", i, cands[i].Pace, own[i].Pace, want[i])
				}
			}
		})
	}
}

// pacedFleet is TestPoolPaces's fleet: six replicas, each with one
// request queued, offered as candidates with their own paces.
func pacedFleet(t *testing.T, at time.Time) (*modelRoutes, []int, []policy.Candidate) {
	meter := func(ratios ...float64) *pace.Meter {
		m := new(pace.Meter)
		for i := range 20 {
			m.Observe(1, ratios[i%len(ratios)], at)
		}
		return m
	}
	slowFresh, fastFresh := new(pace.Meter), new(pace.Meter)
	slowFresh.Observe(1, 3, at) // pace 1.25
	fastFresh.Observe(1, 0.5, at)
	routes := []route{
		{pace: meter(0.7, 1.3)}, // 1.0 ± 0.067
		{pace: meter(0.8, 1.4)}, // 1.1 ± 0.067: within chance of the first
		{pace: meter(3.5, 3.7)}, // 3.6 ± 0.022: well apart
		{pace: slowFresh},       // one sample: unknown noise, above the lowest
		{},                      // routing.pace off
		{pace: fastFresh},       // one sample, below the lowest
	}
	mr := &modelRoutes{routes: routes}
	cands := make([]policy.Candidate, len(routes))
	offered := make([]int, len(routes))
	for i := range routes {
		offered[i] = i
		routes[i].Replica = fleet.NewReplica(fmt.Sprint("r", i), nil, []string{"m"}, 0, 0)
		routes[i].feed = new(load.Feed)
		l, _ := routes[i].TryAcquire()
		t.Cleanup(l.Release)
		var pace float64
		if routes[i].pace != nil {
			pace = routes[i].pace.Pace()
		}
		l.Queue(at, 1, pace, 100) // busy pace seconds, 1 without one
		(&Gateway{}).candidate(&cands[i], &routes[i], clock.Of(at))
	}
	return mr, offered, cands
}

// TestQueueDrainsAtPace: a request routed to an engine at pace 3 with a
// second of estimated prefill holds it three seconds of real time; the
// gateway offers what is left in the estimate's seconds, so the estimate,
// which multiplies it by the pace, prices the real time left. Without a
// pace meter (routing.pace off) the queue drains at the estimate's speed.
func TestQueueDrainsAtPace(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	slow := new(pace.Meter)
	for range 40 {
		slow.Observe(1, 3, at)
	}
	for _, tc := range []struct {
		name  string
		meter *pace.Meter
		pace  float64 // offered; 0 without a meter
		busy  float64 // real seconds the request holds the engine
	}{{"pace 3", slow, 3, 3}, {"pace off", nil, 0, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			r := fleet.NewReplica("r", nil, []string{"m"}, 0, 0)
			rt := &route{Replica: r, feed: new(load.Feed), id: "r", pace: tc.meter}
			l, ok := r.TryAcquire()
			if !ok {
				t.Fatal("no lease")
			}
			defer l.Release()
			var c policy.Candidate
			(&Gateway{}).candidate(&c, rt, clock.Of(at))
			l.Queue(at, 1, c.Pace, 100)
			cost := policy.CostParams{}
			for _, elapsed := range []float64{0, 1, 2, 2.5, 3, 4} {
				now := at.Add(time.Duration(elapsed * float64(time.Second)))
				(&Gateway{}).candidate(&c, rt, clock.Of(now))
				if math.Abs(c.Pace-tc.pace) > 1e-9 {
					t.Fatalf("pace %v, want %v", c.Pace, tc.pace)
				}
				want := max(tc.busy-elapsed, 0) // real seconds left
				got := cost.Estimate(&policy.Request{}, &c).TTFTSecs
				if math.Abs(got-want) > 1e-6 {
					t.Errorf("after %vs: the queue prices %v s, want %v", elapsed, got, want)
				}
			}
		})
	}
}

// TestErrorStreamTeachesNoPace: an engine that refuses with a 503 whose
// body comes in chunks, well after the estimate, is relayed as it is, and
// its first byte, which is no token, is not taken for a first token: the
// pace learns nothing from it (found by a review: it was sampled as a TTFT
// four times the estimate).
func TestErrorStreamTeachesNoPace(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.(http.Flusher).Flush() // no length: the body is relayed as it comes
		time.Sleep(200 * time.Millisecond)
		_, _ = io.WriteString(w, `{"error":{"message":"busy","type":"overloaded"}}`)
	}))
	t.Cleanup(srv.Close)
	cfg := flowConfig(srv.URL, 4)
	cfg.Models[0].Policy = policy.CostModel
	cfg.Routing.Pace = true
	cfg.Retry.MaxAttempts = 1
	gw := startGatewayWith(t, cfg, Options{})
	resp, body := post(t, gw.url+"/v1/completions", `{"model":"sim","prompt":"hello there","max_tokens":1,"stream":true}`)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "busy") {
		t.Fatalf("status %d, body %q: want the engine's 503", resp.StatusCode, body)
	}
	if est := resp.Header.Get(openai.HeaderEstimatedTTFT); est == "" {
		t.Fatal("no estimate on the response: the decision made none to learn against")
	}
	if p := gw.g.fleet.Snapshot().Get("one").Pace().Pace(); p != 1 {
		t.Errorf("pace %v after a streamed 503, want 1 (no sample)", p)
	}
}

// TestWholeAnswerTeachesNoPace: a whole answer's first byte comes with its
// last, however the engine frames it: one sent without a Content-Length
// (chunked, or HTTP/1.0's body ended by the close) is relayed as it comes,
// but the time to it is the whole generation's, no first token's, and the
// pace learns nothing from it (a review's finding: ten such answers of a
// second each drove the pace from 1 to 4). A stream's first event does
// teach it, which shows the test can see a sample.
func TestWholeAnswerTeachesNoPace(t *testing.T) {
	const whole = `{"id":"x","object":"text_completion","choices":[{"index":0,"text":"hi","finish_reason":"length"}]}`
	const events = "data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"text\":\"hi\"}]}\n\ndata: [DONE]\n\n"
	chunked := func(ctype, body string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", ctype, len(body), body)
	}
	tests := []struct {
		name, answer   string
		stream, learns bool
	}{
		{"whole_chunked", chunked("application/json", whole), false, false},
		{"whole_http10_until_close", "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + whole, false, false},
		{"whole_with_length", fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(whole), whole), false, false},
		{"stream", chunked("text/event-stream", events), true, true},
		// A streaming request answered whole (a review's finding): JSON,
		// or events a buffering proxy sent at once with their length.
		{"whole_chunked_to_a_stream", chunked("application/json", whole), true, false},
		{"events_with_length", fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(events), events), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/completions" {
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				conn, rw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				// Well past any estimate for a two-token prompt: a
				// sample would move the pace far from 1.
				time.Sleep(100 * time.Millisecond)
				_, _ = rw.WriteString(tt.answer)
				_ = rw.Flush()
			}))
			t.Cleanup(srv.Close)
			cfg := flowConfig(srv.URL, 4)
			cfg.Models[0].Policy = policy.CostModel
			cfg.Routing.Pace = true
			cfg.Retry.MaxAttempts = 1
			gw := startGatewayWith(t, cfg, Options{})
			for i := range 3 {
				resp, body := post(t, gw.url+"/v1/completions", fmt.Sprintf(`{"model":"sim","prompt":"hello %d","max_tokens":1,"stream":%v}`, i, tt.stream))
				if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"hi"`) {
					t.Fatalf("status %d, body %q: want the engine's answer", resp.StatusCode, body)
				}
				if est := resp.Header.Get(openai.HeaderEstimatedTTFT); est == "" {
					t.Fatal("no estimate on the response: the decision made none to learn against")
				}
			}
			if p := gw.g.fleet.Snapshot().Get("one").Pace().Pace(); (p != 1) != tt.learns {
				t.Errorf("pace %v after three answers, want it learned %v", p, tt.learns)
			}
			// inferrail_ttft_seconds counts the same first tokens (a series
			// never observed is not on the page: -1).
			series := `inferrail_ttft_seconds_count{model="` + testModel + `",policy="cost_model",replica="one"}`
			if got, want := metricValue(scrape(t, gw.admin), series), map[bool]float64{true: 3, false: -1}[tt.learns]; got != want {
				t.Errorf("%s = %v, want %v", series, got, want)
			}
		})
	}
}

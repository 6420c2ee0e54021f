package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/decisionlog"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/sim"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"pgregory.net/rapid"
)

// echoEngine is a stand-in engine whose answers a test scripts: it records
// every body it receives and answers with the bytes of the test's choosing,
// cut into chunks of the test's choosing, flushing after each.
type echoEngine struct {
	mu     sync.Mutex
	bodies [][]byte
	reply  []byte
	chunks []int
	sized  bool          // send a Content-Length, as a whole (unstreamed) answer does
	hold   chan struct{} // when set, the head is flushed and the body waits for it to close
	srv    *httptest.Server
}

func newEchoEngine(t testing.TB) *echoEngine {
	e := &echoEngine{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			return
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		case "/v1/chat/completions", "/v1/completions":
		default:
			http.NotFound(w, r) // the load scraper's /metrics among others
			return
		}
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		e.bodies = append(e.bodies, body)
		reply, chunks, sized, hold := e.reply, e.chunks, e.sized, e.hold
		e.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("X-Engine-Header", "kept")
		if sized {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(reply)))
		}
		flusher := w.(http.Flusher)
		if hold != nil {
			flusher.Flush()
			<-hold
		}
		for i := 0; len(reply) > 0; i++ {
			n := len(reply)
			if len(chunks) > 0 {
				n = min(n, max(1, chunks[i%len(chunks)]))
			}
			_, _ = w.Write(reply[:n])
			flusher.Flush()
			reply = reply[n:]
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func echoConfig(t testing.TB, engines ...*echoEngine) *config.Config {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Aliases: []string{"sim"}}}
	for i, e := range engines {
		cfg.Replicas = append(cfg.Replicas, config.Replica{ID: fmt.Sprintf("e%d", i), URL: e.srv.URL, Models: []string{testModel}, MaxConcurrency: 64, MaxPending: 64})
	}
	cfg.Health.Interval = config.Duration(time.Second)
	return &cfg
}

// TestBytesPassThrough: whatever the engine sends reaches the client
// unchanged under any chunking, and the body the client sends reaches the
// engine byte for byte (but for the model, when an alias is spliced).
func TestBytesPassThrough(t *testing.T) {
	e := newEchoEngine(t)
	gw := startGateway(t, echoConfig(t, e))
	rapid.Check(t, func(rt *rapid.T) {
		reply := rapid.SliceOfN(rapid.Byte(), 0, 5000).Draw(rt, "reply")
		chunks := rapid.SliceOfN(rapid.IntRange(1, 700), 0, 8).Draw(rt, "chunks")
		sized := rapid.Bool().Draw(rt, "sized")
		e.mu.Lock()
		e.reply, e.chunks, e.sized, e.bodies = reply, chunks, sized, nil
		e.mu.Unlock()
		filler := rapid.StringMatching(`[ -~é日\n\t]{0,300}`).Draw(rt, "filler")
		spacing := rapid.SampledFrom([]string{"", " ", "\n  "}).Draw(rt, "spacing")
		model := rapid.SampledFrom([]string{`"` + testModel + `"`, `"sim"`}).Draw(rt, "model")
		body := `{` + spacing + `"messages":[{"role":"user","content":` + strconv.Quote(filler) + `}],` + spacing + `"model":` + spacing + model + `,"x":[1,{"model":"inner"}]}`
		resp, got := chat(rt, gw.url, body)
		if resp.StatusCode != 200 || got != string(reply) {
			rt.Fatalf("client got %d %q, engine sent %q", resp.StatusCode, got, reply)
		}
		if resp.Header.Get("X-Engine-Header") != "kept" || resp.Header.Get("X-Inferrail-Replica") != "e0" {
			rt.Fatalf("headers not relayed: %v", resp.Header)
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		want := strings.Replace(body, model, `"`+testModel+`"`, 1)
		if len(e.bodies) != 1 || string(e.bodies[0]) != want {
			rt.Fatalf("engine got %q, want %q", e.bodies, want)
		}
	})
}

// TestStreamHeadAtOnce: a stream's head reaches the client as soon as the
// engine sends it, before any of its body, while a whole answer (one with a
// Content-Length) may leave in one piece.
func TestStreamHeadAtOnce(t *testing.T) {
	e := newEchoEngine(t)
	gw := startGateway(t, echoConfig(t, e))
	hold := make(chan struct{})
	e.mu.Lock()
	e.reply, e.hold = []byte("data: first\n\n"), hold
	e.mu.Unlock()
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.Post(gw.url+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("head first", "")))
		got <- result{resp, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer r.resp.Body.Close()
		if r.resp.StatusCode != 200 || r.resp.Header.Get("X-Engine-Header") != "kept" {
			t.Fatalf("head: %d %v", r.resp.StatusCode, r.resp.Header)
		}
		close(hold)
		body, err := io.ReadAll(r.resp.Body)
		if err != nil || string(body) != "data: first\n\n" {
			t.Fatalf("body %q, %v", body, err)
		}
	case <-time.After(10 * time.Second):
		close(hold)
		t.Fatal("the stream's head did not reach the client while the engine held its body")
	}
}

// TestH2C: clients may speak HTTP/2 without TLS, and engines may be reached
// over h2c.
func TestH2C(t *testing.T) {
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	cfg.Upstream.HTTP2 = true
	gw := startGateway(t, cfg)
	protos := new(http.Protocols)
	protos.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: protos}}
	req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(chatBody("h2c", `,"stream":true`)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
		t.Errorf("h2c: %s %d %s", resp.Proto, resp.StatusCode, body)
	}
}

// TestEveryRequestCountedOnce sends good, bad and abandoned requests and
// checks that the outcomes add up to the requests sent.
func TestEveryRequestCountedOnce(t *testing.T) {
	sims := fleetOf(t, 2, true)
	gw := startGateway(t, testConfig(t, sims))
	sent := 0
	for i := range 5 {
		chat(t, gw.url, chatBody(fmt.Sprint(i), ""))
		sent++
	}
	for _, body := range []string{`{"model":"nope"}`, `{bad`, `[]`} {
		chat(t, gw.url, body)
		sent++
	}
	sims[0].Kill()
	sims[1].Kill()
	chat(t, gw.url, chatBody("dead fleet", ""))
	sent++
	total := 0.0
	for _, status := range []string{"2xx", "4xx", "5xx", outcomeAborted, outcomeCancelled} {
		for _, rep := range []string{"", "sim-1", "sim-2"} {
			total += testutil.ToFloat64(gw.g.metrics.requests.WithLabelValues(testModel, rep, status))
			total += testutil.ToFloat64(gw.g.metrics.requests.WithLabelValues("", rep, status))
		}
	}
	if int(total) != sent {
		t.Errorf("outcomes add up to %v, %d requests sent\n%s", total, sent, grep(scrape(t, gw.admin), "inferrail_requests_total"))
	}
}

// TestDNSDiscovery: a group's members join and leave as its name resolves
// differently; members that stay keep their counters; a failed lookup keeps
// the last known set.
func TestDNSDiscovery(t *testing.T) {
	sims := fleetOf(t, 3, true)
	res := &fakeResolver{}
	port := func(s string) string { _, p, _ := net.SplitHostPort(s); return p }
	// All three simulators share one port-less name in this test by living
	// on 127.0.0.1 with different ports, so each group member is a port:
	// give each simulator its own group address through the resolver.
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel}}
	cfg.Discovery.DNS = []config.DNSGroup{{Name: "pool", URL: "http://pool.test:" + port(sims[0].Addr()), Models: []string{testModel},
		Refresh: config.Duration(30 * time.Millisecond), MaxConcurrency: 8, MaxPending: 8}}
	cfg.Health.Interval = config.Duration(time.Second)
	res.set("127.0.0.1")
	gw := startResolvingGateway(t, &cfg, res)
	g, url := gw.g, gw.url

	member := fleet.MemberID("pool", "127.0.0.1", port(sims[0].Addr()))
	waitFor(t, "the first member", time.Second, func() bool { return g.Fleet().Snapshot().Get(member) != nil })
	if resp, body := chat(t, url, `{"messages":[{"role":"user","content":"x"}],"max_tokens":2}`); resp.StatusCode != 200 || resp.Header.Get("X-Inferrail-Replica") != member {
		t.Fatalf("via DNS member: %d %s %s", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
	}
	first := g.Fleet().Snapshot().Get(member)

	res.set("127.0.0.1", "127.0.0.2")
	waitFor(t, "a second member", time.Second, func() bool { return len(g.Fleet().Snapshot().Replicas) == 2 })
	if g.Fleet().Snapshot().Get(member) != first {
		t.Error("a member that stayed was replaced")
	}
	res.fail()
	time.Sleep(100 * time.Millisecond)
	if n := len(g.Fleet().Snapshot().Replicas); n != 2 {
		t.Errorf("failed lookups changed the fleet to %d members", n)
	}
	res.set("127.0.0.2")
	waitFor(t, "the first member to leave", time.Second, func() bool { return g.Fleet().Snapshot().Get(member) == nil })
	if !first.Removed() {
		t.Error("departed member not marked removed")
	}
	page := scrape(t, gw.admin)
	if strings.Contains(page, `replica="`+member+`"`) {
		t.Errorf("series of the departed member remain:\n%s", grep(page, member))
	}
}

type fakeResolver struct {
	mu     sync.Mutex
	addrs  []string
	broken bool
	n      int // lookups answered
}

func (r *fakeResolver) lookups() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *fakeResolver) set(addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs, r.broken = addrs, false
}

func (r *fakeResolver) fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.broken = true
}

func (r *fakeResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if r.broken {
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	}
	return append([]string(nil), r.addrs...), nil
}

// TestLogHygiene: request bodies never reach the log unless log_prompts.
func TestLogHygiene(t *testing.T) {
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	gw := startGateway(t, cfg)
	secret := "correct horse battery staple"
	chat(t, gw.url, chatBody(secret, ""))
	chat(t, gw.url, `{"model":"nope","messages":[{"role":"user","content":"`+secret+`"}]}`)
	sims[0].Kill()
	chat(t, gw.url, chatBody(secret, ""))
	if strings.Contains(gw.logs.String(), "horse") {
		t.Errorf("a prompt reached the log:\n%s", gw.logs.String())
	}
	cfg2 := testConfig(t, fleetOf(t, 1, true))
	cfg2.Logging.LogPrompts = true
	gw2 := startGateway(t, cfg2)
	chat(t, gw2.url, chatBody(secret, ""))
	if !strings.Contains(gw2.logs.String(), "horse") {
		t.Error("log_prompts on, but the prompt was not logged")
	}
}

// TestSucceedsWhileAHealthyReplicaIsInReach breaks random replicas in random
// ways: as long as one works and the attempts can reach it, every request
// succeeds there.
func TestSucceedsWhileAHealthyReplicaIsInReach(t *testing.T) {
	sims := fleetOf(t, 4, true)
	cfg := testConfig(t, sims)
	cfg.Retry.MaxAttempts = 4
	cfg.Health.Interval = config.Duration(time.Hour) // passive paths only
	cfg.Health.Timeout = config.Duration(time.Second)
	cfg.Health.EjectionBackoff = config.Duration(time.Millisecond)
	cfg.Health.MaxEjectionBackoff = config.Duration(time.Millisecond)
	gw := startGateway(t, cfg)
	// A lost connection has the replica probed at once, perhaps after its
	// fault changed; every fault spares the health check, so the probes
	// pass and only the passive paths act here.
	faults := []sim.Fault{{}, {Kind: sim.FaultFail, Status: 503, SparesHealth: true}, {Kind: sim.FaultFail, Status: 502, SparesHealth: true},
		{Kind: sim.FaultClose, SparesHealth: true}, {Kind: sim.FaultFail, Status: 504, SparesHealth: true}}
	rapid.Check(t, func(rt *rapid.T) {
		healthy := rapid.IntRange(0, len(sims)-1).Draw(rt, "healthy")
		for i, s := range sims {
			f := sim.Fault{}
			if i != healthy {
				f = faults[rapid.IntRange(1, len(faults)-1).Draw(rt, "fault")]
			}
			s.SetFault(f)
		}
		resp, body := chat(rt, gw.url, chatBody("reach", ""))
		if resp.StatusCode != 200 || resp.Header.Get("X-Inferrail-Replica") != fmt.Sprintf("sim-%d", healthy+1) {
			rt.Fatalf("with only sim-%d working: %d from %q %s", healthy+1, resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
		}
	})
}

// TestFlappingReplica: a replica that flips between healthy and 503 costs
// clients nothing.
func TestFlappingReplica(t *testing.T) {
	sims := fleetOf(t, 3, true)
	gw := startGateway(t, testConfig(t, sims))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		bad := false
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			bad = !bad
			if bad {
				sims[0].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503})
			} else {
				sims[0].SetFault(sim.Fault{})
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	for i := range 150 {
		if resp, body := chat(t, gw.url, chatBody(fmt.Sprint("flap", i), "")); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
}

// TestNeverOffersAnUnfitReplica builds random fleets of healthy, probed-down,
// ejected, full and removed replicas serving random models: the policy only
// ever gets replicas that serve the model, are usable and have room.
func TestNeverOffersAnUnfitReplica(t *testing.T) {
	models := []string{"a", "b"}
	rapid.Check(t, func(rt *rapid.T) {
		cfg := config.Default()
		for _, m := range models {
			cfg.Models = append(cfg.Models, config.Model{Name: m, Policy: rapid.SampledFrom([]string{"round_robin", "random", "least_request", "p2c"}).Draw(rt, "policy")})
		}
		n := rapid.IntRange(1, 8).Draw(rt, "replicas")
		for i := range n {
			serves := rapid.SliceOfNDistinct(rapid.SampledFrom(models), 1, 2, func(s string) string { return s }).Draw(rt, "serves")
			cfg.Replicas = append(cfg.Replicas, config.Replica{ID: fmt.Sprint("r", i), URL: "http://127.0.0.1:1", Models: serves, MaxConcurrency: 2, MaxPending: 2})
		}
		g, err := New(&cfg, Options{})
		if err != nil {
			rt.Fatal(err)
		}
		defer g.Close()
		reps := g.Fleet().Snapshot().Replicas
		for _, r := range reps {
			switch rapid.IntRange(0, 4).Draw(rt, "state") {
			case 1:
				fleet.MarkDown(r)
			case 2:
				for range 3 {
					g.health.Report(r, false)
				}
			case 3:
				for range 2 {
					if _, ok := r.TryAcquire(); !ok {
						break
					}
				}
			}
		}
		for range 20 {
			model := rapid.SampledFrom(models).Draw(rt, "model")
			ex := &exchange{model: model, gen: g.current(), policy: g.testPolicy(model)}
			lease, _, e := g.choose(ex, map[*fleet.Replica]bool{})
			if e != nil {
				continue
			}
			r := lease.Replica()
			if now := clock.Of(time.Now()); !r.Serves(model) || !r.Usable(now) {
				rt.Fatalf("offered %s for %s: serves %v, usable %v", r.ID, model, r.Models, r.Usable(now))
			}
			if r.InFlight() > r.MaxConcurrency() {
				rt.Fatalf("%s over its cap: %d in flight", r.ID, r.InFlight())
			}
			lease.Release()
		}
	})
}

// racingPolicy takes the last slot of the replica it picks first, as a
// concurrent request would between reading the fleet and taking the lease,
// and records every Pick's candidates.
type racingPolicy struct {
	g     *Gateway
	seen  [][]policy.Candidate
	taken *fleet.Lease
}

func (p *racingPolicy) Name() string { return "racing" }

func (p *racingPolicy) Pick(_ *policy.Request, cands []policy.Candidate) policy.Decision {
	p.seen = append(p.seen, slices.Clone(cands))
	if p.taken == nil {
		p.taken, _ = p.g.fleet.Snapshot().Get(cands[1].ID).TryAcquire()
		return policy.Decision{Index: 1}
	}
	return policy.Decision{Index: len(cands) - 1}
}

func (p *racingPolicy) Explain(*policy.Request, []policy.Candidate) policy.Explanation {
	return policy.Explanation{Policy: p.Name()}
}

func (p *racingPolicy) PickExplained(req *policy.Request, cands []policy.Candidate) (policy.Decision, policy.Explanation) {
	return p.Pick(req, cands), p.Explain(req, cands)
}

// TestChooseOffersTheRestAfterLosingTheRace: when the picked replica's last
// slot goes to another request first, the same decision offers the other
// candidates, each as it was read, and leases one of them.
func TestChooseOffersTheRestAfterLosingTheRace(t *testing.T) {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel}}
	for i := range 3 {
		cfg.Replicas = append(cfg.Replicas, config.Replica{ID: fmt.Sprint("r", i), URL: "http://127.0.0.1:1", Models: []string{testModel}, MaxConcurrency: 1})
	}
	g, err := New(&cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	p := &racingPolicy{g: g}
	lease, _, e := g.choose(&exchange{gen: g.current(), model: testModel, policy: p}, nil)
	if e != nil {
		t.Fatalf("no lease after losing the race: %v", e)
	}
	defer lease.Release()
	if p.taken == nil {
		t.Fatal("the racing policy could not take the slot it picked")
	}
	defer p.taken.Release()
	if len(p.seen) != 2 {
		t.Fatalf("%d picks, want 2", len(p.seen))
	}
	want := slices.Delete(slices.Clone(p.seen[0]), 1, 2)
	if !slices.Equal(p.seen[1], want) {
		t.Fatalf("after losing %s the policy saw %+v, want %+v", p.seen[0][1].ID, p.seen[1], want)
	}
	if got := lease.Replica().ID; got != want[len(want)-1].ID {
		t.Fatalf("leased %s, picked %s", got, want[len(want)-1].ID)
	}
}

// TestDecisionLogNamesTheRaceLost: the decision record of a request whose
// picked replica lost its last slot to another request says that replica
// was at capacity; it said tried, as if an earlier attempt had gone there,
// on the request's first attempt (found by a review of the decision log's
// reasons).
func TestDecisionLogNamesTheRaceLost(t *testing.T) {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel}}
	for i := range 3 {
		cfg.Replicas = append(cfg.Replicas, config.Replica{ID: fmt.Sprint("r", i), URL: "http://127.0.0.1:1", Models: []string{testModel}, MaxConcurrency: 1})
	}
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	g, err := New(decisionLogConfig(&cfg, path, 1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &racingPolicy{g: g}
	ex := &exchange{gen: g.current(), model: testModel, policy: p, id: "req-race", obs: &observed{logged: true}}
	lease, _, e := g.choose(ex, nil)
	if e != nil {
		g.Close()
		t.Fatalf("no lease after losing the race: %v", e)
	}
	lease.Release()
	if p.taken == nil {
		g.Close()
		t.Fatal("the racing policy could not take the slot it picked")
	}
	p.taken.Release()
	g.Close() // writes the decision log
	recs, data := readDecisions(t, path)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1:\n%s", len(recs), data)
	}
	lost, winner := p.seen[0][1].ID, lease.Replica().ID
	for _, c := range recs[0].Candidates {
		want := decisionlog.StateOffered
		if c.Replica == lost {
			want = notOfferedFull
		}
		if c.State != want {
			t.Errorf("replica %s: state %q, want %q (lost the race: %s, won: %s)", c.Replica, c.State, want, lost, winner)
		}
	}
}

// TestDepartedSeriesStayGone: a replica that leaves while its metrics page
// is being read loses its series for good, though the scrape ends after it
// left; other replicas' series are untouched.
func TestDepartedSeriesStayGone(t *testing.T) {
	entered, left := make(chan struct{}, 1), make(chan struct{}, 1)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			return // /health and anything else: 200
		}
		select {
		case entered <- struct{}{}:
		default:
		}
		<-r.Context().Done() // the scrape times out, after the replica left
		select {
		case left <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(engine.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(engine.URL, "http://"))
	res := &fakeResolver{}
	res.set("127.0.0.1")
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel}}
	cfg.Discovery.DNS = []config.DNSGroup{{Name: "pool", URL: "http://pool.test:" + port, Models: []string{testModel},
		Refresh: config.Duration(20 * time.Millisecond), MaxConcurrency: 8, MaxPending: 8}}
	cfg.Load.ScrapeTimeout = config.Duration(200 * time.Millisecond)
	cfg.Load.MaxAge = config.Duration(400 * time.Millisecond)
	gw := startResolvingGateway(t, &cfg, res)
	member := fleet.MemberID("pool", "127.0.0.1", port)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the member's page was never asked for")
	}
	res.set("127.0.0.3") // the member leaves while its scrape waits
	waitFor(t, "the member to leave", 5*time.Second, func() bool { return gw.g.Fleet().Snapshot().Get(member) == nil })
	<-left
	// Past the second deletion: whatever the scrape's end wrote is gone, and
	// nothing writes it again.
	time.Sleep(forgetAgainAfter + 200*time.Millisecond)
	if page := scrape(t, gw.admin); strings.Contains(page, `replica="`+member+`"`) {
		t.Errorf("series of the departed member remain:\n%s", grep(page, member))
	}
	other := fleet.MemberID("pool", "127.0.0.3", port)
	if page := scrape(t, gw.admin); !strings.Contains(page, `replica="`+other+`"`) {
		t.Errorf("the member that joined has no series:\n%s", grep(page, "pool-"))
	}
}

// TestRefusedReplicaProbedAtOnce: with probes an hour apart, a request
// refused at a killed replica's port ejects the replica before it is
// answered, has it probed at once and marked down, and is itself served by
// another.
func TestRefusedReplicaProbedAtOnce(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims) // round_robin: the first request goes to sim-1
	cfg.Health.Interval = config.Duration(time.Hour)
	cfg.Health.Timeout = config.Duration(time.Second)
	cfg.Health.EjectionBackoff = config.Duration(time.Minute) // outlasts the test, however slow
	cfg.Health.MaxEjectionBackoff = cfg.Health.EjectionBackoff
	gw := startGateway(t, cfg)
	// The first probe and model-card fetch finish before the kill: one still
	// under way returned its connection to the pool after the close below,
	// and the request took it (a lost connection, not a refused one) on a
	// busy machine.
	waitFor(t, "sim-1's first probe and cards", 10*time.Second, func() bool { return gw.g.Fleet().Snapshot().Get("sim-1").Cards() != nil })
	sims[0].Kill()
	// A connection the gateway pooled from its probes may be picked before
	// it notices the close: that case is TestLostConnectionProbedAtOnce.
	gw.g.transport.CloseIdleConnections()
	resp, body := chat(t, gw.url, chatBody("after the kill", ""))
	if resp.StatusCode != 200 || resp.Header.Get("X-Inferrail-Replica") != "sim-2" {
		t.Fatalf("status %d from %s: %s", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
	}
	rep := gw.g.Fleet().Snapshot().Get("sim-1")
	if !rep.Ejected(time.Now()) || rep.EjectedTotal() != 1 {
		t.Errorf("one refused request: sim-1 ejected %v (%d ejections), want ejected at once", rep.Ejected(time.Now()), rep.EjectedTotal())
	}
	waitFor(t, "sim-1 marked down by probes", 10*time.Second, func() bool { return !rep.Healthy() })
}

// TestLostConnectionProbedAtOnce: with probes an hour apart, a request
// whose connection the engine closes without an answer, as an engine that
// exits does, is served by another replica and has the first probed at
// once: its port refuses the probes and it is marked down.
func TestLostConnectionProbedAtOnce(t *testing.T) {
	sims := fleetOf(t, 1, true)
	var dying *httptest.Server
	var dead atomic.Bool
	dying = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !dead.Load() && r.URL.Path == "/health" {
			return
		}
		if !dead.Load() && r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		// The engine exits, taking every connection with it: no new ones,
		// and none of those still open answers again.
		dead.Store(true)
		_ = dying.Listener.Close()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		dying.CloseClientConnections()
	}))
	t.Cleanup(dying.Close)
	cfg := testConfig(t, sims)
	cfg.Replicas = slices.Insert(cfg.Replicas, 0, config.Replica{ID: "dying", URL: dying.URL, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8})
	cfg.Health.Interval = config.Duration(time.Hour)
	cfg.Health.Timeout = config.Duration(time.Second)
	gw := startGateway(t, cfg) // round_robin: the first request goes to dying
	resp, body := chat(t, gw.url, chatBody("as it exits", ""))
	if resp.StatusCode != 200 || resp.Header.Get("X-Inferrail-Replica") != "sim-1" {
		t.Fatalf("status %d from %s: %s", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
	}
	rep := gw.g.Fleet().Snapshot().Get("dying")
	waitFor(t, "dying marked down by probes", 10*time.Second, func() bool { return !rep.Healthy() })
}

// TestDecisionOnAFleetThatMoved: a decision whose route table was taken
// before every replica in it left, and others joined, routes to one that
// joined instead of answering that no replica serves the model.
func TestDecisionOnAFleetThatMoved(t *testing.T) {
	sims := fleetOf(t, 1, true)
	_, port, _ := net.SplitHostPort(sims[0].Addr())
	res := &fakeResolver{}
	res.set("127.0.0.2")
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel}}
	cfg.Discovery.DNS = []config.DNSGroup{{Name: "pool", URL: "http://pool.test:" + port, Models: []string{testModel},
		Refresh: config.Duration(time.Hour), MaxConcurrency: 8, MaxPending: 8}}
	cfg.Health.Interval = config.Duration(time.Hour)
	gw := startResolvingGateway(t, &cfg, res)
	g := gw.g
	first := fleet.MemberID("pool", "127.0.0.2", port)
	waitFor(t, "the first member", 5*time.Second, func() bool { return g.Fleet().Snapshot().Get(first) != nil })
	stale := g.routes(g.current())
	res.set("127.0.0.1")
	g.discovery.ResolveAll(t.Context())
	joined := fleet.MemberID("pool", "127.0.0.1", port)
	if g.Fleet().Snapshot().Get(joined) == nil || !stale.snap.Get(first).Removed() {
		t.Fatal("the group did not move to the new member")
	}
	ex := &exchange{model: testModel, gen: g.current(), policy: g.testPolicy(testModel)}
	lease, _, err := g.chooseFrom(ex, nil, stale)
	if err != nil {
		t.Fatalf("decision on the table taken before the move: %v", err)
	}
	defer lease.Release()
	if id := lease.Replica().ID; id != joined {
		t.Errorf("routed to %s, want %s", id, joined)
	}
}

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestLostConnection(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"none", nil, false},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"closed", io.EOF, true},
		{"broken pipe", &net.OpError{Op: "write", Err: syscall.EPIPE}, true},
		{"head timeout", errHeadTimeout, false},
		{"replica down", errReplicaDown, false},
		{"switched protocols", errSwitched, false},
		{"status outside HTTP", fmt.Errorf("%w: %d", errBadStatus, 99), false},
		{"client left", context.Canceled, false},
		{"deadline", fmt.Errorf("round trip: %w", context.DeadlineExceeded), false},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, false},
	}
	for _, tt := range tests {
		if got := lostConnection(tt.err); got != tt.want {
			t.Errorf("%s: lostConnection(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// TestDepartedChecksStayGone: a request that ends after its replica left
// does not bring back the replica's prediction checks: they were written
// at the answer's end for every replica, member or not, and a DNS pool's
// churn under traffic grew the page without bound.
func TestDepartedChecksStayGone(t *testing.T) {
	sims := fleetOf(t, 1, true)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(sims[0].URL(), "http://"))
	res := &fakeResolver{}
	res.set("127.0.0.1")
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: testModel, Aliases: []string{"sim"}, Tokenizer: "builtin:sim"}}
	cfg.Discovery.DNS = []config.DNSGroup{{Name: "pool", URL: "http://pool.test:" + port, Models: []string{testModel},
		Refresh: config.Duration(20 * time.Millisecond), MaxConcurrency: 8, MaxPending: 8}}
	gw := startResolvingGateway(t, &cfg, res)
	member := fleet.MemberID("pool", "127.0.0.1", port)
	waitFor(t, "the member to join", 5*time.Second, func() bool { return gw.g.Fleet().Snapshot().Get(member) != nil })
	if resp, body := chat(t, gw.url, chatBody("before", "")); resp.StatusCode != 200 { // the member has checks
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	waitFor(t, "the member's prediction checks", 5*time.Second, func() bool {
		return strings.Contains(scrape(t, gw.admin), `inferrail_prediction_checks_total{replica="`+member+`"`)
	})
	sims[0].SetFault(sim.Fault{Kind: sim.FaultDelay, Delay: 500 * time.Millisecond, SparesHealth: true})
	done := make(chan string, 1)
	go func() {
		resp, body := chat(t, gw.url, chatBody("during", ""))
		done <- fmt.Sprint(resp.StatusCode, " ", body)
	}()
	waitFor(t, "the request in flight", 5*time.Second, func() bool {
		r := gw.g.Fleet().Snapshot().Get(member)
		return r != nil && r.InFlight() > 0
	})
	res.set("127.0.0.3") // the member leaves while its request runs
	waitFor(t, "the member to leave", 5*time.Second, func() bool { return gw.g.Fleet().Snapshot().Get(member) == nil })
	if got := <-done; !strings.HasPrefix(got, "200 ") {
		t.Fatalf("the request in flight: %s", got)
	}
	time.Sleep(forgetAgainAfter + 200*time.Millisecond)
	if page := scrape(t, gw.admin); strings.Contains(page, `replica="`+member+`"`) {
		t.Errorf("series of the departed member remain:\n%s", grep(page, member))
	}
}

// TestStaticReplicaWithMemberID: a static replica given a DNS member's ID
// (validation refuses that config; apply is called past it here) takes the
// ID over, and /metrics still answers: two replicas with one ID made every
// scrape fail with duplicate series.
func TestStaticReplicaWithMemberID(t *testing.T) {
	sims := fleetOf(t, 2, true)
	res := &fakeResolver{}
	res.set("127.0.0.1")
	_, port, _ := net.SplitHostPort(sims[0].Addr())
	cfg := testConfig(t, sims[1:])
	cfg.Discovery.DNS = []config.DNSGroup{{Name: "pool", URL: "http://pool.test:" + port, Models: []string{testModel},
		Refresh: config.Duration(20 * time.Millisecond), MaxConcurrency: 8, MaxPending: 8}}
	gw := startResolvingGateway(t, cfg, res)
	member := fleet.MemberID("pool", "127.0.0.1", port)
	waitFor(t, "the member", time.Second, func() bool { return gw.g.Fleet().Snapshot().Get(member) != nil })

	next := *cfg
	next.Replicas = append(slices.Clone(cfg.Replicas), config.Replica{ID: member, URL: sims[1].URL(), Models: []string{testModel}, MaxConcurrency: 4, MaxPending: 4})
	if result, _, err := gw.g.apply(&next, "test"); result != reloadApplied {
		t.Fatalf("apply = %s, %v", result, err)
	}
	// Past a few refreshes of the group, which must not bring the member back.
	resolved := res.lookups() + 3
	waitFor(t, "three more lookups", 2*time.Second, func() bool { return res.lookups() >= resolved })
	if got := gw.g.Fleet().Snapshot().Get(member); got == nil || got.URL.String() != sims[1].URL() {
		t.Errorf("replica %s is %v, want the static one at %s", member, got, sims[1].URL())
	}
	resp, err := http.Get(gw.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics = %d:\n%.300s", resp.StatusCode, body)
	}
	if !strings.Contains(gw.logs.String(), "dns member left out") {
		t.Error("no warning that the member was left out")
	}
}

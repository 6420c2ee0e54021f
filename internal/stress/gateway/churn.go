package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fakeengine"
	gwpkg "github.com/inferrail/inferrail/internal/gateway"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
)

// ChurnLoad is gw-churn: replicas joining and leaving through DNS
// discovery, many more over time than at any moment, under traffic.
type ChurnLoad struct {
	// Members is how many distinct replicas pass through the group; Live
	// how many it has at a time; Step how many leave (and as many join) at
	// each lookup, every Refresh. Members > Live >= Step > 0.
	Members, Live, Step int
	Refresh             time.Duration
	// Rate is the chat rate through the gateway meanwhile, per second.
	// Must be positive.
	Rate int
	// RenderEvery is the time between two renderings of the metrics page.
	// Must be positive.
	RenderEvery time.Duration
	// MaxPageBytes is the page size the spec allows.
	MaxPageBytes int
}

// Validate reports every setting that cannot run.
func (l ChurnLoad) Validate() error {
	errs := []error{stress.Positive("step", l.Step), stress.Positive("refresh", l.Refresh), stress.Positive("rate", l.Rate),
		stress.Positive("render_every", l.RenderEvery), stress.Positive("max_page_bytes", l.MaxPageBytes)}
	if !(l.Members > l.Live && l.Live >= l.Step) {
		errs = append(errs, fmt.Errorf("members, live, step: want members > live >= step, got %d, %d, %d", l.Members, l.Live, l.Step))
	}
	if l.Members > 65280 {
		errs = append(errs, fmt.Errorf("members: at most 65280 loopback addresses, got %d", l.Members))
	}
	return errors.Join(errs...)
}

// ChurnFigures are what gw-churn measured.
type ChurnFigures struct {
	Members int `json:"members"`
	Live    int `json:"live"`
	// Lookups is how many times the group was resolved; Joined how many
	// distinct replicas the gateway took in.
	Lookups int     `json:"lookups"`
	Seconds float64 `json:"seconds"`
	// Requests and their failures through the churning group.
	Requests int `json:"requests"`
	stress.Failures
	// PageBytes is the largest page rendered; Render the time to render it
	// in process (the admin handler with a recorder), in seconds; Fetch the
	// time to fetch it over loopback.
	PageBytes    int                 `json:"page_bytes"`
	PageBytesEnd int                 `json:"page_bytes_end"`
	Render       measure.Percentiles `json:"render"`
	Fetch        measure.Percentiles `json:"fetch"`
	// Floor is the time client_golang's own handler takes to render the
	// same families handed to it ready (parsed from the page just
	// rendered), every tenth page, beside Render: the library's encoding
	// alone, without the gateway's collectors.
	Floor measure.Percentiles `json:"floor"`
	// ReplicasOnPage is the most distinct replica labels a page held;
	// Departed counts those on the page after the churn that are not
	// members any more.
	ReplicasOnPage int `json:"replicas_on_page"`
	// FamilyBytesEnd is the page after the churn's bytes by metric family.
	FamilyBytesEnd map[string]int `json:"family_bytes_end"`
	Departed       int            `json:"departed_on_page_after"`
}

// churnResolver answers the group's lookups with a window of addresses
// that moves by step at each lookup until it reaches the last member.
// Safe for concurrent use.
type churnResolver struct {
	members, live, step int

	mu      sync.Mutex
	first   int // index of the window's first member; guarded by mu
	lookups int // guarded by mu
	done    chan struct{}
}

func (r *churnResolver) LookupHost(_ context.Context, _ string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lookups > 0 && r.first+r.live < r.members {
		r.first = min(r.first+r.step, r.members-r.live)
		if r.first+r.live == r.members {
			close(r.done)
		}
	}
	r.lookups++
	return r.window(), nil
}

// window is the current members' addresses; r.mu must be held.
func (r *churnResolver) window() []string {
	out := make([]string, r.live)
	for i := range out {
		out[i] = fakeengine.LoopbackIP(r.first + i)
	}
	return out
}

func (r *churnResolver) current() (lookups int, ips []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups, r.window()
}

func runGWChurn(ctx context.Context, r *gwRun) error {
	l := r.c.Churn
	fe, err := procs.StartFakeEngines(ctx, procs.FakeEnginesOptions{Binary: r.c.BenchBinary, Env: r.c.BenchEnv,
		Pages: fmt.Sprintf("%sx%d", fakeengine.PageStamped, l.Members), SharePort: true, Logger: r.log})
	if err != nil {
		return err
	}
	r.replicas = append(r.replicas, &gwReplica{ID: "fake-engines", URL: fe.URLs[0], stop: func() {
		if err := fe.Stop(); err != nil {
			r.res.StopErrors = append(r.res.StopErrors, err.Error())
		}
	}})
	r.res.Setup.Simulators = fmt.Sprintf("one inferrail-bench fake-engines child process (%s) serving %d engines on 127.1.x.y, one port", r.c.BenchBinary, l.Members)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(fe.URLs[0], "http://"))
	res := &churnResolver{members: l.Members, live: l.Live, step: l.Step, done: make(chan struct{})}
	g, gwURL, adminURL, stop, err := startChurnGateway(ctx, r, port, l.Refresh, res)
	if err != nil {
		return err
	}
	defer stop()
	f := &ChurnFigures{Members: l.Members, Live: l.Live}
	r.res.Churn = f
	client, admin := gwClient(256), procs.AdminClient()
	defer client.CloseIdleConnections()
	defer admin.CloseIdleConnections()

	began := time.Now()
	var wg sync.WaitGroup
	var shots []stress.Shot
	wg.Go(func() {
		// The load lasts as long as the churn should.
		steps := (l.Members - l.Live + l.Step - 1) / l.Step
		n := max(1, int(float64(l.Rate)*(time.Duration(steps)*l.Refresh).Seconds()))
		body := gwChatBody(procs.SimModel, 0, 1)
		shots = stress.OpenLoop(ctx, began, stress.FixedSchedule(l.Rate, n), faultRequestTimeout, func(ctx context.Context, i int) (int, string, error) {
			return postChat(ctx, client, gwURL+"/v1/chat/completions", body, "", 1)
		})
	})
	var render, fetch, floor []time.Duration
	handler := g.AdminHandler()
	tick := time.NewTicker(l.RenderEvery)
	for k := 0; ; k++ {
		page, took := renderPage(handler)
		render = append(render, took)
		f.PageBytes = max(f.PageBytes, len(page))
		f.ReplicasOnPage = max(f.ReplicasOnPage, len(replicaLabels(page)))
		if k%10 == 0 {
			t0 := time.Now()
			if _, err := fetchText(ctx, admin, adminURL+"/metrics"); err == nil {
				fetch = append(fetch, time.Since(t0))
			}
			if h, err := floorHandler(page); err == nil {
				_, took := renderPage(h)
				floor = append(floor, took)
			}
		}
		select {
		case <-tick.C:
			continue
		case <-res.done:
		case <-ctx.Done():
		}
		break
	}
	tick.Stop()
	f.Seconds = time.Since(began).Seconds()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	// The gateway needs a lookup or two more to see the last window; a
	// machine slowed by the race detector may need more, so wait for the
	// page to settle, within a bound, before counting what it names.
	var lookups int
	var page []byte
	for settle := time.Now(); ; {
		time.Sleep(l.Refresh)
		var ips []string
		lookups, ips = res.current()
		page, _ = renderPage(handler)
		f.Departed = departed(page, ips, port)
		if f.Departed == 0 || time.Since(settle) > 100*l.Refresh {
			break
		}
	}
	f.PageBytesEnd = len(page)
	f.FamilyBytesEnd = familyBytes(page)
	f.Lookups = lookups
	f.Render, f.Fetch, f.Floor = measure.Summarize(render), measure.Summarize(fetch), measure.Summarize(floor)
	f.Requests = len(shots)
	f.Errors, f.ErrorKinds, f.ErrorSamples = stress.TallyShots(shots)
	churnChecks(r, f, l)
	return nil
}

// departed counts the replicas a page names that are not among the
// addresses the resolver now answers.
func departed(page []byte, ips []string, port string) int {
	live := map[string]bool{}
	for _, ip := range ips {
		live["churn-"+ip+"-"+port] = true
	}
	n := 0
	for id := range replicaLabels(page) {
		if !live[id] {
			n++
		}
	}
	return n
}

func churnChecks(r *gwRun, f *ChurnFigures, l ChurnLoad) {
	r.check("replicas churned through the group", fmt.Sprintf("%d, %d at a time", l.Members, l.Live),
		fmt.Sprintf("%d in %.1f s over %d lookups", f.Members, f.Seconds, f.Lookups), f.Lookups >= (l.Members-l.Live)/l.Step)
	r.check("largest metrics page", fmt.Sprintf("under %d KB", l.MaxPageBytes/1000),
		fmt.Sprintf("%d bytes (%d after the churn; at most %d replicas named on a page)", f.PageBytes, f.PageBytesEnd, f.ReplicasOnPage), f.PageBytes < l.MaxPageBytes)
	r.check("page render time (admin handler, in process)", "well under 1 ms",
		fmt.Sprintf("p50 %s, p99 %s, max %s over %d renders; fetched over loopback p50 %s, p99 %s; client_golang alone on the same families p50 %s, p99 %s",
			usec(f.Render.P50), usec(f.Render.P99), usec(f.Render.Max), f.Render.N, usec(f.Fetch.P50), usec(f.Fetch.P99),
			usec(f.Floor.P50), usec(f.Floor.P99)), f.Render.P99 < 0.0005)
	r.check("departed replicas still named on the page afterwards", "0", fmt.Sprint(f.Departed), f.Departed == 0)
	r.note("The page's size follows the replicas it names, not the replicas that passed: each replica with traffic adds its "+
		"latency histograms (inferrail_request_duration_seconds, and inferrail_ttft_seconds once it streams; by model, policy and replica) and its "+
		"counters, about 2 to 4 KB, and each replica without traffic about 1 KB of gauges; %d live replicas under traffic make the largest page.", l.Live)
	r.check("request errors", "0", fmt.Sprintf("%d of %d", f.Errors, f.Requests), f.Errors == 0)
}

// startChurnGateway starts an in-process gateway whose one DNS group,
// churn, resolves through res to members on port, on loopback listeners.
func startChurnGateway(ctx context.Context, r *gwRun, port string, refresh time.Duration, res *churnResolver) (*gwpkg.Gateway, string, string, func(), error) {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: procs.SimModel, Aliases: []string{"sim"}}}
	cfg.Discovery.DNS = []config.DNSGroup{{Name: "churn", URL: "http://churn.test:" + port, Models: []string{procs.SimModel},
		Refresh: config.Duration(refresh), MaxConcurrency: 256, MaxPending: 64}}
	cfg.Server.ShutdownTimeout = config.Duration(time.Second)
	if err := cfg.Validate(); err != nil {
		return nil, "", "", nil, err
	}
	g, err := gwpkg.New(&cfg, gwpkg.Options{Resolver: res})
	if err != nil {
		return nil, "", "", nil, err
	}
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		g.Close()
		return nil, "", "", nil, err
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cl.Close()
		g.Close()
		return nil, "", "", nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(sctx, cl, al); err != nil {
			r.log.Warn("gw-churn: gateway", "error", err)
		}
	}()
	stop := func() { cancel(); <-done }
	r.res.Setup.Gateway = "the gateway in the harness process (internal/gateway.New with a scripted resolver), served on loopback listeners"
	return g, "http://" + cl.Addr().String(), "http://" + al.Addr().String(), stop, nil
}

// renderPage renders the metrics page in the text format through h and
// times it.
func renderPage(h http.Handler) ([]byte, time.Duration) {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Host = "127.0.0.1" // the admin port answers loopback addresses only (example.com: 403)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	rec := httptest.NewRecorder()
	t0 := time.Now()
	h.ServeHTTP(rec, req)
	return rec.Body.Bytes(), time.Since(t0)
}

// floorHandler is client_golang's metrics handler over page's families,
// parsed once and handed over ready at every gather: what rendering a page
// of the same series costs the library alone.
func floorHandler(page []byte) (http.Handler, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil, err
	}
	list := slices.Collect(maps.Values(fams))
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return list, nil })
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true}), nil
}

// familyBytes counts a text page's bytes by metric family (its # TYPE
// name).
func familyBytes(page []byte) map[string]int {
	out := map[string]int{}
	fam := ""
	for line := range strings.SplitSeq(string(page), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			fam, _, _ = strings.Cut(rest, " ")
		}
		out[fam] += len(line) + 1
	}
	return out
}

var replicaLabel = regexp.MustCompile(`replica="([^"]*)"`)

// replicaLabels is the set of replica label values on a page.
func replicaLabels(page []byte) map[string]bool {
	out := map[string]bool{}
	for _, m := range replicaLabel.FindAllSubmatch(page, -1) {
		if len(m[1]) > 0 {
			out[string(m[1])] = true
		}
	}
	return out
}

func (w *mdWriter) churn(f *ChurnFigures) {
	w.kv(row("Replicas through the group (at a time)", fmt.Sprintf("%d (%d)", f.Members, f.Live)),
		row("Lookups, seconds", fmt.Sprintf("%d in %.1f s", f.Lookups, f.Seconds)),
		row("Requests (errors)", fmt.Sprintf("%d (%d)", f.Requests, f.Errors)),
		row("Largest page / after the churn", fmt.Sprintf("%d / %d bytes", f.PageBytes, f.PageBytesEnd)),
		row("Most replicas named on one page", fmt.Sprint(f.ReplicasOnPage)),
		row("Render p50 / p99 / max (in process)", fmt.Sprintf("%s / %s / %s", usec(f.Render.P50), usec(f.Render.P99), usec(f.Render.Max))),
		row("Fetch over loopback p50 / p99", fmt.Sprintf("%s / %s", usec(f.Fetch.P50), usec(f.Fetch.P99))),
		row("client_golang alone on the same families p50 / p99 (every tenth page)", fmt.Sprintf("%s / %s", usec(f.Floor.P50), usec(f.Floor.P99))),
		row("Departed replicas on the page afterwards", fmt.Sprint(f.Departed)))
	for _, s := range f.ErrorSamples {
		w.p("Request error: `%s`\n\n", strings.ReplaceAll(s, "`", "'"))
	}
}

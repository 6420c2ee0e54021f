package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/decisionlog"
	"github.com/inferrail/inferrail/internal/fakeengine"
	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
)

// FleetLoad is gw-fleet: how old the engine reports are that routing
// decisions read, at fleet sizes and beside hostile engines.
type FleetLoad struct {
	// Legs run one after another, each against its own engines and
	// gateway. At least one.
	Legs []FleetLeg
}

// FleetLeg is one leg of gw-fleet.
type FleetLeg struct {
	// Name names the leg in the results.
	Name string
	// Healthy engines serve stamped pages; Huge and Endless ones serve 50 MB
	// and endless pages. Healthy must be positive, the others at least 0.
	Healthy, Huge, Endless int
	// Rate is the request rate, per second, for Duration. Both positive.
	Rate     int
	Duration time.Duration
	// SampleRate is the share of decisions logged, in (0, 1]: at 64
	// replicas every record holds 64 candidates.
	SampleRate float64
	// Target is the oldest report a decision may read, the spec's figure.
	// Must be positive.
	Target time.Duration
}

// Validate reports every setting that cannot run.
func (l FleetLoad) Validate() error {
	if len(l.Legs) == 0 {
		return errors.New("legs: at least one")
	}
	var errs []error
	for i, lg := range l.Legs {
		p := fmt.Sprintf("legs[%d].", i)
		errs = append(errs, stress.Required(p+"name", lg.Name), stress.Positive(p+"healthy", lg.Healthy), stress.Positive(p+"rate", lg.Rate),
			stress.Positive(p+"duration", lg.Duration), stress.Positive(p+"target", lg.Target))
		if lg.Huge < 0 || lg.Endless < 0 {
			errs = append(errs, fmt.Errorf("%shuge, %sendless: must be at least 0", p, p))
		}
		if !(lg.SampleRate > 0 && lg.SampleRate <= 1) {
			errs = append(errs, fmt.Errorf("%ssample_rate: must be in (0, 1], got %v", p, lg.SampleRate))
		}
	}
	return errors.Join(errs...)
}

// DefaultFleetLegs are the spec's three rows: engine load freshness under
// 1,000 req/s over three engines (102 ms), 64 replicas under 2,000 req/s
// (112 ms, and at 500 req/s besides), and 20 replicas serving 50 MB or
// endless pages for 5 s beside healthy ones (104 ms).
func DefaultFleetLegs() []FleetLeg {
	return []FleetLeg{
		{Name: "3-engines", Healthy: 3, Rate: 1000, Duration: 10 * time.Second, SampleRate: 1, Target: 102 * time.Millisecond},
		{Name: "64-replicas", Healthy: 64, Rate: 2000, Duration: 10 * time.Second, SampleRate: 0.1, Target: 112 * time.Millisecond},
		// The same fleet at a rate a busy two-core machine carries: what
		// the fleet's size costs, apart from the rate.
		{Name: "64-replicas-500", Healthy: 64, Rate: 500, Duration: 10 * time.Second, SampleRate: 0.4, Target: 112 * time.Millisecond},
		{Name: "20-hostile", Healthy: 4, Huge: 10, Endless: 10, Rate: 1000, Duration: 5 * time.Second, SampleRate: 1, Target: 104 * time.Millisecond},
	}
}

// FleetFigures are what gw-fleet measured.
type FleetFigures struct {
	Legs []FleetLegFigures `json:"legs"`
}

// FleetLegFigures are one leg's figures.
type FleetLegFigures struct {
	Name     string `json:"name"`
	Healthy  int    `json:"healthy"`
	Huge     int    `json:"huge"`
	Endless  int    `json:"endless"`
	Rate     int    `json:"rate"`
	Requests int    `json:"requests"`
	stress.Failures
	AchievedRate float64             `json:"achieved_rate"`
	Latency      measure.Percentiles `json:"latency"`
	// Decisions are the logged decisions read; Reads the healthy
	// candidates offered in them, each a report read by routing.
	Decisions int `json:"decisions"`
	Reads     int `json:"reads"`
	// Stale counts healthy candidates offered without a fresh report.
	Stale int `json:"stale"`
	// Age is how old the report each read had been since its engine
	// rendered it, at the start of the decision, in seconds.
	Age measure.Percentiles `json:"age"`
	// HostileWithReport counts hostile candidates that had a report: none
	// should.
	HostileWithReport int     `json:"hostile_with_report"`
	DecisionsDropped  float64 `json:"decisions_dropped"`
	// Scrapes counts the gateway's scrapes by result over the leg.
	Scrapes map[string]float64 `json:"scrapes"`
	// ReferenceAge is what a plain scraper in the harness, scraping the same
	// healthy engines on the same schedule beside the gateway, would have
	// held: for each of its reports, how old the one before it was when it
	// arrived (the oldest a reader could have seen), in seconds.
	// ReferenceFailures counts its scrapes that failed or took over the
	// timeout.
	ReferenceAge      measure.Percentiles `json:"reference_age"`
	ReferenceFailures int                 `json:"reference_failures"`
	// Machine is how busy the machine was during the leg.
	Machine procs.MachineShare `json:"machine"`
	Target  float64            `json:"target_seconds"`
}

func runGWFleet(ctx context.Context, r *gwRun) error {
	f := &FleetFigures{}
	r.res.Fleet = f
	for _, lg := range r.c.Fleet.Legs {
		fig, err := r.fleetLeg(ctx, lg)
		if err != nil {
			return fmt.Errorf("leg %s: %w", lg.Name, err)
		}
		f.Legs = append(f.Legs, *fig)
		r.log.Info("gw-fleet leg", "leg", lg.Name, "errors", fig.Errors, "reads", fig.Reads, "stale", fig.Stale,
			"age_p99_ms", fig.Age.P99*1e3, "age_max_ms", fig.Age.Max*1e3, "loadavg", fig.Machine.LoadAvgEnd)
		fleetChecks(r, fig)
	}
	r.note("The age is counted from the millisecond the engine rendered its page (truncated, so up to 1 ms more) to the start of the " +
		"decision, both read from the machine's one clock. With a scrape every 100 ms a report is up to 100 ms old when the next one " +
		"lands, plus the next scrape's round trip and whatever the scheduler delays it: on two shared cores with the client, the " +
		"gateway and the engines, milliseconds. Only sampled decisions are logged; the legs with many replicas log a share of them.")
	return nil
}

func fleetChecks(r *gwRun, f *FleetLegFigures) {
	hostile := ""
	if f.Huge+f.Endless > 0 {
		hostile = " (healthy replicas)"
	}
	r.check(f.Name+": errors", "0", fmt.Sprintf("%d of %d", f.Errors, f.Requests), f.Errors == 0)
	r.check(f.Name+": oldest report a decision read"+hostile, fmt.Sprintf("at most %s", ms(f.Target)),
		fmt.Sprintf("%s (p50 %s, p99 %s) over %d reads in %d logged decisions; a plain scraper in the harness beside it held reports up to %s old (p99 %s, %d scrapes failed); load average %s",
			ms(f.Age.Max), ms(f.Age.P50), ms(f.Age.P99), f.Reads, f.Decisions, ms(f.ReferenceAge.Max), ms(f.ReferenceAge.P99), f.ReferenceFailures, f.Machine.LoadAvgEnd),
		f.Reads > 0 && f.Age.Max <= f.Target+1e-9)
	r.check(f.Name+": healthy replicas offered without a fresh report", "0", fmt.Sprintf("%d of %d", f.Stale, f.Reads+f.Stale), f.Stale == 0)
	if f.Huge+f.Endless > 0 {
		r.check(f.Name+": hostile replicas read with a report", "0", fmt.Sprint(f.HostileWithReport), f.HostileWithReport == 0)
	}
}

// fleetLeg runs one leg: engines, a gateway logging decisions, the load,
// then the log read back.
func (r *gwRun) fleetLeg(ctx context.Context, lg FleetLeg) (*FleetLegFigures, error) {
	defer r.cleanup()
	healthy, err := r.fakeEngines(ctx, fmt.Sprintf("%sx%d", fakeengine.PageStamped, lg.Healthy), "ok-")
	if err != nil {
		return nil, err
	}
	reps := healthy
	// The hostile engines run in a process of their own, as they would on
	// machines of their own: writing their pages must not slow the healthy
	// engines' answers.
	for _, h := range []struct {
		page, prefix string
		n            int
	}{{fakeengine.PageHuge, "huge-", lg.Huge}, {fakeengine.PageEndless, "endless-", lg.Endless}} {
		if h.n == 0 {
			continue
		}
		more, err := r.fakeEngines(ctx, fmt.Sprintf("%sx%d", h.page, h.n), h.prefix)
		if err != nil {
			return nil, err
		}
		reps = append(reps, more...)
	}
	r.res.Setup.Simulators = fmt.Sprintf("inferrail-bench fake-engines child processes (%s): one serving every healthy replica of a leg, each on its own port, "+
		"and one for each kind of hostile replica", r.c.BenchBinary)
	dir, err := os.MkdirTemp("", "inferrail-gwstress-fleet-")
	if err != nil {
		return nil, err
	}
	r.dirs = append(r.dirs, dir)
	cfg := gwConfig(reps, healthDefault)
	cfg.Routing.DefaultPolicy = "least_request"
	cfg.Observability.DecisionLog = config.DecisionLog{Path: filepath.Join(dir, "decisions.jsonl"), SampleRate: lg.SampleRate, MaxSizeMB: 4000, MaxFiles: 10}
	gw, err := r.gateway(ctx, cfg)
	if err != nil {
		return nil, err
	}
	admin, client := procs.AdminClient(), gwClient(1024)
	defer admin.CloseIdleConnections()
	defer client.CloseIdleConnections()
	warmChats(ctx, client, gw, 20, procs.SimModel)
	before, _ := gw.Metrics(ctx, admin)
	n := int(lg.Duration.Seconds() * float64(lg.Rate))
	url, body := gw.URL+"/v1/chat/completions", gwChatBody(procs.SimModel, 0, 1)
	cpu0 := procs.ReadCPUTimes()
	start := time.Now().Add(20 * time.Millisecond)
	refCtx, stopRef := context.WithCancel(ctx)
	refDone := make(chan refScrapes, 1)
	go func() { refDone <- referenceScrape(refCtx, healthy, 100*time.Millisecond) }()
	shots := stress.OpenLoop(ctx, start, stress.FixedSchedule(lg.Rate, n), faultRequestTimeout, func(ctx context.Context, i int) (int, string, error) {
		return postChat(ctx, client, url, body, "", 1)
	})
	f := &FleetLegFigures{Name: lg.Name, Healthy: lg.Healthy, Huge: lg.Huge, Endless: lg.Endless, Rate: lg.Rate, Requests: n, Target: lg.Target.Seconds(),
		Machine: procs.MachineShareBetween(cpu0, procs.ReadCPUTimes(), runtime.NumCPU())}
	stopRef()
	ref := <-refDone
	f.ReferenceAge, f.ReferenceFailures = measure.Summarize(ref.peaks), ref.failures
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.Errors, f.ErrorKinds, f.ErrorSamples = stress.TallyShots(shots)
	var lat []time.Duration
	var last time.Duration
	for _, s := range shots {
		if s.Err == nil {
			lat = append(lat, s.Done-s.Sched)
		}
		last = max(last, s.Sent)
	}
	f.Latency = measure.Summarize(lat)
	if last > 0 {
		f.AchievedRate = float64(n-1) / last.Seconds()
	}
	after, err := gw.Metrics(ctx, admin)
	if err == nil {
		f.DecisionsDropped = after.Sum("inferrail_decision_log_dropped_total")
		f.Scrapes = map[string]float64{}
		for _, res := range []string{"ok", "error", "unreadable", "too_large"} {
			l := procs.Label("result", res)
			f.Scrapes[res] = after.Sum("inferrail_load_scrapes_total", l)
			if before != nil {
				f.Scrapes[res] -= before.Sum("inferrail_load_scrapes_total", l)
			}
		}
	}
	r.stopGateway(gw) // flushes the decision log
	ages, err := readReportAges(dir, start, f)
	if err != nil {
		return nil, err
	}
	f.Age = measure.Summarize(ages)
	return f, nil
}

// refScrapes is what referenceScrape saw.
type refScrapes struct {
	peaks    []time.Duration
	failures int
}

// referenceScrape scrapes every engine of urls every interval (timeout
// interval), as the gateway's scraper does, each in its own goroutine,
// until ctx ends, and returns for every report after an engine's first
// the age of the one before it when it arrived.
func referenceScrape(ctx context.Context, reps []*gwReplica, interval time.Duration) refScrapes {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, MaxIdleConns: 2 * len(reps)}}
	defer client.CloseIdleConnections()
	type state struct {
		last time.Time // the previous report's stamp
		busy bool
	}
	var mu sync.Mutex
	var out refScrapes
	states := make([]state, len(reps))
	var wg sync.WaitGroup
	t := time.NewTicker(interval)
	defer t.Stop()
	for ctx.Err() == nil {
		for i, rep := range reps {
			mu.Lock()
			busy := states[i].busy
			states[i].busy = true
			mu.Unlock()
			if busy {
				continue
			}
			wg.Go(func() {
				stamp, err := scrapeStamp(ctx, client, rep.URL, interval)
				arrived := time.Now()
				mu.Lock()
				defer mu.Unlock()
				st := &states[i]
				st.busy = false
				switch {
				case ctx.Err() != nil:
				case err != nil:
					out.failures++
				default:
					if !st.last.IsZero() {
						out.peaks = append(out.peaks, arrived.Sub(st.last))
					}
					st.last = stamp
				}
			})
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	wg.Wait()
	return out
}

// scrapeStamp reads the stamp of a fake engine's page.
func scrapeStamp(ctx context.Context, client *http.Client, url string, timeout time.Duration) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	rep, err := load.Parse(resp.Body)
	if err != nil {
		return time.Time{}, err
	}
	return fakeengine.StampTime(int64(rep.Running), time.Now()), nil
}

// fakeEngines starts a fake-engines child serving pages, its replicas
// named prefix1, prefix2, ...; stopping the scenario's replicas stops it.
func (r *gwRun) fakeEngines(ctx context.Context, pages, prefix string) ([]*gwReplica, error) {
	fe, err := procs.StartFakeEngines(ctx, procs.FakeEnginesOptions{Binary: r.c.BenchBinary, Env: r.c.BenchEnv, Pages: pages, Logger: r.log})
	if err != nil {
		return nil, err
	}
	var reps []*gwReplica
	for i, u := range fe.URLs {
		reps = append(reps, &gwReplica{ID: prefix + strconv.Itoa(i+1), URL: u})
	}
	reps[0].stop = func() {
		if err := fe.Stop(); err != nil {
			r.res.StopErrors = append(r.res.StopErrors, err.Error())
		}
	}
	r.replicas = append(r.replicas, reps...)
	return reps, nil
}

// readReportAges reads every decision log file in dir and fills f's
// decision, read and stale counts; it returns the age of every healthy
// report read by a decision made from start on (the warmup's are left out).
func readReportAges(dir string, start time.Time, f *FleetLegFigures) ([]time.Duration, error) {
	files, err := filepath.Glob(filepath.Join(dir, "decisions*.jsonl*"))
	if err != nil {
		return nil, err
	}
	var ages []time.Duration
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
		for sc.Scan() {
			var rec decisionlog.Record
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				fh.Close()
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if rec.Time.Before(start) {
				continue
			}
			f.Decisions++
			ages = appendAges(ages, &rec, f)
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return ages, nil
}

// appendAges appends the age of each healthy report rec's decision read,
// counting stale healthy candidates and hostile ones with a report.
func appendAges(ages []time.Duration, rec *decisionlog.Record, f *FleetLegFigures) []time.Duration {
	for _, c := range rec.Candidates {
		if c.State != decisionlog.StateOffered {
			continue
		}
		healthy := strings.HasPrefix(c.Replica, "ok-")
		switch {
		case !healthy && c.Running != nil:
			f.HostileWithReport++
		case !healthy:
		case c.Running == nil:
			f.Stale++
		default:
			f.Reads++
			ages = append(ages, rec.Time.Sub(fakeengine.StampTime(*c.Running, rec.Time)))
		}
	}
	return ages
}

func (w *mdWriter) fleet(f *FleetFigures) {
	w.p("| Leg | Replicas | Rate | Requests | Errors | Achieved req/s | Latency p50 / p99 | Logged decisions | Reports read | Stale | Report age p50 / p99 / max | Target | Reference scraper: age p99 / max (failed) | Scrapes ok / error / too large | Load average (end) |\n")
	w.p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, lg := range f.Legs {
		reps := fmt.Sprintf("%d healthy", lg.Healthy)
		if lg.Huge+lg.Endless > 0 {
			reps += fmt.Sprintf(", %d huge, %d endless", lg.Huge, lg.Endless)
		}
		w.p("| %s | %s | %d | %d | %d | %.0f | %s / %s | %d | %d | %d | %s / %s / %s | %s | %s / %s (%d) | %.0f / %.0f / %.0f | %s |\n", lg.Name, reps, lg.Rate, lg.Requests,
			lg.Errors, lg.AchievedRate, usec(lg.Latency.P50), usec(lg.Latency.P99), lg.Decisions, lg.Reads, lg.Stale,
			ms(lg.Age.P50), ms(lg.Age.P99), ms(lg.Age.Max), ms(lg.Target), ms(lg.ReferenceAge.P99), ms(lg.ReferenceAge.Max), lg.ReferenceFailures, lg.Scrapes["ok"], lg.Scrapes["error"], lg.Scrapes["too_large"], lg.Machine.LoadAvgEnd)
	}
	w.p("\n")
	for _, lg := range f.Legs {
		for _, s := range lg.ErrorSamples {
			w.p("%s error: `%s`\n\n", lg.Name, strings.ReplaceAll(s, "`", "'"))
		}
	}
}

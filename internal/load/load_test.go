package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/sim"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestParseFixtures(t *testing.T) {
	tests := []struct {
		file string
		want Report
	}{
		{"vllm-dp2.txt", Report{Engine: VLLM, Ranks: 2, Running: 7, Waiting: 1, KVUsage: 0.375, PrefixQueries: 1500, PrefixHits: 700, Preemptions: 3, BlockSize: 16, CapacityBlocks: 36000}},
		{"vllm-old.txt", Report{Engine: VLLM, Ranks: 1, Running: 2, Waiting: 5, KVUsage: 0.9, PrefixQueries: 40, PrefixHits: 16}},
		{"sglang.txt", Report{Engine: SGLang, Ranks: 2, Running: 8, Waiting: 4, KVUsage: 0.30000000000000004, PrefixQueries: 900, PrefixHits: 300, Preemptions: 7, BlockSize: 16, CapacityBlocks: 12500, CapacityTokens: 200000}},
	}
	for _, tt := range tests {
		f, err := os.Open("testdata/" + tt.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Parse(f)
		f.Close()
		if err != nil || *got != tt.want {
			t.Errorf("Parse(%s) = %+v, %v\nwant %+v", tt.file, got, err, tt.want)
		}
	}
}

func TestParseRefusesWhatItCannotTrust(t *testing.T) {
	page, _ := os.ReadFile("testdata/vllm-dp2.txt")
	renamed := bytes.ReplaceAll(page, []byte("vllm:num_requests_waiting"), []byte("vllm:num_requests_queued"))
	for name, body := range map[string][]byte{
		"renamed family":   renamed,
		"not metrics":      []byte("<html>Bad gateway</html>"),
		"other engine":     []byte("# TYPE foo_requests gauge\nfoo_requests 1\n"),
		"empty":            nil,
		"broken line":      []byte("vllm:num_requests_running{engine=\"0\" 3\n"),
		"NaN running":      bytes.Replace(page, []byte("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0"), []byte("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} NaN"), 1),
		"infinite waiting": []byte("vllm:num_requests_running 1\nvllm:num_requests_waiting +Inf\nvllm:kv_cache_usage_perc 0.5\n"),
		"negative usage":   []byte("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc -0.5\n"),
		"negative counter": []byte("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\nvllm:prefix_cache_hits_total -3\n"),
		"usage above one":  []byte("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.1\nvllm:kv_cache_usage_perc{engine=\"1\"} 1.5\n"),
		// More requests than any engine runs (found by a review: 1e19
		// running became MinInt64 in the cost model, an idle engine).
		"1e19 running":          []byte("vllm:num_requests_running 1e19\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\n"),
		"running past 2^31":     []byte("vllm:num_requests_running 2147483649\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\n"),
		"ranks running past it": []byte("vllm:num_requests_running{engine=\"0\"} 2e9\nvllm:num_requests_running{engine=\"1\"} 2e9\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\n"),
		"1e19 waiting":          []byte("sglang:num_running_reqs 1\nsglang:num_queue_reqs 1e19\nsglang:token_usage 0.5\n"),
		// The same series twice, its labels in another order: summed, it
		// would double the load.
		"repeated series": []byte("vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\nvllm:num_requests_running{model_name=\"m\", engine=\"0\"} 3\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\n"),
	} {
		if _, err := Parse(bytes.NewReader(body)); !errors.Is(err, ErrUnreadable) {
			t.Errorf("%s: err = %v, want ErrUnreadable", name, err)
		}
	}
}

// TestParseSimulatorPage reads the simulator's own page, which is vLLM's.
func TestParseSimulatorPage(t *testing.T) {
	cfg := sim.DefaultConfig()
	m := sim.NewMetrics(sim.MetricsConfig{ModelName: "m", Engine: "0", MaxModelLen: 4096,
		CacheConfig: [][2]string{{"block_size", "16"}, {"num_gpu_blocks", "4096"}}, Start: time.Unix(1, 0)})
	m.Record(&sim.StepStats{Running: 5, Waiting: 2, KVUsage: 0.25, PrefixQueries: 100, PrefixHits: 64, Preemptions: 1})
	var page bytes.Buffer
	if _, err := m.WriteTo(&page); err != nil {
		t.Fatal(err)
	}
	got, err := Parse(&page)
	want := Report{Engine: VLLM, Ranks: 1, Running: 5, Waiting: 2, KVUsage: 0.25, PrefixQueries: 100, PrefixHits: 64, Preemptions: 1, BlockSize: 16, CapacityBlocks: cfg.NumGPUBlocks}
	if err != nil || *got != want {
		t.Errorf("Parse(simulator page) = %+v, %v\nwant %+v", got, err, want)
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"vllm-dp2.txt", "vllm-old.txt", "sglang.txt"} {
		b, _ := os.ReadFile("testdata/" + name)
		f.Add(b)
	}
	f.Add([]byte("vllm:num_requests_running NaN\nvllm:num_requests_waiting +Inf\nvllm:kv_cache_usage_perc -1\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		if len(page) > 1<<16 {
			return
		}
		rep, err := Parse(bytes.NewReader(page))
		if err != nil && !errors.Is(err, ErrUnreadable) {
			t.Fatalf("error %v does not wrap ErrUnreadable", err)
		}
		if err == nil && rep.Engine != VLLM && rep.Engine != SGLang {
			t.Fatalf("report of unknown engine %q", rep.Engine)
		}
	})
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// engine is a fake engine on loopback. It numbers the requests it gets,
// records when each arrived (after the scraper sent it) and answers with
// serve. The pages it serves carry the request's number as their prefix
// query counter, so a report can be traced to the scrape that read it.
type engine struct {
	srv   *httptest.Server
	serve func(w http.ResponseWriter, r *http.Request, seq int)

	mu       sync.Mutex
	arrivals []time.Time // guarded by mu; indexed by request number
}

func startEngine(t *testing.T, serve func(w http.ResponseWriter, r *http.Request, seq int)) *engine {
	t.Helper()
	e := &engine{serve: serve}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		seq := len(e.arrivals)
		e.arrivals = append(e.arrivals, time.Now())
		e.mu.Unlock()
		e.serve(w, r, seq)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

// arrival returns when the request whose page reads prefix queries seq
// arrived.
func (e *engine) arrival(seq float64) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if seq < 0 || seq >= float64(len(e.arrivals)) || seq != math.Trunc(seq) {
		return time.Time{}, false
	}
	return e.arrivals[int(seq)], true
}

// enginePage is a minimal vLLM page for request seq.
func enginePage(seq int) []byte {
	return fmt.Appendf(nil, "# TYPE vllm:num_requests_running gauge\n"+
		"vllm:num_requests_running{engine=\"0\"} 1\nvllm:num_requests_waiting{engine=\"0\"} 0\n"+
		"vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\nvllm:prefix_cache_queries_total{engine=\"0\"} %d\n", seq)
}

// drip writes b a byte at a time, spread evenly over about d, until done
// or the scraper hangs up.
func drip(w http.ResponseWriter, b []byte, d time.Duration) {
	rc := http.NewResponseController(w)
	start := time.Now()
	for i := range b {
		time.Sleep(time.Until(start.Add(d * time.Duration(i) / time.Duration(len(b)))))
		if _, err := w.Write(b[i : i+1]); err != nil || rc.Flush() != nil {
			return
		}
	}
}

// How fake engines answer.
var (
	serveGood = func(w http.ResponseWriter, _ *http.Request, seq int) { _, _ = w.Write(enginePage(seq)) }
	// serveSlow answers one scrape in three with a page whose last bytes
	// dribble in over about 40 ms, well within the timeout, and fails the
	// two after it: its report must be stale 250 ms after its scrape was
	// sent, not 250 ms after its last byte arrived.
	serveSlow = func(w http.ResponseWriter, _ *http.Request, seq int) {
		if seq%3 != 0 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		page := enginePage(seq)
		head := len(page) - 20
		if _, err := w.Write(page[:head]); err != nil {
			return
		}
		drip(w, page[head:], 40*time.Millisecond)
	}
	// serveDrip sends a whole page a byte every 3 ms or so: it would take
	// 600 ms, six times the timeout.
	serveDrip = func(w http.ResponseWriter, _ *http.Request, seq int) { drip(w, enginePage(seq), 600*time.Millisecond) }
	serveHang = func(_ http.ResponseWriter, r *http.Request, _ int) { <-r.Context().Done() }
	// serveHuge sends a valid page followed by 6 MB of families Parse
	// skips.
	serveHuge = func(w http.ResponseWriter, _ *http.Request, seq int) {
		if _, err := w.Write(enginePage(seq)); err == nil {
			_, _ = w.Write(hugeTail())
		}
	}
	hugeTail = sync.OnceValue(func() []byte {
		return bytes.Repeat([]byte("vllm:some_histogram_bucket{engine=\"0\",le=\""+strings.Repeat("9", 1000)+"\"} 1\n"), 6000)
	})
	// serveEndless sends a valid page followed by a kilobyte of comments
	// every millisecond until the scraper hangs up.
	serveEndless = func(w http.ResponseWriter, r *http.Request, seq int) {
		chunk := bytes.Repeat([]byte("# a comment that never ends\n"), 36)
		rc := http.NewResponseController(w)
		if _, err := w.Write(enginePage(seq)); err != nil {
			return
		}
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil || rc.Flush() != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	serveGarbage = func(w http.ResponseWriter, _ *http.Request, _ int) {
		_, _ = w.Write(bytes.Repeat([]byte{0xff, '{', '"', '\n'}, 1000))
	}
	serve500 = func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusInternalServerError) }
	// serveCutShort dies halfway through its page.
	serveCutShort = func(w http.ResponseWriter, _ *http.Request, seq int) {
		page := enginePage(seq)
		_, _ = w.Write(page[:len(page)/2])
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
)

// scrapeResults counts a Scraper's results per replica.
type scrapeResults struct {
	mu     sync.Mutex
	counts map[string]map[string]int // guarded by mu
}

func (s *scrapeResults) record(id, result string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]map[string]int{}
	}
	if s.counts[id] == nil {
		s.counts[id] = map[string]int{}
	}
	s.counts[id][result]++
}

// of returns a copy of one replica's counts.
func (s *scrapeResults) of(id string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts[id])
}

func failures(counts map[string]int) int {
	n := 0
	for result, c := range counts {
		if result != ResultOK {
			n += c
		}
	}
	return n
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// runScraper runs sc until the test ends.
func runScraper(t *testing.T, sc *Scraper) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = sc.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// TestScraperFreshness: with the default timings, a report Fresh returns
// was asked for at most MaxAge ago, whatever the engines do: hang, dribble,
// send huge, endless or garbage pages, fail, or die mid-run. The healthy
// engine next to them stays fresh: its scrapes never wait for theirs.
func TestScraperFreshness(t *testing.T) {
	engines := map[string]*engine{}
	for id, serve := range map[string]func(http.ResponseWriter, *http.Request, int){
		"good": serveGood, "dies": serveGood, "slow": serveSlow, "drip": serveDrip, "hang": serveHang,
		"huge": serveHuge, "endless": serveEndless, "garbage": serveGarbage, "500": serve500,
	} {
		engines[id] = startEngine(t, serve)
	}
	targets := []Target{{ID: "dead", URL: mustURL("http://127.0.0.1:1")}}
	for id, e := range engines {
		targets = append(targets, Target{ID: id, URL: mustURL(e.srv.URL)})
	}
	neverFresh := map[string]bool{"dead": true, "drip": true, "hang": true, "huge": true, "endless": true, "garbage": true, "500": true}

	var results scrapeResults
	cfg := ScrapeConfig{Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond, MaxAge: 250 * time.Millisecond} // the defaults
	sc := NewScraper(cfg, &http.Client{}, func() []Target { return targets }, nil, results.record, nil)
	stop := runScraper(t, sc)
	// The same healthy engine scraped alone, at the same time, shows what
	// this machine's load allows.
	alone := NewScraper(cfg, &http.Client{}, func() []Target { return []Target{{ID: "good", URL: mustURL(engines["good"].srv.URL)}} }, nil, nil, nil)
	stopAlone := runScraper(t, alone)
	waitUntil(t, "every engine was scraped and the healthy ones read", func() bool {
		for _, tg := range targets {
			if len(results.of(tg.ID)) == 0 {
				return false
			}
		}
		return results.of("good")[ResultOK] > 0 && results.of("dies")[ResultOK] > 0 && alone.Last("good") != nil
	})

	// Sample every report often; kill an engine a third of the way in.
	const run = 2 * time.Second
	var samples, goodFresh, aloneFresh, slowFresh, stale int
	killed := false
	for began := time.Now(); time.Since(began) < run; time.Sleep(time.Millisecond) {
		if !killed && time.Since(began) > run/3 {
			killed = true
			engines["dies"].srv.Close()
		}
		now := time.Now()
		samples++
		check := func(from *Scraper, id string) bool {
			// What routing reads: fresh only while a report is. The sample
			// read after it is the one it read or a newer one.
			if _, fresh := from.Feed(id).FreshRouting(clock.Of(now)); fresh {
				if neverFresh[id] {
					t.Fatalf("FreshRouting(%s) is fresh, want no report", id)
				}
				smp := from.Last(id)
				if smp == nil {
					t.Fatalf("FreshRouting(%s) is fresh without a sample", id)
				}
				if age := now.Sub(smp.At); age > cfg.MaxAge {
					t.Fatalf("FreshRouting(%s) is fresh, but the latest scrape was sent %v ago", id, age)
				}
			}
			rep, ok := from.Fresh(id, now)
			if !ok {
				return false
			}
			if neverFresh[id] {
				t.Fatalf("Fresh(%s) = %+v, want no report", id, rep)
			}
			arrived, found := engines[id].arrival(rep.PrefixQueries)
			if !found {
				t.Fatalf("Fresh(%s) = %+v, a page %s never served", id, rep, id)
			}
			// The request arrived after it was sent: its age from arrival
			// is at most its age from sending.
			if age := now.Sub(arrived); age > cfg.MaxAge {
				if stale++; stale <= 5 {
					t.Errorf("Fresh(%s) returned the report of a scrape that reached the engine %v ago, want <= %v", id, age, cfg.MaxAge)
				}
			}
			return true
		}
		for _, tg := range targets {
			if check(sc, tg.ID) {
				switch tg.ID {
				case "good":
					goodFresh++
				case "slow":
					slowFresh++
				}
			}
		}
		if check(alone, "good") {
			aloneFresh++
		}
	}
	stop()
	stopAlone()
	if stale > 0 {
		t.Errorf("%d reports Fresh returned in %d samples were stale", stale, samples)
	}
	if _, ok := sc.Fresh("dies", time.Now()); ok {
		t.Error("an engine that died over a second ago still has a fresh report")
	}
	if slowFresh == 0 {
		t.Logf("the slow engine's page never came in time: too loaded a machine to check dribbled pages")
	}
	// A healthy engine's report goes stale only when two scrapes in a row
	// are late. Were its scrapes to wait for the hostile engines', it would
	// be stale about a quarter of the time. A starved test process, which
	// samples far less often than every few milliseconds, cannot tell.
	t.Logf("the healthy engine was fresh in %d of %d samples; scraped alone, in %d", goodFresh, samples, aloneFresh)
	switch {
	case samples < 200:
		t.Logf("too few samples to compare the healthy engine's freshness: the machine is overloaded")
	case aloneFresh-goodFresh > samples/10:
		t.Errorf("the healthy engine was fresh in %d of %d samples next to hostile engines, and in %d scraped alone: want at most 10%% fewer",
			goodFresh, samples, aloneFresh)
	}
}

// TestScrapeResults: each way an engine can fail is counted as what it is.
func TestScrapeResults(t *testing.T) {
	const long, short = 10 * time.Second, 100 * time.Millisecond
	tests := []struct {
		name    string
		serve   func(http.ResponseWriter, *http.Request, int) // nil: nothing listens
		timeout time.Duration
		want    string
		wantErr error
	}{
		{"good", serveGood, long, ResultOK, nil},
		{"dead", nil, long, ResultError, nil},
		{"500", serve500, long, ResultError, nil},
		{"hang", serveHang, short, ResultError, context.DeadlineExceeded},
		{"drip", serveDrip, short, ResultError, context.DeadlineExceeded},
		{"endless", serveEndless, short, ResultError, context.DeadlineExceeded},
		{"huge", serveHuge, long, ResultTooLarge, errTooLarge},
		{"garbage", serveGarbage, long, ResultUnreadable, ErrUnreadable},
		{"cut-short", serveCutShort, long, ResultUnreadable, ErrUnreadable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := mustURL("http://127.0.0.1:1")
			if tt.serve != nil {
				u = mustURL(startEngine(t, tt.serve).srv.URL)
			}
			sc := NewScraper(ScrapeConfig{Timeout: tt.timeout}, &http.Client{}, nil, nil, nil, nil)
			rep, result, err := sc.fetch(context.Background(), Target{ID: tt.name, URL: u})
			if result != tt.want || (err == nil) != (tt.want == ResultOK) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("fetch = %+v, %q, %v; want %q, %v", rep, result, err, tt.want, tt.wantErr)
			}
		})
	}
}

// logRecords keeps what a recordingHandler was given.
type logRecords struct {
	mu   sync.Mutex
	recs []loggedRecord // guarded by mu
}

type loggedRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// recordingHandler is a slog.Handler that keeps every record. Groups are
// ignored: the scraper uses none.
type recordingHandler struct {
	to    *logRecords
	attrs []slog.Attr
}

func (h recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	rec := loggedRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.to.mu.Lock()
	defer h.to.mu.Unlock()
	h.to.recs = append(h.to.recs, rec)
	return nil
}

func (h recordingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recordingHandler{to: h.to, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h recordingHandler) WithGroup(string) slog.Handler { return h }

// TestScraperLogsOutagesOnce: an engine is logged once when its scrapes
// start failing, however many fail and in however many ways, and once when
// one succeeds again; a healthy engine is not logged at all.
func TestScraperLogsOutagesOnce(t *testing.T) {
	var failing atomic.Bool
	flaky := startEngine(t, func(w http.ResponseWriter, r *http.Request, seq int) {
		if !failing.Load() {
			serveGood(w, r, seq)
			return
		}
		switch seq % 3 { // fail a different way each time
		case 0:
			serve500(w, r, seq)
		case 1:
			serveGarbage(w, r, seq)
		case 2:
			serveCutShort(w, r, seq)
		}
	})
	good := startEngine(t, serveGood)
	targets := []Target{{ID: "flaky", URL: mustURL(flaky.srv.URL)}, {ID: "good", URL: mustURL(good.srv.URL)},
		{ID: "dead", URL: mustURL("http://127.0.0.1:1")}}
	var logs logRecords
	var results scrapeResults
	// A long timeout: however loaded the machine, the healthy engine
	// never fails.
	sc := NewScraper(ScrapeConfig{Interval: 10 * time.Millisecond, Timeout: 10 * time.Second, MaxAge: time.Minute},
		&http.Client{}, func() []Target { return targets }, slog.New(recordingHandler{to: &logs}), results.record, nil)
	stop := runScraper(t, sc)

	// phase waits for n more results of the kind wanted from the flaky
	// engine after its behaviour changed.
	phase := func(what string, fail bool, n int) {
		t.Helper()
		count := func() int {
			got := results.of("flaky")
			if fail {
				return failures(got)
			}
			return got[ResultOK]
		}
		from := count()
		failing.Store(fail)
		waitUntil(t, what, func() bool { return count() >= from+n })
	}
	phase("the flaky engine is read", false, 3)
	phase("the flaky engine failed six times", true, 6)
	phase("the flaky engine is read again", false, 3)
	phase("the flaky engine failed again", true, 3)
	waitUntil(t, "the healthy engine and the dead one were scraped a few times", func() bool {
		return results.of("good")[ResultOK] >= 3 && failures(results.of("dead")) >= 3
	})
	stop()

	logs.mu.Lock()
	defer logs.mu.Unlock()
	got := map[string][]string{}
	for _, rec := range logs.recs {
		if rec.attrs["component"] != "load" {
			t.Errorf("record %q has component %q, want load", rec.msg, rec.attrs["component"])
		}
		switch {
		case rec.msg == msgStopped && rec.level == slog.LevelWarn:
			got[rec.attrs["replica"]] = append(got[rec.attrs["replica"]], "stopped")
		case rec.msg == msgRecovered && rec.level == slog.LevelInfo:
			got[rec.attrs["replica"]] = append(got[rec.attrs["replica"]], "recovered")
		default:
			t.Errorf("unexpected record: %s %q %v", rec.level, rec.msg, rec.attrs)
		}
	}
	want := map[string][]string{"flaky": {"stopped", "recovered", "stopped"}, "dead": {"stopped"}}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("logged %v, want %v", got, want)
	}
}

// TestScraperSeesRestart: an engine whose prefix counters go backwards was
// restarted with an empty cache.
func TestScraperSeesRestart(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.ZeroLatency = true
	eng, err := sim.StartLocal(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	resets := make(chan string, 10)
	// A long timeout: however loaded the machine, the healthy engine
	// never fails.
	sc := NewScraper(ScrapeConfig{Interval: 10 * time.Millisecond, Timeout: 10 * time.Second, MaxAge: time.Minute},
		&http.Client{}, func() []Target { return []Target{{ID: "e", URL: mustURL(eng.URL())}} }, nil, nil,
		func(id string) { resets <- id })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = sc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	body := `{"prompt":"` + strings.Repeat("shared words ", 30) + `","max_tokens":1}`
	resp, err := http.Post(eng.URL()+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitForReport(t, sc, "e", func(r *Report) bool { return r.PrefixQueries > 0 })
	eng.Kill()
	if err := eng.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-resets:
		if id != "e" {
			t.Errorf("reset reported for %q", id)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("restart not noticed")
	}
}

func waitForReport(t *testing.T, sc *Scraper, id string, cond func(*Report) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if smp := sc.Last(id); smp != nil && cond(smp.Report) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no report from %s met the condition", id)
}

// referencePage reads a page with the Prometheus library's own text parser
// into the form Parse keeps, for differential checks.
func referencePage(data []byte) (*page, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	p := &page{series: map[string][]sample{}}
	for name, f := range fams {
		p.vllm = p.vllm || strings.HasPrefix(name, "vllm:")
		p.sglang = p.sglang || strings.HasPrefix(name, "sglang:")
		if !wanted[name] {
			continue
		}
		for _, m := range f.GetMetric() {
			s := sample{}
			switch {
			case m.Gauge != nil:
				s.value = m.GetGauge().GetValue()
			case m.Counter != nil:
				s.value = m.GetCounter().GetValue()
			case m.Untyped != nil:
				s.value = m.GetUntyped().GetValue()
			default:
				continue
			}
			for _, lp := range m.GetLabel() {
				s.addLabel(lp.GetName(), lp.GetValue())
			}
			p.series[name] = append(p.series[name], s)
		}
	}
	return p, nil
}

// FuzzParseAgainstLibrary: on every page the Prometheus library reads,
// Parse reads the same report (or refuses it for the same reason).
func FuzzParseAgainstLibrary(f *testing.F) {
	for _, name := range []string{"vllm-dp2.txt", "vllm-old.txt", "sglang.txt"} {
		b, _ := os.ReadFile("testdata/" + name)
		f.Add(b)
	}
	f.Add([]byte("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{a=\"x\\\"y\\\\\",b=\"\\n\"} 1e3 1700000000\nvllm:num_requests_waiting 2\nvllm:kv_cache_usage_perc 0.5\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		ref, err := referencePage(data)
		if err != nil || (!ref.vllm && !ref.sglang) {
			return // the library refuses it: Parse may read what it needs or refuse
		}
		want, wantErr := parseEngine(ref)
		got, gotErr := Parse(bytes.NewReader(data))
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("library: %v; Parse: %v\n%q", wantErr, gotErr, data)
		}
		if wantErr == nil && *got != *want && !(math.IsNaN(got.KVUsage) && math.IsNaN(want.KVUsage)) {
			t.Fatalf("Parse = %+v, library reading %+v\n%q", got, want, data)
		}
	})
}

// parseEngine picks the engine as Parse does.
func parseEngine(p *page) (*Report, error) {
	if p.vllm {
		return parseVLLM(p)
	}
	return parseSGLang(p)
}

// TestParseAgreesWithLibrary: the fixtures, and each again written in the
// text format's other ways, read as the Prometheus library reads them:
// blanks and tabs before every line and a line of only blanks at the end
// (the fuzzer found Parse refusing these), blanks around braces and equals
// signs, and series names quoted among the labels, first or last.
func TestParseAgreesWithLibrary(t *testing.T) {
	sample := regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? `)
	for _, name := range []string{"vllm-dp2.txt", "vllm-old.txt", "sglang.txt"} {
		page, _ := os.ReadFile("testdata/" + name)
		variants := map[string][]byte{
			name:                page,
			name + ", indented": append(regexp.MustCompile(`(?m)^`).ReplaceAll(page, []byte(" \t ")), " \t"...),
			name + ", spaced":   []byte(strings.NewReplacer("{", " \t{ ", "}", " } ", "=", " = ").Replace(string(page))),
			name + ", quoted first": sample.ReplaceAllFunc(page, func(m []byte) []byte {
				g := sample.FindSubmatch(m)
				if len(g[3]) == 0 {
					return fmt.Appendf(nil, "{%q} ", g[1])
				}
				return fmt.Appendf(nil, "{%q, %s} ", g[1], g[3])
			}),
			name + ", quoted last": sample.ReplaceAllFunc(page, func(m []byte) []byte {
				g := sample.FindSubmatch(m)
				if len(g[3]) == 0 {
					return fmt.Appendf(nil, "{%q} ", g[1])
				}
				return fmt.Appendf(nil, "{%s,%q} ", g[3], g[1])
			}),
		}
		for variant, data := range variants {
			ref, err := referencePage(data)
			if err != nil {
				t.Fatalf("%s: the library refuses it: %v", variant, err)
			}
			want, _ := parseEngine(ref)
			got, err := Parse(bytes.NewReader(data))
			if err != nil || *got != *want {
				t.Errorf("%s: Parse = %+v, %v; library reading %+v", variant, got, err, want)
			}
		}
	}
}

// TestScraperFeeds: a feed taken before a replica's first scrape is the one
// its scrapes fill; when the replica stops being a target its feed retires
// and gets nothing more; when it comes back it gets a new feed; and a
// feed's Fresh goes stale MaxAge after the scrape was sent.
func TestScraperFeeds(t *testing.T) {
	eng := startEngine(t, serveGood)
	var listed atomic.Bool
	listed.Store(true)
	targets := func() []Target {
		if !listed.Load() {
			return nil
		}
		return []Target{{ID: "e", URL: mustURL(eng.srv.URL)}}
	}
	sc := NewScraper(ScrapeConfig{Interval: 5 * time.Millisecond, Timeout: 10 * time.Second, MaxAge: time.Hour},
		&http.Client{}, targets, nil, nil, nil)
	first := sc.Feed("e")
	if first.Last() != nil || first.Retired() {
		t.Fatal("a new feed has a sample or is retired")
	}
	if _, ok := first.Fresh(time.Now()); ok {
		t.Fatal("an empty feed is fresh")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = sc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitForReport(t, sc, "e", func(*Report) bool { return true })
	smp := first.Last()
	if smp == nil || smp != sc.Last("e") {
		t.Fatal("the scrapes did not fill the feed taken before them")
	}
	if rep, ok := first.Fresh(smp.At.Add(time.Hour)); !ok || rep != smp.Report {
		t.Error("a report is not fresh MaxAge after its scrape was sent")
	}
	if _, ok := first.Fresh(smp.At.Add(time.Hour + 1)); ok {
		t.Error("a report is fresh past MaxAge")
	}
	if sc.Feed("e") != first {
		t.Error("a scraped replica's feed changed")
	}

	listed.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for !first.Retired() {
		if time.Now().After(deadline) {
			t.Fatal("the feed of a replica that left the targets did not retire")
		}
		time.Sleep(time.Millisecond)
	}
	if sc.Last("e") != nil {
		t.Error("the scraper still reports a replica that left the targets")
	}
	listed.Store(true)
	waitForReport(t, sc, "e", func(*Report) bool { return true })
	if again := sc.Feed("e"); again == first || again.Retired() || again.Last() == nil {
		t.Error("a replica that came back did not get a new, filled feed")
	}
}

// TestRefusedBackoff: a replica whose pages are refused waits one interval,
// then twice as long after each further refusal up to 32 intervals; any
// other result scrapes it at every tick again.
func TestRefusedBackoff(t *testing.T) {
	const iv = 100 * time.Millisecond
	now := time.Unix(1000, 0)
	endless := fmt.Errorf("%w: %w", errEndless, context.DeadlineExceeded)
	tests := []struct {
		results []string
		errs    []error       // each result's error; nil for none
		want    time.Duration // resumeAt after the last, from now; 0 for none
	}{
		{[]string{ResultOK}, nil, 0},
		{[]string{ResultError}, []error{context.DeadlineExceeded}, 0},
		{[]string{ResultError}, []error{endless}, iv},
		{[]string{ResultTooLarge}, nil, iv},
		{[]string{ResultUnreadable, ResultTooLarge}, nil, 2 * iv},
		{[]string{ResultTooLarge, ResultError, ResultTooLarge}, []error{nil, endless, nil}, 4 * iv},
		{slices.Repeat([]string{ResultTooLarge}, 6), nil, 32 * iv},
		{slices.Repeat([]string{ResultUnreadable}, 40), nil, 32 * iv},
		{[]string{ResultTooLarge, ResultTooLarge, ResultOK}, nil, 0},
		{[]string{ResultTooLarge, ResultError, ResultTooLarge}, nil, iv},
	}
	for _, tt := range tests {
		var st replicaState
		for i, r := range tt.results {
			var err error
			if tt.errs != nil {
				err = tt.errs[i]
			}
			st.backOff(r, err, now, iv)
		}
		var got time.Duration
		if at := st.resumeAt.Load(); at != 0 {
			got = time.Unix(0, at).Sub(now)
		}
		if got != tt.want {
			t.Errorf("after %v: resumes %v after now, want %v", tt.results, got, tt.want)
		}
	}
}

// TestRefusedPagesScrapedLess: beside a healthy engine scraped at every
// tick, one serving pages over the limit is scraped ever more rarely, and
// its results are still counted as too large.
func TestRefusedPagesScrapedLess(t *testing.T) {
	good, huge := startEngine(t, serveGood), startEngine(t, serveHuge)
	targets := []Target{{ID: "good", URL: mustURL(good.srv.URL)}, {ID: "huge", URL: mustURL(huge.srv.URL)}}
	var results scrapeResults
	cfg := ScrapeConfig{Interval: 10 * time.Millisecond, Timeout: time.Second, MaxAge: time.Second}
	sc := NewScraper(cfg, &http.Client{}, func() []Target { return targets }, nil, results.record, nil)
	stop := runScraper(t, sc)
	waitUntil(t, "the healthy engine scraped 60 times", func() bool { return results.of("good")[ResultOK] >= 60 })
	stop()
	// At least 60 ticks: the huge engine is tried at the first, then 1, 2,
	// 4, 8, 16 and 32 intervals after the try before, 7 tries by the 64th
	// tick; a slow machine only spaces its tries further apart.
	if n := results.of("huge")[ResultTooLarge]; n < 1 || n > 8 {
		t.Errorf("the huge page's engine was scraped %d times in the healthy one's 60, want 1 to 8", n)
	}
}

// TestEndlessPageCutByTimeout: a page still flowing past a megabyte when
// the timeout cuts it is an error marked errEndless (which backOff treats
// as refused); one cut before that is a plain timeout.
func TestEndlessPageCutByTimeout(t *testing.T) {
	chunk := bytes.Repeat([]byte("# a comment that never ends\n"), 2048)
	fast := startEngine(t, func(w http.ResponseWriter, r *http.Request, seq int) {
		_, _ = w.Write(enginePage(seq))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	sc := NewScraper(ScrapeConfig{Timeout: 500 * time.Millisecond, MaxBytes: 1 << 40}, &http.Client{}, nil, nil, nil, nil)
	_, result, err := sc.fetch(context.Background(), Target{ID: "fast", URL: mustURL(fast.srv.URL)})
	if result != ResultError || !errors.Is(err, errEndless) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("fast endless page: %q, %v; want %q, errEndless", result, err, ResultError)
	}
	slow := startEngine(t, serveHang)
	sc = NewScraper(ScrapeConfig{Timeout: 50 * time.Millisecond}, &http.Client{}, nil, nil, nil, nil)
	if _, result, err := sc.fetch(context.Background(), Target{ID: "hang", URL: mustURL(slow.srv.URL)}); result != ResultError || errors.Is(err, errEndless) {
		t.Errorf("hung engine: %q, %v; want %q without errEndless", result, err, ResultError)
	}
}

// TestForeign: the requests an engine holds waiting that the gateway did
// not send: the engine's waiting count beyond the gateway's unanswered
// requests and those it sent while the page was read. Running requests
// never count, whoever sent them. Never below zero.
func TestForeign(t *testing.T) {
	tests := []struct {
		name             string
		running, waiting float64
		before           Own
		sentDuring       int64
		want             float64
	}{
		{name: "all its own", running: 4, waiting: 2, before: Own{Unanswered: 3}, want: 0},
		{name: "more of its own than the engine holds", running: 1, waiting: 0, before: Own{Unanswered: 4}, want: 0},
		{name: "waiting beyond its unanswered", running: 2, waiting: 5, before: Own{Unanswered: 2}, want: 3},
		{name: "another gateway's running requests", running: 8, waiting: 2, before: Own{Unanswered: 2}, want: 0},
		{name: "nothing of its own there", running: 6, waiting: 2, want: 2},
		{name: "sent while the page was read", running: 6, waiting: 3, before: Own{Unanswered: 0}, sentDuring: 3, want: 0},
		{name: "half a request", waiting: 2.5, before: Own{Unanswered: 1}, want: 1.5},
		{name: "idle engine", before: Own{Unanswered: 2}, sentDuring: 1, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.before
			before.Sent = 100
			after := Own{Sent: 100 + tt.sentDuring}
			if got := foreign(&Report{Running: tt.running, Waiting: tt.waiting}, before, after); got != tt.want {
				t.Errorf("foreign %v, want %v", got, tt.want)
			}
		})
	}
}

// TestScrapeCountsForeign: a scrape reads the gateway's own counts on both
// sides of the page, so requests the gateway sends while the engine renders
// it are not taken for another's, and the result reaches routing; a
// target without Own has none.
func TestScrapeCountsForeign(t *testing.T) {
	for _, withOwn := range []bool{true, false} {
		var own atomic.Pointer[Own]
		own.Store(&Own{Unanswered: 1, Sent: 10})
		eng := startEngine(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
			// The gateway sends two more while the engine renders.
			own.Store(&Own{Unanswered: 3, Sent: 12})
			_, _ = fmt.Fprint(w, "vllm:num_requests_running 1\nvllm:num_requests_waiting 5\nvllm:kv_cache_usage_perc 0.5\n")
		})
		tg := Target{ID: "e", URL: mustURL(eng.srv.URL)}
		want := 0.0
		if withOwn {
			tg.Own = func() Own { return *own.Load() }
			// 5 waiting, of which 1 + 2 may be the gateway's: 2 others.
			want = 2
		}
		sc := NewScraper(ScrapeConfig{Interval: time.Second, Timeout: 5 * time.Second, MaxAge: time.Hour}, &http.Client{},
			func() []Target { return []Target{tg} }, nil, nil, nil)
		sc.scrape(context.Background(), tg, sc.state(tg.ID))
		smp := sc.Last("e")
		if smp == nil {
			t.Fatal("the scrape left no sample")
		}
		r, ok := sc.Feed("e").FreshRouting(clock.Of(smp.At))
		if smp.Foreign != want || !ok || r.Foreign != want {
			t.Errorf("with Own %v: sample's foreign %v, routing's %v (fresh %v), want %v", withOwn, smp.Foreign, r.Foreign, ok, want)
		}
	}
}

// TestLabelSetsDiffer: series whose labels differ have different label
// sets, for every assignment of SGLang's four rank labels to ranks 0..7.
// (FNV-1a alone summed tp_rank="0",moe_ep_rank="0" as tp_rank="1",
// moe_ep_rank="1", and a page of two such schedulers was refused as the
// same series twice; found fixing a review's finding.)
func TestLabelSetsDiffer(t *testing.T) {
	names := []string{"tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"}
	seen := map[uint64][4]int{}
	var ranks [4]int
	for n := range 8 * 8 * 8 * 8 {
		var s sample
		for i, name := range names {
			ranks[i] = n >> (3 * i) & 7
			s.labelSet += labelHash(name, strconv.Itoa(ranks[i]))
		}
		if other, ok := seen[s.labelSet]; ok {
			t.Fatalf("ranks %v and %v have the same label set", ranks, other)
		}
		seen[s.labelSet] = ranks
	}
	page := "sglang:num_running_reqs{tp_rank=\"0\",moe_ep_rank=\"0\"} 1\nsglang:num_running_reqs{tp_rank=\"1\",moe_ep_rank=\"1\"} 1\n" +
		"sglang:num_queue_reqs 0\nsglang:token_usage 0.5\n"
	if _, err := Parse(strings.NewReader(page)); err != nil {
		t.Errorf("two schedulers' page: %v", err)
	}
}

// TestScraperNewURLStartsAfresh: a replica replaced by one of its ID at
// another URL is another engine: its first page is not compared with the
// old engine's last (lower counters there are no restart), and the old
// engine's report does not serve it (its feed retires, and the replica
// gets a new one).
func TestScraperNewURLStartsAfresh(t *testing.T) {
	old := startEngine(t, func(w http.ResponseWriter, _ *http.Request, seq int) { _, _ = w.Write(enginePage(1000 + seq)) })
	next := startEngine(t, serveGood) // prefix queries from 0
	var at atomic.Pointer[url.URL]
	at.Store(mustURL(old.srv.URL))
	resets := make(chan string, 100)
	sc := NewScraper(ScrapeConfig{Interval: 5 * time.Millisecond, Timeout: 10 * time.Second, MaxAge: time.Hour},
		&http.Client{}, func() []Target { return []Target{{ID: "e", URL: at.Load()}} }, nil, nil,
		func(id string) { resets <- id })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = sc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitForReport(t, sc, "e", func(r *Report) bool { return r.PrefixQueries >= 1000 })
	feed := sc.Feed("e")
	at.Store(mustURL(next.srv.URL))
	waitForReport(t, sc, "e", func(r *Report) bool { return r.PrefixQueries < 1000 })
	if n := len(resets); n != 0 {
		t.Errorf("the new engine's lower counters read as %d restarts of the old one", n)
	}
	if !feed.Retired() {
		t.Error("the old engine's feed still serves the replica")
	}
}

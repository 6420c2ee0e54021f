package load

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

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
		{"sglang.txt", Report{Engine: SGLang, Ranks: 2, Running: 8, Waiting: 4, KVUsage: 0.30000000000000004, PrefixQueries: 900, PrefixHits: 300, Preemptions: 7, BlockSize: 16, CapacityBlocks: 12500}},
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
		"renamed family": renamed,
		"not metrics":    []byte("<html>Bad gateway</html>"),
		"other engine":   []byte("# TYPE foo_requests gauge\nfoo_requests 1\n"),
		"empty":          nil,
		"broken line":    []byte("vllm:num_requests_running{engine=\"0\" 3\n"),
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

// hostile is an engine whose metrics page misbehaves in a chosen way.
func hostile(t *testing.T, kind string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch kind {
		case "hang":
			<-r.Context().Done()
		case "huge":
			line := []byte("vllm:num_requests_running{engine=\"0\",model_name=\"" + strings.Repeat("x", 1000) + "\"} 1\n")
			for range 6000 { // about 6 MB
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		case "endless":
			for r.Context().Err() == nil {
				if _, err := w.Write(bytes.Repeat([]byte("# a comment that never ends "), 100)); err != nil {
					return
				}
				time.Sleep(time.Millisecond)
			}
		case "garbage":
			_, _ = w.Write(bytes.Repeat([]byte{0xff, '{', '"', '\n'}, 1000))
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestScraperFreshness: a healthy engine's report stays fresh while dead,
// hung and garbage-spewing engines around it never delay it, each of their
// failures is counted, and stale reports read as missing.
func TestScraperFreshness(t *testing.T) {
	cfg := sim.DefaultConfig()
	cfg.ZeroLatency = true
	good, err := sim.StartLocal(cfg, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	targets := []Target{{ID: "good", URL: mustURL(good.URL())}}
	for _, kind := range []string{"hang", "huge", "endless", "garbage", "500"} {
		targets = append(targets, Target{ID: kind, URL: mustURL(hostile(t, kind).URL)})
	}
	targets = append(targets, Target{ID: "dead", URL: mustURL("http://127.0.0.1:1")})

	var mu sync.Mutex
	results := map[string]map[string]int{}
	// Hung scrapes wait out a long timeout: were scrapes taken in turn, the
	// healthy engine's report would age past it. (Bounds are loose enough
	// for a loaded machine under the race detector.)
	sc := NewScraper(ScrapeConfig{Interval: 20 * time.Millisecond, Timeout: time.Second, MaxAge: 500 * time.Millisecond, MaxBytes: 64 << 10},
		&http.Client{}, func() []Target { return targets }, nil, func(id, result string) {
			mu.Lock()
			defer mu.Unlock()
			if results[id] == nil {
				results[id] = map[string]int{}
			}
			results[id][result]++
		}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = sc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(3 * time.Second)
	var worst time.Duration
	for time.Now().Before(deadline) {
		time.Sleep(7 * time.Millisecond)
		if time.Now().Before(deadline.Add(-1000 * time.Millisecond)) {
			continue // let the first scrapes land
		}
		smp := sc.Last("good")
		if smp == nil {
			t.Fatal("no report from the healthy engine")
		}
		worst = max(worst, time.Since(smp.At))
	}
	if worst > 700*time.Millisecond {
		t.Errorf("the healthy engine's report got %v old next to hostile ones", worst)
	}
	if rep, ok := sc.Fresh("good", time.Now()); !ok || rep.Engine != VLLM {
		t.Errorf("Fresh(good) = %+v, %v", rep, ok)
	}
	mu.Lock()
	wantResult := map[string]string{"good": ResultOK, "hang": ResultError, "huge": ResultTooLarge, "endless": ResultTooLarge,
		"garbage": ResultUnreadable, "500": ResultError, "dead": ResultError}
	for id, want := range wantResult {
		if results[id][want] == 0 {
			t.Errorf("%s: results %v, want some %q", id, results[id], want)
		}
	}
	mu.Unlock()
	for _, id := range []string{"hang", "huge", "endless", "garbage", "500", "dead"} {
		if _, ok := sc.Fresh(id, time.Now()); ok {
			t.Errorf("%s has a fresh report", id)
		}
	}
	good.Kill()
	time.Sleep(700 * time.Millisecond)
	if _, ok := sc.Fresh("good", time.Now()); ok {
		t.Error("a dead engine's report is still fresh past max age")
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
	sc := NewScraper(ScrapeConfig{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, MaxAge: time.Second},
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
				switch lp.GetName() {
				case "priority", "block_size", "num_gpu_blocks":
					if s.labels == nil {
						s.labels = map[string]string{}
					}
					s.labels[lp.GetName()] = lp.GetValue()
				}
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

func TestParseAgreesWithLibrary(t *testing.T) {
	for _, name := range []string{"vllm-dp2.txt", "vllm-old.txt", "sglang.txt"} {
		data, _ := os.ReadFile("testdata/" + name)
		ref, err := referencePage(data)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := parseEngine(ref)
		got, err := Parse(bytes.NewReader(data))
		if err != nil || *got != *want {
			t.Errorf("%s: Parse = %+v, %v; library reading %+v", name, got, err, want)
		}
	}
}

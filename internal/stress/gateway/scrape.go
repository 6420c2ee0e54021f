package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
)

// ScrapeLoad is gw-scrape: the gateway's own /metrics read many times a
// second while a burst of streams runs through it.
type ScrapeLoad struct {
	// Streams is the burst of concurrent streamed chats, each asking for
	// MaxTokens. Both positive.
	Streams, MaxTokens int
	// Every is the time between two scrapes of /metrics. Must be positive.
	Every time.Duration
	// Timeout bounds each stream; zero means 2 minutes.
	Timeout time.Duration
}

// Validate reports every setting that cannot run.
func (l ScrapeLoad) Validate() error {
	return errors.Join(stress.Positive("streams", l.Streams), stress.Positive("max_tokens", l.MaxTokens), stress.Positive("every", l.Every))
}

// ScrapeFigures are what gw-scrape measured.
type ScrapeFigures struct {
	Streams   int `json:"streams"`
	Completed int `json:"completed"`
	stress.Failures
	WallSeconds float64 `json:"wall_seconds"`
	// Scrapes counts the pages read during the burst; ScrapeErrors those
	// that could not be fetched or parsed.
	Scrapes      int `json:"scrapes"`
	ScrapeErrors int `json:"scrape_errors"`
	// Inconsistent counts pages with a problem: a counter or histogram
	// count lower than on the page before, buckets not cumulative, or a
	// _count unequal to the +Inf bucket. Problems are the first few.
	Inconsistent int      `json:"inconsistent"`
	Problems     []string `json:"problems,omitempty"`
	// Series is how many counter and histogram series the last page held.
	Series int `json:"series"`
	// PageBytes is the size of the largest page; Fetch the time to fetch
	// and read one, in seconds.
	PageBytes int                 `json:"page_bytes"`
	Fetch     measure.Percentiles `json:"fetch"`
	// ScrapesPerSecond is the achieved scrape rate during the burst.
	ScrapesPerSecond float64 `json:"scrapes_per_second"`
	// RequestsCounted is inferrail_requests_total on the last page, after
	// the burst: every stream counted once.
	RequestsCounted float64 `json:"requests_counted"`
	// Reference is the same reading of the first simulator's /metrics,
	// beside it in the same burst: how often a process of the same fleet,
	// serving its share of the same streams on the same cores, gets a page
	// read, so that a rate this machine cannot reach shows as such.
	Reference ReferenceScrapes `json:"reference"`
}

// ReferenceScrapes are the reference scraper's figures.
type ReferenceScrapes struct {
	Scrapes          int                 `json:"scrapes"`
	ScrapeErrors     int                 `json:"scrape_errors"`
	PageBytes        int                 `json:"page_bytes"`
	Fetch            measure.Percentiles `json:"fetch"`
	ScrapesPerSecond float64             `json:"scrapes_per_second"`
}

func runGWScrape(ctx context.Context, r *gwRun) error {
	l := r.c.Scrape
	gw := r.gw
	f := &ScrapeFigures{Streams: l.Streams}
	r.res.Scrape = f
	client := gwClient(l.Streams)
	defer client.CloseIdleConnections()
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	warmChats(ctx, client, gw, 10, procs.SimModel)

	sctx, stopScrapes := context.WithCancel(ctx)
	var sw sync.WaitGroup
	var sc, ref pageChecker
	sw.Go(func() { sc.run(sctx, admin, gw.AdminURL+"/metrics", l.Every) })
	refClient := procs.AdminClient()
	defer refClient.CloseIdleConnections()
	sw.Go(func() { ref.run(sctx, refClient, r.sims[0].URL+"/metrics", l.Every) })
	url := gw.URL + "/v1/chat/completions"
	began := time.Now()
	out := stress.StreamBurst(ctx, client, url, l.Streams, l.MaxTokens, l.Timeout, func(i int) []byte {
		return gwStreamBody(procs.SimModel, i, l.MaxTokens, false)
	})
	stopScrapes()
	sw.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	elapsed := time.Since(began)
	// One more page once everything ended: every stream counted.
	sc.scrape(ctx, admin, gw.AdminURL+"/metrics")
	t := stress.TallyStreams(out)
	f.Completed, f.WallSeconds = t.Completed, t.WallSeconds
	f.Errors, f.ErrorKinds, f.ErrorSamples = t.Errors.Result()
	f.Scrapes, f.ScrapeErrors, f.Inconsistent, f.Problems = sc.pages, sc.errors, sc.inconsistent, sc.problems
	f.Series, f.PageBytes, f.Fetch = len(sc.last), sc.maxBytes, measure.Summarize(sc.fetch)
	f.ScrapesPerSecond = float64(sc.pages) / elapsed.Seconds()
	f.Reference = ReferenceScrapes{Scrapes: ref.pages, ScrapeErrors: ref.errors, PageBytes: ref.maxBytes,
		Fetch: measure.Summarize(ref.fetch), ScrapesPerSecond: float64(ref.pages) / elapsed.Seconds()}
	for k, v := range sc.last {
		if strings.HasPrefix(k, "inferrail_requests_total{") {
			f.RequestsCounted += v
		}
	}
	r.check("streams completed", fmt.Sprintf("%d of %d, 0 errors", l.Streams, l.Streams), fmt.Sprintf("%d, %d errors", f.Completed, f.Errors),
		f.Completed == l.Streams && f.Errors == 0)
	want := float64(time.Second) / float64(l.Every)
	r.check("pages read during the burst", fmt.Sprintf("one every %v (at least 90%% of %.0f a second)", l.Every, want),
		fmt.Sprintf("%d in %.2f s (%.0f a second), %d failed; fetch p50 %s, p99 %s; largest page %d bytes; "+
			"a simulator's page beside it: %.0f a second, fetch p50 %s, p99 %s", f.Scrapes, elapsed.Seconds(),
			f.ScrapesPerSecond, f.ScrapeErrors, usec(f.Fetch.P50), usec(f.Fetch.P99), f.PageBytes,
			f.Reference.ScrapesPerSecond, usec(f.Reference.Fetch.P50), usec(f.Reference.Fetch.P99)),
		f.ScrapeErrors == 0 && f.Scrapes > 0 && f.ScrapesPerSecond >= 0.9*want)
	r.check("pages with counters or histograms inconsistent", "0", fmt.Sprintf("%d of %d (%d series on the last)", f.Inconsistent, f.Scrapes, f.Series),
		f.Inconsistent == 0 && f.Scrapes > 0)
	r.check("requests counted in inferrail_requests_total afterwards", fmt.Sprintf("at least %d", l.Streams), fmt.Sprintf("%.0f", f.RequestsCounted),
		f.RequestsCounted >= float64(l.Streams))
	r.note("Pages are read one at a time, each started on the next tick of the interval: a page that takes longer than the interval " +
		"(a starved gateway or harness) delays the next, so the achieved rate is what the machine allowed. The fetch time includes the " +
		"gateway rendering the page and the harness reading it. Beside it, a second reader in the harness reads the first simulator's " +
		"/metrics on the same interval: a process serving its share of the same streams, so its rate is what this machine gives any " +
		"page read during the burst.")
	return nil
}

// pageChecker reads /metrics pages and checks each against itself and
// the page before. Used by one goroutine at a time.
type pageChecker struct {
	last         map[string]float64 // counter-like series of the page before, by name and labels
	pages        int
	errors       int
	inconsistent int
	problems     []string
	maxBytes     int
	fetch        []time.Duration
}

// run scrapes url every interval until ctx ends.
func (c *pageChecker) run(ctx context.Context, client *http.Client, url string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for ctx.Err() == nil {
		c.scrape(ctx, client, url)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

func (c *pageChecker) scrape(ctx context.Context, client *http.Client, url string) {
	began := time.Now()
	data, err := fetchText(ctx, client, url)
	if err != nil {
		if ctx.Err() == nil {
			c.errors++
			c.problem("fetch: " + err.Error())
		}
		return
	}
	c.fetch = append(c.fetch, time.Since(began))
	c.maxBytes = max(c.maxBytes, len(data))
	c.pages++
	cur, problems, err := checkPage(data, c.last)
	if err != nil {
		c.errors++
		c.problem("parse: " + err.Error())
		return
	}
	if len(problems) > 0 {
		c.inconsistent++
		for _, p := range problems {
			c.problem(p)
		}
	}
	c.last = cur
}

func (c *pageChecker) problem(p string) {
	if len(c.problems) < 10 {
		c.problems = append(c.problems, p)
	}
}

// fetchText reads a metrics page in the classic text format.
func fetchText(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return data, nil
}

// checkPage parses a text-format page and returns its counters and
// histogram counts and sums by series, with what is wrong with it: a
// histogram whose buckets are not cumulative or whose count is not its +Inf
// bucket, or a series lower than in prev (nil for the first page).
func checkPage(data []byte, prev map[string]float64) (map[string]float64, []string, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	cur := map[string]float64{}
	var problems []string
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			key := name + seriesLabels(m)
			switch fam.GetType() {
			case dto.MetricType_COUNTER:
				cur[key] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				cur[key+"_count"], cur[key+"_sum"] = float64(h.GetSampleCount()), h.GetSampleSum()
				problems = append(problems, checkHistogram(key, h)...)
			}
		}
	}
	for _, k := range sortedKeys(cur) {
		if before, ok := prev[k]; ok && cur[k] < before {
			problems = append(problems, fmt.Sprintf("%s went from %v to %v", k, before, cur[k]))
		}
	}
	return cur, problems, nil
}

// checkHistogram says what is wrong with one histogram.
func checkHistogram(key string, h *dto.Histogram) []string {
	var problems []string
	var prev uint64
	inf, sawInf := uint64(0), false
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() < prev {
			problems = append(problems, fmt.Sprintf("%s: bucket le=%v holds %d, fewer than the bucket below's %d", key, b.GetUpperBound(), b.GetCumulativeCount(), prev))
		}
		prev = b.GetCumulativeCount()
		if math.IsInf(b.GetUpperBound(), 1) {
			inf, sawInf = b.GetCumulativeCount(), true
		}
	}
	if !sawInf {
		// The text parser leaves +Inf out of the buckets only when the page
		// had none; Prometheus takes _count for it.
		inf = h.GetSampleCount()
	}
	if inf != h.GetSampleCount() || prev > h.GetSampleCount() {
		problems = append(problems, fmt.Sprintf("%s: _count %d, +Inf bucket %d, largest bucket %d", key, h.GetSampleCount(), inf, prev))
	}
	return problems
}

// seriesLabels writes a series' labels in name order.
func seriesLabels(m *dto.Metric) string {
	var b strings.Builder
	b.WriteByte('{')
	for _, l := range m.GetLabel() {
		fmt.Fprintf(&b, "%s=%q,", l.GetName(), l.GetValue())
	}
	b.WriteByte('}')
	return b.String()
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (w *mdWriter) scrape(f *ScrapeFigures) {
	w.kv(row("Streams (completed, errors)", fmt.Sprintf("%d (%d, %d)", f.Streams, f.Completed, f.Errors)),
		row("Burst wall time", fmt.Sprintf("%.2f s", f.WallSeconds)),
		row("Pages read (failed)", fmt.Sprintf("%d (%d), %.0f a second", f.Scrapes, f.ScrapeErrors, f.ScrapesPerSecond)),
		row("Page fetch p50 / p99 / max", fmt.Sprintf("%s / %s / %s", usec(f.Fetch.P50), usec(f.Fetch.P99), usec(f.Fetch.Max))),
		row("Largest page", fmt.Sprintf("%d bytes", f.PageBytes)),
		row("Counter and histogram series on the last page", fmt.Sprint(f.Series)),
		row("Pages inconsistent", fmt.Sprint(f.Inconsistent)),
		row("inferrail_requests_total afterwards", fmt.Sprintf("%.0f", f.RequestsCounted)),
		row("Reference: a simulator's page read beside it (failed)", fmt.Sprintf("%d (%d), %.0f a second", f.Reference.Scrapes,
			f.Reference.ScrapeErrors, f.Reference.ScrapesPerSecond)),
		row("Reference fetch p50 / p99 / max; its largest page", fmt.Sprintf("%s / %s / %s; %d bytes", usec(f.Reference.Fetch.P50),
			usec(f.Reference.Fetch.P99), usec(f.Reference.Fetch.Max), f.Reference.PageBytes)))
	for _, p := range f.Problems {
		w.p("Problem: `%s`\n\n", strings.ReplaceAll(p, "`", "'"))
	}
	for _, s := range f.ErrorSamples {
		w.p("Stream error: `%s`\n\n", strings.ReplaceAll(s, "`", "'"))
	}
}

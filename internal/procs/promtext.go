package procs

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// PromPage is a scraped Prometheus text page as the series the text format
// prints: a histogram's buckets are <family>_bucket series with an le label
// beside <family>_sum and <family>_count, a summary's quantiles carry a
// quantile label. The page is read by the Prometheus library's own parser,
// so label values with commas, quotes or escapes read as Prometheus reads
// them.
type PromPage []Series

// Series is one sample of a page. A timestamp, if any, is dropped.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ScrapePage reads a Prometheus text page (format 0.0.4).
func ScrapePage(ctx context.Context, client *http.Client, url string) (PromPage, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	p, err := ParsePage(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return p, nil
}

// ParsePage parses a Prometheus text page with expfmt's TextParser and
// flattens its families into series.
func ParsePage(r io.Reader) (PromPage, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var p PromPage
	for name, fam := range families {
		for _, m := range fam.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			with := func(k, v string) map[string]string {
				ls := maps.Clone(labels)
				ls[k] = v
				return ls
			}
			switch h, s := m.GetHistogram(), m.GetSummary(); {
			case m.Counter != nil:
				p = append(p, Series{name, labels, m.GetCounter().GetValue()})
			case m.Gauge != nil:
				p = append(p, Series{name, labels, m.GetGauge().GetValue()})
			case m.Untyped != nil:
				p = append(p, Series{name, labels, m.GetUntyped().GetValue()})
			case h != nil:
				for _, b := range h.GetBucket() {
					n := float64(b.GetCumulativeCount()) + b.GetCumulativeCountFloat()
					p = append(p, Series{name + "_bucket", with("le", formatBound(b.GetUpperBound())), n})
				}
				count := float64(h.GetSampleCount()) + h.GetSampleCountFloat()
				p = append(p, Series{name + "_sum", labels, h.GetSampleSum()}, Series{name + "_count", labels, count})
			case s != nil:
				for _, q := range s.GetQuantile() {
					p = append(p, Series{name, with("quantile", formatBound(q.GetQuantile())), q.GetValue()})
				}
				p = append(p, Series{name + "_sum", labels, s.GetSampleSum()}, Series{name + "_count", labels, float64(s.GetSampleCount())})
			}
		}
	}
	return p, nil
}

// formatBound writes a bucket bound or quantile as the text format does.
func formatBound(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Sum adds the values of the series named name whose labels include every
// one of labels, each written as Label writes it: key="value".
func (p PromPage) Sum(name string, labels ...string) float64 {
	want := make(map[string]string, len(labels))
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		want[k] = v
	}
	var total float64
	for _, s := range p {
		if s.Name == name && hasLabels(s.Labels, want) {
			total += s.Value
		}
	}
	return total
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// ByLabel sums the series named name by the value of their label key;
// series without it are left out. Nil when the page has none.
func (p PromPage) ByLabel(name, key string) map[string]float64 {
	var out map[string]float64
	for _, s := range p {
		v, ok := s.Labels[key]
		if s.Name != name || !ok {
			continue
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[v] += s.Value
	}
	return out
}

// Buckets sums the cumulative bucket counts of every series of histogram
// family name by upper bound, +Inf included. Nil when the page has none.
func (p PromPage) Buckets(name string) map[float64]float64 {
	var out map[float64]float64
	for bound, n := range p.ByLabel(name+"_bucket", "le") {
		le, err := strconv.ParseFloat(bound, 64)
		if err != nil {
			continue
		}
		if out == nil {
			out = map[float64]float64{}
		}
		out[le] += n
	}
	return out
}

// Label writes a label matcher for PromPage.Sum.
func Label(k, v string) string { return k + "=" + strconv.Quote(v) }

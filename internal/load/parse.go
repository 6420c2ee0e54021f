// Package load reads engines' own view of their load from their Prometheus
// pages (vLLM and SGLang natively) and keeps, per replica, the latest report
// and when it was taken, so routing can use reports that are fresh and treat
// stale ones as missing.
package load

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Engine is the kind of engine a page came from, told by its metric prefix.
type Engine string

const (
	VLLM   Engine = "vllm"
	SGLang Engine = "sglang"
)

// Report is one engine's load as its metrics page showed it. Counts are
// summed over data-parallel ranks; KVUsage is their mean.
type Report struct {
	Engine         Engine
	Ranks          int     // data-parallel ranks seen
	Running        float64 // requests in execution batches
	Waiting        float64 // requests waiting to be scheduled
	KVUsage        float64 // share of the KV cache in use, 0..1
	PrefixQueries  float64 // cumulative prompt tokens looked up in the prefix cache
	PrefixHits     float64 // cumulative prompt tokens found there
	Preemptions    float64 // cumulative preemptions (SGLang: retractions)
	BlockSize      int     // tokens per KV block (SGLang: page size); 0 when not reported
	CapacityBlocks int     // KV cache capacity in blocks; 0 when not reported
}

// ErrUnreadable wraps every reason a page cannot be used: not the text
// format, no known engine prefix, or a required family missing (a renamed
// metric after an upgrade must show up, not read as an idle engine).
var ErrUnreadable = errors.New("unreadable metrics page")

// Parse reads one metrics page in the Prometheus text format.
func Parse(r io.Reader) (*Report, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	switch {
	case hasPrefix(fams, "vllm:"):
		return parseVLLM(fams)
	case hasPrefix(fams, "sglang:"):
		return parseSGLang(fams)
	}
	return nil, fmt.Errorf("%w: no vllm: or sglang: metrics", ErrUnreadable)
}

func hasPrefix(fams map[string]*dto.MetricFamily, prefix string) bool {
	for name := range fams {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// series returns the samples of the first of names present, skipping
// SGLang's per-priority breakdowns.
func series(fams map[string]*dto.MetricFamily, names ...string) ([]*dto.Metric, bool) {
	for _, n := range names {
		f, ok := fams[n]
		if !ok {
			continue
		}
		var out []*dto.Metric
		for _, m := range f.GetMetric() {
			if label(m, "priority") != "" {
				continue
			}
			out = append(out, m)
		}
		return out, true
	}
	return nil, false
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// sum adds a family's samples over ranks; ok is false when it is absent.
func sum(fams map[string]*dto.MetricFamily, names ...string) (float64, int, bool) {
	ms, ok := series(fams, names...)
	if !ok {
		return 0, 0, false
	}
	var s float64
	for _, m := range ms {
		s += value(m)
	}
	return s, len(ms), true
}

func mean(fams map[string]*dto.MetricFamily, names ...string) (float64, bool) {
	s, n, ok := sum(fams, names...)
	if !ok || n == 0 {
		return 0, ok
	}
	return s / float64(n), true
}

func missing(names ...string) error {
	return fmt.Errorf("%w: no %s family", ErrUnreadable, strings.Join(names, " or "))
}

func parseVLLM(fams map[string]*dto.MetricFamily) (*Report, error) {
	rep := &Report{Engine: VLLM}
	var ok bool
	var ranks int
	if rep.Running, ranks, ok = sum(fams, "vllm:num_requests_running"); !ok {
		return nil, missing("vllm:num_requests_running")
	}
	rep.Ranks = ranks
	if rep.Waiting, _, ok = sum(fams, "vllm:num_requests_waiting"); !ok {
		return nil, missing("vllm:num_requests_waiting")
	}
	// Older servers named KV usage and the prefix counters differently.
	if rep.KVUsage, ok = mean(fams, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"); !ok {
		return nil, missing("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
	}
	rep.PrefixQueries, _, _ = sum(fams, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries")
	rep.PrefixHits, _, _ = sum(fams, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits")
	rep.Preemptions, _, _ = sum(fams, "vllm:num_preemptions_total", "vllm:num_preemptions")
	if infos, ok := series(fams, "vllm:cache_config_info"); ok {
		for _, m := range infos {
			if bs, err := strconv.Atoi(label(m, "block_size")); err == nil && bs > 0 {
				rep.BlockSize = bs
			}
			if n, err := strconv.Atoi(label(m, "num_gpu_blocks")); err == nil && n > 0 {
				rep.CapacityBlocks += n
			}
		}
	}
	return rep, nil
}

func parseSGLang(fams map[string]*dto.MetricFamily) (*Report, error) {
	rep := &Report{Engine: SGLang}
	var ok bool
	var ranks int
	if rep.Running, ranks, ok = sum(fams, "sglang:num_running_reqs"); !ok {
		return nil, missing("sglang:num_running_reqs")
	}
	rep.Ranks = ranks
	if rep.Waiting, _, ok = sum(fams, "sglang:num_queue_reqs"); !ok {
		return nil, missing("sglang:num_queue_reqs")
	}
	if rep.KVUsage, ok = mean(fams, "sglang:token_usage"); !ok {
		return nil, missing("sglang:token_usage")
	}
	rep.PrefixQueries, _, _ = sum(fams, "sglang:prompt_tokens_total")
	rep.PrefixHits, _, _ = sum(fams, "sglang:cached_tokens_total")
	rep.Preemptions, _, _ = sum(fams, "sglang:num_retracted_requests_total")
	page, _ := mean(fams, "sglang:page_size")
	tokens, _, _ := sum(fams, "sglang:max_total_num_tokens")
	if page >= 1 {
		rep.BlockSize = int(page)
		rep.CapacityBlocks = int(tokens / page)
	}
	return rep, nil
}

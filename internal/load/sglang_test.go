package load

import (
	"fmt"
	"strings"
	"testing"
)

// scheduler is one SGLang scheduler's gauges as its page shows them.
type scheduler struct {
	labels                  string // its rank labels, e.g. `dp_rank="0",tp_rank="1"`
	running, waiting, usage float64
	tokens, page            float64 // max_total_num_tokens, page_size
}

// sglangPage writes the page of an engine with these schedulers, plus the
// tokenizer's counters (one series per cache source).
func sglangPage(scheds ...scheduler) string {
	var b strings.Builder
	for _, f := range []struct {
		name string
		v    func(s scheduler) float64
	}{
		{"sglang:num_running_reqs", func(s scheduler) float64 { return s.running }},
		{"sglang:num_queue_reqs", func(s scheduler) float64 { return s.waiting }},
		{"sglang:token_usage", func(s scheduler) float64 { return s.usage }},
		{"sglang:max_total_num_tokens", func(s scheduler) float64 { return s.tokens }},
		{"sglang:page_size", func(s scheduler) float64 { return s.page }},
		{"sglang:num_retracted_requests_total", func(s scheduler) float64 { return 1 }},
	} {
		fmt.Fprintf(&b, "# HELP %s Multiprocess metric\n# TYPE %s gauge\n", f.name, f.name)
		for _, s := range scheds {
			fmt.Fprintf(&b, "%s{engine_type=\"unified\",model_name=\"m\",%s} %v\n", f.name, s.labels, f.v(s))
		}
	}
	b.WriteString("sglang:prompt_tokens_total{engine_type=\"unified\",model_name=\"m\"} 1000\n")
	b.WriteString("sglang:cached_tokens_total{cache_source=\"device\",engine_type=\"unified\",model_name=\"m\"} 300\n")
	b.WriteString("sglang:cached_tokens_total{cache_source=\"host\",engine_type=\"unified\",model_name=\"m\"} 100\n")
	return b.String()
}

// TestParseSGLangSchedulers: an SGLang engine's load is summed over its
// data-parallel ranks only. The schedulers of one rank (tp_rank, pp_rank,
// moe_ep_rank apart) describe one batch and one KV pool; with
// --enable-metrics-for-all-schedulers each prints its own series, and the
// page must read as it does without the flag, where only the lowest ranks
// report. (Found by a review: a TP=2 engine read twice its running,
// waiting and capacity.)
func TestParseSGLangSchedulers(t *testing.T) {
	tp0 := scheduler{`moe_ep_rank="0",pp_rank="0",tp_rank="0"`, 5, 3, 0.25, 160000, 16}
	tp1 := scheduler{`moe_ep_rank="1",pp_rank="0",tp_rank="1"`, 5, 3, 0.25, 160000, 16}
	base := Report{Engine: SGLang, Ranks: 1, Running: 5, Waiting: 3, KVUsage: 0.25, PrefixQueries: 1000, PrefixHits: 400,
		Preemptions: 1, BlockSize: 16, CapacityBlocks: 10000, CapacityTokens: 160000}
	dp := func(r Report, ranks int) Report {
		r.Ranks, r.Running, r.Waiting, r.Preemptions, r.CapacityBlocks, r.CapacityTokens = ranks, r.Running*float64(ranks),
			r.Waiting*float64(ranks), r.Preemptions*float64(ranks), r.CapacityBlocks*ranks, r.CapacityTokens*ranks
		return r
	}
	at := func(s scheduler, labels string) scheduler { s.labels = labels; return s }
	for _, tc := range []struct {
		name   string
		scheds []scheduler
		want   Report
	}{
		{"tp1", []scheduler{tp0}, base},
		{"tp2_rank0_only", []scheduler{tp0}, base},
		{"tp2_all_schedulers", []scheduler{tp0, tp1}, base},
		{"tp2_all_schedulers_rank1_first", []scheduler{tp1, tp0}, base},
		{"tp4_all_schedulers", []scheduler{tp0, tp1,
			at(tp1, `moe_ep_rank="2",pp_rank="0",tp_rank="2"`), at(tp1, `moe_ep_rank="3",pp_rank="0",tp_rank="3"`)}, base},
		{"tp2_ranks_disagree_lowest_read", []scheduler{tp0, {tp1.labels, 9, 9, 0.5, 320000, 16}}, base},
		{"tp10_compared_as_numbers", []scheduler{at(tp1, `moe_ep_rank="0",pp_rank="0",tp_rank="10"`), at(tp0, `moe_ep_rank="0",pp_rank="0",tp_rank="9"`)}, base},
		{"pp2_each_stage_reports", []scheduler{tp0, at(tp1, `moe_ep_rank="0",pp_rank="1",tp_rank="0"`)}, base},
		{"dp2_rank0_only", []scheduler{
			at(tp0, `dp_rank="0",moe_ep_rank="0",pp_rank="0",tp_rank="0"`),
			at(tp0, `dp_rank="1",moe_ep_rank="0",pp_rank="0",tp_rank="2"`)}, dp(base, 2)},
		{"dp2_tp2_all_schedulers", []scheduler{
			at(tp0, `dp_rank="0",moe_ep_rank="0",pp_rank="0",tp_rank="0"`),
			at(tp1, `dp_rank="0",moe_ep_rank="1",pp_rank="0",tp_rank="1"`),
			at(tp0, `dp_rank="1",moe_ep_rank="2",pp_rank="0",tp_rank="2"`),
			at(tp1, `dp_rank="1",moe_ep_rank="3",pp_rank="0",tp_rank="3"`)}, dp(base, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(sglangPage(tc.scheds...)))
			if err != nil || *got != tc.want {
				t.Errorf("Parse = %+v, %v\nwant %+v", got, err, tc.want)
			}
		})
	}
}

// TestUsableBlocks: an engine's capacity in the gateway's blocks. SGLang's
// pool of tokens is cut into them whatever its page; vLLM's blocks, less
// the null block, are taken as the gateway's whatever their size.
func TestUsableBlocks(t *testing.T) {
	sglang := func(page, tokens int) Report {
		return Report{Engine: SGLang, BlockSize: page, CapacityBlocks: tokens / page, CapacityTokens: tokens}
	}
	vllm := Report{Engine: VLLM, BlockSize: 16, CapacityBlocks: 4096}
	for _, tc := range []struct {
		name      string
		rep       Report
		blockSize int
		want      int
	}{
		{"sglang_page1_block16", sglang(1, 160000), 16, 10000},
		{"sglang_page16_block16", sglang(16, 160000), 16, 10000},
		{"sglang_page16_block48", sglang(16, 160000), 48, 3333},
		{"sglang_engine_blocks", sglang(16, 160000), 0, 10000},
		{"sglang_unreported", Report{Engine: SGLang}, 16, 0},
		{"vllm_block16", vllm, 16, 4095},
		{"vllm_block32", vllm, 32, 4095},
		{"vllm_engine_blocks", vllm, 0, 4095},
		{"vllm_unreported", Report{Engine: VLLM}, 16, 0},
	} {
		if got := tc.rep.UsableBlocks(tc.blockSize); got != tc.want {
			t.Errorf("%s: UsableBlocks(%d) = %d, want %d", tc.name, tc.blockSize, got, tc.want)
		}
	}
}

// TestParseCapacityPastBelief: a KV capacity past 2^31 blocks or tokens
// is not taken, as one that is not a number is not: converted to an int,
// SGLang's 1e19 tokens became MinInt64 blocks, and vLLM's blocks summed
// over ranks overflowed (found by a review). One at 2^31 is taken.
func TestParseCapacityPastBelief(t *testing.T) {
	const load = "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.5\n"
	const sglang = "sglang:num_running_reqs 1\nsglang:num_queue_reqs 0\nsglang:token_usage 0.5\n"
	info := func(engine, blocks string) string {
		return fmt.Sprintf("vllm:cache_config_info{block_size=\"16\",engine=%q,num_gpu_blocks=%q} 1\n", engine, blocks)
	}
	for _, tc := range []struct {
		name                    string
		page                    string
		blockSize, blocks, toks int
	}{
		{"vllm_2^31", load + info("0", "2147483648"), 16, 1 << 31, 0},
		{"vllm_past_2^31", load + info("0", "2147483649"), 16, 0, 0},
		{"vllm_ranks_overflowing", load + info("0", "9223372036854775807") + info("1", "9223372036854775807"), 16, 0, 0},
		{"vllm_rank_past_2^31", load + info("0", "1000") + info("1", "4294967296"), 16, 1000, 0},
		{"sglang_2^31_tokens", sglang + "sglang:page_size 16\nsglang:max_total_num_tokens 2147483648\n", 16, 1 << 27, 1 << 31},
		{"sglang_1e19_tokens", sglang + "sglang:page_size 1\nsglang:max_total_num_tokens 1e19\n", 1, 0, 0},
		{"sglang_1e19_page", sglang + "sglang:page_size 1e19\nsglang:max_total_num_tokens 160000\n", 0, 0, 160000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.page))
			if err != nil {
				t.Fatal(err)
			}
			if got.BlockSize != tc.blockSize || got.CapacityBlocks != tc.blocks || got.CapacityTokens != tc.toks {
				t.Errorf("block size %d, %d blocks, %d tokens; want %d, %d, %d", got.BlockSize, got.CapacityBlocks, got.CapacityTokens,
					tc.blockSize, tc.blocks, tc.toks)
			}
		})
	}
}

// TestParseSGLangManyRanks: past the few series looked through one by one,
// ranks are grouped by a map; 24 data-parallel ranks of two tensor-parallel
// schedulers each read as 24, each its tp_rank 0 scheduler's.
func TestParseSGLangManyRanks(t *testing.T) {
	var scheds []scheduler
	want := 0.0
	for dp := range 24 {
		// The higher rank first: the lowest must win wherever it sits.
		scheds = append(scheds,
			scheduler{fmt.Sprintf(`dp_rank="%d",tp_rank="1"`, dp), 100, 0, 0.5, 1600, 16},
			scheduler{fmt.Sprintf(`dp_rank="%d",tp_rank="0"`, dp), float64(dp + 1), 0, 0.5, 1600, 16})
		want += float64(dp + 1)
	}
	rep, err := Parse(strings.NewReader(sglangPage(scheds...)))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ranks != 24 || rep.Running != want {
		t.Errorf("%d ranks running %v, want 24 running %v", rep.Ranks, rep.Running, want)
	}
}

package dashboards

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite inferrail.json from the panel table")

// The dashboard is written from the table below rather than by hand, so
// that ids, the grid and every panel's boilerplate stay consistent;
// `go test ./dashboards -run TestDashboardIsGenerated -update` rewrites it.
// Grafana's own export of an edited dashboard is welcome as a starting
// point, but the change lands here.

// rateWindow is the window every rate and increase uses: Grafana sets it
// from the step and the data source's scrape interval.
const rateWindow = "[$__rate_interval]"

// A section is a row of the dashboard and the panels under it.
type section struct {
	title  string
	panels []panelSpec
}

// A panelSpec is one panel: a time series unless stat is set, a third of
// the width unless wide.
type panelSpec struct {
	title, description, unit string
	stat, wide               bool
	signed                   bool // values may be negative: no floor at 0
	targets                  []targetSpec
}

type targetSpec struct{ expr, legend string }

func rate(metric string) string { return "rate(" + metric + rateWindow + ")" }

func increase(metric string) string { return "increase(" + metric + rateWindow + ")" }

// quantile is the q-quantile of a histogram's rate, per the by labels.
func quantile(q, histogram, by string) string {
	return "histogram_quantile(" + q + ", sum by (le, " + by + ") (" + rate(histogram+"_bucket") + "))"
}

// mean is a histogram's mean over the window, per the by labels.
func mean(histogram, by string) string {
	return "sum by (" + by + ") (" + rate(histogram+"_sum") + ") / sum by (" + by + ") (" + rate(histogram+"_count") + ")"
}

// p50p99 are a histogram's median and 99th percentile, per the by labels.
func p50p99(histogram, by, legend string) []targetSpec {
	return []targetSpec{
		{quantile("0.5", histogram, by), "p50 " + legend},
		{quantile("0.99", histogram, by), "p99 " + legend},
	}
}

// shadowAgreed is each shadow's share of decisions that picked the
// routing policy's replica; a shadow that never agreed shows 0 rather
// than nothing.
const shadowAgreed = "(sum by (model, policy) (rate(inferrail_shadow_decisions_total{agreed=\"true\"}" + rateWindow + "))" +
	" or sum by (model, policy) (rate(inferrail_shadow_decisions_total" + rateWindow + ")) * 0)" +
	" / sum by (model, policy) (rate(inferrail_shadow_decisions_total" + rateWindow + "))"

// shadowGain is the mean estimated TTFT a shadow's picks would have saved
// per shadowed request: positive when the cost model prices them faster.
const shadowGain = "(sum by (model, policy) (rate(inferrail_shadow_estimated_ttft_seconds_total{pick=\"active\"}" + rateWindow + "))" +
	" - sum by (model, policy) (rate(inferrail_shadow_estimated_ttft_seconds_total{pick=\"shadow\"}" + rateWindow + ")))" +
	" / sum by (model, policy) (rate(inferrail_shadow_decisions_total" + rateWindow + "))"

// layout is the dashboard, top to bottom.
var layout = []section{
	{"Traffic", []panelSpec{
		{title: "Requests by outcome", unit: "reqps",
			description: "Requests per second by the status class the client got; aborted when the engine broke a started response, cancelled when the client left.",
			targets:     []targetSpec{{"sum by (status) (" + rate("inferrail_requests_total") + ")", "{{status}}"}}},
		{title: "Traffic share per policy", unit: "percentunit",
			description: "Each policy's (each arm's, under a split) share of a model's finished requests.",
			targets: []targetSpec{{"sum by (model, policy) (" + rate("inferrail_request_duration_seconds_count") + ") / on (model) group_left " +
				"sum by (model) (" + rate("inferrail_request_duration_seconds_count") + ")", "{{model}} {{policy}}"}}},
		{title: "In flight per replica", unit: "short",
			description: "Requests the gateway has in flight to each replica, and the streams among them still waiting for a response head.",
			targets: []targetSpec{
				{"sum by (replica) (inferrail_replica_in_flight)", "{{replica}}"},
				{"sum by (replica) (inferrail_replica_pending)", "{{replica}} pending"},
			}},
	}},
	{"Time to first token", []panelSpec{
		{title: "TTFT per replica (gateway)", unit: "s",
			description: "Time from a streamed request's arrival at the gateway to the first byte of its answer, per replica: streamed 2xx answers only (a whole answer's first byte comes with its last), so traffic that does not stream shows nothing here.",
			targets:     p50p99("inferrail_ttft_seconds", "replica", "{{replica}}")},
		{title: "TTFT per policy (gateway)", unit: "s",
			description: "The same time per routing policy, of streamed 2xx answers only: the panel to compare the arms of a split.",
			targets:     p50p99("inferrail_ttft_seconds", "policy", "{{policy}}")},
		{title: "TTFT per replica (engines)", unit: "s",
			description: "Time to first token as each engine measures it (vllm:time_to_first_token_seconds), without the gateway and the network.",
			targets:     p50p99("vllm:time_to_first_token_seconds", "replica", "{{replica}}")},
		{title: "Estimated vs measured TTFT", unit: "s",
			description: "The cost model's mean estimate of the chosen replica's TTFT next to the mean TTFT the gateway measured (streamed 2xx answers only), per policy.",
			targets: []targetSpec{
				{mean("inferrail_estimated_ttft_seconds", "policy"), "estimated {{policy}}"},
				{mean("inferrail_ttft_seconds", "policy"), "measured {{policy}}"},
			}},
		{title: "Routing decision time", unit: "s",
			description: "Time to choose a replica and take a lease on it, per policy.",
			targets:     p50p99("inferrail_routing_decision_seconds", "policy", "{{policy}}")},
		{title: "Queued prefill per replica", unit: "s",
			description: "Prefill the gateway's own decisions queued on each replica, drained in real time: the wait the cost model prices.",
			targets:     []targetSpec{{"sum by (replica) (inferrail_replica_queued_prefill_seconds)", "{{replica}}"}}},
		{title: "Engine pace per replica", unit: "none",
			description: "How each replica's engine has lately streamed first tokens against the cost model's estimates: measured over estimated, 1 until known. With routing.pace the estimates are multiplied by it, so a replica above its peers is priced slower.",
			targets:     []targetSpec{{"max by (replica) (inferrail_replica_pace)", "{{replica}}"}}},
	}},
	{"Engines", []panelSpec{
		{title: "Engine queues", unit: "short",
			description: "Requests running and waiting in each engine, from its own metrics.",
			targets: []targetSpec{
				{"sum by (replica) (vllm:num_requests_running)", "{{replica}} running"},
				{"sum by (replica) (vllm:num_requests_waiting)", "{{replica}} waiting"},
			}},
		{title: "Engine KV cache usage", unit: "percentunit",
			description: "Share of each engine's KV cache blocks in use.",
			targets:     []targetSpec{{"max by (replica) (vllm:kv_cache_usage_perc)", "{{replica}}"}}},
		{title: "Engine prefix cache hit rate", unit: "percentunit",
			description: "Prompt tokens each engine found in its prefix cache, over those it looked up.",
			targets: []targetSpec{{"sum by (replica) (" + rate("vllm:prefix_cache_hits_total") + ") / sum by (replica) (" +
				rate("vllm:prefix_cache_queries_total") + ")", "{{replica}}"}}},
	}},
	{"Cache and index", []panelSpec{
		{title: "Prefix hit rate: predicted vs engines", unit: "percentunit",
			description: "The share of prompt tokens the gateway's KV index predicted cached on the replicas it chose, next to the share the engines found cached.",
			targets: []targetSpec{
				{"sum(" + rate("inferrail_predicted_cached_tokens_total") + ") / sum(" + rate("inferrail_prompt_tokens_total") + ")", "predicted by the gateway"},
				{"sum(" + rate("vllm:prefix_cache_hits_total") + ") / sum(" + rate("vllm:prefix_cache_queries_total") + ")", "found by the engines"},
			}},
		{title: "Index blocks per replica", unit: "short",
			description: "Blocks the KV index holds for each replica, against the capacity it assumes; with several gateways, the largest of their figures (each indexes the same engine).",
			targets: []targetSpec{
				{"max by (replica) (inferrail_replica_index_blocks)", "{{replica}}"},
				{"max by (replica) (inferrail_replica_index_capacity_blocks)", "{{replica}} capacity"},
			}},
		{title: "Tokenization", unit: "reqps",
			description: "Prompts tokenized at the edge, or why a request got no prediction, per model.",
			targets:     []targetSpec{{"sum by (model, result) (" + rate("inferrail_tokenized_requests_total") + ")", "{{model}} {{result}}"}}},
		{title: "Tokenization time", unit: "s",
			description: "Time to tokenize and hash a prompt, waiting for a worker included.",
			targets:     p50p99("inferrail_tokenize_seconds", "model", "{{model}}")},
	}},
	{"Guards, steering and failures", []panelSpec{
		{title: "Load guards", unit: "ops",
			description: "Decisions where a load guard set replicas aside (bounded_load, kv_pressure), or every replica was under KV pressure (kv_waived).",
			targets:     []targetSpec{{"sum by (guard) (" + rate("inferrail_routing_guards_total") + ")", "{{guard}}"}}},
		{title: "Steering", unit: "ops",
			description: "Decisions made by session affinity, won by a hot prefix owner, or routed by the fallback for prompts without a full block.",
			targets:     []targetSpec{{"sum by (reason) (" + rate("inferrail_routing_steered_total") + ")", "{{reason}}"}}},
		{title: "Retries", unit: "ops",
			description: "Requests moved to another replica before the first response byte.",
			targets:     []targetSpec{{"sum by (model) (" + rate("inferrail_upstream_retries_total") + ")", "{{model}}"}}},
		{title: "Ejections and health", unit: "short",
			description: "Passive ejections in the window, and the replicas out of rotation (ejected) or failing their probes (healthy at 0).",
			targets: []targetSpec{
				{"sum by (replica) (" + increase("inferrail_ejections_total") + ")", "{{replica}} ejections"},
				{"sum by (replica) (inferrail_replica_ejected)", "{{replica}} ejected"},
				{"sum by (replica) (inferrail_replica_healthy)", "{{replica}} healthy"},
			}},
		{title: "Errors", unit: "ops",
			description: "Errors the gateway answered itself, by reason, and responses abandoned because the client left.",
			targets: []targetSpec{
				{"sum by (reason) (" + rate("inferrail_request_errors_total") + ")", "{{reason}}"},
				{"sum by (model) (" + rate("inferrail_client_disconnects_total") + ")", "client left {{model}}"},
			}},
		{title: "Engine scrapes", unit: "ops",
			description: "Scrapes of the engines' metrics pages by result: ok, error (no answer), unreadable, too_large.",
			targets:     []targetSpec{{"sum by (replica, result) (" + rate("inferrail_load_scrapes_total") + ")", "{{replica}} {{result}}"}}},
	}},
	{"Control plane", []panelSpec{
		{title: "Config generation", unit: "none", stat: true,
			description: "The generation of the config in effect: 1 at start, one more at every applied change.",
			targets:     []targetSpec{{"max(inferrail_config_generation)", "generation"}}},
		{title: "Config reloads", unit: "short",
			description: "Attempts to change the config (file, SIGHUP or admin API) in the window, by result: applied, unchanged or rejected.",
			targets:     []targetSpec{{"sum by (result) (" + increase("inferrail_config_reloads_total") + ")", "{{result}}"}}},
		{title: "Split per model", unit: "percent",
			description: "The percent of each model's requests each policy routes.",
			targets:     []targetSpec{{"sum by (model, policy) (inferrail_model_policy_percent)", "{{model}} {{policy}}"}}},
		{title: "Shadow agreement", unit: "percentunit",
			description: "The share of requests for which a shadow policy picked the replica the routing policy picked.",
			targets:     []targetSpec{{shadowAgreed, "{{model}} {{policy}}"}}},
		{title: "Shadow estimated gain", unit: "s", signed: true,
			description: "The mean TTFT per request the cost model estimates a shadow's picks would have saved (negative: cost). The cost model's own view, which favours cost_model: a reason to try a shadow in a split, not proof.",
			targets:     []targetSpec{{shadowGain, "{{model}} {{policy}}"}}},
		{title: "Shadow requests dropped", unit: "ops",
			description: "Routed requests left out of the shadows because their worker was behind.",
			targets:     []targetSpec{{"sum(" + rate("inferrail_shadow_dropped_total") + ")", "dropped"}}},
	}},
	{"Gateway process", []panelSpec{
		{title: "Gateway memory", unit: "bytes",
			description: "Each gateway's resident memory and the Go heap in use. Bounded caches (tokenizer pieces, the index, flow tables) level off; growth that never does is a leak.",
			targets: []targetSpec{
				{ofGateway("process_resident_memory_bytes"), "resident {{instance}}"},
				{ofGateway("go_memstats_heap_inuse_bytes"), "heap in use {{instance}}"},
			}},
		{title: "Goroutines and open files", unit: "short",
			description: "Each gateway's goroutines (a few per connection and stream) and open file descriptors (mostly connections).",
			targets: []targetSpec{
				{ofGateway("go_goroutines"), "goroutines {{instance}}"},
				{ofGateway("process_open_fds"), "open files {{instance}}"},
			}},
		{title: "Gateway CPU", unit: "percentunit",
			description: "CPU each gateway uses: 100% is one core.",
			targets:     []targetSpec{{ofGateway(rate("process_cpu_seconds_total")), "{{instance}}"}}},
	}},
}

// ofGateway keeps the series of a process metric that come from gateways:
// the engines' pages carry process metrics of their own, the gateway's
// alone inferrail_build_info.
func ofGateway(expr string) string {
	return expr + " * on (job, instance) group_left () inferrail_build_info"
}

// configChanges marks every applied config change on every panel.
const configChanges = "changes(inferrail_config_generation[1m]) > 0"

// dataSource is the dashboard's Prometheus, chosen by its variable.
var dataSource = map[string]any{"type": "prometheus", "uid": "${datasource}"}

// render writes the dashboard from layout.
func render() ([]byte, error) {
	var panels []any
	id, y := 1, 0
	for _, s := range layout {
		panels = append(panels, map[string]any{"id": id, "type": "row", "title": s.title, "collapsed": false,
			"gridPos": grid(0, y, 24, 1), "panels": []any{}})
		id, y = id+1, y+1
		x := 0
		for _, p := range s.panels {
			w := 8
			if p.wide {
				w = 12
			}
			if x+w > 24 {
				x, y = 0, y+8
			}
			panels = append(panels, panelJSON(id, p, grid(x, y, w, 8)))
			id, x = id+1, x+w
		}
		y += 8
	}
	d := map[string]any{
		"uid": "inferrail", "title": "Inferrail", "tags": []string{"inferrail"},
		"description":   "The gateway and its engines: traffic, time to first token, engine load, cache and index, guards and failures, the control plane.",
		"editable":      true,
		"graphTooltip":  1,
		"schemaVersion": 41,
		"version":       1,
		"refresh":       "10s",
		"time":          map[string]any{"from": "now-30m", "to": "now"},
		"timezone":      "browser",
		"links":         []any{},
		"templating": map[string]any{"list": []any{map[string]any{
			"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
			"current": map[string]any{"text": "Prometheus", "value": "prometheus"}, "hide": 0, "refresh": 1, "regex": "", "options": []any{}}}},
		"annotations": map[string]any{"list": []any{
			map[string]any{"builtIn": 1, "datasource": map[string]any{"type": "grafana", "uid": "-- Grafana --"},
				"enable": true, "hide": true, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"},
			map[string]any{"name": "Config changes", "datasource": dataSource, "enable": true, "hide": false,
				"iconColor": "orange", "expr": configChanges, "titleFormat": "config generation changed", "step": "15s"},
		}},
		"panels": panels,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func grid(x, y, w, h int) map[string]int { return map[string]int{"x": x, "y": y, "w": w, "h": h} }

func panelJSON(id int, p panelSpec, pos map[string]int) map[string]any {
	var targets []any
	for i, t := range p.targets {
		targets = append(targets, map[string]any{"refId": string(rune('A' + i)), "datasource": dataSource,
			"expr": t.expr, "legendFormat": t.legend, "range": true, "editorMode": "code"})
	}
	out := map[string]any{"id": id, "title": p.title, "description": p.description, "datasource": dataSource,
		"gridPos": pos, "targets": targets}
	if p.stat {
		out["type"] = "stat"
		out["fieldConfig"] = map[string]any{"defaults": map[string]any{"unit": p.unit}, "overrides": []any{}}
		out["options"] = map[string]any{"colorMode": "value", "graphMode": "area", "textMode": "auto",
			"justifyMode": "auto", "orientation": "auto", "wideLayout": true, "showPercentChange": false,
			"percentChangeColorMode": "standard",
			"reduceOptions":          map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false}}
		return out
	}
	out["type"] = "timeseries"
	defaults := map[string]any{"unit": p.unit,
		"custom": map[string]any{"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never", "spanNulls": false}}
	if !p.signed {
		defaults["min"] = 0
	}
	out["fieldConfig"] = map[string]any{"defaults": defaults, "overrides": []any{}}
	out["options"] = map[string]any{
		"legend":  map[string]any{"displayMode": "list", "placement": "bottom", "showLegend": true, "calcs": []any{}},
		"tooltip": map[string]any{"mode": "multi", "sort": "desc"}}
	return out
}

// TestDashboardIsGenerated: inferrail.json is what the panel table
// renders (-update rewrites it).
func TestDashboardIsGenerated(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("inferrail.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("inferrail.json")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("inferrail.json is not what the panel table renders (run go test ./dashboards -run TestDashboardIsGenerated -update; -want +got):\n%s", diff)
	}
}

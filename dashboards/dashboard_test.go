package dashboards

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/procs"
	"github.com/prometheus/prometheus/promql/parser"
)

// dashboardJSON is the part of Grafana's dashboard model the tests read.
type dashboardJSON struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name       string          `json:"name"`
			Datasource *dataSourceJSON `json:"datasource"`
			Expr       string          `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
	Panels []panelJSONModel `json:"panels"`
}

type dataSourceJSON struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panelJSONModel struct {
	ID          int                      `json:"id"`
	Type        string                   `json:"type"`
	Title       string                   `json:"title"`
	Description string                   `json:"description"`
	Datasource  *dataSourceJSON          `json:"datasource"`
	GridPos     struct{ X, Y, W, H int } `json:"gridPos"`
	Targets     []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource *dataSourceJSON `json:"datasource"`
	} `json:"targets"`
}

// A query is one PromQL expression of the dashboard and where it is.
type query struct{ where, expr string }

func loadDashboard(t *testing.T) *dashboardJSON {
	t.Helper()
	var d dashboardJSON
	if err := json.Unmarshal(JSON, &d); err != nil {
		t.Fatalf("inferrail.json: %v", err)
	}
	return &d
}

// queries are every panel target's expression and every annotation's.
func (d *dashboardJSON) queries() []query {
	var qs []query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, query{p.Title + "/" + tg.RefID, tg.Expr})
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			qs = append(qs, query{"annotation " + a.Name, a.Expr})
		}
	}
	return qs
}

// expand replaces the Grafana variables a query may hold with what Grafana
// would send: $__rate_interval with window (a PromQL duration).
func expand(expr, window string) string {
	return strings.ReplaceAll(expr, "$__rate_interval", window)
}

var promql = parser.NewParser(parser.Options{})

// metricNames parses expr and returns the metric names its selectors
// read, sorted and without repeats; a selector without a name is an error.
func metricNames(expr string) ([]string, parser.Expr, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	var missing error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			if name == "" {
				missing = errors.New("a selector without a metric name")
			}
			names = append(names, name)
		}
		return nil
	})
	if missing != nil {
		return nil, nil, missing
	}
	sort.Strings(names)
	return slices.Compact(names), e, nil
}

// TestMetricNames: the name extraction the checks rely on finds every
// selector, inside functions, aggregations, binary operations and
// subqueries, and refuses what it cannot check.
func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []string
		bad        bool
	}{
		{"plain", "up", []string{"up"}, false},
		{"colons", "sum by (replica) (vllm:num_requests_running)", []string{"vllm:num_requests_running"}, false},
		{"histogram", "histogram_quantile(0.99, sum by (le) (rate(a_bucket[1m])))", []string{"a_bucket"}, false},
		{"binary", "sum(rate(b_total[1m])) / sum(rate(a_total[1m])) or c * 0", []string{"a_total", "b_total", "c"}, false},
		{"subquery", "changes(max(g)[1m:15s]) > 0", []string{"g"}, false},
		{"repeated", "x / x", []string{"x"}, false},
		{"nameless", `{job="gateway"}`, nil, true},
		{"unparsable", "sum by (replica (x)", nil, true},
		{"grafana variable left", "rate(x[$__rate_interval])", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := metricNames(tc.expr)
			if tc.bad {
				if err == nil {
					t.Fatalf("metricNames(%q) = %v, want an error", tc.expr, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("metricNames(%q) = %v, %v; want %v", tc.expr, got, err, tc.want)
			}
		})
	}
}

// TestDashboardShape: the dashboard is one Grafana can import and an
// operator can read: unique ids and titles, a description on every panel,
// panels on a grid that do not overlap, every query on the data source
// variable, and that variable choosing among Prometheus data sources.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.UID != "inferrail" || d.Title == "" {
		t.Errorf("uid %q, title %q; want uid inferrail and a title", d.UID, d.Title)
	}
	if len(d.Templating.List) != 1 || d.Templating.List[0].Name != "datasource" ||
		d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Errorf("templating %+v; want one datasource variable over prometheus data sources", d.Templating.List)
	}
	ids, titles := map[int]bool{}, map[string]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if ids[p.ID] || titles[p.Title] || p.Title == "" {
			t.Errorf("panel %d %q: id or title empty or used twice", p.ID, p.Title)
		}
		ids[p.ID], titles[p.Title] = true, true
		g := p.GridPos
		if g.X < 0 || g.W <= 0 || g.X+g.W > 24 || g.H <= 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Description == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q: no description or no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] {
				t.Errorf("panel %q: refId %s used twice", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			for _, ds := range []*dataSourceJSON{p.Datasource, tg.Datasource} {
				if ds == nil || *ds != (dataSourceJSON{"prometheus", "${datasource}"}) {
					t.Errorf("panel %q/%s: data source %+v, want the ${datasource} variable", p.Title, tg.RefID, ds)
				}
			}
		}
	}
}

// TestQueriesParse: every query of the dashboard parses with Prometheus's
// own parser once Grafana's variables are expanded, leaves no variable
// unexpanded, and gives an instant vector Grafana can draw.
func TestQueriesParse(t *testing.T) {
	qs := loadDashboard(t).queries()
	if len(qs) < 30 {
		t.Fatalf("%d queries; the dashboard lost its panels", len(qs))
	}
	for _, q := range qs {
		names, e, err := metricNames(expand(q.expr, "1m"))
		if err != nil {
			t.Errorf("%s: %s: %v", q.where, q.expr, err)
			continue
		}
		if e.Type() != parser.ValueTypeVector {
			t.Errorf("%s: %s is a %s, not an instant vector", q.where, q.expr, e.Type())
		}
		if len(names) == 0 {
			t.Errorf("%s: %s reads no metric", q.where, q.expr)
		}
	}
}

// TestDashboardCoversTheSpec: the dashboard reads what the spec's
// dashboard shows, by the metric each part comes from.
func TestDashboardCoversTheSpec(t *testing.T) {
	used := map[string]bool{}
	for _, q := range loadDashboard(t).queries() {
		names, _, err := metricNames(expand(q.expr, "1m"))
		if err != nil {
			continue // TestQueriesParse reports it
		}
		for _, n := range names {
			used[n] = true
		}
	}
	for _, c := range []struct{ what, metric string }{
		{"TTFT per replica and policy from the gateway", "inferrail_ttft_seconds_bucket"},
		{"TTFT per replica from the engines", "vllm:time_to_first_token_seconds_bucket"},
		{"requests in flight", "inferrail_replica_in_flight"},
		{"engine queues", "vllm:num_requests_waiting"},
		{"engine KV usage", "vllm:kv_cache_usage_perc"},
		{"traffic share per policy", "inferrail_request_duration_seconds_count"},
		{"predicted hit rate", "inferrail_predicted_cached_tokens_total"},
		{"engines' hit rate", "vllm:prefix_cache_hits_total"},
		{"decision time", "inferrail_routing_decision_seconds_bucket"},
		{"retries", "inferrail_upstream_retries_total"},
		{"ejections", "inferrail_ejections_total"},
		{"errors", "inferrail_request_errors_total"},
		{"tokenization outcomes", "inferrail_tokenized_requests_total"},
		{"tokenization time", "inferrail_tokenize_seconds_bucket"},
		{"index blocks per replica", "inferrail_replica_index_blocks"},
		{"estimated TTFT", "inferrail_estimated_ttft_seconds_sum"},
		{"queued prefill", "inferrail_replica_queued_prefill_seconds"},
		{"load guards", "inferrail_routing_guards_total"},
		{"steering", "inferrail_routing_steered_total"},
		{"config generation", "inferrail_config_generation"},
		{"config reloads", "inferrail_config_reloads_total"},
		{"splits", "inferrail_model_policy_percent"},
		{"shadow agreement", "inferrail_shadow_decisions_total"},
		{"shadow estimated gain", "inferrail_shadow_estimated_ttft_seconds_total"},
		{"shadow drops", "inferrail_shadow_dropped_total"},
	} {
		if !used[c.metric] {
			t.Errorf("no query shows %s (%s)", c.what, c.metric)
		}
	}
}

// exported is every series name on the live metrics pages of a gateway
// and a simulator after the scenario: what Prometheus would store.
func exported(t *testing.T, ctx context.Context) map[string]bool {
	t.Helper()
	f := startFleet(t, ctx)
	runW1(t, ctx, f, 24, 8)
	provoke(t, ctx, f)
	client := procs.AdminClient()
	defer client.CloseIdleConnections()
	names := map[string]bool{}
	for _, url := range []string{f.Gateway.AdminURL + "/metrics", f.Sims[0].URL + "/metrics"} {
		page, err := procs.ScrapePage(ctx, client, url)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page {
			names[s.Name] = true
		}
	}
	return names
}

// TestQueriesNameLiveMetrics: every metric a query reads is on the live
// page of the gateway or of a simulator (vLLM's names) once traffic and
// the events the panels show have happened; histograms are read through
// their _bucket, _sum and _count series, as Prometheus stores them.
func TestQueriesNameLiveMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a gateway and three simulators")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	live := exported(t, ctx)
	for _, q := range loadDashboard(t).queries() {
		names, _, err := metricNames(expand(q.expr, "1m"))
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		for _, n := range names {
			if !live[n] {
				t.Errorf("%s reads %s, which neither the gateway nor the simulator exports", q.where, n)
			}
		}
	}
}

package procs

import (
	"maps"
	"math"
	"strings"
	"testing"
)

func TestParsePage(t *testing.T) {
	page := `# HELP inferrail_replica_ejected 1 while passive ejection keeps the replica out of rotation.
# TYPE inferrail_replica_ejected gauge
inferrail_replica_ejected{replica="sim-1"} 0
inferrail_replica_ejected{replica="sim-2"} 1
inferrail_replica_ejected{replica="sim-20"} 1
inferrail_routing_decisions_total{model="m",policy="least_request",replica="sim-2"} 12
inferrail_routing_decisions_total{model="n",policy="least_request",replica="sim-2"} 3
inferrail_upstream_retries_total{model="m"} 4 1700000000000
odd{label="a b } c"} 2.5e+00
go_goroutines 17
`
	p, err := ParsePage(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"inferrail_replica_ejected", []string{Label("replica", "sim-2")}, 1},
		{"inferrail_replica_ejected", nil, 2},
		{"inferrail_routing_decisions_total", []string{Label("replica", "sim-2")}, 15},
		{"inferrail_routing_decisions_total", []string{Label("replica", "sim-2"), Label("model", "n")}, 3},
		{"inferrail_upstream_retries_total", nil, 4},
		{"odd", nil, 2.5},
		{"go_goroutines", nil, 17},
		{"missing", nil, 0},
	}
	for _, tt := range tests {
		if got := p.Sum(tt.name, tt.labels...); got != tt.want {
			t.Errorf("sum(%s, %v) = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
	if _, err := ParsePage(strings.NewReader("x{a=\"b\"} notanumber\n")); err == nil {
		t.Error("ParsePage accepted a value that is not a number")
	}
}

// Label values are read with the text format's escapes, commas and quotes
// inside them included, and histograms read the same whether the page types
// them or not.
func TestParsePageLabelsAndBuckets(t *testing.T) {
	page := `# TYPE typed_seconds histogram
typed_seconds_bucket{policy="kv_aware",le="1e-07"} 1
typed_seconds_bucket{policy="kv_aware",le="+Inf"} 3
typed_seconds_sum{policy="kv_aware"} 1e-06
typed_seconds_count{policy="kv_aware"} 3
untyped_seconds_bucket{model="m",le="1e-07"} 2
untyped_seconds_bucket{model="m",le="+Inf"} 5
requests_total{model="a,le=\"x\"",result="busy"} 1
requests_total{model="a\\b\nc",result="ok"} 2
requests_total{model="a"} 4
# TYPE rpc_seconds summary
rpc_seconds{quantile="0.5"} 0.25
rpc_seconds_sum 7
rpc_seconds_count 9
`
	p, err := ParsePage(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	inf := math.Inf(1)
	if got, want := p.Buckets("typed_seconds"), map[float64]float64{1e-07: 1, inf: 3}; !maps.Equal(got, want) {
		t.Errorf("typed buckets = %v, want %v", got, want)
	}
	if got, want := p.Buckets("untyped_seconds"), map[float64]float64{1e-07: 2, inf: 5}; !maps.Equal(got, want) {
		t.Errorf("untyped buckets = %v, want %v", got, want)
	}
	if got := p.Buckets("missing"); got != nil {
		t.Errorf("missing buckets = %v, want nil", got)
	}
	if got := p.Sum("typed_seconds_count"); got != 3 {
		t.Errorf("typed count = %v, want 3", got)
	}
	if got, want := p.ByLabel("requests_total", "result"), map[string]float64{"busy": 1, "ok": 2}; !maps.Equal(got, want) {
		t.Errorf("by result = %v, want %v", got, want)
	}
	if got, want := p.ByLabel("requests_total", "model"), map[string]float64{`a,le="x"`: 1, "a\\b\nc": 2, "a": 4}; !maps.Equal(got, want) {
		t.Errorf("by model = %v, want %v", got, want)
	}
	if got := p.Sum("requests_total", Label("model", `a,le="x"`)); got != 1 {
		t.Errorf("sum of the escaped model = %v, want 1", got)
	}
	if got := p.Sum("rpc_seconds", Label("quantile", "0.5")); got != 0.25 {
		t.Errorf("summary quantile = %v, want 0.25", got)
	}
	if got := p.Sum("rpc_seconds_count"); got != 9 {
		t.Errorf("summary count = %v, want 9", got)
	}
}

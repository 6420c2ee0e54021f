package gateway

import (
	"strings"
	"testing"
	"time"
)

// TestCheckPage: checkPage finds each kind of inconsistency, and none in
// pages that have none.
func TestCheckPage(t *testing.T) {
	const before = `# TYPE reqs_total counter
reqs_total{code="200"} 5
# TYPE lat_seconds histogram
lat_seconds_bucket{le="0.1"} 1
lat_seconds_bucket{le="1"} 3
lat_seconds_bucket{le="+Inf"} 4
lat_seconds_sum 2.5
lat_seconds_count 4
`
	prev, problems, err := checkPage([]byte(before), nil)
	if err != nil || len(problems) != 0 {
		t.Fatalf("first page: problems %v, error %v", problems, err)
	}
	tests := []struct {
		name string
		page string
		want string // a substring of the first problem; "" for none
	}{
		{"grown", strings.NewReplacer("} 5", "} 6", "+Inf\"} 4", "+Inf\"} 5", "_count 4", "_count 5").Replace(before), ""},
		{"same", before, ""},
		{"counter_backwards", strings.Replace(before, "} 5", "} 4", 1), "reqs_total{code=\"200\",} went from 5 to 4"},
		{"buckets_not_cumulative", strings.Replace(before, `le="1"} 3`, `le="1"} 0`, 1), "fewer than the bucket below"},
		{"count_not_inf", strings.Replace(before, "_count 4", "_count 7", 1), "_count 7, +Inf bucket 4"},
		{"count_backwards", strings.NewReplacer("+Inf\"} 4", "+Inf\"} 3", "_count 4", "_count 3").Replace(before), "went from 4 to 3"},
		{"new_series", before + "# TYPE other_total counter\nother_total 1\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, problems, err := checkPage([]byte(tt.page), prev)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.want == "" && len(problems) > 0:
				t.Errorf("problems %v, want none", problems)
			case tt.want != "" && (len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), tt.want)):
				t.Errorf("problems %v, want one with %q", problems, tt.want)
			}
		})
	}
	if _, _, err := checkPage([]byte("not a page {"), nil); err == nil {
		t.Error("a garbage page parsed")
	}
}

// TestGatewayStressScrape: gw-scrape at a small size: every stream
// completes, every page read parses and is consistent.
func TestGatewayStressScrape(t *testing.T) {
	c := testGatewayConfig(t)
	c.Scenarios = []string{ScenarioScrape}
	c.Scrape = ScrapeLoad{Streams: 50, MaxTokens: 8, Every: 10 * time.Millisecond}
	if err := Run(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	f := readGWResult(t, c.OutDir, ScenarioScrape).Scrape
	if f == nil {
		t.Fatal("gw-scrape: no figures")
	}
	if f.Completed != 50 || f.Errors != 0 || f.Scrapes < 2 || f.ScrapeErrors != 0 || f.Inconsistent != 0 || f.Series == 0 || f.RequestsCounted < 50 {
		t.Errorf("gw-scrape: %+v", f)
	}
	// The reference reader ran beside it on a simulator's page.
	if ref := f.Reference; ref.Scrapes < 2 || ref.ScrapeErrors != 0 || ref.PageBytes == 0 || ref.ScrapesPerSecond <= 0 {
		t.Errorf("gw-scrape reference: %+v", ref)
	}
}

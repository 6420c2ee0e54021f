package dashboards

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/procs"
	"go.yaml.in/yaml/v3"
)

// prometheusEnv names the Prometheus binary TestRealPrometheus runs; make
// dashboard-check sets it.
const prometheusEnv = "INFERRAIL_PROMETHEUS"

// scrapeEvery is the real Prometheus's scrape interval, and step the
// resolution the panels are queried at, as Grafana would on a short time
// range. rateInterval is what Grafana makes of $__rate_interval from them:
// the larger of step plus the scrape interval and four scrape intervals.
const (
	scrapeEvery  = time.Second
	step         = 2 * time.Second
	rateInterval = "4s"
)

// TestRealPrometheus: a real Prometheus scrapes the gateway and the
// simulators through a short W1 run and the scenario's events, and every
// query of the dashboard, asked of its HTTP API as Grafana asks it (a
// range query over the run), returns at least one series with a number in
// it. It runs only when INFERRAIL_PROMETHEUS names a prometheus binary
// (make dashboard-check).
func TestRealPrometheus(t *testing.T) {
	bin := os.Getenv(prometheusEnv)
	if bin == "" {
		t.Skip("SKIPPED: no real Prometheus; make dashboard-check runs this test with one (" + prometheusEnv + " names the binary)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	f := startFleet(t, ctx)
	prom := startPrometheus(t, ctx, bin, f)
	prom.waitUp(t, ctx, 1+len(f.Sims))
	start := time.Now()
	runW1(t, ctx, f, 120, 4)
	provoke(t, ctx, f)

	// A counter born with an event has a rate only from its second sample
	// on, so the queries are asked again, over a range that grows with
	// every scrape, until each answers or a minute has passed.
	qs := loadDashboard(t).queries()
	pending := map[string]string{} // where → why the last answer was not one
	for _, q := range qs {
		pending[q.where] = "not asked"
	}
	deadline := time.Now().Add(time.Minute)
	var end time.Time
	for len(pending) > 0 && time.Now().Before(deadline) {
		time.Sleep(scrapeEvery)
		end = time.Now()
		for _, q := range qs {
			if _, ok := pending[q.where]; !ok {
				continue
			}
			series, finite, err := prom.rangeQuery(ctx, expand(q.expr, rateInterval), start, end)
			switch {
			case err != nil:
				pending[q.where] = err.Error()
			case series == 0:
				pending[q.where] = "no series: " + q.expr
			case finite == 0:
				pending[q.where] = fmt.Sprintf("%d series, no number in them: %s", series, q.expr)
			default:
				delete(pending, q.where)
				t.Logf("%-45s %3d series, %5d numbers", q.where, series, finite)
			}
		}
	}
	for _, q := range qs {
		if why, ok := pending[q.where]; ok {
			t.Errorf("%s: %s", q.where, why)
		}
	}
	t.Logf("%d queries evaluated by %s over %v of W1 and events", len(qs), prom.version, end.Sub(start).Round(time.Second))
}

// prometheus is a real Prometheus child scraping the scenario's fleet.
type prometheus struct {
	url, version string
	client       *http.Client
}

// startPrometheus writes a config that scrapes the gateway's admin port
// (job gateway) and every simulator (job engines, each labelled with its
// replica name as the gateway calls it), starts bin on a free loopback
// port with its data in a temporary directory, and waits until it is
// ready. It stops when the test ends.
func startPrometheus(t *testing.T, ctx context.Context, bin string, f *harness.Fleet) *prometheus {
	t.Helper()
	dir := t.TempDir()
	var engines []map[string]any
	for i, s := range f.Sims {
		engines = append(engines, map[string]any{"targets": []string{strings.TrimPrefix(s.URL, "http://")},
			"labels": map[string]string{"replica": harness.SimID(i)}})
	}
	cfg := map[string]any{
		"global": map[string]string{"scrape_interval": scrapeEvery.String(), "scrape_timeout": scrapeEvery.String()},
		"scrape_configs": []any{
			map[string]any{"job_name": "gateway", "static_configs": []any{
				map[string]any{"targets": []string{strings.TrimPrefix(f.Gateway.AdminURL, "http://")}}}},
			map[string]any{"job_name": "engines", "static_configs": engines},
		},
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--config.file="+path, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	out := procs.NewTailBuffer(8 << 10)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("prometheus ignored SIGTERM for 30 s: %s", out.String())
		}
	})
	p := &prometheus{url: "http://" + addr, client: &http.Client{Timeout: 30 * time.Second}}
	t.Cleanup(p.client.CloseIdleConnections)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := p.client.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("prometheus exited: %v: %s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within a minute: %s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var info struct {
		Data struct {
			Version string `json:"version"`
		} `json:"data"`
	}
	if err := p.get(ctx, "/api/v1/status/buildinfo", nil, &info); err != nil {
		t.Fatal(err)
	}
	p.version = "Prometheus " + cmp.Or(info.Data.Version, "(version unknown)")
	return p
}

// waitUp waits until Prometheus has scraped n targets successfully.
func (p *prometheus) waitUp(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var up struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		err := p.get(ctx, "/api/v1/query", url.Values{"query": {"up == 1"}}, &up)
		if err == nil && len(up.Data.Result) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not see %d targets up within 30 s (last: %d up, %v)", n, len(up.Data.Result), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rangeQuery asks Prometheus for expr from start to end at step, and
// counts the series and the finite values among their points.
func (p *prometheus) rangeQuery(ctx context.Context, expr string, start, end time.Time) (series, finite int, err error) {
	var res struct {
		Data struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Values [][2]any `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	q := url.Values{"query": {expr}, "start": {unixText(start)}, "end": {unixText(end)}, "step": {step.String()}}
	if err := p.get(ctx, "/api/v1/query_range", q, &res); err != nil {
		return 0, 0, err
	}
	if res.Data.ResultType != "matrix" {
		return 0, 0, fmt.Errorf("result type %q, want matrix", res.Data.ResultType)
	}
	for _, s := range res.Data.Result {
		for _, v := range s.Values {
			text, _ := v[1].(string)
			if x, err := strconv.ParseFloat(text, 64); err == nil && !math.IsNaN(x) && !math.IsInf(x, 0) {
				finite++
			}
		}
	}
	return len(res.Data.Result), finite, nil
}

func unixText(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// get calls the HTTP API and decodes its answer's body into out; an
// answer whose status is not success is an error with Prometheus's
// message.
func (p *prometheus) get(ctx context.Context, path string, q url.Values, out any) error {
	u := p.url + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: status %d, %w", path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s: %s", path, body.Status, body.Error)
	}
	return json.Unmarshal(append(append([]byte(`{"data":`), body.Data...), '}'), out)
}

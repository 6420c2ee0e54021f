package compose

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/procs"
)

// TestRealPrometheusLoadsTheStackConfig: a real Prometheus starts with the
// stack's prometheus.yml (it refuses an invalid config at start) and,
// reading it itself, plans to scrape exactly the gateway's metrics port and
// the three simulators, each engine under its replica label. The hosts are
// the compose network's, so here every target is down; that is not
// checked. It runs only when INFERRAIL_PROMETHEUS names a prometheus binary
// (make dashboard-check).
func TestRealPrometheusLoadsTheStackConfig(t *testing.T) {
	bin := os.Getenv("INFERRAIL_PROMETHEUS")
	if bin == "" {
		t.Skip("SKIPPED: no real Prometheus; make dashboard-check runs this test with one (INFERRAIL_PROMETHEUS names the binary)")
	}
	src, _ := stackPrometheus(t, loadCompose(t))
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	out := procs.NewTailBuffer(8 << 10)
	cmd := exec.Command(bin, "--config.file="+src, "--storage.tsdb.path="+filepath.Join(t.TempDir(), "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port), "--log.level=error")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("prometheus: %v: %s", err, out.String())
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	var targets struct {
		Data struct {
			ActiveTargets []struct {
				ScrapeURL string            `json:"scrapeUrl"`
				Labels    map[string]string `json:"labels"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	deadline := time.Now().Add(time.Minute)
	for len(targets.Data.ActiveTargets) < 4 {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("prometheus refused %s: %v: %s", src, err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus listed %d targets within a minute: %s", len(targets.Data.ActiveTargets), out.String())
		}
		time.Sleep(200 * time.Millisecond)
		resp, err := client.Get(base + "/api/v1/targets?state=active")
		if err != nil {
			continue
		}
		if resp.StatusCode != http.StatusOK { // still starting: 503 in plain text
			resp.Body.Close()
			continue
		}
		err = json.NewDecoder(resp.Body).Decode(&targets)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("targets: %v", err)
		}
	}
	var got []string
	for _, tg := range targets.Data.ActiveTargets {
		got = append(got, tg.Labels["job"]+" "+tg.ScrapeURL+" "+tg.Labels["replica"])
	}
	slices.Sort(got)
	want := []string{
		"engines http://sim-1:8000/metrics sim-1",
		"engines http://sim-2:8000/metrics sim-2",
		"engines http://sim-3:8000/metrics sim-3",
		"gateway http://gateway:9090/metrics ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("prometheus scrapes\n%q\nwant\n%q", got, want)
	}
}

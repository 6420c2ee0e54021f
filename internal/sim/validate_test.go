package sim

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRequestLargerThanPoolIsRefused: should a request outgrow the KV
// cache (startup refuses such configs, so the engine is altered behind
// its back here), it gets a 400 rather than a place in the queue it would
// hold for good, and the requests after it are served.
func TestRequestLargerThanPoolIsRefused(t *testing.T) {
	cfg := zeroLatencyConfig()
	cfg.NumGPUBlocks, cfg.MaxModelLen = 64, 1008 // 63 usable blocks of 16
	srv, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.cfg.MaxModelLen, srv.engine.cfg.MaxModelLen = 1<<40, 1<<40
	url := serve(t, srv) + "/v1/completions"

	big := `{"model":"m","max_tokens":1,"prompt":"` + strings.Repeat("abc", 1100) + `"}`
	// A guard, not a measure: without the check the request never ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(big))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a request larger than the pool: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a request larger than the pool: status %d, want 400", resp.StatusCode)
	}
	if code, _, body := post(t, url, `{"model":"m","max_tokens":1,"prompt":"hi"}`); code != http.StatusOK {
		t.Errorf("the next request: %d %s", code, body)
	}
}

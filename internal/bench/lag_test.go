package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/workload"
)

// BenchmarkOpenLoopSendLag runs two seconds of the open-loop driver at 300
// req/s against a server that answers at once, and reports how late the
// requests were written against their schedule (Sent − Sched): the driver
// is meant to send every one within about 2 ms of it. It reports, not
// asserts: the machines it runs on are shared.
func BenchmarkOpenLoopSendLag(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, sseBody(2))
	}))
	defer srv.Close()
	client := NewLoadClient()
	defer client.CloseIdleConnections()
	reqs := workload.NewRequests(handRequests(600, time.Second/300))
	var lags []time.Duration
	for b.Loop() {
		outs := RunOpenLoop(b.Context(), time.Now().Add(10*time.Millisecond), reqs, OpenLoopOptions{URL: srv.URL, Client: client, Timeout: 10 * time.Second})
		for i := range outs {
			if !outs[i].OK() {
				b.Fatalf("request %d failed: %s", i, outs[i].String())
			}
			lags = append(lags, outs[i].Sent-outs[i].Sched)
		}
	}
	slices.Sort(lags)
	at := func(q float64) float64 { return lags[min(len(lags)-1, int(q*float64(len(lags))))].Seconds() * 1e3 }
	b.ReportMetric(at(0.5), "lag-p50-ms")
	b.ReportMetric(at(0.99), "lag-p99-ms")
	b.ReportMetric(lags[len(lags)-1].Seconds()*1e3, "lag-max-ms")
}

package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// BenchmarkMetricsPage renders the admin /metrics page of a gateway over
// 16 replicas that have all served traffic (every per-replica histogram
// and gauge live), against client_golang's own handler encoding the same
// families already gathered: the column pair says how much of a page is
// gathering the live series and how much the library's encoding.
func BenchmarkMetricsPage(b *testing.B) {
	sims := fleetOf(b, 16, true)
	cfg := testConfig(b, sims)
	g, err := New(cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	client := g.ClientHandler()
	for i := range 4 * len(sims) { // round robin: every replica serves some
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody(fmt.Sprint("hello ", i), "")))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		client.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	admin := g.AdminHandler()
	fams, err := g.registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	encodeOnly := promhttp.HandlerFor(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return fams, nil }), promhttp.HandlerOpts{})
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"page=gateway", admin}, {"page=encode_only", encodeOnly}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				r.Host = "127.0.0.1" // a loopback admin port without keys refuses example.com
				r.Header.Set("Accept", "text/plain;version=0.0.4")
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
				size = w.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/page")
		})
	}
}

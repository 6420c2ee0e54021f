package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkProxyChat sends small non-streamed chats through the gateway to
// one zero-latency simulator in the same process, for profiling the request
// path (go test -bench ProxyChat -cpuprofile cpu.out ./internal/gateway).
func BenchmarkProxyChat(b *testing.B) {
	sims := fleetOf(b, 1, true)
	gw := startGateway(b, testConfig(b, sims))
	body := chatBody("hello there", "")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

package plainproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTakesTurns: requests go to the upstreams in turn, with their method,
// path, body and the upstream's answer unchanged.
func TestTakesTurns(t *testing.T) {
	var urls []string
	for i := range 3 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Upstream", fmt.Sprint(i))
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RequestURI(), body)
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, urls) }()
	var got []string
	for i := range 6 {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/x?q=1", "text/plain", strings.NewReader(fmt.Sprint("body", i)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTeapot || string(b) != fmt.Sprintf("POST /v1/x?q=1 body%d", i) {
			t.Errorf("request %d: %d %q", i, resp.StatusCode, b)
		}
		got = append(got, resp.Header.Get("X-Upstream"))
	}
	if strings.Join(got, "") != "012012" {
		t.Errorf("upstreams in order %v, want 0 1 2 0 1 2", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestRefusesBadUpstreams(t *testing.T) {
	for _, ups := range [][]string{nil, {"127.0.0.1:80"}, {"http://"}} {
		if _, err := New(ups, 1); err == nil {
			t.Errorf("New(%q) accepted", ups)
		}
	}
}

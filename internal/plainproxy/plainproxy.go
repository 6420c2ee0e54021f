// Package plainproxy is the smallest useful HTTP reverse proxy net/http
// makes: the standard library's httputil.ReverseProxy taking turns over
// fixed upstreams, with no routing, health, limits or metrics. Benchmarks
// run it beside the gateway to tell the CPU a proxy hop costs on a machine
// from the CPU the gateway adds on top of it. It is not part of the product.
package plainproxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// New returns a handler that sends each request to the next of upstreams
// (base URLs such as http://127.0.0.1:8000) in turn, over keep-alive
// connections: as many idle ones per upstream as idlePerHost.
func New(upstreams []string, idlePerHost int) (http.Handler, error) {
	if len(upstreams) == 0 {
		return nil, errors.New("plainproxy: at least one upstream is required")
	}
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: idlePerHost,
		IdleConnTimeout:     90 * time.Second,
	}
	proxies := make([]*httputil.ReverseProxy, len(upstreams))
	for i, raw := range upstreams {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("plainproxy: upstream %q is not a base URL", raw)
		}
		p := httputil.NewSingleHostReverseProxy(u)
		p.Transport = transport
		proxies[i] = p
	}
	var next atomic.Uint64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxies[(next.Add(1)-1)%uint64(len(proxies))].ServeHTTP(w, r)
	}), nil
}

// Serve proxies ln's connections to upstreams until ctx ends, then closes
// the listener and waits up to a second for requests in progress.
func Serve(ctx context.Context, ln net.Listener, upstreams []string) error {
	h, err := New(upstreams, idlePerHost)
	if err != nil {
		return err
	}
	return serve(ctx, ln, h)
}

// idlePerHost is how many idle connections Serve keeps to each upstream:
// room for the open loops of the benchmarks that run it.
const idlePerHost = 1024

func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Command runs `plain-proxy --listen ADDR --upstreams URL[,URL...]` until
// ctx ends: what `inferrail-bench plain-proxy` does.
func Command(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("plain-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	upstreams := fs.String("upstreams", "", "comma-separated base URLs to take turns over")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("plain-proxy: unexpected argument %q", fs.Arg(0))
	}
	ups := strings.Split(*upstreams, ",")
	if *upstreams == "" {
		ups = nil
	}
	h, err := New(ups, idlePerHost)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	return serve(ctx, ln, h)
}

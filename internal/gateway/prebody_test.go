package gateway

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/sim"
)

// TestRefusalsBeforeTheBodyDoNotWaitForIt: a request refused before its
// body is read is answered though the body never comes whole: a client
// that sends headers and part of a body held its connection, unanswered,
// for as long as it liked. So is one that a route answers without reading
// a body (the model list, /health, a CORS preflight): those were held
// past every timeout, each connection a goroutine and a descriptor.
func TestRefusalsBeforeTheBodyDoNotWaitForIt(t *testing.T) {
	secret, key := newKey("k", nil)
	cfg, _ := keyedConfig(t, 1, key)
	gw := startGateway(t, cfg)
	auth := "Authorization: Bearer " + secret + "\r\n"
	// A body limit under the 1,000 bytes the requests below announce.
	smallCfg := testConfig(t, fleetOf(t, 1, true))
	smallCfg.Server.MaxBodyBytes = 500
	small := startGateway(t, smallCfg)
	tests := []struct {
		name, addr, head string
		want             int
		host             string // "" for localhost
	}{
		{"no_key", gw.url, "POST /v1/chat/completions HTTP/1.1\r\n", http.StatusUnauthorized, ""},
		{"unknown_path", gw.url, "POST /v1/nope HTTP/1.1\r\n" + auth, http.StatusNotFound, ""},
		{"wrong_method", gw.url, "PUT /v1/chat/completions HTTP/1.1\r\n" + auth, http.StatusMethodNotAllowed, ""},
		{"bad_priority", gw.url, "POST /v1/chat/completions HTTP/1.1\r\n" + auth + "X-Inferrail-Priority: bogus\r\n", http.StatusBadRequest, ""},
		{"admin_unknown_path", gw.admin, "POST /admin/nope HTTP/1.1\r\n", http.StatusNotFound, ""},
		{"admin_foreign_host", gw.admin, "PATCH /admin/config HTTP/1.1\r\n", http.StatusForbidden, "evil.example"},
		{"over_the_limit", small.url, "POST /v1/chat/completions HTTP/1.1\r\n", http.StatusRequestEntityTooLarge, ""},
		{"models", gw.url, "GET /v1/models HTTP/1.1\r\n" + auth, http.StatusOK, ""},
		{"models_head", gw.url, "HEAD /v1/models HTTP/1.1\r\n" + auth, http.StatusOK, ""},
		{"health", gw.url, "GET /health HTTP/1.1\r\n", http.StatusOK, ""},
		{"health_head", gw.url, "HEAD /health HTTP/1.1\r\n", http.StatusOK, ""},
		{"preflight", gw.url, "OPTIONS /v1/chat/completions HTTP/1.1\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n", http.StatusNoContent, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(tt.addr, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// 20 bytes of 1,000, and then nothing.
			host := cmp.Or(tt.host, "localhost")
			req := tt.head + "Host: " + host + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + `{"model":"sim","mess`
			if _, err := conn.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer within 5 s: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}

// TestRefusedWholeBodiesKeepTheConnection: a refusal given before the body
// is read, or the answer of a route that reads none, still drains a body
// the client sent whole (up to net/http's 256 KiB), so the connection
// serves the next request, as an engine's does.
func TestRefusedWholeBodiesKeepTheConnection(t *testing.T) {
	gw := startGateway(t, testConfig(t, fleetOf(t, 1, true)))
	routes := []struct {
		name, line string
		want       int
	}{
		{"refused", "POST /v1/nope", http.StatusNotFound},
		{"models", "GET /v1/models", http.StatusOK},
		{"health", "GET /health", http.StatusOK},
	}
	for _, rt := range routes {
		for _, size := range []int{100, 5000, 200 << 10} {
			t.Run(rt.name+"/"+strconv.Itoa(size), func(t *testing.T) {
				conn, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				body := `{"model":"sim","prompt":"` + strings.Repeat("a", size) + `"}`
				req := fmt.Sprintf("%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", rt.line, len(body), body)
				if _, err := conn.Write([]byte(req + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
					t.Fatal(err)
				}
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(conn)
				for _, want := range []int{rt.want, http.StatusOK} {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("waiting for the %d: %v", want, err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != want {
						t.Errorf("status %d, want %d", resp.StatusCode, want)
					}
				}
			})
		}
	}
}

// TestHalfClosedClientIsCut: a client that closes its sending side after a
// whole request is taken as gone (net/http cancels the request), and the
// gateway stops waiting on the engine; it then cuts the connection rather
// than let net/http send an empty 200, which the client, still reading,
// would take for a successful, empty completion.
func TestHalfClosedClientIsCut(t *testing.T) {
	sims := fleetOf(t, 1, true)
	sims[0].SetFault(sim.Fault{Kind: sim.FaultHang, SparesHealth: true})
	gw := startGateway(t, testConfig(t, sims))
	for _, stream := range []string{"", `,"stream":true`} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		body := chatBody("half closed", stream)
		req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(conn)
		conn.Close()
		if len(got) > 0 || err != nil && !isConnReset(err) {
			t.Errorf("stream %q: read %q, %v; want the connection cut with nothing sent", stream, got, err)
		}
	}
	waitFor(t, "no request in flight", 5*time.Second, func() bool { return gw.g.fleet.Snapshot().Get("sim-1").InFlight() == 0 })
}

// isConnReset reports whether err is a connection reset by its peer.
func isConnReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

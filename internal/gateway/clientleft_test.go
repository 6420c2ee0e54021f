package gateway

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestClientLeavesMidUpload: a client that closes its connection while
// sending its body is counted as cancelled and a disconnect, not as a bad
// request the gateway answered (found by a review: 4xx alerts fired for
// clients that gave up uploading); a body that breaks the framing is
// still a 400.
func TestClientLeavesMidUpload(t *testing.T) {
	gw := startGateway(t, testConfig(t, fleetOf(t, 1, true)))
	before := scrape(t, gw.admin)
	const left = 4
	body := `{"model":"sim","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`
	for range left {
		conn, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10])
		time.Sleep(50 * time.Millisecond) // the handler is reading the body
		conn.Close()
	}
	resp := rawRequest(t, gw.url, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("a bad chunk size: %d, want 400", resp.StatusCode)
	}
	delta := func(page, family, labels string) float64 {
		return countedWith(page, family, labels) - countedWith(before, family, labels)
	}
	var after string
	deadline := time.Now().Add(5 * time.Second)
	for {
		after = scrape(t, gw.admin)
		if delta(after, "inferrail_client_disconnects_total", "") >= left || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := delta(after, "inferrail_client_disconnects_total", ""); got != left {
		t.Errorf("%v disconnects counted, want %d", got, left)
	}
	if got := delta(after, "inferrail_requests_total", `status="cancelled"`); got != left {
		t.Errorf("%v requests counted cancelled, want %d", got, left)
	}
	if got := delta(after, "inferrail_request_errors_total", `reason="bad_request"`); got != 1 {
		t.Errorf("%v bad requests counted, want 1 (the bad chunk size)", got)
	}
}

// TestAdminOptionsStar: "OPTIONS *" on the admin port is answered by its
// routes (a JSON 404), not net/http's bare 200 past the admin key guard.
func TestAdminOptionsStar(t *testing.T) {
	gw := startGateway(t, testConfig(t, fleetOf(t, 1, true)))
	resp := rawRequest(t, gw.admin, "OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !strings.Contains(string(body), "not found") {
		t.Errorf("OPTIONS * on the admin port: %d %s, want a 404", resp.StatusCode, body)
	}
}

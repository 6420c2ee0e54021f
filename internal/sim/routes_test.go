package sim

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestRoutesMatchTheDecodedPathExactly: as vLLM's router, a path is
// matched as decoded, never cleaned and redirected (a POST client would
// follow a redirect with its body); a known path with another method is a
// 405 naming the one it takes; anything else is vLLM's 404.
func TestRoutesMatchTheDecodedPathExactly(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	addr := strings.TrimPrefix(url, "http://")
	tests := []struct {
		method, target string
		status         int
		allow          string
	}{
		{"GET", "/v1/models", 200, ""},
		{"HEAD", "/v1/models", 200, ""},
		{"GET", "//v1/models", 404, ""},
		{"GET", "/v1/./models", 404, ""},
		{"GET", "/v1/../v1/models", 404, ""},
		{"GET", "/v1/models/", 404, ""},
		{"POST", "/v1/chat%2Fcompletions", 200, ""},
		{"GET", "/v1/chat/completions", 405, "POST"},
		{"POST", "/v1/models", 405, "GET"},
		{"GET", "/metrics/anything", 200, ""},
		{"GET", "/nope", 404, ""},
		{"POST", "/v1/chat/completions/render", 200, ""},
		{"GET", "/v1/completions/render", 405, "POST"},
		// vLLM mounts derender beside render; no router asks for it.
		{"POST", "/v1/chat/completions/derender", 404, ""},
	}
	for _, tt := range tests {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
		req := tt.method + " " + tt.target + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
		if tt.method == "POST" {
			req += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
		} else {
			req += "\r\n"
		}
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: tt.method})
		if err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.target, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != tt.status || resp.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: %d (Allow %q) %s; want %d (Allow %q)", tt.method, tt.target, resp.StatusCode, resp.Header.Get("Allow"), got, tt.status, tt.allow)
		}
		if tt.status == 404 && !strings.HasPrefix(string(got), `{"error":{"message":"Not Found"`) {
			t.Errorf("%s %s: 404 body %s, want vLLM's", tt.method, tt.target, got)
		}
	}
}

// TestByteOrderMarkIsSkipped: a JSON body behind UTF-8's byte order mark
// is read, as Python's json.loads of bytes reads it.
func TestByteOrderMarkIsSkipped(t *testing.T) {
	_, url := startServer(t, zeroLatencyConfig())
	if code, _, body := post(t, url+"/v1/chat/completions", "\ufeff"+`{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`); code != http.StatusOK {
		t.Errorf("chat behind a byte order mark: %d %s", code, body)
	}
}

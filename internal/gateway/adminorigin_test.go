package gateway

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/inferrail/inferrail/internal/auth"
)

func TestLocalHost(t *testing.T) {
	for _, tt := range []struct {
		host string
		want bool
	}{
		{"", true},
		{"127.0.0.1:9090", true},
		{"127.0.0.1", true},
		{"[::1]:9090", true},
		{"10.0.0.7:9090", true}, // an address cannot be rebound
		{"localhost:9090", true},
		{"LocalHost.:9090", true},
		{"localhost", true},
		{"evil.example:9090", false},
		{"localhost.evil.example:9090", false},
		{"127.0.0.1.nip.io:9090", false},
		{"x", false},
	} {
		if got := localHost(tt.host); got != tt.want {
			t.Errorf("localHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}

// adminRequest sends method path to the admin port with the Host and
// Origin given ("" sends none) and returns the status.
func adminRequest(t *testing.T, admin, method, path, host, origin, body string, header ...string) int {
	t.Helper()
	req, err := http.NewRequest(method, admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	req.Header.Set("Content-Type", "text/plain") // a form's, which needs no preflight
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestAdminRefusesBrowsers: a web page can reach a loopback admin port
// from the browser of someone on the machine, by a cross-site form or by a
// host name rebound to 127.0.0.1. Neither reads, patches or reloads the
// config; programs that name the port as they reach it still do.
func TestAdminRefusesBrowsers(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	self := strings.TrimPrefix(gw.admin, "http://")
	port := self[strings.LastIndex(self, ":"):]
	evil := "evil.example" + port
	steal := `{"replicas":[{"id":"sim-1","url":"http://127.0.0.1:9","models":["` + testModel + `"]}]}`
	for _, tt := range []struct {
		name, method, path, host, origin, body string
		want                                   int
	}{
		{"curl", http.MethodGet, "/admin/config", "", "", "", 200},
		{"by localhost", http.MethodGet, "/admin/replicas", "localhost" + port, "", "", 200},
		{"a page of this origin", http.MethodGet, "/metrics", "", "http://" + self, "", 200},
		{"rebound name reads", http.MethodGet, "/admin/config", evil, "", "", 403},
		{"rebound name patches", http.MethodPatch, "/admin/config", evil, "http://" + evil, steal, 403},
		{"cross-site form reloads", http.MethodPost, "/admin/reload", "", "http://evil.example", "", 403},
		{"cross-site form patches", http.MethodPatch, "/admin/config", "", "null", steal, 403},
	} {
		if got := adminRequest(t, gw.admin, tt.method, tt.path, tt.host, tt.origin, tt.body); got != tt.want {
			t.Errorf("%s: %s %s: %d, want %d", tt.name, tt.method, tt.path, got, tt.want)
		}
	}
	if _, cfg := get(t, gw.admin+"/admin/config"); !strings.Contains(cfg, sims[0].URL()) || strings.Contains(cfg, "127.0.0.1:9\"") {
		t.Errorf("the refused patches changed the replicas: %s", cfg)
	}
	page := scrape(t, gw.admin)
	for reason, want := range map[string]float64{failForeignHost: 2, failCrossOrigin: 2} {
		if got := metricValue(page, `inferrail_auth_failures_total{port="admin",reason="`+reason+`"}`); got != want {
			t.Errorf("admin %s failures %v, want %v", reason, got, want)
		}
	}
}

// TestAdminKeysTakeAnyHost: with admin keys a page cannot answer the
// port's challenge, so any name reaches it (a name the port is published
// under, say); a page of another origin is still refused.
func TestAdminKeysTakeAnyHost(t *testing.T) {
	secret, key := newKey("ops", nil)
	cfg := testConfig(t, fleetOf(t, 1, true))
	cfg.Auth.AdminKeysFile = filepath.Join(t.TempDir(), "admin.yaml")
	writeKeys(t, cfg.Auth.AdminKeysFile, key)
	gw := startGateway(t, cfg)
	if got := adminRequest(t, gw.admin, http.MethodGet, "/admin/config", "gateway.internal:9090", "", "", bearer(secret)...); got != 200 {
		t.Errorf("a named host with the admin key: %d, want 200", got)
	}
	if got := adminRequest(t, gw.admin, http.MethodPost, "/admin/reload", "", "http://evil.example", "", bearer(secret)...); got != 403 {
		t.Errorf("another origin with the admin key: %d, want 403", got)
	}
}

// TestExplainKeyGrant: /admin/explain?key= says the client port would
// refuse a model the key may not use, and admits the one it may.
func TestExplainKeyGrant(t *testing.T) {
	_, key := newKey("narrow", func(k *auth.Key) { k.Models = []string{otherModel} })
	cfg, _ := keyedConfig(t, 1, key)
	gw := startGateway(t, cfg)
	for model, want := range map[string]string{testModel: "refuse/model_not_allowed", otherModel: "admit/"} {
		v := explainAs(t, gw, "narrow", `{"model":"`+model+`","prompt":"hello","max_tokens":1}`)
		if got := v.Verdict + "/" + v.Reason; got != want {
			t.Errorf("explain as narrow for %s: %s, want %s", model, got, want)
		}
	}
}

// TestAdminNamedLoopback: an admin_listen that names its host (here in
// capitals, or a name of the machine's own) and listens on loopback is a
// loopback port: a rebound name is refused there as on 127.0.0.1, while
// the configured name and localhost pass (found by a review: any name but
// "localhost" turned the check off).
func TestAdminNamedLoopback(t *testing.T) {
	for _, listen := range []string{"LOCALHOST:9090", "gw-box:9090"} {
		t.Run(strings.Split(listen, ":")[0], func(t *testing.T) {
			cfg := testConfig(t, fleetOf(t, 1, true))
			cfg.Server.AdminListen = listen // the test's own listener is 127.0.0.1
			gw := startGateway(t, cfg)
			self := strings.TrimPrefix(gw.admin, "http://")
			port := self[strings.LastIndex(self, ":"):]
			for host, want := range map[string]int{
				"evil.example" + port: 403,
				"localhost" + port:    200,
				"GW-BOX." + port:      map[bool]int{true: 200, false: 403}[strings.HasPrefix(listen, "gw-box")],
				"":                    200,
			} {
				if got := adminRequest(t, gw.admin, http.MethodGet, "/admin/config", host, "", ""); got != want {
					t.Errorf("Host %q: %d, want %d", host, got, want)
				}
			}
		})
	}
}

func TestListenName(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:9090": "", "[::1]:9090": "", ":9090": "", "localhost:9090": "", "LocalHost.:9090": "",
		"gw-box:9090": "gw-box", "admin.internal.:9090": "admin.internal",
	} {
		if got := listenName(addr); got != want {
			t.Errorf("listenName(%q) = %q, want %q", addr, got, want)
		}
	}
}

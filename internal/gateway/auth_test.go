package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/syncbuf"
)

// otherModel is a second model the test fleet lists, for keys that may
// use one model and not the other. The simulators do not serve it; no
// request for it reaches them in these tests.
const otherModel = "other/model"

// newKey makes a key named name, with its secret.
func newKey(name string, edit func(*auth.Key)) (string, *auth.Key) {
	secret, h := auth.NewSecret()
	k := &auth.Key{Name: name, Hash: h}
	if edit != nil {
		edit(k)
	}
	return secret, k
}

// writeKeys replaces the keys file at path, by rename, as an operator's
// tooling would.
func writeKeys(t testing.TB, path string, keys ...*auth.Key) {
	t.Helper()
	writeFile(t, path, auth.FormatFile(keys))
}

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// keyedConfig is testConfig with otherModel listed and keys read from a
// file in a new directory, whose path it returns.
func keyedConfig(t testing.TB, n int, keys ...*auth.Key) (*config.Config, string) {
	t.Helper()
	cfg := testConfig(t, fleetOf(t, n, true))
	cfg.Models = append(cfg.Models, config.Model{Name: otherModel, BlockSize: 16})
	for i := range cfg.Replicas {
		cfg.Replicas[i].Models = append(cfg.Replicas[i].Models, otherModel)
	}
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, keys...)
	cfg.Auth.KeysFile = path
	cfg.Auth.ReloadInterval = config.Duration(20 * time.Millisecond)
	return cfg, path
}

func bearer(secret string) []string { return []string{"Authorization", "Bearer " + secret} }

// get sends a GET with the given header pairs and returns the response
// with its body read.
func get(t testing.TB, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// apiError is an error body in OpenAI's shape.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func decodeError(t testing.TB, body string) apiError {
	t.Helper()
	var e apiError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("the body is not an error in OpenAI's shape (%v): %s", err, body)
	}
	return e
}

// metricValue returns the value of the series line that starts with
// series on a metrics page, or -1.
func metricValue(page, series string) float64 {
	for _, l := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(l, series+" "); ok {
			var v float64
			fmt.Sscan(rest, &v)
			return v
		}
	}
	return -1
}

func TestAPIKeys(t *testing.T) {
	fullSecret, full := newKey("full", nil)
	otherSecret, other := newKey("other-only", func(k *auth.Key) { k.Models = []string{otherModel} })
	cfg, _ := keyedConfig(t, 1, full, other)
	gw := startGateway(t, cfg)

	tests := []struct {
		name   string
		model  string
		header []string
		status int
		reason string // the auth failure counted; "" for none
		code   string
	}{
		{"good_key", "sim", bearer(fullSecret), 200, "", ""},
		{"scheme_in_lower_case", testModel, []string{"Authorization", "bearer " + fullSecret}, 200, "", ""},
		{"missing", "sim", nil, 401, "missing", "invalid_api_key"},
		{"empty", "sim", []string{"Authorization", ""}, 401, "missing", "invalid_api_key"},
		{"wrong_key", "sim", bearer("irk-not-a-key-of-this-gateway"), 401, "unknown_key", "invalid_api_key"},
		{"key_of_another_shape", "sim", bearer("sk-proj-abc"), 401, "unknown_key", "invalid_api_key"},
		{"basic_auth", "sim", []string{"Authorization", "Basic dXNlcjpwYXNz"}, 401, "malformed", "invalid_api_key"},
		{"secret_without_scheme", "sim", []string{"Authorization", fullSecret}, 401, "malformed", "invalid_api_key"},
		{"two_headers", "sim", []string{"Authorization", "Bearer " + fullSecret, "Authorization", "Bearer " + fullSecret}, 401, "malformed", "invalid_api_key"},
		{"long_token", "sim", bearer(strings.Repeat("a", 64<<10)), 401, "malformed", "invalid_api_key"},
		{"model_not_allowed", "sim", bearer(otherSecret), 403, "model_not_allowed", "model_not_allowed"},
	}
	counts := map[string]int{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"` + tc.model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
			req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-Id", "client-"+tc.name)
			for i := 0; i+1 < len(tc.header); i += 2 {
				req.Header.Add(tc.header[i], tc.header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.reason != "" {
				counts[tc.reason]++
			}
			if tc.status == 200 {
				return
			}
			e := decodeError(t, string(b))
			if e.Error.Code != tc.code || e.Error.Type != "invalid_request_error" {
				t.Errorf("error type %q code %q, want invalid_request_error %q", e.Error.Type, e.Error.Code, tc.code)
			}
			if strings.Contains(string(b), fullSecret) || strings.Contains(string(b), "aaaa") {
				t.Errorf("the error quotes the credential: %s", b)
			}
			if tc.status == 401 && resp.Header.Get("Www-Authenticate") != `Bearer realm="inferrail"` {
				t.Errorf("WWW-Authenticate %q", resp.Header.Get("Www-Authenticate"))
			}
			if got := resp.Header.Get("X-Request-Id"); got != "client-"+tc.name {
				t.Errorf("x-request-id %q on the refusal, want the client's", got)
			}
		})
	}
	page := scrape(t, gw.admin)
	for reason, n := range counts {
		if got := metricValue(page, `inferrail_auth_failures_total{port="client",reason="`+reason+`"}`); got != float64(n) {
			t.Errorf("auth failures for %s: %v, want %d", reason, got, n)
		}
	}
	if got := metricValue(page, `inferrail_auth_keys{file="keys"}`); got != 2 {
		t.Errorf("inferrail_auth_keys %v, want 2", got)
	}

	t.Run("health_needs_no_key", func(t *testing.T) {
		if resp, _ := get(t, gw.url+"/health"); resp.StatusCode != 200 {
			t.Errorf("/health without a key: %d", resp.StatusCode)
		}
	})
	t.Run("unknown_path_asks_for_a_key_first", func(t *testing.T) {
		if resp, _ := get(t, gw.url+"/v2/secret"); resp.StatusCode != 401 {
			t.Errorf("an unknown path without a key: %d, want 401", resp.StatusCode)
		}
		if resp, _ := get(t, gw.url+"/v2/secret", bearer(fullSecret)...); resp.StatusCode != 404 {
			t.Errorf("an unknown path with a key: %d, want 404", resp.StatusCode)
		}
	})
	t.Run("models_listed_per_key", func(t *testing.T) {
		ids := func(body string) []string {
			var v struct {
				Data []struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			_ = json.Unmarshal([]byte(body), &v)
			var out []string
			for _, d := range v.Data {
				out = append(out, d.ID)
			}
			return out
		}
		if resp, _ := get(t, gw.url+"/v1/models"); resp.StatusCode != 401 {
			t.Errorf("/v1/models without a key: %d", resp.StatusCode)
		}
		if _, b := get(t, gw.url+"/v1/models", bearer(fullSecret)...); strings.Join(ids(b), ",") != testModel+",sim,"+otherModel {
			t.Errorf("/v1/models for a key of every model lists %v", ids(b))
		}
		if _, b := get(t, gw.url+"/v1/models", bearer(otherSecret)...); strings.Join(ids(b), ",") != otherModel {
			t.Errorf("/v1/models for a key of %s lists %v", otherModel, ids(b))
		}
	})
	t.Run("control_bytes_refused_by_net_http", func(t *testing.T) {
		// Go's client will not send them; a raw connection does, and
		// net/http answers 400 before any handler runs.
		c, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x01b\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("a control byte in the header: %d, want 400", resp.StatusCode)
		}
	})
	t.Run("megabyte_headers", func(t *testing.T) {
		// net/http reads up to http.DefaultMaxHeaderBytes (1 MiB) plus 4
		// KiB of headers: a 1 MiB token reaches the gateway, which refuses
		// it without hashing it; a 2 MiB one net/http refuses itself.
		resp, body := get(t, gw.url+"/v1/models", bearer(strings.Repeat("a", 1<<20))...)
		if resp.StatusCode != http.StatusUnauthorized || decodeError(t, body).Error.Code != "invalid_api_key" {
			t.Errorf("a 1 MiB Authorization header: %d %s, want 401", resp.StatusCode, body)
		}
		resp, _ = get(t, gw.url+"/v1/models", bearer(strings.Repeat("a", 2<<20))...)
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a 2 MiB Authorization header: %d, want 431", resp.StatusCode)
		}
		if resp, _ := get(t, gw.url+"/v1/models", bearer(fullSecret)...); resp.StatusCode != 200 {
			t.Errorf("after the 1 MiB header: %d", resp.StatusCode)
		}
	})
	if strings.Contains(gw.logs.String(), fullSecret) || strings.Contains(gw.logs.String(), full.Hash.String()[7:]) {
		t.Error("the log holds a key or its hash")
	}
}

// TestKeyNotForwarded: the engine never sees the client's key; with no
// keys configured the header passes as it always did.
func TestKeyNotForwarded(t *testing.T) {
	_, k := newKey("k", nil)
	var seen http.Header
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header
		if got := keyOf(r); got != k {
			t.Errorf("the handler sees key %v, want %v", got, k)
		}
	})
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	r.Header.Set("Authorization", "Bearer x")
	r.Header.Set("X-Custom", "kept")
	withKeyHandler := func(w http.ResponseWriter, r *http.Request) { next.ServeHTTP(w, withKey(r, k)) }
	withKeyHandler(httptest.NewRecorder(), r)
	if seen.Get("Authorization") != "" || seen.Get("X-Custom") != "kept" {
		t.Errorf("forwarded headers %v: want X-Custom and no Authorization", seen)
	}
	if r.Header.Get("Authorization") == "" {
		t.Error("the client's own request was changed")
	}
}

func keyOf(r *http.Request) *auth.Key { return auth.FromContext(r.Context()) }

func TestNoAuthUnchanged(t *testing.T) {
	gw := startGateway(t, testConfig(t, fleetOf(t, 1, true)))
	for _, h := range [][]string{nil, bearer("anything")} {
		if resp, body := chat(t, gw.url, chatBody("open", ""), h...); resp.StatusCode != 200 {
			t.Errorf("without keys configured, header %v: %d %s", h, resp.StatusCode, body)
		}
	}
	if resp, _ := get(t, gw.admin+"/metrics"); resp.StatusCode != 200 {
		t.Errorf("admin without admin keys: %d", resp.StatusCode)
	}
	if strings.Contains(scrape(t, gw.admin), "inferrail_auth_keys") {
		t.Error("inferrail_auth_keys is exported without keys")
	}
}

func TestAdminKeys(t *testing.T) {
	clientSecret, client := newKey("client", nil)
	adminSecret, admin := newKey("ops", nil)
	cfg, _ := keyedConfig(t, 1, client)
	adminPath := filepath.Join(t.TempDir(), "admin.yaml")
	writeKeys(t, adminPath, admin)
	cfg.Auth.AdminKeysFile = adminPath
	gw := startGateway(t, cfg)
	for _, tc := range []struct {
		path   string
		header []string
		status int
	}{
		{"/metrics", nil, 401},
		{"/metrics", bearer(clientSecret), 401},
		{"/metrics", bearer(adminSecret), 200},
		{"/admin/replicas", bearer(adminSecret), 200},
		{"/admin/index", nil, 401},
	} {
		resp, body := get(t, gw.admin+tc.path, tc.header...)
		if resp.StatusCode != tc.status {
			t.Errorf("GET %s with %v: %d, want %d: %s", tc.path, tc.header, resp.StatusCode, tc.status, body)
		}
	}
	// The client port does not take the admin key.
	if resp, _ := chat(t, gw.url, chatBody("x", ""), bearer(adminSecret)...); resp.StatusCode != 401 {
		t.Errorf("the admin key on the client port: %d, want 401", resp.StatusCode)
	}
	_, page := get(t, gw.admin+"/metrics", bearer(adminSecret)...)
	if got := metricValue(page, `inferrail_auth_failures_total{port="admin",reason="unknown_key"}`); got != 1 {
		t.Errorf("admin unknown_key failures %v, want 1", got)
	}
	if got := metricValue(page, `inferrail_auth_failures_total{port="admin",reason="missing"}`); got != 2 {
		t.Errorf("admin missing failures %v, want 2", got)
	}
}

// TestKeysReloadLive: a rewritten keys file takes effect without a
// restart, a bad one leaves the keys in effect and is counted, and the
// series of a revoked key go with it.
func TestKeysReloadLive(t *testing.T) {
	aSecret, a := newKey("tenant-a", func(k *auth.Key) { k.Limits.RequestsPerMinute = 1 })
	bSecret, b := newKey("tenant-b", nil)
	cfg, path := keyedConfig(t, 1, a)
	gw := startGateway(t, cfg)
	status := func(secret string) int {
		resp, _ := chat(t, gw.url, chatBody("reload", ""), bearer(secret)...)
		return resp.StatusCode
	}
	if status(aSecret) != 200 || status(aSecret) != 429 || status(bSecret) != 401 {
		t.Fatal("before the reload: a admitted once then limited, b unknown, expected")
	}
	limitedA := `inferrail_rate_limited_total{key="tenant-a",limit="key_requests",model="` + testModel + `"}`
	if metricValue(scrape(t, gw.admin), limitedA) != 1 {
		t.Fatal("tenant-a's 429 is not counted")
	}

	writeKeys(t, path, b)
	waitFor(t, "tenant-b to be let in", 10*time.Second, func() bool { return status(bSecret) == 200 })
	if status(aSecret) != 401 {
		t.Error("tenant-a still works after it left the file")
	}
	page := scrape(t, gw.admin)
	if metricValue(page, limitedA) != -1 {
		t.Error("the revoked key's rate-limited series is still exported")
	}
	if metricValue(page, `inferrail_auth_reloads_total{file="keys",result="ok"}`) != 1 {
		t.Errorf("reloads: %s", grepLines(page, "inferrail_auth_reloads_total"))
	}

	writeFile(t, path, "keys:\n  - name: broken\n    hash: "+bSecret+"\n")
	waitFor(t, "the bad file to be counted", 10*time.Second, func() bool {
		return metricValue(scrape(t, gw.admin), `inferrail_auth_reloads_total{file="keys",result="error"}`) == 1
	})
	if status(bSecret) != 200 {
		t.Error("a bad keys file took the keys in effect away")
	}
	if strings.Contains(gw.logs.String(), bSecret) {
		t.Error("the log quotes the secret pasted into the hash field")
	}
}

func grepLines(page, prefix string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// requestSeries counts a metrics page's series of families that count
// requests and their refusals (the replicas' and the index's move on
// their own).
func requestSeries(page string) int {
	n := 0
	for _, l := range strings.Split(page, "\n") {
		for _, f := range []string{"inferrail_auth_", "inferrail_request", "inferrail_rate_limit"} {
			if strings.HasPrefix(l, f) {
				n++
			}
		}
	}
	return n
}

// TestTenThousandBadKeys: 10,000 distinct wrong keys are refused, counted
// by reason only, and leave no state: the metrics page has the same
// series and the heap does not keep them.
func TestTenThousandBadKeys(t *testing.T) {
	secret, k := newKey("good", nil)
	cfg, _ := keyedConfig(t, 1, k)
	gw := startGateway(t, cfg)
	if resp, _ := get(t, gw.url+"/v1/models", bearer("irk-warmup")...); resp.StatusCode != 401 {
		t.Fatal("warm-up")
	}
	before := requestSeries(scrape(t, gw.admin))
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	h0 := heap()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 10_000; i += 8 {
				req, _ := http.NewRequest(http.MethodGet, gw.url+"/v1/models", nil)
				req.Header.Set("Authorization", fmt.Sprintf("Bearer irk-bad-%06d-%s", i, strings.Repeat("x", i%200)))
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	if statuses[401] != 10_000 {
		t.Fatalf("statuses %v, want 10,000 401s", statuses)
	}
	page := scrape(t, gw.admin)
	if after := requestSeries(page); after != before || strings.Contains(page, "irk-bad") {
		t.Errorf("the request families went from %d to %d series:\n%s", before, after, page)
	}
	if got := metricValue(page, `inferrail_auth_failures_total{port="client",reason="unknown_key"}`); got != 10_001 {
		t.Errorf("unknown_key failures %v, want 10,001", got)
	}
	if grew := int64(heap()) - int64(h0); grew > 4<<20 {
		t.Errorf("the heap grew by %d bytes over 10,000 bad keys", grew)
	}
	if resp, _ := get(t, gw.url+"/v1/models", bearer(secret)...); resp.StatusCode != 200 {
		t.Errorf("the good key after the flood: %d", resp.StatusCode)
	}
}

// TestTenThousandKeys: a file of 10,000 keys with limits loads; keys work;
// only the limited keys get series, and only the used ones buckets.
func TestTenThousandKeys(t *testing.T) {
	const n = 10_000
	secrets := make([]string, n)
	keys := make([]*auth.Key, n)
	for i := range keys {
		secrets[i], keys[i] = newKey(fmt.Sprintf("tenant-%05d", i), func(k *auth.Key) {
			k.Limits = config.Limits{RequestsPerMinute: 2, PromptTokensPerMinute: 100_000}
		})
	}
	cfg, _ := keyedConfig(t, 1, keys...)
	gw := startGateway(t, cfg)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	send := func(i int) int {
		req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/chat/completions", strings.NewReader(chatBody("many", "")))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+secrets[i])
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// Every 50th key sends a request: 200 keys in use of 10,000.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for j := w; j*50 < n; j += 8 {
				if got := send(j * 50); got != 200 {
					t.Errorf("tenant %d: %d", j*50, got)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for range 2 {
		send(7)
	}
	if got := send(7); got != 429 {
		t.Errorf("tenant 7's third request in a minute: %d, want 429", got)
	}
	page := scrape(t, gw.admin)
	if got := grepLines(page, "inferrail_rate_limited_total{"); strings.Count(got, "\n")+1 != 1 || !strings.Contains(got, `key="tenant-00007"`) {
		t.Errorf("rate-limited series:\n%s\nwant one, tenant-00007's", got)
	}
	if got := metricValue(page, `inferrail_auth_keys{file="keys"}`); got != n {
		t.Errorf("inferrail_auth_keys %v, want %d", got, n)
	}
	if buckets := gw.g.access.limiter.(interface{ Len() int }).Len(); buckets != 2*(n/50+1) {
		t.Errorf("%d buckets for %d keys used, want two each", buckets, n/50+1)
	}
}

// TestAdminExposedWarned: an admin port beyond loopback without admin
// keys is logged as a warning at start.
func TestAdminExposedWarned(t *testing.T) {
	cfg := testConfig(t, fleetOf(t, 1, true))
	cfg.Server.AdminListen = "0.0.0.0:0"
	logs := &syncbuf.Buffer{}
	g, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if !regexp.MustCompile(`level=WARN msg="the admin port listens beyond loopback`).MatchString(logs.String()) {
		t.Errorf("no warning in:\n%s", logs.String())
	}
	notes, err := CheckAccess(cfg)
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], "0.0.0.0:0") {
		t.Errorf("CheckAccess = %q, %v; want the exposed admin port noted", notes, err)
	}
	cfg.Auth.KeysFile = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := CheckAccess(cfg); err == nil || !strings.Contains(err.Error(), "auth.keys_file") {
		t.Errorf("CheckAccess with a missing keys file: %v", err)
	}
	if _, err := New(cfg, Options{}); err == nil {
		t.Error("New with a missing keys file succeeded")
	}
}

// TestKeyGrantsFollowAliases: a key's models are resolved by the config
// generation in effect, so a live alias change moves its grant; once an
// alias it names is gone, the name grants nothing and a later edit of the
// keys file (a revocation) still takes effect. The keys were resolved once,
// when the file was read, and the revocation was refused ("fast is not a
// configured model") until the alias came back.
func TestKeyGrantsFollowAliases(t *testing.T) {
	aSecret, a := newKey("team-a", func(k *auth.Key) { k.Models = []string{"fast"} })
	bSecret, b := newKey("team-b", nil)
	cfg, path := keyedConfig(t, 1, a, b)
	cfg.Models[0].Aliases = append(cfg.Models[0].Aliases, "fast")
	gw := startGateway(t, cfg)
	// The simulator serves testModel alone: a request for otherModel that
	// the gateway lets through gets the engine's 404.
	status := func(secret, model string) int {
		resp, _ := chat(t, gw.url, `{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, bearer(secret)...)
		return resp.StatusCode
	}
	aliasesTo := func(i int) { // the model that has alias fast; -1 for none
		t.Helper()
		next := *gw.g.current().cfg
		next.Models = slices.Clone(next.Models)
		for j := range next.Models {
			next.Models[j].Aliases = slices.DeleteFunc(slices.Clone(next.Models[j].Aliases), func(s string) bool { return s == "fast" })
			if j == i {
				next.Models[j].Aliases = append(next.Models[j].Aliases, "fast")
			}
		}
		if err := next.Validate(); err != nil {
			t.Fatal(err)
		}
		if result, _, err := gw.g.apply(&next, "test"); result != reloadApplied {
			t.Fatalf("apply = %s, %v", result, err)
		}
	}
	steps := []struct {
		name        string
		fastIs      int // index of the model with alias fast; -1 for none
		test, other int // team-a's status for testModel and otherModel
	}{
		{"fast_is_test", 0, 200, 403},
		{"fast_moved_to_other", 1, 403, 404},
		{"fast_removed", -1, 403, 403},
	}
	for _, s := range steps {
		if s.name != "fast_is_test" {
			aliasesTo(s.fastIs)
		}
		if got1, got2 := status(aSecret, testModel), status(aSecret, otherModel); got1 != s.test || got2 != s.other {
			t.Errorf("%s: team-a gets %d for %s and %d for %s, want %d and %d", s.name, got1, testModel, got2, otherModel, s.test, s.other)
		}
	}
	if !strings.Contains(gw.logs.String(), "a key names a model the config no longer has") {
		t.Error("removing an alias a key names logged no warning")
	}

	writeKeys(t, path, a) // team-b revoked
	waitFor(t, "team-b to be revoked", 10*time.Second, func() bool { return status(bSecret, testModel) == 401 })
	aliasesTo(1)
	if got := status(aSecret, otherModel); got != 404 {
		t.Errorf("alias fast back on %s: team-a gets %d, want the engine's 404", otherModel, got)
	}
}

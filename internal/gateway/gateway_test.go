package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/sim"
)

func TestProxiesChatAndCompletions(t *testing.T) {
	sims := fleetOf(t, 3, true)
	gw := startGateway(t, testConfig(t, sims))

	seen := map[string]int{}
	for i := range 6 {
		resp, body := chat(t, gw.url, chatBody(fmt.Sprintf("hello %d", i), ""), "X-Request-Id", fmt.Sprintf("client-%d", i))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Request-Id"); got != fmt.Sprintf("client-%d", i) {
			t.Errorf("x-request-id %q, want the client's", got)
		}
		var v struct {
			ID    string `json:"id"`
			Model string `json:"model"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		if v.ID != fmt.Sprintf("chatcmpl-client-%d", i) || v.Model != testModel {
			t.Errorf("engine saw id %q model %q; want the client's id and the alias resolved", v.ID, v.Model)
		}
		seen[resp.Header.Get("X-Inferrail-Replica")]++
	}
	if len(seen) != 3 || seen["sim-1"] != 2 {
		t.Errorf("round robin spread %v, want 2 on each of 3", seen)
	}

	// Completions, and a model left out while the gateway serves one.
	req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/completions", strings.NewReader(`{"prompt":"Once","max_tokens":2}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "bad id with spaces")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"model":"`+testModel+`"`) {
		t.Errorf("completion without a model: %d %s", resp.StatusCode, b)
	}
	if id := resp.Header.Get("X-Request-Id"); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Errorf("malformed client id replaced by %q, want 32 hex digits", id)
	}

	// vLLM's request_id in the body names the request when no header
	// does (a well-formed header wins, as in vLLM); one malformed is replaced.
	for _, c := range []struct{ extra, header, want string }{
		{`,"request_id":"body-1"`, "", "body-1"},
		{`,"request_id":"body-2"`, "client-2", "client-2"},
		{`,"request_id":"bad id"`, "", ""},
		{`,"request_id":"body-3"`, "bad id", "body-3"}, // an unusable header is no header
	} {
		var kv []string
		if c.header != "" {
			kv = []string{"X-Request-Id", c.header}
		}
		resp, body := chat(t, gw.url, chatBody("named", c.extra), kv...)
		got := resp.Header.Get("X-Request-Id")
		if c.want == "" && !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(got) || c.want != "" && got != c.want {
			t.Errorf("%s with header %q: x-request-id %q, want %q (32 hex digits if empty)", c.extra, c.header, got, c.want)
		}
		if !strings.Contains(body, `"id":"chatcmpl-`+got+`"`) {
			t.Errorf("%s: the engine named it otherwise than the gateway's %q: %s", c.extra, got, body)
		}
	}

	// A body behind UTF-8's byte order mark, which vLLM reads, with an
	// alias to splice.
	resp, body := chat(t, gw.url, "\uFEFF"+chatBody("after a BOM", ""))
	if resp.StatusCode != 200 || !strings.Contains(body, `"model":"`+testModel+`"`) {
		t.Errorf("body behind a byte order mark: %d %s", resp.StatusCode, body)
	}
}

func TestOwnAnswers(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	tests := []struct {
		method, path, body string
		status             int
		want               string
		allow              string
	}{
		{"POST", "/v1/chat/completions", `{"model":"nope","messages":[]}`, 404, "{\"error\":{\"message\":\"The model `nope` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}", ""},
		{"POST", "/v1/chat/completions", `{"model":`, 400, `"type":"BadRequestError"`, ""},
		{"POST", "/v1/chat/completions", `{"model":7}`, 400, `"param":"model"`, ""},
		{"POST", "/v1/chat/completions", `[{"model":"sim"}]`, 400, `{"error":{"message":"the request body must be a JSON object","type":"BadRequestError","param":null,"code":400}}`, ""},
		// A model name that is not UTF-8 is vLLM's 400 for such a body, not
		// a 404 naming U+FFFD.
		{"POST", "/v1/chat/completions", "{\"model\":\"si\xffm\",\"messages\":[]}", 400, `{"error":{"message":"There was an error parsing the body","type":"Bad Request","param":null,"code":400}}`, ""},
		{"GET", "/v1/chat/completions", ``, 405, `{"error":{"message":"Method Not Allowed","type":"Method Not Allowed","param":null,"code":405}}`, "POST"},
		{"DELETE", "/v1/models", ``, 405, `"code":405`, "GET, HEAD"},
		{"GET", "/v2/anything", ``, 404, `{"error":{"message":"Not Found","type":"Not Found","param":null,"code":404}}`, ""},
		// Paths match exactly, as vLLM's router matches them: no redirect
		// to a cleaned path, which a POST client would follow with its body.
		{"POST", "//v1/chat/completions", `{}`, 404, `"code":404`, ""},
		{"POST", "/v1/chat/completions/", `{}`, 404, `"code":404`, ""},
		{"GET", "/v1/../v1/models", ``, 404, `"code":404`, ""},
		{"GET", "/v1/./models", ``, 404, `"code":404`, ""},
		// The engines' own tools answer for one engine's tokenizer: not
		// forwarded, render as /tokenize.
		{"POST", "/tokenize", `{"prompt":"x"}`, 404, `{"error":{"message":"Not Found"`, ""},
		{"POST", "/v1/chat/completions/render", `{"messages":[{"role":"user","content":"x"}]}`, 404, `{"error":{"message":"Not Found"`, ""},
		{"POST", "/v1/completions/render", `{"prompt":"x"}`, 404, `{"error":{"message":"Not Found"`, ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, gw.url+tt.path, strings.NewReader(tt.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", "client-abc")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s %s %s: %d %s, want %d with %s", tt.method, tt.path, tt.body, resp.StatusCode, b, tt.status, tt.want)
		}
		if resp.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: Allow %q, want %q", tt.method, tt.path, resp.Header.Get("Allow"), tt.allow)
		}
		if got := resp.Header.Get("X-Request-Id"); got != "client-abc" {
			t.Errorf("%s %s: x-request-id %q, want the client's", tt.method, tt.path, got)
		}
	}
}

// TestOwnAnswersOutsideTheRoutes: request targets no route has, "OPTIONS *"
// and a CONNECT's authority, are answered in vLLM's shape with the
// client's request ID, as every other path is, not by net/http's defaults.
func TestOwnAnswersOutsideTheRoutes(t *testing.T) {
	gw := startGateway(t, testConfig(t, fleetOf(t, 1, true)))
	for _, line := range []string{"OPTIONS * HTTP/1.1", "CONNECT 127.0.0.1:1 HTTP/1.1"} {
		resp := rawRequest(t, gw.url, line+"\r\nHost: x\r\nX-Request-Id: client-abc\r\n\r\n")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || !strings.HasPrefix(string(body), `{"error":{"message":"Not Found"`) || resp.Header.Get("X-Request-Id") != "client-abc" {
			t.Errorf("%s: %d %q, x-request-id %q; want vLLM's 404 with the client's id", line, resp.StatusCode, body, resp.Header.Get("X-Request-Id"))
		}
	}
}

// rawRequest writes a request as given on a new connection to the server
// at url and reads the response head.
func rawRequest(t *testing.T, url, request string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestModelsListedLocally(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	gw := startGateway(t, cfg)
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			Root        string `json:"root"`
			MaxModelLen *int   `json:"max_model_len"`
		} `json:"data"`
	}
	waitFor(t, "model cards from the engines", 2*time.Second, func() bool {
		resp, err := http.Get(gw.url + "/v1/models")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&list)
		return len(list.Data) == 2 && list.Data[0].MaxModelLen != nil
	})
	if list.Data[0].ID != testModel || list.Data[1].ID != "sim" || *list.Data[0].MaxModelLen != 4096 || list.Data[1].Root != testModel {
		t.Errorf("models %+v, want the model then its alias with the engines' metadata", list.Data)
	}
	// Listing never calls an engine: it works with every engine dead.
	for _, s := range sims {
		s.Kill()
	}
	resp, err := http.Get(gw.url + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("models with engines dead: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestRetriesBeforeTheFirstByte kills and breaks replicas: requests that had
// not started move to a working replica.
func TestRetriesBeforeTheFirstByte(t *testing.T) {
	sims := fleetOf(t, 3, true)
	cfg := testConfig(t, sims)
	cfg.Health.Interval = cfg.Health.Interval * 100 // probes out of the way: passive paths only
	cfg.Health.Timeout = cfg.Health.Timeout * 100
	// The killed replica, once ejected, stays out for the test: when a
	// busy machine made the test outlast a 200 ms ejection, the last
	// request's third attempt went to it, and a refused connection, not
	// an engine's 503, was the last answer.
	cfg.Health.EjectionBackoff, cfg.Health.MaxEjectionBackoff = config.Duration(time.Minute), config.Duration(time.Minute)
	gw := startGateway(t, cfg)
	sims[0].Kill()
	sims[1].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503})
	for i := range 9 {
		resp, body := chat(t, gw.url, chatBody(fmt.Sprint("q", i), ""))
		if resp.StatusCode != 200 || resp.Header.Get("X-Inferrail-Replica") != "sim-3" {
			t.Fatalf("request %d: %d from %s: %s", i, resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
		}
	}
	page := scrape(t, gw.admin)
	if !strings.Contains(page, "inferrail_upstream_retries_total") {
		t.Error("no retries counted")
	}
	sims[1].SetFault(sim.Fault{Kind: sim.FaultClose})
	resp, body := chat(t, gw.url, chatBody("after close", ""))
	if resp.StatusCode != 200 {
		t.Errorf("with one replica closing connections: %d %s", resp.StatusCode, body)
	}
	// When every attempt fails, the client gets the engine's own 503.
	sims[2].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503})
	sims[1].SetFault(sim.Fault{Kind: sim.FaultFail, Status: 503})
	resp, body = chat(t, gw.url, chatBody("all failing", ""))
	if resp.StatusCode != 503 {
		t.Errorf("every replica failing: %d %s, want 503", resp.StatusCode, body)
	}
}

// TestStartedStreamNeverReplayed breaks an engine mid-stream: the client
// sees a broken response, and the request is not sent anywhere else.
func TestStartedStreamNeverReplayed(t *testing.T) {
	sims := fleetOf(t, 2, false)
	cfg := testConfig(t, sims)
	gw := startGateway(t, cfg)
	req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim","messages":[{"role":"user","content":"long"}],"max_tokens":500,"ignore_eos":true,"stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	victim := resp.Header.Get("X-Inferrail-Replica")
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if victim == "sim-1" {
		sims[0].Kill()
	} else {
		sims[1].Kill()
	}
	_, err = io.ReadAll(r)
	if err == nil {
		t.Fatal("the client read a clean end of a stream the engine broke")
	}
	page := scrape(t, gw.admin)
	if countedWith(page, "inferrail_requests_total", `status="aborted"`) == 0 {
		t.Errorf("no aborted outcome counted:\n%s", grep(page, "inferrail_requests_total"))
	}
	if !strings.Contains(page, `inferrail_upstream_retries_total{model="inferrail/sim-8b"} 0`) {
		t.Errorf("a started stream was retried:\n%s", grep(page, "retries"))
	}
}

func grep(page, substr string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestEjectionAndReadmission kills a replica under traffic: it is ejected
// after failed requests and comes back once it answers again.
func TestEjectionAndReadmission(t *testing.T) {
	sims := fleetOf(t, 3, true)
	cfg := testConfig(t, sims)
	gw := startGateway(t, cfg)
	sims[0].Kill()
	for i := range 12 {
		if resp, body := chat(t, gw.url, chatBody(fmt.Sprint(i), "")); resp.StatusCode != 200 {
			t.Fatalf("request %d after the kill: %d %s", i, resp.StatusCode, body)
		}
	}
	rep := gw.g.Fleet().Snapshot().Get("sim-1")
	waitFor(t, "sim-1 out of rotation", time.Second, func() bool { return !rep.Usable(clock.Of(time.Now())) })
	if err := sims[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "sim-1 back in rotation", 3*time.Second, func() bool { return rep.Usable(clock.Of(time.Now())) })
	got := map[string]bool{}
	for i := range 6 {
		resp, _ := chat(t, gw.url, chatBody(fmt.Sprint("back", i), ""))
		got[resp.Header.Get("X-Inferrail-Replica")] = true
	}
	if !got["sim-1"] {
		t.Errorf("sim-1 served nothing after readmission: %v", got)
	}
}

// TestEjectionCap makes every engine fail: at most half of the replicas are
// ejected, so the pool never empties.
func TestEjectionCap(t *testing.T) {
	sims := fleetOf(t, 4, true)
	cfg := testConfig(t, sims)
	cfg.Health.Interval = cfg.Health.Interval * 100
	cfg.Health.Timeout = cfg.Health.Timeout * 100
	cfg.Health.EjectionBackoff = cfg.Health.EjectionBackoff * 50
	cfg.Health.MaxEjectionBackoff = cfg.Health.EjectionBackoff
	gw := startGateway(t, cfg)
	for _, s := range sims {
		s.SetFault(sim.Fault{Kind: sim.FaultFail, Status: 500})
	}
	for i := range 40 {
		chat(t, gw.url, chatBody(fmt.Sprint(i), ""))
	}
	ejected := 0
	for _, r := range gw.g.Fleet().Snapshot().Replicas {
		if r.Ejected(time.Now()) {
			ejected++
		}
	}
	if ejected != 2 {
		t.Errorf("%d of 4 replicas ejected, want exactly the cap of 2", ejected)
	}
}

// TestHangingReplica: a replica that stops answering is marked down by its
// probes, and requests waiting on it move to another replica.
func TestHangingReplica(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	cfg.Health.UnhealthyThreshold = 2
	gw := startGateway(t, cfg)
	waitFor(t, "first probes", time.Second, func() bool { return gw.g.Fleet().Snapshot().Get("sim-1").Cards() != nil })
	sims[0].SetFault(sim.Fault{Kind: sim.FaultHang})
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			resp, body := chat(t, gw.url, chatBody(fmt.Sprint("h", i), ""))
			if resp.StatusCode != 200 || resp.Header.Get("X-Inferrail-Replica") != "sim-2" {
				t.Errorf("request %d: %d from %s %s", i, resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("requests waiting on the hung replica took %v to move", took)
	}
}

// TestBreakers: a replica at max_concurrency is skipped; a full fleet gets
// an immediate 503 with Retry-After; caps hold under a race.
func TestBreakers(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	for i := range cfg.Replicas {
		cfg.Replicas[i].MaxConcurrency = 2
		cfg.Replicas[i].MaxPending = 2
	}
	cfg.Health.Interval = cfg.Health.Interval * 100
	cfg.Health.Timeout = cfg.Health.Timeout * 100
	gw := startGateway(t, cfg)
	for _, s := range sims {
		s.SetFault(sim.Fault{Kind: sim.FaultDelay, Delay: 300 * time.Millisecond, SparesHealth: true})
	}
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			resp, _ := chat(t, gw.url, chatBody(fmt.Sprint("b", i), ""))
			mu.Lock()
			statuses[resp.StatusCode]++
			if resp.StatusCode == 503 && resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			mu.Unlock()
		})
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	if statuses[200] != 4 || statuses[503] != 8 {
		t.Errorf("statuses %v, want 4 served (2 per replica) and 8 refused at once", statuses)
	}
}

// TestClientDisconnectFreesEngine: a client that leaves a stream frees the
// engine's slot within 100 ms.
func TestClientDisconnectFreesEngine(t *testing.T) {
	sims := fleetOf(t, 1, false)
	gw := startGateway(t, testConfig(t, sims))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim","messages":[{"role":"user","content":"go on"}],"max_tokens":1000,"ignore_eos":true,"stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	left := time.Now()
	resp.Body.Close()
	running := func() string {
		var page strings.Builder
		_, _ = sims[0].Server().Metrics().WriteTo(&page)
		return grep(page.String(), "vllm:num_requests_running{")
	}
	waitFor(t, "the engine to drop the request", time.Second, func() bool { return strings.HasSuffix(running(), " 0.0") })
	if took := time.Since(left); took > 100*time.Millisecond {
		t.Errorf("engine slot freed %v after the client left, want under 100 ms", took)
	}
}

// TestGracefulShutdown: on shutdown the gateway stops accepting but lets a
// running stream finish.
func TestGracefulShutdown(t *testing.T) {
	sims := fleetOf(t, 1, false)
	gw := startGateway(t, testConfig(t, sims))
	req, _ := http.NewRequest(http.MethodPost, gw.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim","messages":[{"role":"user","content":"x"}],"max_tokens":15,"ignore_eos":true,"stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	gw.cancel()
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("stream cut by shutdown: %v\n%s", err, body)
	}
	select {
	case <-gw.done:
	case <-time.After(5 * time.Second):
		t.Fatal("gateway did not stop after the stream ended")
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(gw.url, "http://"), 200*time.Millisecond); err == nil {
		t.Error("gateway still accepts connections after shutdown")
	}
}

// TestBodyLimits: a body over the limit is a 413 and a body that stalls a
// 408; a rejected request behind Expect: 100-continue is answered at once.
func TestBodyLimits(t *testing.T) {
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	cfg.Server.MaxBodyBytes = 1000
	cfg.Server.RequestTimeout = cfg.Server.RequestTimeout / 25 // 200 ms
	gw := startGateway(t, cfg)
	resp, body := chat(t, gw.url, chatBody(strings.Repeat("x", 2000), ""))
	if resp.StatusCode != 413 {
		t.Errorf("oversized body: %d %s", resp.StatusCode, body)
	}

	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":")
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.Contains(line, "408") {
		t.Errorf("stalled body answered %q, want 408\n%s", line, gw.logs.String())
	}

	conn2, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	fmt.Fprintf(conn2, "POST /v1/unknown HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
	_ = conn2.SetReadDeadline(time.Now().Add(time.Second))
	line, _ = bufio.NewReader(conn2).ReadString('\n')
	if !strings.Contains(line, "404") {
		t.Errorf("rejected request behind Expect: 100-continue answered %q, want an immediate 404", line)
	}
	// A header the gateway refuses is read before the body is asked for.
	resp = rawRequest(t, gw.url, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100000\r\nExpect: 100-continue\r\nX-Inferrail-Priority: bogus\r\n\r\n")
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("bad priority behind Expect: 100-continue answered %d, want an immediate 400", resp.StatusCode)
	}
}

// TestHeaderReadTimeout: a connection that never finishes its headers, and
// an idle keep-alive connection, are closed after header_read_timeout.
func TestHeaderReadTimeout(t *testing.T) {
	sims := fleetOf(t, 1, true)
	cfg := testConfig(t, sims)
	cfg.Server.HeaderReadTimeout = cfg.Server.HeaderReadTimeout / 50 // 200 ms
	gw := startGateway(t, cfg)
	conn, err := net.Dial("tcp", strings.TrimPrefix(gw.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /health HTTP/1.1\r\nHost: x\r\n")
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = io.ReadAll(conn)
	if took := time.Since(start); err != nil || took > 2*time.Second {
		t.Errorf("half-sent headers: connection closed after %v (%v), want about 200 ms", took, err)
	}
}

// TestAdminReplicas: the admin port shows each replica's state and its
// engine's last report with its age; a dead engine's report goes stale.
func TestAdminReplicas(t *testing.T) {
	sims := fleetOf(t, 2, true)
	cfg := testConfig(t, sims)
	gw := startGateway(t, cfg)
	type view struct {
		Replicas []struct {
			ID      string `json:"id"`
			Healthy bool   `json:"healthy"`
			Engine  *struct {
				Kind           string  `json:"kind"`
				Fresh          bool    `json:"fresh"`
				AgeSecs        float64 `json:"age_secs"`
				CapacityBlocks int     `json:"capacity_blocks"`
			} `json:"engine"`
		} `json:"replicas"`
	}
	get := func() view {
		resp, err := http.Get(gw.admin + "/admin/replicas")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v view
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	waitFor(t, "both engines reported", 2*time.Second, func() bool {
		v := get()
		return len(v.Replicas) == 2 && v.Replicas[0].Engine != nil && v.Replicas[1].Engine != nil
	})
	v := get()
	if e := v.Replicas[0].Engine; e.Kind != "vllm" || !e.Fresh || e.CapacityBlocks != 1024 || e.AgeSecs > 0.25 {
		t.Errorf("sim-1's engine view %+v", *e)
	}
	sims[1].Kill()
	waitFor(t, "sim-2's report to go stale and its probes to fail", 3*time.Second, func() bool {
		v := get()
		return !v.Replicas[1].Engine.Fresh && !v.Replicas[1].Healthy
	})
}

// TestRetryKeepsTheEnginesAnswer: two replicas, two attempts, the first on
// sim-1 (round robin). When an engine answered 502, 503 or 504 and the
// retry got no answer at all (a refused connection, one closed without an
// answer), the client gets the engine's answer, which says more than the
// gateway's own 502 about a transport failure; a later engine answer, or a
// good one, wins over it; with no engine answering, the client gets the
// gateway's 502.
func TestRetryKeepsTheEnginesAnswer(t *testing.T) {
	fail := func(status int) func(*sim.Local) {
		return func(s *sim.Local) { s.SetFault(sim.Fault{Kind: sim.FaultFail, Status: status}) }
	}
	refuse := func(s *sim.Local) { s.Kill() }
	closeConn := func(s *sim.Local) { s.SetFault(sim.Fault{Kind: sim.FaultClose}) }
	serve := func(*sim.Local) {}
	for _, tc := range []struct {
		name          string
		first, second func(*sim.Local)
		status        int
		replica       string // the answer's X-Inferrail-Replica; "" for the gateway's own
	}{
		{"503_then_refused", fail(503), refuse, 503, "sim-1"},
		{"502_then_closed", fail(502), closeConn, 502, "sim-1"},
		{"504_then_refused", fail(504), refuse, 504, "sim-1"},
		{"503_then_504", fail(503), fail(504), 504, "sim-2"},
		{"refused_then_503", refuse, fail(503), 503, "sim-2"},
		{"503_then_served", fail(503), serve, 200, "sim-2"},
		{"refused_then_closed", refuse, closeConn, 502, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sims := fleetOf(t, 2, true)
			cfg := testConfig(t, sims)
			cfg.Health.Interval = cfg.Health.Interval * 100 // probes out of the way: passive paths only
			cfg.Health.Timeout = cfg.Health.Timeout * 100
			cfg.Retry.MaxAttempts = 2
			gw := startGateway(t, cfg)
			tc.first(sims[0])
			tc.second(sims[1])
			resp, body := chat(t, gw.url, chatBody("which answer", ""))
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			jerr := json.Unmarshal([]byte(body), &e)
			engine := tc.replica != "" && tc.status != 200
			switch {
			case resp.StatusCode != tc.status || resp.Header.Get("X-Inferrail-Replica") != tc.replica:
				t.Errorf("answer %d from %q: %s; want %d from %q", resp.StatusCode, resp.Header.Get("X-Inferrail-Replica"), body, tc.status, tc.replica)
			case engine && (jerr != nil || e.Error.Message != "injected failure"):
				t.Errorf("answer %d: %s; want the engine's own error", resp.StatusCode, body)
			case tc.status != 200 && !engine && (jerr != nil || e.Error.Message == "" || e.Error.Message == "injected failure"):
				t.Errorf("answer %d: %s; want the gateway's OpenAI error", resp.StatusCode, body)
			}
			if got := counterValue(t, gw, "inferrail_upstream_retries_total", "model", testModel); got != 1 {
				t.Errorf("%v retries counted, want 1: the second replica was not tried", got)
			}
		})
	}
}

// TestTTFTMetricCountsStreamsOnly: inferrail_ttft_seconds observes the
// first byte of streamed 2xx answers only; a whole answer's first byte
// comes with its last, and an engine's error carries no token.
func TestTTFTMetricCountsStreamsOnly(t *testing.T) {
	sims := fleetOf(t, 1, true)
	gw := startGateway(t, testConfig(t, sims))
	for _, tc := range []struct{ body string }{
		{chatBody("whole", "")},
		{chatBody("refused", `,"n":2`)},
		{chatBody("streamed", `,"stream":true`)},
	} {
		resp, b := chat(t, gw.url, tc.body)
		if resp.StatusCode != 200 && resp.StatusCode != 400 {
			t.Fatalf("%s: %d %s", tc.body, resp.StatusCode, b)
		}
	}
	series := `inferrail_ttft_seconds_count{model="` + testModel + `",policy="round_robin",replica="sim-1"}`
	page := scrape(t, gw.admin)
	if got := metricValue(page, series); got != 1 {
		t.Errorf("%s = %v, want 1 (the stream only)\n%s", series, got, grep(page, "inferrail_ttft_seconds_count"))
	}
}

// TestResponseHeadersAsTheEngineSent: an engine's answer without a
// Content-Type reaches the client without one (net/http would add its
// guess), and one with a Content-Type keeps it.
func TestResponseHeadersAsTheEngineSent(t *testing.T) {
	for _, ct := range []string{"", "application/json"} {
		engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ct == "" {
				w.Header()["Content-Type"] = nil
			} else {
				w.Header().Set("Content-Type", ct)
			}
			_, _ = io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"length"}]}`)
		}))
		t.Cleanup(engine.Close)
		gw := startGatewayWith(t, flowConfig(engine.URL, 0), Options{})
		resp, body := postCompletion(t, gw.url, `{"model":"sim","prompt":"hello","max_tokens":1}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if got, ok := resp.Header["Content-Type"]; ct == "" && ok || ct != "" && (len(got) != 1 || got[0] != ct) {
			t.Errorf("engine's Content-Type %q: the client got %q", ct, got)
		}
	}
}

// TestEngineCardIsStable: of the cards the replicas of a model published,
// the listing takes a passing replica's, the least max_model_len among
// them, the freshest among equals, whatever the order of fetches. The
// freshest alone made the listing flip between 4096 and 8192 (found by a
// review); a client sizing prompts by it then sent some too long.
func TestEngineCardIsStable(t *testing.T) {
	now := time.Now()
	mk := func(id string, maxLen int, fetched time.Duration, up bool) *fleet.Replica {
		u, _ := url.Parse("http://127.0.0.1:1/" + id)
		r := fleet.NewReplica(id, u, []string{testModel}, 0, 0)
		card := fmt.Sprintf(`{"id":%q,"owned_by":%q,"max_model_len":%d}`, testModel, id, maxLen)
		if maxLen < 0 {
			card = fmt.Sprintf(`{"id":%q,"owned_by":%q}`, testModel, id)
		}
		r.SetCards(&fleet.ModelCards{Fetched: now.Add(fetched), Cards: map[string][]byte{testModel: []byte(card)}})
		if !up {
			fleet.MarkDown(r)
		}
		return r
	}
	for _, tc := range []struct {
		name     string
		replicas []*fleet.Replica
		want     string
	}{
		{"least_context", []*fleet.Replica{mk("long", 8192, time.Second, true), mk("short", 4096, 0, true)}, "short"},
		{"least_context_either_order", []*fleet.Replica{mk("short", 4096, time.Second, true), mk("long", 8192, 0, true)}, "short"},
		{"passing_first", []*fleet.Replica{mk("down", 2048, time.Second, false), mk("up", 8192, 0, true)}, "up"},
		{"freshest_among_equals", []*fleet.Replica{mk("old", 4096, 0, true), mk("new", 4096, time.Second, true)}, "new"},
		{"a_length_over_none", []*fleet.Replica{mk("none", -1, time.Second, true), mk("some", 4096, 0, true)}, "some"},
		{"only_down", []*fleet.Replica{mk("down", 4096, 0, false)}, "down"},
	} {
		card := engineCard(tc.replicas, testModel)
		if got := strings.Trim(string(card["owned_by"]), `"`); got != tc.want {
			t.Errorf("%s: the card of %s, want %s's", tc.name, got, tc.want)
		}
	}
	if card := engineCard(nil, testModel); card != nil {
		t.Errorf("no replica: %v, want no card", card)
	}
}

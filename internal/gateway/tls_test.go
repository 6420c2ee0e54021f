package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/certs/certstest"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/sim"
)

// tlsClient trusts roots and presents certs.
func tlsClient(roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: certs},
		ForceAttemptHTTP2: true,
	}, Timeout: 10 * time.Second}
}

// postChat sends a chat request with client and returns the response with
// its body read, or the error.
func postChat(client *http.Client, url, body string) (*http.Response, string, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// tlsGateway starts a gateway whose client port serves TLS with a
// certificate for localhost from ca, written in dir.
func tlsGateway(t *testing.T, ca *certstest.CA, dir string, edit func(*config.Config)) *running {
	t.Helper()
	cfg := testConfig(t, fleetOf(t, 1, true))
	cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile = ca.WriteFiles(t, dir, "server", certstest.Localhost("first"))
	if edit != nil {
		edit(cfg)
	}
	gw := startGateway(t, cfg)
	gw.url = strings.Replace(gw.url, "http://", "https://", 1)
	return gw
}

func TestClientPortTLS(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "client-port-ca")
	gw := tlsGateway(t, ca, dir, nil)
	client := tlsClient(ca.Pool())
	defer client.CloseIdleConnections()

	resp, body, err := postChat(client, gw.url, chatBody("over tls", ""))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a chat over TLS: %v %v %s", resp, err, body)
	}
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 || resp.Proto != "HTTP/2.0" {
		t.Errorf("connection: %+v over %s; want TLS 1.2+ and HTTP/2 by ALPN", resp.TLS, resp.Proto)
	}

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"tls11", &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11}},
		{"untrusted", &tls.Config{}},
	} {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc.cfg}}
		if _, _, err := postChat(c, gw.url, chatBody("x", "")); err == nil {
			t.Errorf("%s: the handshake succeeded", tc.name)
		}
	}
	plain, body, err := postChat(http.DefaultClient, strings.Replace(gw.url, "https://", "http://", 1), chatBody("x", ""))
	if err != nil || plain.StatusCode != 400 {
		t.Errorf("plain HTTP to the TLS port: %v %v %s, want net/http's 400", plain, err, body)
	}

	// A rotated certificate is served without a restart, at most a
	// second (tlsCheckEvery) after it is written.
	ca.WriteFiles(t, dir, "server", certstest.Localhost("second"))
	waitFor(t, "the rotated certificate", 10*time.Second, func() bool {
		c := tlsClient(ca.Pool())
		defer c.CloseIdleConnections()
		resp, _, err := postChat(c, gw.url, chatBody("rotated", ""))
		return err == nil && resp.TLS.PeerCertificates[0].Subject.CommonName == "second"
	})
	if got := metricValue(scrape(t, gw.admin), `inferrail_tls_reloads_total{name="server_cert",result="ok"}`); got != 1 {
		t.Errorf("TLS reloads %v, want 1", got)
	}
	// The old connection keeps working on its old certificate.
	if resp, _, err := postChat(client, gw.url, chatBody("kept", "")); err != nil || resp.StatusCode != 200 {
		t.Errorf("the connection made before the rotation: %v", err)
	}
}

func TestClientPortMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := certstest.NewCA(t, "server-ca"), certstest.NewCA(t, "client-ca")
	caFile := filepath.Join(dir, "clients.pem")
	certstest.Write(t, caFile, clientCA.PEM)
	gw := tlsGateway(t, serverCA, dir, func(c *config.Config) { c.Server.TLS.ClientCAFile = caFile })
	good := clientCA.Pair(t, certstest.Leaf{CommonName: "app", Client: true})
	stranger := certstest.NewCA(t, "stranger").Pair(t, certstest.Leaf{CommonName: "app", Client: true})
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"signed_by_the_client_ca", []tls.Certificate{good}, true},
		{"no_certificate", nil, false},
		{"signed_by_another_ca", []tls.Certificate{stranger}, false},
	} {
		c := tlsClient(serverCA.Pool(), tc.certs...)
		resp, _, err := postChat(c, gw.url, chatBody("mtls", ""))
		c.CloseIdleConnections()
		if ok := err == nil && resp.StatusCode == 200; ok != tc.ok {
			t.Errorf("%s: %v %v, want ok %v", tc.name, resp, err, tc.ok)
		}
	}
}

// TestStalledHandshakes: clients that connect and stall in the TLS
// handshake, saying nothing or half a ClientHello, are cut after
// server.header_read_timeout; none holds a goroutine past it (goleak
// checks the package at its end) and the port keeps serving.
func TestStalledHandshakes(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "stall-ca")
	gw := tlsGateway(t, ca, dir, func(c *config.Config) { c.Server.HeaderReadTimeout = config.Duration(300 * time.Millisecond) })
	addr := strings.TrimPrefix(gw.url, "https://")
	// The first bytes of a TLS record holding a ClientHello, and no more.
	partial := []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range 2 * n {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if i%2 == 1 {
				if _, err := c.Write(partial); err != nil {
					errs <- err
					return
				}
			}
			// Fail-safe only: the server must close long before this.
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = io.Copy(io.Discard, c)
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				errs <- errors.New("the server never closed a stalled handshake")
			case err != nil && !errors.Is(err, syscall.ECONNRESET):
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	client := tlsClient(ca.Pool())
	defer client.CloseIdleConnections()
	if resp, _, err := postChat(client, gw.url, chatBody("after the stalls", "")); err != nil || resp.StatusCode != 200 {
		t.Errorf("after %d stalled handshakes: %v %v", 2*n, resp, err)
	}
}

// tlsSim runs a simulator serving HTTPS with cert, asking clients for a
// certificate signed by clientCAs when not nil. It returns its base URL.
func tlsSim(t *testing.T, cert tls.Certificate, clientCAs *x509.CertPool) string {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.ZeroLatency = true
	cfg.MaxModelLen = 4096
	cfg.NumGPUBlocks = 1024
	srv, err := sim.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	if clientCAs != nil {
		tc.ClientCAs, tc.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx, tls.NewListener(ln, tc)); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return "https://" + ln.Addr().String()
}

// TestUpstreamTLS: engines behind https with their own CA, a client
// certificate they require, and a certificate for another name than the
// one dialed; the gateway's probes, scrapes and requests all go over it.
func TestUpstreamTLS(t *testing.T) {
	dir := t.TempDir()
	engineCA, gatewayCA := certstest.NewCA(t, "engine-ca"), certstest.NewCA(t, "gateway-ca")
	byIP := tlsSim(t, engineCA.Pair(t, certstest.Localhost("engine")), gatewayCA.Pool())
	byName := tlsSim(t, engineCA.Pair(t, certstest.Leaf{CommonName: "named", DNSNames: []string{"vllm.internal"}}), nil)
	caFile := filepath.Join(dir, "engines.pem")
	certstest.Write(t, caFile, engineCA.PEM)
	certFile, keyFile := gatewayCA.WriteFiles(t, dir, "gateway", certstest.Leaf{CommonName: "gateway", Client: true})

	for _, tc := range []struct {
		name string
		url  string
		tls  config.UpstreamTLS
		ok   bool
	}{
		{"ca_and_client_cert", byIP, config.UpstreamTLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}, true},
		{"no_client_cert", byIP, config.UpstreamTLS{CAFile: caFile}, false},
		{"system_roots", byIP, config.UpstreamTLS{}, false},
		{"server_name", byName, config.UpstreamTLS{CAFile: caFile, ServerName: "vllm.internal"}, true},
		{"wrong_name", byName, config.UpstreamTLS{CAFile: caFile}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, nil)
			cfg.Replicas = []config.Replica{{ID: "tls-sim", URL: tc.url, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8}}
			cfg.Upstream.TLS = tc.tls
			cfg.Tokenizer.Verify = tc.ok
			slowHandshakes(cfg)
			gw := startGateway(t, cfg)
			if !tc.ok {
				resp, _ := chat(t, gw.url, chatBody("refused", ""))
				if resp.StatusCode/100 != 5 {
					t.Errorf("status %d, want the engine unreachable", resp.StatusCode)
				}
				return
			}
			waitFor(t, "the engine healthy and scraped", 10*time.Second, func() bool {
				return metricValue(scrape(t, gw.admin), `inferrail_load_scrapes_total{replica="tls-sim",result="ok"}`) > 0 &&
					metricValue(scrape(t, gw.admin), `inferrail_replica_healthy{replica="tls-sim"}`) == 1
			})
			if resp, body := chat(t, gw.url, chatBody("over https", "")); resp.StatusCode != 200 {
				t.Errorf("a chat to an https engine: %d %s", resp.StatusCode, body)
			}
		})
	}
}

// TestUpstreamTLSHTTP2: with upstream.http2, https engines are spoken to
// in HTTP/2 negotiated by ALPN. (The simulator serves HTTP/1.1 over TLS,
// so the engine here is a plain net/http server that says which protocol
// it was asked in.)
func TestUpstreamTLSHTTP2(t *testing.T) {
	engine := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"proto":"`+r.Proto+`"}`)
		}
	}))
	engine.EnableHTTP2 = true
	engine.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes cut by Close at the end
	engine.StartTLS()
	t.Cleanup(engine.Close)
	caFile := filepath.Join(t.TempDir(), "engine.pem")
	certstest.Write(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: engine.Certificate().Raw}))
	cfg := testConfig(t, nil)
	cfg.Replicas = []config.Replica{{ID: "h2", URL: engine.URL, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8}}
	cfg.Upstream.HTTP2 = true
	cfg.Upstream.TLS.CAFile = caFile
	cfg.Tokenizer.Verify = false
	slowHandshakes(cfg)
	gw := startGateway(t, cfg)
	if resp, body := chat(t, gw.url, chatBody("h2", "")); resp.StatusCode != 200 || body != `{"proto":"HTTP/2.0"}` {
		t.Errorf("%d %s, want the engine asked in HTTP/2", resp.StatusCode, body)
	}
}

// slowHandshakes gives health probes of https engines the time a TLS
// handshake takes under -race on a saturated machine: with the harness's
// 250 ms, a probe timed out there between the test seeing the engine healthy
// and its chat, which then found no healthy replica.
func slowHandshakes(cfg *config.Config) {
	cfg.Health.Interval = config.Duration(2 * time.Second)
	cfg.Health.Timeout = config.Duration(2 * time.Second)
}

// TestCheckNotesAnExpiredCertificate: --check notes a server certificate
// past its expiry (clients will refuse it); a valid one adds no note.
func TestCheckNotesAnExpiredCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "check-ca")
	for _, tc := range []struct {
		notAfter time.Time
		want     bool
	}{{time.Now().Add(time.Hour), false}, {time.Now().Add(-time.Minute), true}} {
		cfg := testConfig(t, nil)
		leaf := certstest.Localhost("checked")
		leaf.NotAfter = tc.notAfter
		cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile = ca.WriteFiles(t, dir, "server", leaf)
		notes, err := CheckAccess(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(strings.Join(notes, "\n"), "is expired at"); got != tc.want {
			t.Errorf("expires %v: notes %q, want an expiry note %v", tc.notAfter, notes, tc.want)
		}
	}
}

// TestUpstreamTLSOffLive: a live change may move the last engine off TLS
// while upstream.tls stays set (it changes only at a restart, so refusing
// the change left the operator no live way to make it); it is a warning,
// as is upstream.tls with no https engine at start (a --check note).
func TestUpstreamTLSOffLive(t *testing.T) {
	sims := fleetOf(t, 1, true)
	engine := httptest.NewTLSServer(http.NotFoundHandler())
	engine.Config.ErrorLog = log.New(io.Discard, "", 0)
	t.Cleanup(engine.Close)
	caFile := filepath.Join(t.TempDir(), "engine.pem")
	certstest.Write(t, caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: engine.Certificate().Raw}))
	cfg := testConfig(t, sims)
	cfg.Replicas = append(cfg.Replicas, config.Replica{ID: "tls", URL: engine.URL, Models: []string{testModel}, MaxConcurrency: 8, MaxPending: 8})
	cfg.Upstream.TLS.CAFile = caFile
	cfg.Tokenizer.Verify = false
	gw := startGateway(t, cfg)
	plain := fmt.Sprintf(`{"replicas":[{"id":"sim-1","url":%q,"models":[%q]}]}`, sims[0].URL(), testModel)
	if code, _, problems := patch(t, gw.admin, plain); code != http.StatusOK {
		t.Fatalf("moving the last engine off TLS: %d %+v, want 200", code, problems)
	}
	if !strings.Contains(gw.logs.String(), "upstream.tls is set but no replica") {
		t.Error("no warning that upstream.tls applies to no engine")
	}
	cfg.Replicas = cfg.Replicas[:1]
	notes, err := CheckAccess(cfg)
	if err != nil || !strings.Contains(strings.Join(notes, "\n"), "upstream.tls is set but no replica") {
		t.Errorf("--check of upstream.tls with no https engine: %q, %v; want a note", notes, err)
	}
}

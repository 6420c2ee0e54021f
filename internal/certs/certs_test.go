package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/certs/certstest"
)

// reports records what a Report is told.
type reports struct {
	mu   sync.Mutex
	errs []error // nil entries: a reload took effect
}

func (r *reports) report(_ string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *reports) counts() (ok, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errs {
		if e == nil {
			ok++
		} else {
			failed++
		}
	}
	return ok, failed
}

func TestKeypairReload(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "test-ca")
	certFile, keyFile := ca.WriteFiles(t, dir, "server", certstest.Localhost("first"))
	var r reports
	kp, err := LoadKeypair("server", certFile, keyFile, 0, r.report)
	if err != nil {
		t.Fatal(err)
	}
	cn := func() string { return kp.Certificate().Leaf.Subject.CommonName }
	steps := []struct {
		name       string
		do         func()
		cn         string
		ok, failed int
	}{
		{"first", func() {}, "first", 0, 0},
		{"rotated", func() { ca.WriteFiles(t, dir, "server", certstest.Localhost("second")) }, "second", 1, 0},
		{"cert_before_key", func() {
			c, _ := ca.Issue(t, certstest.Localhost("third"))
			certstest.Write(t, certFile, c)
		}, "second", 1, 1},
		{"mismatch_reported_once", func() {}, "second", 1, 1},
		{"key_removed", func() { os.Remove(keyFile) }, "second", 1, 2},
		{"both_written", func() { ca.WriteFiles(t, dir, "server", certstest.Localhost("fourth")) }, "fourth", 2, 2},
		{"garbage", func() { certstest.Write(t, keyFile, []byte("not pem")) }, "fourth", 2, 3},
	}
	for _, s := range steps {
		s.do()
		if got := cn(); got != s.cn {
			t.Errorf("%s: certificate %q in effect, want %q", s.name, got, s.cn)
		}
		if ok, failed := r.counts(); ok != s.ok || failed != s.failed {
			t.Errorf("%s: %d reloads and %d failures reported, want %d and %d", s.name, ok, failed, s.ok, s.failed)
		}
	}
	if _, err := LoadKeypair("server", certFile, keyFile, 0, nil); err == nil {
		t.Error("LoadKeypair of a bad pair succeeded")
	}
	if _, err := LoadKeypair("server", filepath.Join(dir, "none"), keyFile, 0, nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadKeypair of a missing file: %v", err)
	}
}

func TestBundle(t *testing.T) {
	dir := t.TempDir()
	a, b := certstest.NewCA(t, "a"), certstest.NewCA(t, "b")
	path := filepath.Join(dir, "ca.pem")
	certstest.Write(t, path, a.PEM)
	bundle, err := LoadBundle("ca", path, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	trusts := func(ca *certstest.CA) bool {
		_, err := ca.Cert.Verify(x509.VerifyOptions{Roots: bundle.Pool()})
		return err == nil
	}
	if !trusts(a) || trusts(b) {
		t.Fatal("the bundle does not hold exactly a")
	}
	certstest.Write(t, path, append(append([]byte{}, a.PEM...), b.PEM...))
	if !trusts(a) || !trusts(b) {
		t.Error("after b was appended the bundle does not hold both")
	}
	certstest.Write(t, path, []byte("no certificates here"))
	if !trusts(a) || !trusts(b) {
		t.Error("a file without certificates replaced the bundle")
	}
	certstest.Write(t, path, []byte{})
	if _, err := LoadBundle("ca", path, 0, nil); err == nil {
		t.Error("LoadBundle of an empty file succeeded")
	}
}

// serve accepts TLS connections with cfg on loopback and answers each
// handshake by writing the client certificate's common name (or "-").
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return
				}
				name := "-"
				if pc := tc.ConnectionState().PeerCertificates; len(pc) > 0 {
					name = pc[0].Subject.CommonName
				}
				_, _ = io.WriteString(c, name)
			})
		}
	})
	return ln.Addr().String()
}

// hello dials addr with cfg and returns what the server wrote: the
// server certificate's common name is checked by the caller through
// cfg's roots.
func hello(addr string, cfg *tls.Config) (server, said string, err error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil {
		return "", "", err
	}
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, string(b), nil
}

func TestServer(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "server-ca")
	certFile, keyFile := ca.WriteFiles(t, dir, "server", certstest.Localhost("one"))
	kp, err := LoadKeypair("server", certFile, keyFile, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, Server(kp, nil))

	tests := []struct {
		name   string
		cfg    *tls.Config
		server string // "" when the handshake must fail
	}{
		{"trusted", &tls.Config{RootCAs: ca.Pool()}, "one"},
		{"tls12", &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12}, "one"},
		{"tls11_refused", &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11}, ""},
		{"other_ca_refused", &tls.Config{RootCAs: certstest.NewCA(t, "other").Pool()}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, said, err := hello(addr, tc.cfg)
			if tc.server == "" {
				if err == nil {
					t.Errorf("handshake succeeded, want it refused")
				}
				return
			}
			if err != nil || got != tc.server || said != "-" {
				t.Errorf("hello = %q, %q, %v; want %q, \"-\"", got, said, err, tc.server)
			}
		})
	}

	t.Run("rotation_without_restart", func(t *testing.T) {
		ca.WriteFiles(t, dir, "server", certstest.Localhost("two"))
		if got, _, err := hello(addr, &tls.Config{RootCAs: ca.Pool()}); err != nil || got != "two" {
			t.Errorf("after rotation the server presents %q (%v), want two", got, err)
		}
	})
}

func TestServerMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientsA, clientsB := certstest.NewCA(t, "server-ca"), certstest.NewCA(t, "clients-a"), certstest.NewCA(t, "clients-b")
	certFile, keyFile := serverCA.WriteFiles(t, dir, "server", certstest.Localhost("server"))
	kp, err := LoadKeypair("server", certFile, keyFile, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "clients.pem")
	certstest.Write(t, caFile, clientsA.PEM)
	bundle, err := LoadBundle("clients", caFile, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, Server(kp, bundle))
	alice := clientsA.Pair(t, certstest.Leaf{CommonName: "alice", Client: true})
	bob := clientsB.Pair(t, certstest.Leaf{CommonName: "bob", Client: true})
	try := func(certs ...tls.Certificate) (string, error) {
		_, said, err := hello(addr, &tls.Config{RootCAs: serverCA.Pool(), Certificates: certs})
		return said, err
	}
	if said, err := try(alice); err != nil || said != "alice" {
		t.Errorf("alice, signed by the bundle's CA: %q, %v", said, err)
	}
	if _, err := try(); err == nil {
		t.Error("a client without a certificate was let in")
	}
	if _, err := try(bob); err == nil {
		t.Error("bob, signed by another CA, was let in")
	}
	certstest.Write(t, caFile, clientsB.PEM)
	if said, err := try(bob); err != nil || said != "bob" {
		t.Errorf("after the bundle changed to bob's CA, bob: %q, %v", said, err)
	}
	if _, err := try(alice); err == nil {
		t.Error("after the bundle dropped alice's CA, alice was let in")
	}
}

func TestDialer(t *testing.T) {
	dir := t.TempDir()
	engineCA, gatewayCA := certstest.NewCA(t, "engine-ca"), certstest.NewCA(t, "gateway-ca")
	engine := engineCA.Pair(t, certstest.Leaf{CommonName: "engine", DNSNames: []string{"vllm.internal"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	named := engineCA.Pair(t, certstest.Leaf{CommonName: "named", DNSNames: []string{"vllm.internal"}})
	clientPool := gatewayCA.Pool()
	serverCfg := func(c tls.Certificate) *tls.Config {
		return &tls.Config{Certificates: []tls.Certificate{c}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: clientPool}
	}
	byIP, byName := serve(t, serverCfg(engine)), serve(t, serverCfg(named))

	caFile := filepath.Join(dir, "engines.pem")
	certstest.Write(t, caFile, engineCA.PEM)
	roots, err := LoadBundle("engines", caFile, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := gatewayCA.WriteFiles(t, dir, "gateway", certstest.Leaf{CommonName: "gateway", Client: true})
	cert, err := LoadKeypair("gateway", certFile, keyFile, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var nd net.Dialer
	tests := []struct {
		name string
		d    Dialer
		addr string
		said string // "" when the dial must fail
	}{
		{"ip_san", Dialer{Dial: nd.DialContext, Roots: roots}, byIP, "-"},
		{"client_cert", Dialer{Dial: nd.DialContext, Roots: roots, Cert: cert}, byIP, "gateway"},
		{"name_mismatch", Dialer{Dial: nd.DialContext, Roots: roots}, byName, ""},
		{"server_name_override", Dialer{Dial: nd.DialContext, Roots: roots, ServerName: "vllm.internal"}, byName, "-"},
		{"system_roots_refuse_test_ca", Dialer{Dial: nd.DialContext}, byIP, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.d.DialTLSContext(context.Background(), "tcp", tc.addr)
			if tc.said == "" {
				if err == nil {
					c.Close()
					t.Error("dial succeeded, want it refused")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if b, _ := io.ReadAll(c); string(b) != tc.said {
				t.Errorf("the engine saw client %q, want %q", b, tc.said)
			}
			if v := c.(*tls.Conn).ConnectionState().Version; v < tls.VersionTLS12 {
				t.Errorf("TLS version %x", v)
			}
		})
	}
}

// TestKeypairDated: a certificate past its expiry, or before its start, is
// named so; one within its dates is not.
func TestKeypairDated(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "test-ca")
	var r reports
	for _, tc := range []struct {
		name     string
		notAfter time.Time
		at       time.Time
		want     string
	}{
		{"valid", time.Now().Add(time.Hour), time.Now(), ""},
		{"expired", time.Now().Add(-30 * time.Minute), time.Now(), "expired at "},
		{"not_yet", time.Now().Add(time.Hour), time.Now().Add(-2 * time.Hour), "not valid until "},
	} {
		leaf := certstest.Localhost(tc.name)
		leaf.NotAfter = tc.notAfter
		certFile, keyFile := ca.WriteFiles(t, dir, tc.name, leaf)
		kp, err := LoadKeypair(tc.name, certFile, keyFile, time.Hour, r.report)
		if err != nil {
			t.Fatal(err)
		}
		if got := kp.Dated(tc.at); tc.want == "" && got != "" || tc.want != "" && !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: Dated = %q, want %q", tc.name, got, tc.want)
		}
	}
}

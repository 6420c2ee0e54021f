package gateway

// TLS on the client port (server.tls) and to https:// engines
// (upstream.tls). Certificates, keys and CA bundles are reread when their
// files change (package certs). The client port's handshake must finish
// within server.header_read_timeout, as net/http bounds it, so a client
// that stalls in it holds a connection no longer than one that stalls in
// its headers.

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/certs"
)

// tlsCheckEvery is how often, at most, a handshake checks whether TLS
// files changed.
const tlsCheckEvery = time.Second

// serverTLS is the client port's TLS.
type serverTLS struct {
	config *tls.Config
	cert   *certs.Keypair
}

// buildTLS loads the client port's certificate and client CAs and the
// engines' CAs and client certificate, and sets the upstream transport to
// dial https:// engines with them.
func (g *Gateway) buildTLS() error {
	m := g.access.metrics
	var kp *certs.Keypair
	report := func(name string, err error) {
		if err != nil {
			m.tlsReloads.WithLabelValues(name, "error").Inc()
			g.log.Error("TLS files not reloaded; what is in effect stays", "name", name, "error", err)
			return
		}
		m.tlsReloads.WithLabelValues(name, "ok").Inc()
		g.log.Info("TLS files reloaded", "name", name)
		if name == "server_cert" && kp != nil {
			g.warnDated(kp)
		}
	}
	st := g.cfg.Server.TLS
	if st.Enabled() {
		var err error
		if kp, err = certs.LoadKeypair("server_cert", st.CertFile, st.KeyFile, tlsCheckEvery, report); err != nil {
			return err
		}
		g.warnDated(kp)
		var clients *certs.Bundle
		if st.ClientCAFile != "" {
			if clients, err = certs.LoadBundle("client_ca", st.ClientCAFile, tlsCheckEvery, report); err != nil {
				return err
			}
		}
		g.access.tls = &serverTLS{config: certs.Server(kp, clients), cert: kp}
		g.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "inferrail_tls_certificate_expiry_timestamp_seconds",
			Help:        "When the certificate in effect expires, as a Unix time.",
			ConstLabels: prometheus.Labels{"name": "server_cert"},
		}, func() float64 { return float64(kp.NotAfter().Unix()) }))
	}
	return g.buildUpstreamTLS(report)
}

// warnDated logs a server certificate that clients will refuse for its
// dates. It is served all the same: it may be what an operator means to
// replace, and the port stays up for clients that skip the check.
func (g *Gateway) warnDated(kp *certs.Keypair) {
	if why := kp.Dated(time.Now()); why != "" {
		g.log.Warn("the server certificate is "+why+": clients will refuse it", "cert_file", g.cfg.Server.TLS.CertFile)
	}
}

// buildUpstreamTLS gives the transport a TLS dialer with upstream.tls's
// CAs, client certificate and server name. Without upstream.tls, https://
// engines are dialed with the system's roots and TLS 1.2 at least.
func (g *Gateway) buildUpstreamTLS(report certs.Report) error {
	if g.transport == nil { // --check builds no transport
		g.transport = &http.Transport{Protocols: new(http.Protocols)}
	}
	uc := g.cfg.Upstream
	d := &certs.Dialer{
		Dial:             (&net.Dialer{Timeout: time.Duration(uc.ConnectTimeout), KeepAlive: 30 * time.Second}).DialContext,
		ServerName:       uc.TLS.ServerName,
		HandshakeTimeout: time.Duration(uc.ConnectTimeout),
		NextProtos:       []string{"http/1.1"},
	}
	if uc.HTTP2 {
		d.NextProtos = []string{"h2"}
		g.transport.Protocols.SetHTTP2(true)
	}
	var err error
	if uc.TLS.CAFile != "" {
		if d.Roots, err = certs.LoadBundle("upstream_ca", uc.TLS.CAFile, tlsCheckEvery, report); err != nil {
			return err
		}
	}
	if uc.TLS.CertFile != "" {
		if d.Cert, err = certs.LoadKeypair("upstream_cert", uc.TLS.CertFile, uc.TLS.KeyFile, tlsCheckEvery, report); err != nil {
			return err
		}
	}
	g.transport.DialTLSContext = d.DialTLSContext
	return nil
}

// serveClient serves the client port on ln, over TLS when configured.
func (g *Gateway) serveClient(srv *http.Server, ln net.Listener) error {
	if g.access.tls == nil {
		return srv.Serve(ln)
	}
	srv.TLSConfig = g.access.tls.config
	srv.Protocols.SetHTTP2(true)
	return srv.ServeTLS(ln, "", "")
}

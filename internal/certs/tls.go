package certs

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// Server returns the client port's TLS config: TLS 1.2 at least, Go's
// default cipher suites, the certificate kp holds, and ALPN for HTTP/2 and
// HTTP/1.1. With clientCAs, every client must present a certificate that
// chains to the bundle in effect at its handshake.
func Server(kp *Keypair, clientCAs *Bundle) *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return kp.Certificate(), nil
		},
	}
	if clientCAs == nil {
		return c
	}
	base := c.Clone()
	base.ClientAuth = tls.RequireAndVerifyClientCert
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cc := base.Clone()
		cc.ClientCAs = clientCAs.Pool()
		return cc, nil
	}
	return c
}

// Dialer makes TLS connections to engines. Each connection gets the CA
// bundle and client certificate in effect when it is dialed.
type Dialer struct {
	// Dial makes the TCP connection.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Roots are the CAs engines' certificates must chain to; nil means the
	// system's.
	Roots *Bundle
	// Cert is the client certificate for engines that ask for one; nil
	// means none.
	Cert *Keypair
	// ServerName is checked against engines' certificates and sent as
	// SNI; empty means the host dialed.
	ServerName string
	// NextProtos are offered by ALPN, such as "h2" and "http/1.1".
	NextProtos []string
	// HandshakeTimeout bounds the handshake; 0 means the context's
	// deadline only.
	HandshakeTimeout time.Duration
}

// DialTLSContext dials addr and completes a TLS handshake; it is an
// http.Transport's DialTLSContext.
func (d *Dialer) DialTLSContext(ctx context.Context, network, addr string) (net.Conn, error) {
	raw, err := d.Dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: d.ServerName, NextProtos: d.NextProtos}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	if d.Roots != nil {
		cfg.RootCAs = d.Roots.Pool()
	}
	if d.Cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return d.Cert.Certificate(), nil
		}
	}
	if d.HandshakeTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.HandshakeTimeout)
		defer cancel()
	}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return c, nil
}

package gateway

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// Reasons a browser's request to the admin port is refused, as
// inferrail_auth_failures_total labels them.
const (
	failCrossOrigin = "cross_origin" // sent by a page of another origin
	failForeignHost = "foreign_host" // a name other than localhost, on a loopback port without keys
)

// refuseBrowsers keeps web pages off the admin port. A page of another site
// can send a form or a fetch there (its Origin then is not the host the
// request went to), and a page whose host name its owner rebinds to
// 127.0.0.1 is one the browser lets read and patch the admin API as its
// own origin: without admin keys, a loopback port answers only requests
// addressed to an IP address or localhost. Programs (curl, Prometheus)
// send no Origin and address the port as they reach it.
//
// An admin_listen that names its host (other than localhost) is taken as
// exposed by the config, which cannot resolve it; but such a name that
// resolved to loopback is a loopback port all the same, and the address a
// request arrived on says so. There the name itself is let through, as
// localhost is: it is the operator's, not a page's.
func (g *Gateway) refuseBrowsers(next http.Handler) http.Handler {
	keyless := g.access.adminKeys == nil
	checkHost := keyless && !g.cfg.AdminExposed()
	name := ""
	if keyless {
		name = listenName(g.cfg.Server.AdminListen)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reason := ""
		switch {
		case r.Header.Get("Origin") != "" && !originIsHost(r.Header.Get("Origin"), r.Host):
			reason = failCrossOrigin
		case checkHost && !localHost(r.Host),
			name != "" && arrivedOnLoopback(r) && !localHost(r.Host) && !hostIs(r.Host, name):
			reason = failForeignHost
		}
		if reason == "" {
			next.ServeHTTP(w, r)
			return
		}
		g.access.metrics.failures.WithLabelValues(portAdmin, reason).Inc()
		skipBody(w, r)
		msg := "the admin port does not answer requests a web page of another origin sends"
		if reason == failForeignHost {
			msg = "the admin port listens on loopback without admin keys and answers only requests addressed to an IP address or localhost, not " + r.Host
		}
		writeAdminJSON(w, http.StatusForbidden, adminError{Error: msg})
	})
}

// originIsHost reports whether origin (scheme://host[:port]) names the
// host the request was sent to.
func originIsHost(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// localHost reports whether a Host header names an IP address or
// localhost (a request without one, HTTP/1.0, is taken as local).
func localHost(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostOf(hostport)
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return strings.EqualFold(host, "localhost")
}

// hostOf is a Host header's or listen address's host, without its port,
// brackets or a final dot.
func hostOf(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.Trim(host, "[]"), ".")
}

// hostIs reports whether a Host header names the host name.
func hostIs(hostport, name string) bool { return strings.EqualFold(hostOf(hostport), name) }

// listenName is the host name a listen address names, "" when it names an
// IP address, localhost or no host (every interface).
func listenName(addr string) string {
	host := hostOf(addr)
	if host == "" || strings.EqualFold(host, "localhost") {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return ""
	}
	return host
}

// arrivedOnLoopback reports whether r came in on a loopback address.
func arrivedOnLoopback(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

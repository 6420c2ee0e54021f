package gateway

// API keys on both ports. With auth.keys_file, every client-port request
// but /health must name a configured key in "Authorization: Bearer"; the
// key is put in the request's context for the limits and the model check
// (limits.go), and the header is not forwarded to engines. With
// auth.admin_keys_file, every admin request must name an admin key.
// Without them the ports behave as before keys existed.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/auth"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/ratelimit"
)

// Ports, as inferrail_auth_failures_total labels them.
const (
	portClient = "client"
	portAdmin  = "admin"
)

// Reasons of inferrail_request_errors_total for refusals of this file and
// limits.go.
const (
	reasonUnauthorized = "unauthorized"
	reasonForbidden    = "forbidden"
	reasonRateLimited  = "rate_limited"
)

// access is what the gateway controls access with: API keys, rate limits
// and TLS. Built once by buildAccess; the key sets inside the sources
// change as their files do.
type access struct {
	keys      *auth.Source      // client keys; nil without auth.keys_file
	adminKeys *auth.Source      // admin keys; nil without auth.admin_keys_file
	limiter   ratelimit.Limiter // the buckets of keys and models
	tls       *serverTLS        // the client port's TLS; nil for plain HTTP
	metrics   *accessMetrics
}

// accessMetrics are the families of keys, limits and TLS.
type accessMetrics struct {
	failures    *prometheus.CounterVec
	limited     *prometheus.CounterVec
	reloads     *prometheus.CounterVec
	tlsReloads  *prometheus.CounterVec
	charged     *prometheus.CounterVec
	chargedBy   map[string]prometheus.Counter // charged's series by source, looked up once
	trueUps     prometheus.Counter
	limitErrors prometheus.Counter
}

func newAccessMetrics(reg prometheus.Registerer) *accessMetrics {
	m := &accessMetrics{
		failures:    counterVec("inferrail_auth_failures_total", "Requests refused for their credential, by port (client, admin) and reason: missing, malformed, unknown_key, model_not_allowed, and on the admin port cross_origin and foreign_host (a web page's request).", "port", "reason"),
		limited:     counterVec("inferrail_rate_limited_total", "Requests refused with 429 by a rate limit, by model, key name (empty without keys) and the limit that refused (key_requests, model_prompt_tokens, ...).", "model", "key", "limit"),
		reloads:     counterVec("inferrail_auth_reloads_total", "Rereads of a changed keys file (keys, admin_keys), by result: ok, or error when the keys in effect stayed.", "file", "result"),
		tlsReloads:  counterVec("inferrail_tls_reloads_total", "Rereads of changed TLS files (server_cert, client_ca, upstream_ca, upstream_cert), by result: ok, or error when what was in effect stayed.", "name", "result"),
		charged:     counterVec("inferrail_rate_limit_output_tokens_total", "Output tokens charged to output limits, by where the count came from: usage (the engine's), stream_chunks or bytes (estimated when a response carried no usage).", "source"),
		trueUps:     counter("inferrail_rate_limit_prompt_trueups_total", "Requests whose prompt tokens were taken by an estimate (the edge tokenizer had no count in time, or none to give) and then corrected to the engine's usage.prompt_tokens."),
		limitErrors: counter("inferrail_rate_limiter_errors_total", "Rate limiter calls that failed; the request was admitted. Always 0 with the in-process limiter."),
	}
	reg.MustRegister(m.failures, m.limited, m.reloads, m.tlsReloads, m.charged, m.trueUps, m.limitErrors)
	m.chargedBy = map[string]prometheus.Counter{}
	for _, s := range []string{sourceUsage, sourceChunks, sourceBytes} {
		m.chargedBy[s] = m.charged.WithLabelValues(s)
	}
	return m
}

// buildAccess reads the key files and TLS material and sets the limits up.
func (g *Gateway) buildAccess() error {
	a := &access{limiter: ratelimit.NewLocal(), metrics: newAccessMetrics(g.registry)}
	g.access = a
	ac := g.cfg.Auth
	var err error
	if ac.KeysFile != "" {
		if a.keys, err = g.openKeys("keys", ac.KeysFile, false); err != nil {
			return err
		}
	}
	if ac.AdminKeysFile != "" {
		if a.adminKeys, err = g.openKeys("admin_keys", ac.AdminKeysFile, true); err != nil {
			return err
		}
	}
	if g.cfg.UpstreamTLSUnused() {
		g.log.Warn(upstreamTLSUnused)
	}
	if g.cfg.AdminExposed() {
		g.log.Warn("the admin port listens beyond loopback and asks for no key: set auth.admin_keys_file or keep server.admin_listen on 127.0.0.1",
			"admin_listen", g.cfg.Server.AdminListen)
	}
	for _, s := range g.cfg.SharedEngines() {
		g.log.Warn(s)
	}
	return g.buildTLS()
}

// openKeys opens a keys file whose rereads are counted and logged, and
// whose keys' series are deleted when they leave.
func (g *Gateway) openKeys(file, path string, admin bool) (*auth.Source, error) {
	m := g.access.metrics
	src, err := auth.Open(path, auth.Options{Admin: admin, Resolve: func(name string) (string, bool) { return g.current().resolveModel(name) }}, g.log.With("component", "auth"), func(prev, next *auth.Set, err error) {
		if err != nil {
			m.reloads.WithLabelValues(file, "error").Inc()
			return
		}
		m.reloads.WithLabelValues(file, "ok").Inc()
		kept := map[string]bool{}
		for _, k := range next.Keys() {
			kept[k.Name] = true
		}
		for _, k := range prev.Keys() {
			if !kept[k.Name] {
				m.limited.DeletePartialMatch(prometheus.Labels{"key": k.Name})
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("auth.%s_file: %w", file, err)
	}
	g.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "inferrail_auth_keys", Help: "Keys in effect, by file (keys, admin_keys).", ConstLabels: prometheus.Labels{"file": file},
	}, func() float64 { return float64(src.Keys().Len()) }))
	return src, nil
}

// CheckAccess reads what --check can check of access beyond the config:
// the key files and TLS files load, the decision log and capture paths
// name regular files or nothing yet, and those and the shadow log's could
// be written now. It returns notes on what is legal but
// worth knowing (an admin port open beyond loopback).
func CheckAccess(cfg *config.Config) (notes []string, err error) {
	g := &Gateway{cfg: cfg, registry: prometheus.NewRegistry()}
	g.log = slog.New(slog.DiscardHandler)
	gen, err := newGeneration(cfg, 1, nil)
	if err != nil {
		return nil, err
	}
	g.gen.Store(gen)
	if err := g.buildAccess(); err != nil {
		return nil, err
	}
	if err := checkLogPaths(&cfg.Observability); err != nil {
		return nil, err
	}
	if err := probeLogPaths(&cfg.Observability); err != nil {
		return nil, err
	}
	if t := g.access.tls; t != nil {
		if why := t.cert.Dated(time.Now()); why != "" {
			notes = append(notes, fmt.Sprintf("server.tls.cert_file %s is %s: clients will refuse it", cfg.Server.TLS.CertFile, why))
		}
	}
	if cfg.UpstreamTLSUnused() {
		notes = append(notes, upstreamTLSUnused)
	}
	if cfg.AdminExposed() {
		notes = append(notes, fmt.Sprintf("server.admin_listen %s is beyond loopback and auth.admin_keys_file is not set: anyone who reaches it can read metrics and use the admin API", cfg.Server.AdminListen))
	}
	notes = append(notes, cfg.SharedEngines()...)
	return notes, nil
}

// upstreamTLSUnused is the warning for upstream.tls set with no https
// engine; it takes effect for the https replicas a live change adds.
const upstreamTLSUnused = "upstream.tls is set but no replica or dns group is https://: it applies to none until one is"

// requireKey makes every request but /health name a client key, when
// there are keys.
func (g *Gateway) requireKey(next http.Handler) http.Handler {
	src := g.access.keys
	if src == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			next.ServeHTTP(w, r)
			return
		}
		key, fail := lookupKey(src, r)
		if key == nil {
			g.access.metrics.failures.WithLabelValues(portClient, string(fail)).Inc()
			g.answerOwn(w, r, unauthorized(fail))
			return
		}
		next.ServeHTTP(w, withKey(r, key))
	})
}

// requireAdminKey makes every admin request name an admin key, when there
// are admin keys.
func (g *Gateway) requireAdminKey(next http.Handler) http.Handler {
	src := g.access.adminKeys
	if src == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, fail := lookupKey(src, r)
		if key == nil {
			g.access.metrics.failures.WithLabelValues(portAdmin, string(fail)).Inc()
			skipBody(w, r)
			w.Header().Set(openai.HeaderRequestID, requestIDFor(r))
			unauthorized(fail).write(w)
			return
		}
		next.ServeHTTP(w, withKey(r, key))
	})
}

// lookupKey finds the key a request names, or why there is none.
func lookupKey(src *auth.Source, r *http.Request) (*auth.Key, auth.Failure) {
	tok, fail := auth.Bearer(r.Header)
	if fail != auth.FailureNone {
		return nil, fail
	}
	if k := src.Keys().Lookup(tok); k != nil {
		return k, auth.FailureNone
	}
	return nil, auth.UnknownKey
}

// withKey is r with key in its context and without its Authorization
// header, which must not reach engines. The header map is copied, not
// changed: a handler does not modify its request.
func withKey(r *http.Request, key *auth.Key) *http.Request {
	r = r.WithContext(auth.NewContext(r.Context(), key))
	h := make(http.Header, len(r.Header))
	for k, vs := range r.Header {
		if k != "Authorization" {
			h[k] = vs
		}
	}
	r.Header = h
	return r
}

// keyAllows reports whether the request's key, if any, may use model, as
// gen resolves the names the key lists.
func keyAllows(r *http.Request, gen *generation, model string) bool {
	k := auth.FromContext(r.Context())
	return k == nil || k.Allows(model, gen.resolveModel)
}

// warnLostGrants logs each name the keys in effect list that the config
// cur knew and next does not: the name grants nothing from next on.
func (g *Gateway) warnLostGrants(cur, next *generation) {
	if g.access == nil || g.access.keys == nil || cur == nil {
		return
	}
	for _, u := range g.access.keys.Keys().Unknown(next.resolveModel) {
		if _, known := cur.resolveModel(u.Name); known {
			g.log.Warn("a key names a model the config no longer has; it grants nothing", "key", u.Key, "model", u.Name)
		}
	}
}

// unauthorized is the 401 of a credential refused for fail. It never
// quotes the credential.
func unauthorized(fail auth.Failure) *refusal {
	msg := "Incorrect API key provided."
	switch fail {
	case auth.Missing:
		msg = "No API key was provided: send it as `Authorization: Bearer <key>`."
	case auth.Malformed:
		msg = "The Authorization header must be exactly one `Bearer <key>`, the key at most 256 characters of A-Z a-z 0-9 - . _ ~ + / and trailing =."
	}
	rf := newRefusal(openai.OpenAIError(http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", msg, ""), reasonUnauthorized)
	rf.header = http.Header{"Www-Authenticate": {`Bearer realm="inferrail"`}}
	return rf
}

// modelDenied is the 403 of a key that may not use a model.
func modelDenied(key, model string) *refusal {
	return newRefusal(openai.OpenAIError(http.StatusForbidden, "invalid_request_error", "model_not_allowed",
		fmt.Sprintf("The API key `%s` may not use the model `%s`.", key, model), "model"), reasonForbidden)
}

// watchKeys rereads the key files when they change, until ctx ends.
func (g *Gateway) watchKeys(ctx context.Context) {
	every := time.Duration(g.cfg.Auth.ReloadInterval)
	var wg sync.WaitGroup
	for _, src := range []*auth.Source{g.access.keys, g.access.adminKeys} {
		if src != nil {
			wg.Go(func() { src.Run(ctx, every) })
		}
	}
	wg.Wait()
}

// Package gateway is inferrail-gateway: the OpenAI-compatible client port
// that proxies requests to engines, and the admin port with its metrics.
package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/load"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/reclaim"
	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Gateway routes OpenAI-compatible requests to a fleet of engines. Build it
// with New and run it with Serve.
type Gateway struct {
	// cfg is the config the gateway started with. What can change while it
	// runs is read from the generation in effect (current); the rest only a
	// restart changes, so cfg holds it.
	cfg       *config.Config
	gen       atomic.Pointer[generation]
	reloadMu  sync.Mutex  // serializes reloads
	patchMu   sync.Mutex  // serializes admin patches, read to applied
	file      *configFile // nil when not started from a file; guarded by reloadMu
	shadows   *shadowRunner
	log       *slog.Logger
	fleet     *fleet.Fleet
	health    *fleet.Health
	discovery *fleet.Discovery
	scraper   *load.Scraper
	transport *http.Transport
	registry  *prometheus.Registry
	metrics   *metrics
	flow      *flowControl // every model's queue (flow.go)
	draining  atomic.Bool
	stopping  chan struct{} // closed when draining starts: queued requests leave
	arrivals  atomic.Uint64 // client requests that reached a handler, for reclaim
	active    atomic.Int64  // client requests in a handler now, for reclaim

	tokenizers map[string]*modelTokenizer // by model; absent: no predictions
	tokPool    *tokenize.Pool
	index      index.Index
	kv         *kvEvents // the engines' KV event streams; nil in approximate mode
	drift      *drift    // predictions checked against the engines' usage
	tokChecks  *tokenChecks
	learned    sync.Map      // replica → engine-reported capacity last applied, in its blocks
	access     *access       // API keys, rate limits and TLS (auth.go, limits.go, tls.go)
	obs        observability // traces and the decision log
}

// policySettings are the routing settings of one model.
func policySettings(cfg *config.Config, model string, seed uint64) policy.Settings {
	r := &cfg.Routing
	cm := cfg.ModelCostModel(model)
	s := policy.DefaultSettings()
	s.Seed = seed
	s.Epsilon, s.Kappa, s.ShortPromptTokens, s.KVGuard = r.Epsilon, r.Kappa, r.ShortPromptTokens, r.KVGuard
	s.SessionAffinity, s.HistoryAffinity, s.BacklogCost = r.SessionAffinity, r.HistoryAffinity, r.BacklogCost
	s.PrefixHashBlocks = r.PrefixHash.Blocks
	s.Cost = policy.CostParams{
		PrefillTokenSecs:       cm.PrefillTokenSecs,
		PrefillPairSecs:        cm.PrefillPairSecs,
		PrefillFixedSecs:       cm.PrefillFixedSecs,
		DecodeInterferenceSecs: cm.DecodeInterferenceSecs,
	}
	s.KVAware = policy.KVWeights{CacheWeight: r.KVAware.CacheWeight, LoadWeight: r.KVAware.LoadWeight}
	s.HotPrefix = policy.HotPrefixParams{Blocks: r.HotPrefix.Blocks, Window: time.Duration(r.HotPrefix.Window), Utilization: r.HotPrefix.Utilization,
		Demand: r.HotPrefix.Demand, Copies: r.HotPrefix.Copies}
	return s
}

// Options are what a gateway needs beyond its config.
type Options struct {
	Logger   *slog.Logger   // nil discards
	Resolver fleet.Resolver // for DNS groups; nil means the system resolver
	// ConfigPath is the file the config was read from, reread every
	// server.reload_interval, on SIGHUP and on POST /admin/reload. Empty:
	// the config changes only through PATCH /admin/config.
	ConfigPath string
}

// New builds a gateway from a validated config.
func New(cfg *config.Config, opts Options) (*Gateway, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, log: logger, tokenizers: map[string]*modelTokenizer{}, stopping: make(chan struct{})}
	if opts.ConfigPath != "" {
		g.file = &configFile{path: opts.ConfigPath}
		if data, err := config.ReadFile(opts.ConfigPath); err == nil {
			g.file.sum = sha256.Sum256(data)
		}
	}
	gen, err := newGeneration(cfg, 1, nil)
	if err != nil {
		return nil, err
	}
	g.gen.Store(gen)
	g.buildTokenizers()
	// The queue is deep enough that a burst waits (up to tokenizer.max_wait,
	// which bounds what a wait costs) instead of being refused at once: a
	// queue of 4 per worker turned away 4% of requests at 2,000 req/s.
	g.tokPool = tokenize.NewPool(cfg.Tokenizer.Workers, 64*cfg.Tokenizer.Workers)
	ix := index.NewApprox(cfg.Index.DefaultCapacityBlocks)
	ix.SetSpeculativeTTL(time.Duration(cfg.Index.SpeculativeTTL))
	g.index = ix
	if err := g.buildFleet(opts.Resolver); err != nil {
		return nil, err
	}
	g.transport = g.newTransport()
	g.registry = prometheus.NewRegistry()
	registerProcessMetrics(g.registry)
	g.flow = newFlowControl(cfg, g.registry)
	g.registry.MustRegister(&fairCollector{g: g})
	g.buildWatchers()
	if err := g.buildAccess(); err != nil {
		g.Close()
		return nil, err
	}
	var sl *shadowLog
	if path := cfg.Observability.ShadowLog; path != "" {
		if sl, err = openShadowLog(path, logger); err != nil {
			g.Close()
			return nil, err
		}
	}
	g.shadows = newShadowRunner(g.registry, sl)
	g.registry.MustRegister(&controlCollector{g: g})
	if g.obs, err = newObservability(&cfg.Observability, g.registry, logger); err != nil {
		if sl != nil {
			sl.close()
		}
		g.Close()
		return nil, err
	}
	// The first generation is written last, once nothing can fail: a
	// start that fails leaves the shadow log as it found it, rather than
	// with a generation of a gateway that never ran.
	g.onGeneration(gen)
	return g, nil
}

// buildTokenizers loads every model's tokenizer.
func (g *Gateway) buildTokenizers() {
	cfg := g.cfg
	for i, m := range cfg.Models {
		// A model without a tokenizer is a legitimate configuration, so it
		// is noted at Info; one whose tokenizer fails to load is a Warn.
		switch mt, err := loadTokenizer(&cfg.Models[i], cfg.Tokenizer.CacheTokens); {
		case err != nil:
			g.log.Warn("model routes without cache predictions", "model", m.Name, "error", err)
		case mt == nil:
			g.log.Info("model routes without cache predictions: no tokenizer configured", "model", m.Name)
		default:
			g.log.Info("model predicts cache hits", "model", m.Name, "tokenizer", m.Tokenizer, "tokenizer_class", mt.class)
			if hft, ok := mt.tok.(hfTokenizer); ok {
				for _, p := range hft.chat.Problems() {
					g.log.Warn("chat requests that use this template route without cache predictions", "model", m.Name, "problem", p)
				}
			}
			mt.revealKeys = cfg.Index.Mode != config.IndexApproximate
			g.tokenizers[m.Name] = mt
		}
	}
}

// buildFleet makes the fleet of the configured replicas, whose KV
// capacity the index learns, and the discovery of DNS groups.
func (g *Gateway) buildFleet(res fleet.Resolver) error {
	static, err := staticReplicas(g.cfg)
	if err != nil {
		return err
	}
	for _, r := range static {
		g.index.Join(r.ID)
		if r.KVCapacityBlocks > 0 {
			g.index.SetCapacity(r.ID, r.KVCapacityBlocks)
		}
	}
	g.fleet = fleet.New(static, g.log)
	var groups []fleet.DNSGroup
	for i, dc := range g.cfg.Discovery.DNS {
		u, err := url.Parse(dc.URL)
		if err != nil {
			return fmt.Errorf("discovery.dns[%d].url: %w", i, err)
		}
		groups = append(groups, fleet.DNSGroup{Name: dc.Name, URL: u, Models: dc.Models, Refresh: time.Duration(dc.Refresh),
			MaxConcurrency: int64(dc.MaxConcurrency), MaxPending: int64(dc.MaxPending), KVCapacityBlocks: dc.KVCapacityBlocks})
	}
	g.discovery = fleet.NewDiscovery(g.fleet, groups, res, g.log)
	return nil
}

// engineClient is a client of the engines over the gateway's transport,
// with timeout (0: none). It follows no redirect: a replica is judged by
// its own answers (a 3xx to a probe or a scrape is a failed one), never by
// a page of the host it points to, and a request is not sent on to it.
// The proxy's requests go through the transport alone, which follows none
// either: the client gets an engine's 3xx as it came.
func (g *Gateway) engineClient(timeout time.Duration) *http.Client {
	return &http.Client{Transport: g.transport, Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
}

// buildWatchers makes what watches the fleet (the engines' load scraper
// and the health checker), the metrics that read them, and the reactions
// of the index and the metrics to replicas that join or leave.
func (g *Gateway) buildWatchers() {
	lc := g.cfg.Load
	g.scraper = load.NewScraper(load.ScrapeConfig{
		Interval: time.Duration(lc.ScrapeInterval), Timeout: time.Duration(lc.ScrapeTimeout), MaxAge: time.Duration(lc.MaxAge),
	}, g.engineClient(0), g.scrapeTargets, g.log, func(id, result string) {
		if !g.memberID(id) {
			return // it left while its page was read
		}
		g.metrics.scrapes.WithLabelValues(id, result).Inc()
		if result == load.ResultOK {
			g.learnCapacity(id)
		}
	}, func(id string) {
		g.index.Reset(id)
		if g.memberID(id) {
			g.metrics.indexResets.WithLabelValues(id).Inc()
		}
	})
	g.metrics = newMetrics(g.registry, g.fleet, g.scraper, g.index, g.tokenizers)
	g.metrics.startAtZero(g.cfg, g.fleet.Snapshot().Replicas, func(model string) bool { return g.tokenizers[model] != nil })
	g.drift = newDrift(g.log)
	g.registry.MustRegister(&driftCollector{d: g.drift})
	g.tokChecks = &tokenChecks{checks: map[string]*tokenCheck{}}
	g.registry.MustRegister(&tokenCheckCollector{c: g.tokChecks})
	g.registry.MustRegister(&indexSourceCollector{g: g})
	if g.cfg.Index.Mode != config.IndexApproximate {
		g.kv = newKVEvents(g.cfg, g.index, g.scraper, g.drift, g.log, g.eventsConfig)
		g.registry.MustRegister(&kvCollector{kv: g.kv})
	}
	hc := g.cfg.Health
	g.health = fleet.NewHealth(fleet.HealthConfig{
		Interval: time.Duration(hc.Interval), UnhealthyInterval: time.Duration(hc.UnhealthyInterval), Timeout: time.Duration(hc.Timeout),
		UnhealthyThreshold: hc.UnhealthyThreshold, HealthyThreshold: hc.HealthyThreshold,
		EjectionBackoff: time.Duration(hc.EjectionBackoff), MaxEjectionBackoff: time.Duration(hc.MaxEjectionBackoff),
		MaxEjectionPercent: hc.MaxEjectionPercent,
	}, g.fleet, g.engineClient(0), g.log, func(r *fleet.Replica) {
		if g.member(r) {
			g.metrics.ejections.WithLabelValues(r.ID).Inc()
		}
	}, nil)
	g.fleet.Watch(func(added, removed []*fleet.Replica) {
		for _, r := range removed {
			// A replica replaced by one of the same ID (its settings were
			// reloaded) keeps its series; its engine's cache is another's.
			if !slices.ContainsFunc(added, func(a *fleet.Replica) bool { return a.ID == r.ID }) {
				g.metrics.forget(r.ID)
				g.forgetAgain(r.ID)
			}
			g.index.Forget(r.ID)
			g.learned.Delete(r.ID)
			g.drift.forget(r.ID)
		}
		// After the departures: a replica replaced by one of its ID is
		// forgotten, then learned anew. The index knows a replica only
		// from here on: a request or a scrape still running on one that
		// left cannot bring it back.
		for _, r := range added {
			g.metrics.replicaAtZero(r)
			g.index.Join(r.ID)
			if r.KVCapacityBlocks > 0 {
				g.index.SetCapacity(r.ID, r.KVCapacityBlocks)
			}
		}
		if g.kv != nil {
			g.kv.leave(removed)
			g.kv.join(added)
		}
	})
}

// scrapeTargets lists the replicas whose engines the load scraper reads.
func (g *Gateway) scrapeTargets() []load.Target {
	reps := g.fleet.Snapshot().Replicas
	out := make([]load.Target, len(reps))
	for i, r := range reps {
		out[i] = load.Target{ID: r.ID, URL: r.URL, BlockSize: g.blockSize(r), Own: func() load.Own {
			unanswered, sent := r.Unanswered()
			return load.Own{Unanswered: unanswered, Sent: sent}
		}}
	}
	return out
}

// blockSize is the block size replica r's cache is counted in: its first
// model's, as its index mirror and shadow LRU count it (a replica serving
// models of other block sizes would cut their prompts otherwise than its
// engine, whose block size is one). 0 when the model is unknown.
func (g *Gateway) blockSize(r *fleet.Replica) int {
	if len(r.Models) == 0 {
		return 0
	}
	for i := range g.cfg.Models {
		if m := &g.cfg.Models[i]; m.Name == r.Models[0] {
			return m.Blocks()
		}
	}
	return 0
}

// newTransport builds the pooled connections to engines: keep-alive
// HTTP/1.1, or h2c with upstream.http2. Compression is left to the engines
// so bytes pass through unchanged.
func (g *Gateway) newTransport() *http.Transport {
	uc := g.cfg.Upstream
	dialer := &net.Dialer{Timeout: time.Duration(uc.ConnectTimeout), KeepAlive: 30 * time.Second}
	t := &http.Transport{
		DialContext:         dialer.DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: uc.MaxIdleConnsPerHost,
		// Below uvicorn's 5 s keep-alive (vLLM, SGLang): a connection the
		// engine is about to close is not picked for a new request.
		IdleConnTimeout:    4 * time.Second,
		DisableCompression: true,
		// An engine's head as large as a client's may be (net/http's
		// server default); a larger one fails the attempt.
		MaxResponseHeaderBytes: http.DefaultMaxHeaderBytes,
		Protocols:              new(http.Protocols),
	}
	if uc.HTTP2 {
		t.Protocols.SetUnencryptedHTTP2(true)
	} else {
		t.Protocols.SetHTTP1(true)
	}
	return t
}

// Close stops what New started (the tokenizer's workers) and closes idle
// connections to engines. Serve does it when it returns; a gateway that is
// built and never served is closed by its builder. Routing a request after
// Close is not allowed.
func (g *Gateway) Close() {
	g.tokPool.Close()
	g.transport.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), observeCloseTimeout)
	defer cancel()
	g.obs.close(ctx, g.log)
}

// Fleet returns the gateway's fleet, for tests and the admin API.
func (g *Gateway) Fleet() *fleet.Fleet { return g.fleet }

// Registry returns the gateway's metrics registry.
func (g *Gateway) Registry() *prometheus.Registry { return g.registry }

// ClientHandler serves the OpenAI-compatible client port. Routes match the
// decoded path exactly, as vLLM's router does: a path that is not one of
// them ("//v1/models", "/health/", a CONNECT's empty one) is a 404 in
// vLLM's shape, never a redirect to a cleaned path that a POST client
// would follow with its body.
func (g *Gateway) ClientHandler() http.Handler {
	generate := g.only(cutIfUnanswered(g.serveGenerate), http.MethodPost)
	models := g.only(unread(g.traceLocal(g.serveModels)), http.MethodGet, http.MethodHead)
	// /health has no span: probes would fill the traces.
	health := g.only(unread(g.serveHealth), http.MethodGet, http.MethodHead)
	keyed := g.requireKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions", "/v1/completions":
			generate(w, r)
		case "/v1/models":
			models(w, r)
		case "/health":
			health(w, r)
		default:
			g.answerOwn(w, r, refusedNotFound)
		}
	}))
	cors := withCORS(keyed, g.cfg.Server.CORSAllowedOrigins)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.arrivals.Add(1)
		g.active.Add(1)
		defer g.active.Add(-1)
		cors.ServeHTTP(w, r)
	})
}

// only admits the given methods and answers others with vLLM's 405.
func (g *Gateway) only(h http.HandlerFunc, methods ...string) http.HandlerFunc {
	allow := strings.Join(methods, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		for _, m := range methods {
			if r.Method == m {
				h(w, r)
				return
			}
		}
		w.Header().Set("Allow", allow)
		g.answerOwn(w, r, refusedMethod)
	}
}

// unread wraps a handler that answers without reading the request's body
// (the model list, /health): as for a refusal (skipBody), a body announced
// but never sent whole would otherwise hold its answer and connection,
// past every timeout, while net/http waited to drain it.
func unread(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		skipBody(w, r)
		h(w, r)
	}
}

// cutIfUnanswered cuts the connection of a request whose handler returned
// without an answer because its client left. Returning would let net/http
// send an empty 200, and a client that had only closed its sending side
// would read a successful, empty completion.
func cutIfUnanswered(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		if sw.status == 0 && r.Context().Err() != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// answerOwn answers a request that never reaches the proxy. Its body is not
// read, so a client waiting on Expect: 100-continue is answered at once.
func (g *Gateway) answerOwn(w http.ResponseWriter, r *http.Request, rf *refusal) {
	skipBody(w, r)
	id := requestIDFor(r)
	w.Header().Set(openai.HeaderRequestID, id)
	rf.write(w)
	g.metrics.errors.WithLabelValues("", rf.reason).Inc()
	g.traceOwn(r, id, rf.answer.Status)
}

func (g *Gateway) serveHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(openai.HeaderRequestID, requestIDFor(r))
	if g.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// busy reports whether a client request is in a handler now, for reclaim:
// a burst still streaming is not idle though nothing new arrives.
func (g *Gateway) busy() bool { return g.active.Load() > 0 }

// returnedMemory logs what reclaim gave back to the OS.
func (g *Gateway) returnedMemory(before, after uint64) {
	g.log.Debug("idle: heap returned to the OS", "held_mib_before", before>>20, "held_mib_after", after>>20)
}

// AdminHandler serves the admin port: metrics and the replicas' state.
func (g *Gateway) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(withoutClash(g.registry), promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("GET /admin/replicas", g.serveReplicas)
	mux.HandleFunc("GET /admin/index", g.serveIndex)
	mux.HandleFunc("POST /admin/tokenize/v1/chat/completions", g.serveTokenize)
	mux.HandleFunc("POST /admin/tokenize/v1/completions", g.serveTokenize)
	mux.HandleFunc("POST /admin/explain/v1/chat/completions", g.serveExplain)
	mux.HandleFunc("POST /admin/explain/v1/completions", g.serveExplain)
	mux.HandleFunc("GET /admin/config", g.serveConfig)
	mux.HandleFunc("PATCH /admin/config", g.servePatchConfig)
	mux.HandleFunc("POST /admin/reload", g.serveReload)
	mux.HandleFunc("GET /admin/shadow", g.serveShadow)
	return g.refuseBrowsers(g.requireAdminKey(exactRoutes(mux)))
}

// Serve resolves DNS groups, starts health checking and serves the client
// and admin listeners until ctx ends; then it stops accepting, lets running
// streams finish for up to server.shutdown_timeout and closes the rest.
func (g *Gateway) Serve(ctx context.Context, client, admin net.Listener) error {
	g.discovery.ResolveAll(ctx)
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.health.Run(bg) })
	wg.Go(func() { _ = g.discovery.Run(bg) })
	wg.Go(func() { _ = g.scraper.Run(bg) })
	wg.Go(func() { g.watchKeys(bg) })
	if g.kv != nil {
		wg.Go(func() { g.kv.run(bg, func() []*fleet.Replica { return g.fleet.Snapshot().Replicas }) })
	}
	if g.cfg.Tokenizer.Verify {
		wg.Go(func() { g.checkTokenizers(bg, 5*time.Second) })
	}
	if g.file != nil {
		wg.Go(func() { g.watchFile(bg) })
	}
	if g.shadows != nil {
		wg.Go(func() { g.shadows.run(bg) })
	}
	// Once idle after a burst, the memory it took goes back to the OS.
	wg.Go(func() {
		reclaim.Run(bg, reclaim.Options{Work: g.arrivals.Load, Busy: g.busy, Returned: g.returnedMemory})
	})
	defer func() {
		stopBG()
		wg.Wait()
		g.Close()
	}()

	sc := g.cfg.Server
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	errLog := slog.NewLogLogger(g.log.Handler(), slog.LevelDebug)
	clientSrv := &http.Server{
		Handler:           g.ClientHandler(),
		ReadHeaderTimeout: time.Duration(sc.HeaderReadTimeout),
		IdleTimeout:       time.Duration(sc.HeaderReadTimeout),
		Protocols:         protocols,
		ErrorLog:          errLog,
		// "OPTIONS *" reaches ClientHandler, which answers it in vLLM's
		// shape with a request ID, instead of net/http's bare 200.
		DisableGeneralOptionsHandler: true,
	}
	// A whole admin request (a patch, a prompt to explain) must arrive
	// within the request timeout: a stalled body would hold its handler.
	// "OPTIONS *" too reaches AdminHandler, whose key and origin guards
	// and exact routes answer it, not net/http's bare 200.
	adminSrv := &http.Server{Handler: g.AdminHandler(), ReadHeaderTimeout: time.Duration(sc.HeaderReadTimeout),
		ReadTimeout: time.Duration(sc.RequestTimeout), IdleTimeout: time.Duration(sc.HeaderReadTimeout), ErrorLog: errLog,
		DisableGeneralOptionsHandler: true}
	errc := make(chan error, 2)
	go func() { errc <- g.serveClient(clientSrv, client) }()
	go func() { errc <- adminSrv.Serve(admin) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	if !g.draining.Swap(true) {
		close(g.stopping)
	}
	g.log.Info("shutting down: draining running requests", "timeout", time.Duration(sc.ShutdownTimeout).String())
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(sc.ShutdownTimeout))
	defer cancel()
	if serr := clientSrv.Shutdown(sctx); serr != nil {
		g.log.Warn("shutdown timeout: closing the requests still running")
		_ = clientSrv.Close()
	}
	_ = adminSrv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/telemetry"
	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// Version is the vLLM version the simulator answers as.
const Version = "0.31.0"

// Server is one simulated vLLM engine behind its OpenAI-compatible HTTP API.
type Server struct {
	cfg         Config
	engine      *Engine
	metrics     *Metrics
	tok         *simtok.Tokenizer
	fingerprint string
	log         *slog.Logger
	mux         http.Handler
	kvpub       *kvPublisher      // nil unless KV events are published
	tracer      *telemetry.Tracer // nil unless traces are exported
	bigBodies   chan struct{}     // held while a large body is parsed and tokenized
}

// New validates cfg and builds a server. Serve runs it.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	m := NewMetrics(MetricsConfig{
		ModelName: cfg.ModelName(),
		// vLLM labels an engine's metrics with its data parallel index.
		Engine:      strconv.Itoa(cfg.DataParallelRank),
		MaxModelLen: cfg.MaxModelLen,
		CacheConfig: cacheConfigLabels(&cfg),
		Start:       start,
	})
	s := &Server{
		cfg:         cfg,
		metrics:     m,
		engine:      NewEngine(cfg, m),
		tok:         simtok.New(),
		fingerprint: fingerprint(&cfg),
		log:         logger,
		bigBodies:   make(chan struct{}, 1),
	}
	tracer, err := newTracer(&cfg)
	if err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	s.tracer = tracer
	if cfg.KVEvents.Publishing() && cfg.EnablePrefixCaching {
		if err := s.startKVEvents(); err != nil {
			return nil, fmt.Errorf("kv events: %w", err)
		}
	}
	s.routes()
	return s, nil
}

// Config returns the configuration the server runs with.
func (s *Server) Config() Config { return s.cfg }

// Metrics returns the server's vLLM metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

// Engine returns the server's engine.
func (s *Server) Engine() *Engine { return s.engine }

// Handler returns the HTTP API. The engine must be running (Serve or Run).
func (s *Server) Handler() http.Handler { return s.mux }

// Run runs the engine until ctx ends, for servers whose HTTP side is
// served by the caller, and its KV event publisher, whose sockets it closes
// before it returns.
func (s *Server) Run(ctx context.Context) error {
	if s.tracer != nil {
		defer s.flushTraces()
	}
	if s.kvpub == nil {
		return s.engine.Run(ctx)
	}
	// The publisher outlives the engine a little, to send its last batches.
	pubCtx, stop := context.WithCancel(context.Background())
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		s.kvpub.run(pubCtx, s.cfg.KVEvents.BufferSteps)
	}()
	err := s.engine.Run(ctx)
	stop()
	<-pubDone
	return err
}

// Serve runs the engine and serves HTTP on ln until ctx ends, then shuts the
// listener down and waits for both.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{
		Handler:           s.mux,
		Protocols:         cleartextProtocols(),
		ReadHeaderTimeout: 10 * time.Second,
		// Requests outlive ctx: a stopping engine ends its streams with an
		// error event, which a request context cancelled with the server's
		// would take for a client that left, ending them as if finished.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	engineDone := make(chan error, 1)
	go func() { engineDone <- s.Run(ctx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveDone:
		serveDone <- err
	}
	cancel()
	shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdownCtx)
	<-engineDone
	if serr := <-serveDone; err == nil && !errors.Is(serr, http.ErrServerClosed) {
		err = serr
	}
	return err
}

// cleartextProtocols accepts HTTP/1.1 and, unlike vLLM, h2c, so routers
// that speak HTTP/2 to their engines can be tested against the simulator.
func cleartextProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

func (s *Server) routes() {
	type route struct {
		method string
		h      http.HandlerFunc
	}
	routes := map[string]route{
		"/v1/chat/completions":        {http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, true) }},
		"/v1/completions":             {http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, false) }},
		"/v1/models":                  {http.MethodGet, s.models},
		"/health":                     {http.MethodGet, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }},
		"/version":                    {http.MethodGet, s.version},
		"/metrics":                    {http.MethodGet, s.serveMetrics},
		"/reset_prefix_cache":         {http.MethodPost, s.resetPrefixCache},
		"/tokenize":                   {http.MethodPost, s.tokenize},
		"/detokenize":                 {http.MethodPost, s.detokenize},
		"/v1/chat/completions/render": {http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.render(w, r, true) }},
		"/v1/completions/render":      {http.MethodPost, func(w http.ResponseWriter, r *http.Request) { s.render(w, r, false) }},
	}
	// Routes match the decoded path exactly, as vLLM's router does: no
	// redirect to a cleaned path ("//v1/models" is a 404), and an escaped
	// slash is a slash. A wrong method on a known path gets vLLM's 405.
	s.mux = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt, ok := routes[r.URL.Path]
		switch {
		case !ok && strings.HasPrefix(r.URL.Path, "/metrics/"):
			// vLLM also mounts prometheus_client's app at /metrics, which
			// answers every path below it with the page, whatever the method.
			s.serveMetrics(w, r)
		case !ok:
			openai.HTTPError(http.StatusNotFound, "Not Found").Write(w)
		case r.Method == rt.method || rt.method == http.MethodGet && r.Method == http.MethodHead:
			rt.h(w, r)
		default:
			w.Header().Set("Allow", rt.method)
			openai.HTTPError(http.StatusMethodNotAllowed, "Method Not Allowed").Write(w)
		}
	})
}

func cacheConfigLabels(c *Config) [][2]string {
	b := func(v bool) string {
		if v {
			return "True"
		}
		return "False"
	}
	slidingWindow := "None"
	if c.SlidingWindow > 0 {
		slidingWindow = strconv.Itoa(c.SlidingWindow)
	}
	return [][2]string{
		{"block_size", strconv.Itoa(c.BlockSize)},
		{"cache_dtype", "auto"},
		{"enable_prefix_caching", b(c.EnablePrefixCaching)},
		{"gpu_memory_utilization", "0.92"},
		{"is_attention_free", "False"},
		{"num_cpu_blocks", "None"},
		{"num_gpu_blocks", strconv.Itoa(c.NumGPUBlocks)},
		{"num_gpu_blocks_override", strconv.Itoa(c.NumGPUBlocks)},
		{"prefix_caching_hash_algo", hashAlgoName(c)},
		{"sliding_window", slidingWindow},
	}
}

func fingerprint(c *Config) string {
	fc := *c
	fc.OTLPTracesEndpoint, fc.OTLPTracesProtocol = "", "" // where spans go changes no answer
	// vLLM hashes its engine config, which the API server's tool flags are
	// no part of.
	fc.EnableAutoToolChoice, fc.ToolCallParser = false, ""
	sum := sha256.Sum256(fmt.Appendf(nil, "%+v", fc))
	return "vllm-" + Version + "-" + hex.EncodeToString(sum[:4])
}

func randomID() string { return fmt.Sprintf("%016x", rand.Uint64()) }

// prepared is a validated request turned into engine input.
type prepared struct {
	g      *genRequest
	model  string
	id     string
	prompt []int
	max    int // effective max_tokens
}

// prepare validates a generation body and tokenizes its prompt.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, chat bool) (*prepared, *openai.Error) {
	body, e := readJSONBody(w, r)
	if e != nil {
		return nil, e
	}
	defer s.holdIfBig(body)()
	p, e := s.tokenized(body, chat)
	if e != nil {
		return nil, e
	}
	// Startup refuses a pool smaller than one request of --max-model-len,
	// so this never fires; should a request outgrow the pool all the same,
	// it is refused here, for queued it would never be admitted and would
	// hold up every request behind it.
	n := len(p.prompt)
	if need, usable := blocksFor(n+p.max, s.cfg.BlockSize), s.cfg.NumGPUBlocks-1; need > usable {
		return nil, openai.BadRequest(fmt.Sprintf("This request needs %d KV cache blocks for its %d input tokens and up to %d output tokens, but the KV cache has %d blocks of %d tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
			need, n, p.max, usable, s.cfg.BlockSize), "input_tokens")
	}
	p.id = r.Header.Get(openai.HeaderRequestID)
	if p.id == "" {
		p.id = p.g.requestID
	}
	if p.id == "" {
		p.id = randomID()
	}
	if chat {
		p.id = "chatcmpl-" + p.id
	} else {
		p.id = "cmpl-" + p.id
	}
	return p, nil
}

// tokenized is what generating and rendering a body share: it validates
// the body, checks its model and tool choice, and tokenizes its prompt
// within --max-model-len, setting the effective max_tokens.
func (s *Server) tokenized(body []byte, chat bool) (*prepared, *openai.Error) {
	g, e := parseGenRequest(body, chat, s.tok)
	if e != nil {
		return nil, e
	}
	p := &prepared{g: g, model: s.cfg.ModelName()}
	// vLLM names its first served name in every answer, whichever one
	// the request used (OpenAIServingModels.model_name).
	if g.model != "" && !s.cfg.Serves(g.model) {
		return nil, openai.ModelNotFound(g.model)
	}
	// After the model, before the prompt, as vLLM renders a chat.
	if e := s.cfg.refuseToolChoice(g.toolChoice); e != nil {
		return nil, e
	}
	requested := g.maxTokens
	if requested == 0 && !chat {
		requested = 16 // vLLM's completion default
	}
	// Counted before tokenized: the ids of a prompt too long to serve are
	// never built.
	var n int
	p.prompt, n = promptIDs(s.tok, g.prompt, s.cfg.MaxModelLen-max(requested, 1))
	if n == 0 {
		return nil, openai.BadRequest("The prompt must not be empty.", "prompt")
	}
	p.max = s.cfg.MaxModelLen - n
	if requested > 0 {
		p.max = min(p.max, requested)
	}
	if n+requested > s.cfg.MaxModelLen || p.max < 1 {
		return nil, s.contextLengthError(g, requested, n)
	}
	return p, nil
}

// contextLengthError is vLLM's 400 for a prompt of n tokens that leaves
// no room for the requested output tokens. vLLM tokenizes a text prompt
// (a chat's rendering too) no further than one token past the input it
// allows, --max-model-len less the output requested: of a longer prompt
// it knows only that it holds at least that many tokens, and says so. A
// prompt of token ids it counts whole.
func (s *Server) contextLengthError(g *genRequest, requested, n int) *openai.Error {
	asked := big.NewInt(int64(requested))
	// requested is clamped, right for the test but not for the message.
	if exact, ok := exactInt(g.maxSent); ok {
		asked = exact
	}
	atLeast := ""
	// requested is clamped far inside int's range, so maxInput cannot
	// overflow; a clamped request is not the one vLLM truncates for.
	maxInput := s.cfg.MaxModelLen - requested
	if !g.prompt.HasIDs && maxInput >= 0 && n > maxInput && asked.Cmp(big.NewInt(int64(requested))) == 0 {
		n, atLeast = maxInput+1, "at least "
	}
	return openai.BadRequest(fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %s output tokens and your prompt contains %s%d input tokens, for a total of %s%s tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
		s.cfg.MaxModelLen, asked, atLeast, n, atLeast, new(big.Int).Add(asked, big.NewInt(int64(n)))), "input_tokens")
}

// newRequest builds the engine's view of a prepared request.
func (s *Server) newRequest(p *prepared) *request {
	seed := blockhash.Seed(s.cfg.ModelName(), "", p.g.prompt.CacheSalt)
	req := &request{
		id:        p.id,
		salt:      p.g.prompt.CacheSalt,
		tokens:    p.prompt[:len(p.prompt):len(p.prompt)],
		prompt:    len(p.prompt),
		seed:      seed,
		maxTokens: p.max,
		maxParam:  p.max,
		minTokens: p.g.minTokens,
		ignoreEOS: p.g.ignoreEOS,
		out:       newStream(),

		reportFull: p.g.reportFull,
	}
	if s.cfg.EnablePrefixCaching {
		req.hashes = blockhash.Extend(nil, seed, p.prompt, s.cfg.BlockSize)
		if l := s.engine.sched.pool.log; l != nil {
			l.extend(req) // here, so that the engine goroutine does not hash prompts
		}
	}
	// The stand-in model's reply depends only on the prompt: its words and,
	// unless the client overrides it, where it stops.
	h := seed.Lo
	for _, t := range p.prompt {
		h = (h ^ uint64(t)) * 0x100000001b3
	}
	req.babble = simtok.NewBabbler(h)
	req.eosAt = naturalLength(h)
	return req
}

// naturalLength is how many tokens, EOS included, the stand-in model writes
// when nothing stops it first: 17 to 256, chosen by the prompt's hash h. It
// is never 16 or fewer, so a completion left at vLLM's default max_tokens of
// 16 always ends with "length", as the tests and the README promise.
func naturalLength(h uint64) int {
	return 17 + int(h>>40%240)
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	sp := s.traceRequest(r)
	defer sp.end()
	p, e := s.prepare(w, r, chat)
	if e != nil {
		sp.refused(e)
		e.Write(w)
		return
	}
	req := s.newRequest(p)
	ctx := r.Context()
	if err := s.engine.submit(ctx, req); err != nil {
		if errors.Is(err, ErrStopped) {
			openai.HTTPError(http.StatusServiceUnavailable, "the engine has stopped").Write(w)
		}
		return
	}
	created := time.Now().Unix()
	if p.g.stream {
		s.stream(w, r, p, req, created)
	} else {
		s.complete(w, r, p, req, created)
	}
	sp.finished(p, req)
}

// wait blocks until the stream has news, the client leaves or the engine
// stops. It reports whether to go on.
func (s *Server) wait(ctx context.Context, req *request) bool {
	select {
	case <-req.out.Ready():
		return true
	case <-ctx.Done():
		s.engine.cancel(req)
		return false
	case <-s.engine.Done():
		return false
	}
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, p *prepared, req *request, created int64) {
	var ids []int
	var finish string
	for finish == "" {
		if !s.wait(r.Context(), req) {
			if r.Context().Err() == nil {
				openai.HTTPError(http.StatusInternalServerError, "the engine stopped before the request finished").Write(w)
			}
			return
		}
		ids, _, finish = req.out.take(ids)
	}
	if finish == "abort" {
		openai.HTTPError(http.StatusInternalServerError, "the request was aborted").Write(w)
		return
	}
	text := s.tok.Decode(ids, true)
	u := usage{prompt: req.prompt, completion: len(ids), cached: req.cached, created: req.created, details: s.cfg.EnablePromptTokensDetails}
	var body []byte
	if p.g.chat {
		body = appendChatResponse(nil, p, created, s.fingerprint, text, finish, u)
	} else {
		body = appendCompletionResponse(nil, p, created, s.fingerprint, text, finish, u)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, p *prepared, req *request, created int64) {
	h := w.Header()
	h.Set("Content-Type", openai.SSEContentType)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	flush()
	sw := streamWriter{p: p, created: created, fingerprint: s.fingerprint, prompt: req.prompt}
	var ids []int
	var buf, text []byte
	// stopped ends the stream with an error event, unless the client has
	// gone: the engine stopped under it, and it must never end as if it
	// had finished.
	stopped := func() {
		if r.Context().Err() == nil {
			e := openai.HTTPError(http.StatusInternalServerError, "the engine stopped before the request finished")
			buf = openai.AppendEvent(buf[:0], e.AppendStreamJSON(nil))
			buf = openai.AppendEvent(buf, openai.Done)
			_, _ = w.Write(buf)
			flush()
		}
	}
	started := false
	for {
		if !s.wait(r.Context(), req) {
			stopped()
			return
		}
		var total int
		var finish string
		ids, total, finish = req.out.take(ids[:0])
		if finish == "abort" {
			stopped()
			return
		}
		buf = buf[:0]
		if !started && p.g.chat && (len(ids) > 0 || finish != "") {
			buf = sw.appendRoleChunk(buf)
		}
		started = true
		if len(ids) > 0 || finish != "" {
			text = s.tok.AppendDecoded(text[:0], ids, true)
			buf = sw.appendChunk(buf, text, total, finish)
		}
		if finish != "" {
			if p.g.includeUsage {
				u := usage{prompt: req.prompt, completion: total, cached: req.cached, created: req.created, details: s.cfg.EnablePromptTokensDetails}
				buf = sw.appendUsageChunk(buf, u)
			}
			buf = openai.AppendEvent(buf, openai.Done)
		}
		if _, err := w.Write(buf); err != nil {
			s.engine.cancel(req)
			return
		}
		flush()
		if finish != "" {
			return
		}
	}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	now := time.Now().Unix()
	names := s.cfg.ServedModelNames
	if len(names) == 0 {
		names = []string{s.cfg.Model}
	}
	b := []byte(`{"object":"list","data":[`)
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = openai.AppendString(b, name)
		b = append(b, `,"object":"model","created":`...)
		b = strconv.AppendInt(b, now, 10)
		b = append(b, `,"owned_by":"vllm","root":`...)
		b = openai.AppendString(b, s.cfg.Model)
		b = append(b, `,"parent":null,"max_model_len":`...)
		b = strconv.AppendInt(b, int64(s.cfg.MaxModelLen), 10)
		b = append(b, `,"permission":[{"id":"modelperm-`...)
		b = append(b, randomID()...)
		b = append(b, `","object":"model_permission","created":`...)
		b = strconv.AppendInt(b, now, 10)
		b = append(b, `,"allow_create_engine":false,"allow_sampling":true,"allow_logprobs":true,"allow_search_indices":false,"allow_view":true,"allow_fine_tuning":false,"organization":"*","group":null,"is_blocking":false}]}`...)
	}
	b = append(b, "]}"...)
	writeJSON(w, b)
}

func writeJSON(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, []byte(`{"version":"`+Version+`"}`))
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", MetricsContentType)
	_, _ = s.metrics.WriteTo(w)
}

func (s *Server) resetPrefixCache(w http.ResponseWriter, r *http.Request) {
	ok, err := s.engine.ResetPrefixCache(r.Context())
	if err != nil {
		openai.HTTPError(http.StatusServiceUnavailable, "the engine has stopped").Write(w)
		return
	}
	writeJSON(w, []byte(`{"success":`+strconv.FormatBool(ok)+`}`))
}

// tokenize answers vLLM's /tokenize: a completion prompt, or a chat in the
// messages form.
func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	body, e := readJSONBody(w, r)
	if e != nil {
		e.Write(w)
		return
	}
	root, err := decodeJSON(body)
	o, isObj := root.(*object)
	if err != nil || !isObj {
		_, e := parseRequest(body, false, false, s.tok)
		if e == nil {
			e = openai.BadRequest("the body must be a JSON object", "")
		}
		e.Write(w)
		return
	}
	_, isChat := o.get("messages")
	defer s.holdIfBig(body)()
	g, e := parseRequest(body, isChat, false, s.tok)
	if e != nil {
		e.Write(w)
		return
	}
	if g.model != "" && !s.cfg.Serves(g.model) {
		openai.ModelNotFound(g.model).Write(w)
		return
	}
	ids := s.tok.PromptIDs(g.prompt)
	b := []byte(`{"count":`)
	b = strconv.AppendInt(b, int64(len(ids)), 10)
	b = append(b, `,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(s.cfg.MaxModelLen), 10)
	b = append(b, `,"tokens":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	b = append(b, `],"token_strs":`...)
	if v, _ := o.get("return_token_strs"); v == true {
		b = append(b, '[')
		for i, id := range ids {
			if i > 0 {
				b = append(b, ',')
			}
			b = openai.AppendString(b, s.tok.Decode([]int{id}, false))
		}
		b = append(b, ']')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, '}')
	writeJSON(w, b)
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	body, e := readJSONBody(w, r)
	if e != nil {
		e.Write(w)
		return
	}
	root, err := decodeJSON(body)
	v := &validator{}
	o, isObj := root.(*object)
	switch {
	case err != nil:
		bodyError(err).Write(w)
		return
	case !isObj:
		v.add("model_attributes_type", nil, "Input should be a valid dictionary or object to extract fields from", root)
	}
	var ids []int
	var sent []any // the ids as sent, for the message
	if isObj {
		model, _ := v.str(o, "model", true)
		if model != "" && !s.cfg.Serves(model) && len(v.errs) == 0 {
			openai.ModelNotFound(model).Write(w)
			return
		}
		raw, ok := o.get("tokens")
		list, isList := raw.([]any)
		switch {
		case !ok:
			v.add("missing", []any{"tokens"}, "Field required", o)
		case !isList:
			v.add("list_type", []any{"tokens"}, "Input should be a valid list", raw)
		}
		for i, t := range list {
			id, kind := laxInt(t)
			if kind != "" {
				v.add(kind, []any{"tokens", i}, intMessages[kind], t)
				continue
			}
			if id < 0 {
				v.addCtx("greater_than_equal", []any{"tokens", i}, "Input should be greater than or equal to 0", t,
					&object{keys: []string{"ge"}, vals: []any{jsonInt(new(big.Int))}})
				continue
			}
			ids = append(ids, id)
			sent = append(sent, t)
		}
	}
	if e := v.err(); e != nil {
		e.Write(w)
		return
	}
	for i, id := range ids {
		if !s.tok.Valid(id) {
			openai.BadRequest(fmt.Sprintf("Token id %s is out of vocabulary", sentInt(sent[i], id)), "tokens").Write(w)
			return
		}
	}
	b := []byte(`{"prompt":`)
	b = openai.AppendString(b, s.tok.Decode(ids, false))
	writeJSON(w, append(b, '}'))
}

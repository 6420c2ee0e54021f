package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// replicaView is one replica as GET /admin/replicas shows it.
type replicaView struct {
	ID             string      `json:"id"`
	URL            string      `json:"url"`
	Group          string      `json:"group,omitempty"`
	Models         []string    `json:"models"`
	Healthy        bool        `json:"healthy"`
	Ejected        bool        `json:"ejected"`
	EjectedTotal   int64       `json:"ejections"`
	InFlight       int64       `json:"in_flight"`
	Pending        int64       `json:"pending"`
	MaxConcurrency int64       `json:"max_concurrency"`
	MaxPending     int64       `json:"max_pending"`
	QueuedPrefill  float64     `json:"queued_prefill_secs"`
	MeanPrefill    float64     `json:"mean_prefill_secs"` // of the requests lately routed there: what a foreign waiting request is priced at
	PromptTokens   int64       `json:"prompt_tokens_in_flight"`
	PromptWaiting  int64       `json:"prompt_tokens_waiting"`
	Engine         *engineView `json:"engine"` // null until a report arrived
}

// engineView is the engine's last load report.
type engineView struct {
	Kind       string  `json:"kind"`
	AgeSeconds float64 `json:"age_secs"`
	Fresh      bool    `json:"fresh"`
	Running    float64 `json:"running"`
	Waiting    float64 `json:"waiting"`
	// ForeignWaiting is how many of those the gateway cannot have sent
	// (another gateway's, a client's, or preempted ones queued again).
	ForeignWaiting float64 `json:"foreign_waiting"`
	KVUsage        float64 `json:"kv_usage"`
	PrefixQueries  float64 `json:"prefix_cache_queries"`
	PrefixHits     float64 `json:"prefix_cache_hits"`
	Preemptions    float64 `json:"preemptions"`
	BlockSize      int     `json:"block_size,omitempty"`
	CapacityBlocks int     `json:"capacity_blocks,omitempty"`
}

// serveReplicas answers GET /admin/replicas: every replica's health,
// ejection, load and its engine's last report with its age.
func (g *Gateway) serveReplicas(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	var out struct {
		Replicas []replicaView `json:"replicas"`
	}
	out.Replicas = []replicaView{}
	for _, rep := range g.fleet.Snapshot().Replicas {
		v := replicaView{ID: rep.ID, URL: rep.URL.String(), Group: rep.Group, Models: rep.Models,
			Healthy: rep.Healthy(), Ejected: rep.Ejected(now), EjectedTotal: rep.EjectedTotal(),
			InFlight: rep.InFlight(), Pending: rep.Pending(), MaxConcurrency: rep.MaxConcurrency(), MaxPending: rep.MaxPending(),
			QueuedPrefill: rep.QueuedPrefill(now), MeanPrefill: rep.MeanPrefill()}
		v.PromptTokens, v.PromptWaiting = rep.PromptLoad()
		if smp := g.scraper.Last(rep.ID); smp != nil {
			e := smp.Report
			age := now.Sub(smp.At)
			v.Engine = &engineView{Kind: string(e.Engine), AgeSeconds: age.Seconds(), Fresh: age <= time.Duration(g.cfg.Load.MaxAge),
				Running: e.Running, Waiting: e.Waiting, ForeignWaiting: smp.Foreign, KVUsage: e.KVUsage, PrefixQueries: e.PrefixQueries,
				PrefixHits: e.PrefixHits, Preemptions: e.Preemptions, BlockSize: e.BlockSize, CapacityBlocks: e.CapacityBlocks}
		}
		out.Replicas = append(out.Replicas, v)
	}
	writeAdminJSON(w, http.StatusOK, out)
}

// serveIndex answers GET /admin/index: the KV index's entries, their memory
// and every replica's predicted blocks against its capacity.
func (g *Gateway) serveIndex(w http.ResponseWriter, r *http.Request) {
	s := summarize(g.index.Stats())
	s.Mode = g.cfg.Index.Mode
	s.Predictions = g.drift.status()
	s.Tokenization = g.tokChecks.list()
	if g.kv != nil {
		s.KVEvents = g.kv.status(time.Now())
	}
	writeAdminJSON(w, http.StatusOK, s)
}

// serveTokenize answers POST /admin/tokenize/v1/...: a request as a client
// would send it, tokenized as routing would, in the shape of vLLM's
// /tokenize plus the prompt's full-block hashes. Nothing reaches an engine.
func (g *Gateway) serveTokenize(w http.ResponseWriter, r *http.Request) {
	ex, err := g.readRequest(w, r)
	if err != nil {
		refusalOf(err).write(w) // not counted: nothing is routed
		return
	}
	model, body := ex.model, ex.parseable()
	mt := g.tokenizers[model]
	if mt == nil {
		openai.BadRequest("The model "+model+" has no tokenizer.", "model").Write(w)
		return
	}
	if ex.unreadable {
		// As routing, which predicts nothing for it (unreadableLiteral).
		openai.BadRequest("The request holds NaN, Infinity or -Infinity where its prompt is read; the gateway does not tokenize it.", "").Write(w)
		return
	}
	chat := isChatPath(r.URL.Path)
	var p *tokenize.Prompt
	if chat {
		p, err = tokenize.ParseChatRequest(body)
	} else {
		p, err = tokenize.ParseCompletionRequest(body)
	}
	if err != nil {
		openai.BadRequest(err.Error(), "").Write(w)
		return
	}
	stop, release := adminStop(r, ex.deadline)
	defer release()
	ids, err := mt.tok.PromptIDs(p, stop)
	switch {
	case errors.Is(err, hf.ErrStopped):
		openai.HTTPError(http.StatusGatewayTimeout, "Tokenizing did not finish within the request timeout.").Write(w)
		return
	case err == nil && p.Cuts(len(ids), g.contextLen(model)):
		// As routing: the engine keeps other tokens than these, so they
		// are not what it caches.
		err = &tokenize.UnsupportedError{Reason: tokenize.ReasonTruncate}
	}
	if err != nil {
		openai.BadRequest("The model "+model+"'s tokenizer cannot prepare this request: "+err.Error(), "").Write(w)
		return
	}
	if ids == nil {
		ids = []int{} // an empty prompt's tokens are [], as vLLM's /tokenize writes them
	}
	hashes := blockhash.Extend(nil, blockhash.Seed(model, "", p.CacheSalt), ids, mt.blockSize)
	out := struct {
		Count       int      `json:"count"`
		MaxModelLen *int     `json:"max_model_len"`
		Tokens      []int    `json:"tokens"`
		BlockSize   int      `json:"block_size"`
		Blocks      []string `json:"blocks"`
	}{Count: len(ids), Tokens: ids, BlockSize: mt.blockSize, Blocks: hexBlocks(hashes)}
	if n := g.contextLen(model); n > 0 {
		out.MaxModelLen = &n
	}
	writeAdminJSON(w, http.StatusOK, out)
}

// adminStop is set once an admin request's caller leaves or its deadline
// passes: what the admin port tokenizes stops there, since a prompt of
// megabytes can take a tokenizer seconds and gigabytes. release lets go
// of what watches for either.
func adminStop(r *http.Request, deadline time.Time) (stop *atomic.Bool, release func()) {
	stop = new(atomic.Bool)
	detach := context.AfterFunc(r.Context(), func() { stop.Store(true) })
	timer := time.AfterFunc(time.Until(deadline), func() { stop.Store(true) })
	return stop, func() { detach(); timer.Stop() }
}

// exactRoutes serves mux's routes on their exact paths only, and answers
// every other request in JSON as the admin API's errors are: 404 for a
// path no route has (an unclean one included, which ServeMux would
// redirect), 405 with Allow for a method the path's route does not take.
func exactRoutes(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if _, path, _ := strings.Cut(pattern, " "); path != "" && path == r.URL.Path {
			h.ServeHTTP(w, r)
			return
		}
		skipBody(w, r)
		// What ServeMux would answer says whether the path has a route.
		rec := &headerOnly{header: http.Header{}}
		h.ServeHTTP(rec, r)
		status := http.StatusNotFound
		if rec.status == http.StatusMethodNotAllowed && pattern == "" {
			status = http.StatusMethodNotAllowed
			w.Header().Set("Allow", rec.header.Get("Allow"))
		}
		writeAdminJSON(w, status, adminError{Error: fmt.Sprintf("%s %s: %s", r.Method, r.URL.Path, strings.ToLower(http.StatusText(status)))})
	})
}

// adminError is the body of an admin answer that is only an error.
type adminError struct {
	Error string `json:"error"`
}

// headerOnly records a handler's status and header, dropping its body.
type headerOnly struct {
	header http.Header
	status int
}

func (h *headerOnly) Header() http.Header { return h.header }
func (h *headerOnly) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}
func (h *headerOnly) Write(b []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	return len(b), nil
}

// writeAdminJSON answers v as indented JSON with status. v is encoded
// before the status is sent, so that one that does not encode (a
// non-finite number) gets a 500 that says so, not status and an empty body.
func writeAdminJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.MarshalIndent(adminError{Error: "encode the answer: " + err.Error()}, "", "  ")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

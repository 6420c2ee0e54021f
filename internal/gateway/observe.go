package gateway

// Observing requests: OpenTelemetry traces (tracing.go), the decision
// log (decisionlog.go) and the traffic capture (captureRequest). All are
// off unless configured; while all are off, the hooks on the request path
// find ex.obs nil and return at once, creating nothing.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/inferrail/inferrail/internal/capture"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/decisionlog"
	"github.com/inferrail/inferrail/internal/linelog"
	"github.com/inferrail/inferrail/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// observability is what the gateway observes requests with. Its zero
// value observes nothing.
type observability struct {
	tracer  *telemetry.Tracer   // nil: no spans
	log     *decisionlog.Writer // nil: no decision log
	sampler decisionlog.Sampler
	capture *capture.Writer // nil: no traffic capture
	// captured samples the requests the capture records.
	captured decisionlog.Sampler
}

// traceService is the service.name of the gateway's spans.
const traceService = "inferrail-gateway"

// newObservability starts what oc turns on and registers its metrics.
func newObservability(oc *config.Observability, reg prometheus.Registerer, logger *slog.Logger) (observability, error) {
	var o observability
	// Checked before anything starts, so that a refusal leaves nothing
	// running.
	if err := checkLogPaths(oc); err != nil {
		return o, err
	}
	if oc.OTLPEndpoint != "" {
		t, err := telemetry.New(context.Background(), telemetry.Options{Endpoint: oc.OTLPEndpoint, Protocol: oc.OTLPProtocol,
			SampleRatio: oc.TraceSampleRatio, Service: traceService, Logger: logger.With("component", "traces")})
		if err != nil {
			return o, err
		}
		o.tracer = t
		stats := func(f func(telemetry.Stats) uint64) func() float64 {
			return func() float64 { return float64(f(t.Stats())) }
		}
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "inferrail_trace_spans_exported_total",
				Help: "Spans the OTLP collector took."}, stats(func(s telemetry.Stats) uint64 { return s.Exported })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "inferrail_trace_spans_failed_total",
				Help: "Spans in exports the collector did not take, retries included."}, stats(func(s telemetry.Stats) uint64 { return s.Failed })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "inferrail_trace_spans_dropped_total",
				Help: "Spans dropped because the export queue was full."}, stats(func(s telemetry.Stats) uint64 { return s.Dropped })))
	}
	if dl := &oc.DecisionLog; dl.SampleRate > 0 {
		w := decisionlog.Open(decisionlog.Options{Path: dl.Path, MaxSizeMB: dl.MaxSizeMB, MaxFiles: dl.MaxFiles,
			Logger: logger.With("component", "decision_log")})
		o.log, o.sampler = w, decisionlog.NewSampler(dl.SampleRate)
		registerLines(reg, "inferrail_decision_log", "Routing decisions", "the decision log", w.Stats)
	}
	if c := &oc.Capture; c.Path != "" && c.SampleRate > 0 {
		w := capture.Open(capture.Options{MaxBlockIDs: c.MaxBlockIDs, Lines: linelog.Options{Path: c.Path, MaxSizeMB: c.MaxSizeMB,
			MaxFiles: c.MaxFiles, Logger: logger.With("component", "capture")}})
		o.capture, o.captured = w, decisionlog.NewSampler(c.SampleRate)
		registerLines(reg, "inferrail_capture", "Requests", "the traffic capture", func() linelog.Stats { return w.Stats().Stats })
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "inferrail_capture_block_ids_forgotten_total",
			Help: "Block hashes the traffic capture's id maps forgot, the least recently seen, to stay within max_block_ids."},
			func() float64 { return float64(w.Stats().Forgotten) }))
	}
	return o, nil
}

// checkLogPaths refuses a decision log or capture path that names
// something other than a regular file (linelog.CheckPath), and a decision
// log file already there that cannot be appended to (read-only, say),
// which would lose every line: asking changes nothing, so start asks too.
// The capture moves its file aside, whatever its mode.
func checkLogPaths(oc *config.Observability) error {
	if dl := &oc.DecisionLog; dl.SampleRate > 0 {
		err := linelog.CheckPath(dl.Path)
		if err == nil {
			err = linelog.Appendable(dl.Path)
		}
		if err != nil {
			return fmt.Errorf("observability.decision_log.path: %w", err)
		}
	}
	if c := &oc.Capture; c.Path != "" && c.SampleRate > 0 {
		if err := linelog.CheckPath(c.Path); err != nil {
			return fmt.Errorf("observability.capture.path: %w", err)
		}
	}
	return nil
}

// probeLogPaths refuses, for --check, a decision log, capture or shadow
// log path where no file could be written now (linelog.Writable, told how
// each log uses a file already there: the decision log appends to it, the
// capture moves it aside, the shadow log appends to it and never rotates,
// so needs its directory only to make it): the shadow log is opened at
// start, which would fail, and the others at their first line, every one
// of which would be lost with only a metric to say so. Start does not
// probe directories: it would leave a file behind a start that fails
// later, and the shadow log's open refuses it anyway; it asks only what
// opening a file already there tells (checkLogPaths).
func probeLogPaths(oc *config.Observability) error {
	var errs []error
	if dl := &oc.DecisionLog; dl.SampleRate > 0 {
		if err := linelog.Writable(dl.Path, linelog.Appends, true); err != nil {
			errs = append(errs, fmt.Errorf("observability.decision_log.path: %w", err))
		}
	}
	if c := &oc.Capture; c.Path != "" && c.SampleRate > 0 {
		if err := linelog.Writable(c.Path, linelog.MovesAside, true); err != nil {
			errs = append(errs, fmt.Errorf("observability.capture.path: %w", err))
		}
	}
	if p := oc.ShadowLog; p != "" {
		// Its directory is not made: openShadowLog would fail without it.
		if err := linelog.Writable(p, linelog.AppendsInPlace, false); err != nil {
			errs = append(errs, fmt.Errorf("observability.shadow_log: %w", err))
		}
	}
	return errors.Join(errs...)
}

// registerLines registers the counters of a line log whose lines are
// what (capitalized), written to where: written, failed and dropped.
func registerLines(reg prometheus.Registerer, prefix, what, where string, stats func() linelog.Stats) {
	count := func(f func(linelog.Stats) uint64) func() float64 {
		return func() float64 { return float64(f(stats())) }
	}
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_written_total",
			Help: what + " written to " + where + "."}, count(func(s linelog.Stats) uint64 { return s.Written })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_failed_total",
			Help: what + " lost to failed writes of " + where + "."}, count(func(s linelog.Stats) uint64 { return s.Failed })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: prefix + "_dropped_total",
			Help: what + " dropped because the writer of " + where + " was behind."}, count(func(s linelog.Stats) uint64 { return s.Dropped })))
}

// on reports whether anything observes requests.
func (o *observability) on() bool { return o.tracer != nil || o.log != nil || o.capture != nil }

// close writes what the decision log and the capture hold and exports the
// spans queued, within limit.
func (o *observability) close(ctx context.Context, logger *slog.Logger) {
	if o.log != nil {
		if err := o.log.Close(); err != nil {
			logger.Warn("closing the decision log", "error", err)
		}
	}
	if o.capture != nil {
		if err := o.capture.Close(); err != nil {
			logger.Warn("closing the traffic capture", "error", err)
		}
	}
	if o.tracer != nil {
		if err := o.tracer.Shutdown(ctx); err != nil {
			logger.Warn("spans not exported at shutdown", "error", err)
		}
	}
}

// observed is what is kept of one request to trace it and log its
// decisions. It belongs to the request's goroutine.
type observed struct {
	server  trace.Span // nil without tracing
	logged  bool       // the request's decisions go to the decision log
	attempt int        // decisions made so far
	// why, while logged, is offer's reason for each of the model's routes
	// not offered in the current decision.
	why []string
}

// noObservation is what observe returns while nothing observes requests.
var noObservation = func() {}

// observe starts observing ex, read from the client: the decision log
// samples it by ID, and with tracing the request gets its server span,
// continuing the client's trace. The function it returns ends the
// observation; serveGenerate defers it.
func (g *Gateway) observe(ex *exchange) func() {
	if !g.obs.on() {
		return noObservation
	}
	ex.captured = g.obs.capture != nil && ex.model != "" && g.obs.captured.Sampled(ex.id)
	logged := g.obs.log != nil && ex.model != "" && g.obs.sampler.Sampled(ex.id)
	if g.obs.tracer == nil {
		if logged { // else, with the decision log alone, there is nothing to keep
			ex.obs = &observed{logged: true}
		}
		return noObservation
	}
	o := &observed{logged: logged}
	ex.obs = o
	return g.traceServer(ex, o)
}

// whyNotOffered returns the slice offer fills with why each of n routes
// was not offered, while the request's decisions are logged; nil otherwise.
func (o *observed) whyNotOffered(n int) []string {
	if o == nil || !o.logged {
		return nil
	}
	if cap(o.why) < n {
		o.why = make([]string, n)
	}
	o.why = o.why[:n]
	clear(o.why)
	return o.why
}

// notOffered sets why route i, offered at first, was taken out of the
// current decision, while the request's decisions are logged.
func (o *observed) notOffered(i int, why string) {
	if o != nil && o.logged && i < len(o.why) {
		o.why[i] = why
	}
}

// captureRequest queues the capture's record of ex, whose response had
// out output tokens counted from source (out < 0: no 2xx answer, no
// record).
func (g *Gateway) captureRequest(ex *exchange, out int64, source string) {
	if !ex.captured || out < 0 {
		return
	}
	r := &capture.Record{Arrived: ex.arrived, Model: ex.model, InputTokens: max(ex.route.PromptTokens, 1), InputSource: capture.SourceEstimate,
		OutputTokens: max(int(out), 1), OutputSource: source}
	if p := ex.pred; p != nil {
		r.InputSource, r.BlockSize, r.Blocks = capture.SourceTokenizer, g.tokenizers[ex.model].blockSize, p.hashes
	}
	g.obs.capture.Log(r)
}

// statusWriter notes the status of the response written through it.
type statusWriter struct {
	http.ResponseWriter
	status int // 0 until the head is written
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observeCloseTimeout bounds how long closing the gateway waits for the
// spans still queued to be exported.
const observeCloseTimeout = 3 * time.Second

// armName is the split arm that routed ex: its policy's name when the
// model's traffic is split between policies, "" when it is not.
func armName(ex *exchange) string {
	if mp := ex.gen.routing[ex.model]; mp != nil && len(mp.arms) > 1 {
		return ex.policy.Name()
	}
	return ""
}

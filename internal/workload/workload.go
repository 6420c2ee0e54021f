package workload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Request is one request of a workload, ready to send.
type Request struct {
	// At is when the request is scheduled to leave, from the start of the run.
	At time.Duration
	// Path is the API path: /v1/chat/completions or /v1/completions.
	Path string
	// Body is the whole JSON body, model included, streaming with usage.
	Body []byte
	// Session names the conversation in the x-session-id header; empty for none.
	Session string
	// Kind is the workload the request came from (w1 … w8, trace), so a mix
	// can be reported per kind.
	Kind string
	// MaxTokens is the output length the body asks for.
	MaxTokens int
	// PromptTokens is the length of the prompt in builtin:sim tokens, as
	// the simulator renders and counts it.
	PromptTokens int
}

// Spec says which requests to generate.
type Spec struct {
	Workload string        // w1, w2, w3, w4, w5, w6, w8, mix, hot or trace
	Model    string        // the model field of every body
	Rate     float64       // mean requests per second; must be 0 for trace
	Duration time.Duration // schedule length; the last request leaves before it
	Requests int           // when > 0, stop after this many requests instead
	Seed     uint64        // every random draw comes from it

	Arrivals string  // poisson (default; w8: gamma) or gamma
	CV       float64 // coefficient of variation of gamma gaps; w8 default 2
	Ramp     string  // "" or diurnal: the rate follows a day's shape, mean kept; w8 default diurnal, "flat" turns it off
	// RampAmplitude is the diurnal swing A of the rate, in [0, 1): the rate
	// runs from (1−A) to (1+A) times the mean. Zero means 0.5.
	RampAmplitude float64

	// Workload knobs; zero means the workload's default.
	SystemPrompts int     // w1/hot/mix/w8: distinct shared system prompts (8); w5: few-shot blocks (4)
	Zipf          float64 // hot: exponent over system prompts (1.1); w4: over documents (1.0)
	OutputTokens  int     // fixed output length; 0 for the workload's draw
	// MaxPromptTokens bounds prompts. w2, w3: a conversation ends before a
	// turn whose prompt plus output would pass it (24,000). trace: longer
	// inputs are cut to it (0 keeps them whole).
	MaxPromptTokens int

	TracePath      string  // trace: Mooncake-format JSONL
	TimeScale      float64 // trace: multiply timestamps (default 1)
	RateMultiplier float64 // trace: compress arrivals by this factor (default 1)
	ShareGPTPath   string  // w2: replay conversations from a ShareGPT JSON file

	// TraceDigest is the SHA-256, in hex, of the trace's bytes as they were
	// read for the run (ReadTraceDigest), so that a result names the trace
	// it replayed and not only its path, which a pipe (/dev/fd/63) or a
	// file edited in place shares with others. Empty: not known (results
	// written before it), and not checked.
	TraceDigest string `json:",omitempty"`
	// ShareGPTDigest is the same for the ShareGPT file (ReadShareGPT).
	ShareGPTDigest string `json:",omitempty"`
}

// Workload names.
const (
	W1    = "w1"
	W2    = "w2"
	W3    = "w3"
	W4    = "w4"
	W5    = "w5"
	W6    = "w6"
	W8    = "w8"
	Mix   = "mix"
	Hot   = "hot"
	Trace = "trace"
)

// Workloads lists every workload name Generate accepts.
func Workloads() []string {
	return []string{W1, W2, W3, W4, W5, W6, W8, Mix, Hot, Trace}
}

// Arrival processes and ramps.
const (
	Poisson = "poisson"
	Gamma   = "gamma"
	Flat    = "flat"
	Diurnal = "diurnal"
)

// ChatPath is the API path of every generated request.
const ChatPath = "/v1/chat/completions"

// Defaults not tied to one workload.
const (
	defaultSystemPrompts = 8
	defaultFewShotBlocks = 4
	defaultHotZipf       = 1.1
	defaultDocZipf       = 1.0
	defaultW8CV          = 2
	defaultAmplitude     = 0.5
	defaultMaxPrompt     = 24000
)

// WithDefaults returns s with every zero knob that its workload reads set
// to the workload's default. It does not validate s.
func (s Spec) WithDefaults() Spec {
	w := s.Workload
	if s.Arrivals == "" && w != Trace {
		s.Arrivals = Poisson
		if w == W8 {
			s.Arrivals = Gamma
		}
	}
	if s.Arrivals == Gamma && s.CV == 0 && w == W8 {
		s.CV = defaultW8CV
	}
	if s.Ramp == "" && w == W8 {
		s.Ramp = Diurnal
	}
	if s.Ramp == Diurnal && s.RampAmplitude == 0 {
		s.RampAmplitude = defaultAmplitude
	}
	if s.SystemPrompts == 0 {
		switch w {
		case W1, Hot, Mix, W8:
			s.SystemPrompts = defaultSystemPrompts
		case W5:
			s.SystemPrompts = defaultFewShotBlocks
		}
	}
	if s.Zipf == 0 {
		switch w {
		case Hot:
			s.Zipf = defaultHotZipf
		case W4:
			s.Zipf = defaultDocZipf
		}
	}
	if s.MaxPromptTokens == 0 && (w == W2 || w == W3) {
		s.MaxPromptTokens = defaultMaxPrompt
	}
	if w == Trace {
		if s.TimeScale == 0 {
			s.TimeScale = 1
		}
		if s.RateMultiplier == 0 {
			s.RateMultiplier = 1
		}
	}
	return s
}

// Validate reports every problem with s at once. It reads no files.
func (s Spec) Validate() error {
	var p problems
	s.validateSource(&p)
	s.validateShape(&p)
	return errors.Join(p...)
}

// MaxRequests bounds the requests of one run of a generated workload:
// its schedule, every body with it, is made whole before the run starts,
// and a rate of 1e308 req/s (whose gaps round to nothing) or 200,000 req/s
// for a minute ran inferrail-bench out of memory. Ten million is far past
// any run the harness makes.
const MaxRequests = 10_000_000

// CheckRunSize reports a run of rate requests per second over d, or of
// requests requests when that is set, that would make more than
// MaxRequests. rate must be finite (Validate says so otherwise).
func CheckRunSize(rate float64, d time.Duration, requests int) error {
	if requests > 0 {
		if requests > MaxRequests {
			return fmt.Errorf("%d requests is more than the %d a run may make (its schedule is made whole before it starts)", requests, MaxRequests)
		}
		return nil
	}
	if n := rate * d.Seconds(); n > MaxRequests {
		count := strconv.FormatFloat(n, 'g', 3, 64)
		if math.IsInf(n, 1) {
			count = "past " + strconv.FormatFloat(math.MaxFloat64, 'g', 2, 64)
		}
		return fmt.Errorf("%g req/s over %v is %s requests, more than the %d a run may make (its schedule is made whole before it starts)",
			rate, d, count, MaxRequests)
	}
	return nil
}

// problems collects what is wrong with a spec, each naming its field.
type problems []error

func (p *problems) bad(field, rule string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: "+rule, append([]any{field}, args...)...))
}

// finite reports whether v is a finite number, and notes field if not.
func (p *problems) finite(field string, v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		p.bad(field, "must be a finite number")
		return false
	}
	return true
}

// validateSource checks what the requests come from and how many there
// are: the workload and its rate, or the trace and its timing.
func (s Spec) validateSource(p *problems) {
	w := s.Workload
	if !slices.Contains(Workloads(), w) {
		p.bad("workload", "unknown workload %q (want one of %v)", w, Workloads())
	}
	if s.Model == "" {
		p.bad("model", "required")
	}
	if s.Duration < 0 {
		p.bad("duration", "must be >= 0")
	}
	if s.Requests < 0 {
		p.bad("requests", "must be >= 0")
	}
	if w == Trace {
		if s.Rate != 0 {
			p.bad("rate", "must be 0 for trace: the trace's timestamps are the arrivals (use rate_multiplier)")
		}
		if s.Duration > 0 && s.Requests > 0 {
			p.bad("duration", "at most one of duration and requests may cut a trace")
		}
		if s.TracePath == "" {
			p.bad("trace_path", "required for trace")
		}
		if d := s.TraceDigest; d != "" && !isSHA256Hex(d) {
			p.bad("trace_digest", "must be a SHA-256 in hex (64 digits 0-9a-f), not %q", d)
		}
		if s.Arrivals != "" {
			p.bad("arrivals", "must be empty for trace: the trace's timestamps are the arrivals")
		}
		if s.Ramp != "" {
			p.bad("ramp", "must be empty for trace")
		}
		if p.finite("time_scale", s.TimeScale) && s.TimeScale < 0 {
			p.bad("time_scale", "must be > 0")
		}
		if p.finite("rate_multiplier", s.RateMultiplier) && s.RateMultiplier < 0 {
			p.bad("rate_multiplier", "must be > 0")
		}
	} else {
		if p.finite("rate", s.Rate) && s.Rate <= 0 {
			p.bad("rate", "must be > 0")
		} else if err := CheckRunSize(s.Rate, s.Duration, s.Requests); err != nil {
			field := "rate"
			if s.Requests > 0 {
				field = "requests"
			}
			p.bad(field, "%v", err)
		}
		if (s.Duration > 0) == (s.Requests > 0) {
			p.bad("duration", "exactly one of duration and requests must be > 0")
		}
		if s.TracePath != "" {
			p.bad("trace_path", "only for the trace workload")
		}
		if s.TraceDigest != "" {
			p.bad("trace_digest", "only for the trace workload")
		}
		if s.TimeScale != 0 {
			p.bad("time_scale", "only for the trace workload")
		}
		if s.RateMultiplier != 0 {
			p.bad("rate_multiplier", "only for the trace workload")
		}
	}
}

// isSHA256Hex reports whether d is a SHA-256 written as ReadTraceDigest
// writes it: 64 lower-case hex digits.
func isSHA256Hex(d string) bool {
	if len(d) != 2*sha256.Size {
		return false
	}
	for _, c := range d {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// validateShape checks the arrivals, the ramp and the workload-specific
// knobs.
func (s Spec) validateShape(p *problems) {
	w := s.Workload
	switch s.Arrivals {
	case "", Poisson, Gamma:
	default:
		p.bad("arrivals", "unknown arrival process %q (want poisson or gamma)", s.Arrivals)
	}
	if p.finite("cv", s.CV) {
		arrivals := s.WithDefaults().Arrivals
		switch {
		case s.CV < 0:
			p.bad("cv", "must be > 0")
		case arrivals == Gamma && s.CV == 0 && w != W8:
			p.bad("cv", "must be > 0 with gamma arrivals")
		case arrivals != Gamma && s.CV != 0:
			p.bad("cv", "only with gamma arrivals")
		}
	}
	switch s.Ramp {
	case "", Flat, Diurnal:
	default:
		p.bad("ramp", "unknown ramp %q (want flat or diurnal)", s.Ramp)
	}
	if p.finite("ramp_amplitude", s.RampAmplitude) {
		switch {
		case s.RampAmplitude < 0 || s.RampAmplitude >= 1:
			p.bad("ramp_amplitude", "must be in [0, 1)")
		case s.RampAmplitude != 0 && s.WithDefaults().Ramp != Diurnal:
			p.bad("ramp_amplitude", "only with the diurnal ramp")
		}
	}
	switch {
	case s.SystemPrompts < 0:
		p.bad("system_prompts", "must be >= 0")
	case s.SystemPrompts > 0 && !slices.Contains([]string{W1, Hot, Mix, W8, W5}, w):
		p.bad("system_prompts", "only for w1, hot, mix, w8 and w5")
	}
	if p.finite("zipf", s.Zipf) {
		switch {
		case s.Zipf < 0:
			p.bad("zipf", "must be > 0")
		case s.Zipf > 0 && w != Hot && w != W4:
			p.bad("zipf", "only for hot and w4")
		}
	}
	if s.OutputTokens < 0 {
		p.bad("output_tokens", "must be >= 0")
	}
	switch {
	case s.MaxPromptTokens < 0:
		p.bad("max_prompt_tokens", "must be >= 0")
	case s.MaxPromptTokens > 0 && w != W2 && w != W3 && w != Trace:
		p.bad("max_prompt_tokens", "only for w2, w3 and trace")
	}
	if s.ShareGPTPath != "" && w != W2 {
		p.bad("sharegpt_path", "only for w2")
	}
	switch d := s.ShareGPTDigest; {
	case d == "":
	case s.ShareGPTPath == "":
		p.bad("sharegpt_digest", "only with sharegpt_path")
	case !isSHA256Hex(d):
		p.bad("sharegpt_digest", "must be a SHA-256 in hex (64 digits 0-9a-f), not %q", d)
	}
}

// Generate returns the requests of spec sorted by At (ties keep the order
// they were made in). The same spec gives the same requests byte for byte.
// It reads TracePath or ShareGPTPath when the spec names them.
func Generate(spec Spec) ([]Request, error) {
	return GenerateContext(context.Background(), spec)
}

// GenerateContext is Generate, stopping with ctx's error when ctx is done
// while it replays a trace (a large one takes seconds).
func GenerateContext(ctx context.Context, spec Spec) ([]Request, error) {
	reqs, err := GenerateRequests(ctx, spec)
	if err != nil {
		return nil, err
	}
	return reqs.All(ctx)
}

// GenerateRequests is GenerateContext, but a trace's prompts are made
// only as Requests.Request asks for them: every error is reported here,
// and the rest is quick.
func GenerateRequests(ctx context.Context, spec Spec) (*Requests, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("workload spec: %w", err)
	}
	spec = spec.WithDefaults()
	if spec.Workload == Trace {
		recs, digest, err := ReadTraceDigest(ctx, spec.TracePath)
		if err != nil {
			return nil, err
		}
		if spec.TraceDigest != "" && digest != spec.TraceDigest {
			// Replaying other requests than the spec records would make a
			// result that lies about what it measured.
			return nil, fmt.Errorf("trace %s: its contents are not those planned (sha256 %s, not %s): it changed since", spec.TracePath, digest, spec.TraceDigest)
		}
		return traceRequests(ctx, spec, recs)
	}
	src, err := newSource(ctx, spec)
	if err != nil {
		return nil, err
	}
	return NewRequests(schedule(spec, src)), nil
}

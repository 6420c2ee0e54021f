package stress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/procs"
)

// SoakLoad is a long mixed workload at bounded concurrency.
type SoakLoad struct {
	// Requests is the total number sent, warmup included. It must be
	// positive.
	Requests int
	// Concurrency is how many requests are in flight at once. It must be
	// positive.
	Concurrency int
	// Warmup is how many requests run before the memory baseline is taken.
	// It must be within 0..Requests-1.
	Warmup int
	// SampleEvery takes a resident-memory sample under load each time this
	// many more requests have ended. Zero means no samples under load.
	SampleEvery int
	// IdleWindow is how long the memory baselines after the warmup and at
	// the end are sampled with no load (every 100 ms, keeping the minimum).
	// Zero means 2 s.
	IdleWindow time.Duration
	// Timeout bounds each request. Zero means 60 s.
	Timeout time.Duration
	// Seed picks the requests; the same seed sends the same workload.
	Seed uint64
}

// Validate reports every setting that cannot run.
func (l SoakLoad) Validate() error {
	var warmup error
	if l.Warmup < 0 || (l.Requests > 0 && l.Warmup >= l.Requests) {
		warmup = fmt.Errorf("warmup: must be within 0..%d, got %d", max(0, l.Requests-1), l.Warmup)
	}
	return errors.Join(Positive("requests", l.Requests), Positive("concurrency", l.Concurrency), warmup,
		NotNegative("sample_every", l.SampleEvery), NotNegative("idle_window", l.IdleWindow), NotNegative("timeout", l.Timeout))
}

// SoakFigures is what RunSoak measured.
type SoakFigures struct {
	Requests  int `json:"requests"`
	Completed int `json:"completed"` // requests that passed every check
	// Cancelled counts requests the client gave up on by design: streams it
	// left after the first content chunk and non-streamed requests whose
	// short client deadline expired. They are not errors.
	Cancelled int `json:"cancelled"`
	Failures
	// Mix counts the requests sent by shape (chat, chat_stream, completion,
	// completion_stream) and, in addition, those planned to be given up by
	// the client (left_mid_stream, client_deadline).
	Mix map[string]int `json:"mix"`
	// LoadSeconds is the time spent sending load, idle windows excluded.
	LoadSeconds       float64 `json:"load_seconds"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	// Latency is from sending to the end of the response, completed
	// requests only.
	Latency Latency `json:"latency"`
	// Memory follows the simulator process; nil when no pid was given.
	Memory *SoakMemory `json:"memory,omitempty"`
	// Sim is read from the simulator's /metrics once the load is over; nil
	// when that failed.
	Sim *SimGauges `json:"sim,omitempty"`
}

// SoakMemory is the simulator's resident memory over a soak.
type SoakMemory struct {
	Pid int `json:"pid"`
	// WarmupRSSBytes and EndRSSBytes are the idle baselines after the warmup
	// and after the last request.
	WarmupRSSBytes int64          `json:"warmup_rss_bytes"`
	EndRSSBytes    int64          `json:"end_rss_bytes"`
	GrowthBytes    int64          `json:"growth_bytes"` // end minus warmup
	GrowthMiB      float64        `json:"growth_mib"`
	PeakRSSBytes   int64          `json:"peak_rss_bytes"` // the largest sample
	WarmupFDs      int            `json:"warmup_fds"`
	EndFDs         int            `json:"end_fds"`
	Samples        []MemorySample `json:"samples"`
}

// MemorySample is one reading of the simulator's memory.
type MemorySample struct {
	Requests int     `json:"requests"` // requests ended so far
	Seconds  float64 `json:"seconds"`  // since the soak began
	RSSBytes int64   `json:"rss_bytes"`
	FDs      int     `json:"fds"`
	Idle     bool    `json:"idle"` // no load; the minimum over the idle window
}

// SimGauges is what the simulator's /metrics said after the load.
type SimGauges struct {
	Running     float64 `json:"num_requests_running"`
	Waiting     float64 `json:"num_requests_waiting"`
	KVUsage     float64 `json:"kv_cache_usage_perc"`
	Preemptions float64 `json:"num_preemptions_total"`
	// RequestSuccess is vllm:request_success_total by finished_reason.
	RequestSuccess map[string]float64 `json:"request_success_total"`
}

// WithDefaults is l with its zero durations at their defaults: an idle
// window of 2 s and a 60 s timeout.
func (l SoakLoad) WithDefaults() SoakLoad {
	l.IdleWindow = OrDefault(l.IdleWindow, 2*time.Second)
	l.Timeout = OrDefault(l.Timeout, 60*time.Second)
	return l
}

// RunSoak sends l's workload to the simulator at baseURL and, when pid is
// positive, follows that process's resident memory: an idle baseline after
// the warmup, samples under load, and an idle baseline at the end. Failed
// requests are counted, not returned: the error is only for a load that
// cannot run or was interrupted.
func RunSoak(ctx context.Context, baseURL string, l SoakLoad, pid int) (SoakFigures, error) {
	if err := l.Validate(); err != nil {
		return SoakFigures{}, err
	}
	l = l.WithDefaults()
	s := &soak{
		l:        l,
		pid:      pid,
		client:   NewClient(l.Concurrency),
		baseURL:  baseURL,
		prefixes: soakPrefixes(l.Seed),
		begin:    time.Now(),
		mix:      make(map[string]int),
	}
	defer s.client.CloseIdleConnections()

	s.phase(ctx, 0, l.Warmup)
	var warm MemorySample
	if pid > 0 {
		warm = s.idleSample(ctx)
	}
	s.phase(ctx, l.Warmup, l.Requests)
	if err := ctx.Err(); err != nil {
		return SoakFigures{}, err
	}
	f := SoakFigures{
		Requests:          l.Requests,
		Completed:         int(s.completed.Load()),
		Cancelled:         int(s.cancelled.Load()),
		Mix:               s.mix,
		LoadSeconds:       s.loadTime.Seconds(),
		RequestsPerSecond: float64(l.Requests) / s.loadTime.Seconds(),
		Latency:           summarize(s.latencies),
	}
	f.Errors, f.ErrorKinds, f.ErrorSamples = s.errors.Result()
	if pid > 0 {
		end := s.idleSample(ctx)
		m := &SoakMemory{
			Pid:            pid,
			WarmupRSSBytes: warm.RSSBytes,
			EndRSSBytes:    end.RSSBytes,
			GrowthBytes:    end.RSSBytes - warm.RSSBytes,
			GrowthMiB:      float64(end.RSSBytes-warm.RSSBytes) / (1 << 20),
			WarmupFDs:      warm.FDs,
			EndFDs:         end.FDs,
			Samples:        s.samples,
		}
		for _, smp := range m.Samples {
			m.PeakRSSBytes = max(m.PeakRSSBytes, smp.RSSBytes)
		}
		f.Memory = m
	}
	if g, err := ScrapeGauges(ctx, s.client, baseURL); err == nil {
		f.Sim = g
	} else {
		f.ErrorSamples = append(f.ErrorSamples, "scrape /metrics after the soak: "+err.Error())
	}
	return f, ctx.Err()
}

// soak is one RunSoak in progress.
type soak struct {
	l        SoakLoad
	pid      int
	client   *http.Client
	baseURL  string
	prefixes []string
	begin    time.Time

	ended     atomic.Int64 // requests ended, any outcome
	completed atomic.Int64
	cancelled atomic.Int64
	errors    ErrorTally

	mu        sync.Mutex
	mix       map[string]int  // guarded by mu
	latencies []time.Duration // guarded by mu
	samples   []MemorySample  // guarded by mu
	loadTime  time.Duration   // written between phases only
}

// phase sends requests [from, to) with l.Concurrency workers and waits for
// all of them.
func (s *soak) phase(ctx context.Context, from, to int) {
	start := time.Now()
	defer func() { s.loadTime += time.Since(start) }()
	Pool(ctx, from, to, s.l.Concurrency, func(i int) { s.one(ctx, i) })
}

// ErrPlanned is the cause of a client deadline the workload sets on purpose.
var ErrPlanned = errors.New("planned client deadline")

// one sends request i and records its outcome.
func (s *soak) one(ctx context.Context, i int) {
	spec := s.request(i)
	s.mu.Lock()
	s.mix[spec.shape]++
	if spec.leave {
		s.mix["left_mid_stream"]++
	}
	if spec.deadline > 0 {
		s.mix["client_deadline"]++
	}
	s.mu.Unlock()

	rctx, cancel := context.WithTimeout(ctx, s.l.Timeout)
	defer cancel()
	if spec.deadline > 0 {
		var stop context.CancelFunc
		rctx, stop = context.WithTimeoutCause(rctx, spec.deadline, ErrPlanned)
		defer stop()
	}
	sent := time.Now()
	err := s.send(rctx, spec)
	took := time.Since(sent)
	switch {
	case err == nil:
		s.completed.Add(1)
		s.mu.Lock()
		s.latencies = append(s.latencies, took)
		s.mu.Unlock()
	case errors.Is(err, ErrLeft) || errors.Is(context.Cause(rctx), ErrPlanned):
		s.cancelled.Add(1)
	default:
		s.errors.Add(measure.Classify(rctx, err))
	}
	n := int(s.ended.Add(1))
	if s.pid > 0 && s.l.SampleEvery > 0 && n > s.l.Warmup && (n-s.l.Warmup)%s.l.SampleEvery == 0 {
		smp := s.readMemory(n, false)
		s.mu.Lock()
		s.samples = append(s.samples, smp)
		s.mu.Unlock()
	}
}

func (s *soak) send(ctx context.Context, spec soakRequest) error {
	path := "/v1/completions"
	if spec.chat {
		path = "/v1/chat/completions"
	}
	if spec.stream {
		resp, err := Post(ctx, s.client, s.baseURL+path, spec.body, "text/event-stream")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		c := StreamCheck{MaxTokens: spec.maxTokens, WantUsage: spec.usage}
		if spec.leave {
			c.OnContent = func() bool { return false }
		}
		return ReadStream(resp.Body, c)
	}
	resp, err := Post(ctx, s.client, s.baseURL+path, spec.body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return CheckFull(body, spec.maxTokens)
}

// CheckFull checks a non-streamed chat or completion response.
func CheckFull(body []byte, maxTokens int) error {
	var r struct {
		Choices []struct {
			Message *struct {
				Content *string `json:"content"`
			} `json:"message"`
			Text         *string `json:"text"`
			FinishReason string  `json:"finish_reason"`
		} `json:"choices"`
		Usage *usageJSON `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return measure.Failf(measure.KindJSON, "response %.80q: %v", body, err)
	}
	if len(r.Choices) != 1 {
		return measure.Failf(measure.KindJSON, "%d choices, want 1", len(r.Choices))
	}
	c := r.Choices[0]
	if (c.Message == nil || c.Message.Content == nil) && c.Text == nil {
		return measure.Failf(measure.KindJSON, "choice without content or text")
	}
	if c.FinishReason != "stop" && c.FinishReason != "length" {
		return measure.Failf(measure.KindFinish, "finish_reason %q, want stop or length", c.FinishReason)
	}
	if r.Usage == nil {
		return measure.Failf(measure.KindUsage, "no usage")
	}
	return checkUsage(*r.Usage, c.FinishReason, maxTokens, false)
}

// idleSample closes the client's idle connections, waits out the idle
// window with no load reading memory every 100 ms, and returns the least
// resident memory seen with the open files counted at the window's end, so
// that connections the simulator failed to release show up.
func (s *soak) idleSample(ctx context.Context) MemorySample {
	s.client.CloseIdleConnections()
	n := int(s.ended.Load())
	best := s.readMemory(n, true)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(s.l.IdleWindow)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return best
		case <-tick.C:
		}
		if m := s.readMemory(n, true); m.RSSBytes > 0 && (best.RSSBytes == 0 || m.RSSBytes < best.RSSBytes) {
			best = m
		}
	}
	best.FDs, _ = procs.OpenFDs(s.pid)
	s.mu.Lock()
	s.samples = append(s.samples, best)
	s.mu.Unlock()
	return best
}

// readMemory reads the simulator's memory; a failed read leaves zeros.
func (s *soak) readMemory(requests int, idle bool) MemorySample {
	m := MemorySample{Requests: requests, Seconds: time.Since(s.begin).Seconds(), Idle: idle}
	m.RSSBytes, _ = procs.ResidentBytes(s.pid)
	m.FDs, _ = procs.OpenFDs(s.pid)
	return m
}

// soakRequest is one request of the soak workload.
type soakRequest struct {
	shape     string // chat_stream, chat, completion_stream or completion
	chat      bool
	stream    bool
	usage     bool          // stream_options.include_usage
	leave     bool          // stream only: leave after the first content chunk
	deadline  time.Duration // non-stream only: give up after this long; 0 for none
	maxTokens int
	body      []byte
}

// request builds request i of the workload; it depends only on the seed
// and i. Half the requests are chats; half are streamed; 8% of streams are
// left after their first content chunk and 2% of the others carry a client
// deadline of 1-3 ms. Half the prompts start with one of a few shared
// system prompts; prompt bodies run from a few words to a few thousand
// tokens.
func (s *soak) request(i int) soakRequest {
	r := rand.New(rand.NewPCG(s.l.Seed, uint64(i)))
	q := soakRequest{chat: r.IntN(2) == 0, stream: r.IntN(2) == 0, maxTokens: 1 + r.IntN(64)}
	if q.stream {
		q.leave = r.IntN(100) < 8
		q.usage = r.IntN(2) == 0
	} else if r.IntN(100) < 2 {
		q.deadline = time.Duration(1+r.IntN(3)) * time.Millisecond
	}
	var prefix string
	if r.IntN(2) == 0 {
		prefix = s.prefixes[r.IntN(len(s.prefixes))]
	}
	var words int
	switch p := r.IntN(100); {
	case p < 70:
		words = 5 + r.IntN(96)
	case p < 95:
		words = 100 + r.IntN(401)
	default:
		words = 500 + r.IntN(1501)
	}
	text := Babble(r, words)

	var b []byte
	if q.chat {
		q.shape = "chat"
		b = append(b, `{"messages":[`...)
		if prefix != "" {
			b = append(b, `{"role":"system","content":`...)
			b = openai.AppendString(b, prefix)
			b = append(b, `},`...)
		}
		b = append(b, `{"role":"user","content":`...)
		b = openai.AppendString(b, text)
		b = append(b, `}]`...)
	} else {
		q.shape = "completion"
		b = append(b, `{"prompt":`...)
		if prefix != "" {
			text = prefix + "\n\n" + text
		}
		b = openai.AppendString(b, text)
	}
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(q.maxTokens), 10)
	if q.stream {
		q.shape += "_stream"
		b = append(b, `,"stream":true`...)
		if q.usage {
			b = append(b, `,"stream_options":{"include_usage":true}`...)
		}
	}
	q.body = append(b, '}')
	return q
}

// soakPrefixes are the shared system prompts, 100-600 words each.
func soakPrefixes(seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 1<<62))
	p := make([]string, 8)
	for i := range p {
		p[i] = "System " + strconv.Itoa(i) + ". " + Babble(r, 100+r.IntN(501))
	}
	return p
}

var babbleWords = strings.Fields(`the router picks an engine for each request by the prefix its
cache holds and the load it reports so long prompts that share a system message land
where their blocks already live while short chats spread across replicas; queues grow,
decode steps slow, and the scheduler preempts what no longer fits. Tokens, blocks, hashes:
every step counts them.`)

// Babble returns n words of English-looking text.
func Babble(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(babbleWords[r.IntN(len(babbleWords))])
	}
	return b.String()
}

// ScrapeGauges reads the gauges and counters a soak checks from the
// simulator's /metrics page.
func ScrapeGauges(ctx context.Context, client *http.Client, baseURL string) (*SimGauges, error) {
	p, err := procs.ScrapePage(ctx, client, baseURL+"/metrics")
	if err != nil {
		return nil, err
	}
	return gaugesOf(p), nil
}

// parseGauges picks the soak's figures out of a Prometheus text page.
func parseGauges(r io.Reader) (*SimGauges, error) {
	p, err := procs.ParsePage(r)
	if err != nil {
		return nil, err
	}
	return gaugesOf(p), nil
}

// gaugesOf picks the soak's figures out of a parsed page.
func gaugesOf(p procs.PromPage) *SimGauges {
	g := &SimGauges{
		Running:        p.Sum("vllm:num_requests_running"),
		Waiting:        p.Sum("vllm:num_requests_waiting"),
		KVUsage:        p.Sum("vllm:kv_cache_usage_perc"),
		Preemptions:    p.Sum("vllm:num_preemptions_total"),
		RequestSuccess: p.ByLabel("vllm:request_success_total", "finished_reason"),
	}
	if g.RequestSuccess == nil {
		g.RequestSuccess = make(map[string]float64)
	}
	return g
}

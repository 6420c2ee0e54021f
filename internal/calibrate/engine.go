package calibrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inferrail/inferrail/internal/load"
)

// Errors that stop a calibration before or while it probes, for errors.Is.
var (
	// ErrUnreachable: the engine did not answer at all.
	ErrUnreachable = errors.New("engine unreachable")
	// ErrNotIdle: the engine was serving other requests, before or during
	// the probes, so its TTFTs would include their queueing.
	ErrNotIdle = errors.New("engine not idle")
	// ErrNoTTFT: the engine's metrics page has no TTFT histogram to read.
	ErrNoTTFT = errors.New("no time to first token histogram on the metrics page")
	// ErrEngine: the engine answered a request with an error or something
	// that is not the OpenAI API.
	ErrEngine = errors.New("engine request failed")
)

// ttftFamilies are the engines' TTFT histograms, measured inside the
// engine from arrival to first token.
var ttftFamilies = []string{"vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"}

// engine talks to one OpenAI-compatible engine.
type engine struct {
	base    string // URL without a trailing slash
	client  *http.Client
	timeout time.Duration // per request
}

// snapshot is what one read of the metrics page tells calibration.
type snapshot struct {
	report     *load.Report
	ttftSum    float64 // seconds
	ttftCount  float64
	scrapeSecs float64 // how long the read took
}

// errStatus is a non-2xx answer.
type errStatus struct {
	code int
	body string
}

func (e *errStatus) Error() string {
	return fmt.Sprintf("status %d: %s", e.code, e.body)
}

// do sends one request and returns the body of a 2xx answer.
func (e *engine) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() == nil || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: %s %s: %w", ErrUnreachable, method, path, err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	// One byte past the cap tells an answer cut at it from one that fits.
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: read body: %w", ErrUnreachable, method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, &errStatus{code: resp.StatusCode, body: strings.TrimSpace(string(b[:min(len(b), 512)]))}
	}
	if len(b) > maxAnswer {
		// Cut short it read as "unexpected end of JSON input" or "line N:
		// no value", which named nothing of the cause.
		return nil, fmt.Errorf("%w: %s %s: the answer is larger than %d MiB", ErrEngine, method, path, maxAnswer>>20)
	}
	return b, nil
}

// maxAnswer bounds what calibration reads of an answer: a metrics page or
// a model list of a real engine is a few hundred kilobytes at most.
const maxAnswer = 16 << 20

// modelInfo is what /v1/models says about the model calibration probes.
type modelInfo struct {
	name        string
	maxModelLen int // 0 when not reported
}

// model returns the engine's model: want if it serves it, else the first
// one listed when want is empty.
func (e *engine) model(ctx context.Context, want string) (modelInfo, error) {
	b, err := e.do(ctx, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return modelInfo{}, fmt.Errorf("list models: %w", wrapStatus(err))
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen *int   `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return modelInfo{}, fmt.Errorf("%w: list models: %v", ErrEngine, err)
	}
	for _, m := range list.Data {
		if want == "" || m.ID == want {
			info := modelInfo{name: m.ID}
			if m.MaxModelLen != nil {
				info.maxModelLen = *m.MaxModelLen
			}
			return info, nil
		}
	}
	if want == "" {
		return modelInfo{}, fmt.Errorf("%w: /v1/models lists no model", ErrEngine)
	}
	return modelInfo{}, fmt.Errorf("%w: the engine does not serve model %q", ErrEngine, want)
}

// errNoTokenize means the engine has no /tokenize endpoint.
var errNoTokenize = errors.New("no /tokenize endpoint")

// tokenize returns how many tokens the engine makes of a completion prompt,
// with the special tokens it adds (a BOS) when special is set.
func (e *engine) tokenize(ctx context.Context, model, prompt string, special bool) (int, error) {
	b, err := e.do(ctx, http.MethodPost, "/tokenize", map[string]any{"model": model, "prompt": prompt, "add_special_tokens": special})
	var st *errStatus
	if errors.As(err, &st) && (st.code == http.StatusNotFound || st.code == http.StatusMethodNotAllowed) {
		return 0, errNoTokenize
	}
	if err != nil {
		return 0, fmt.Errorf("tokenize: %w", wrapStatus(err))
	}
	var r struct {
		Count *int `json:"count"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Count == nil {
		return 0, fmt.Errorf("%w: tokenize: no count in the answer", ErrEngine)
	}
	return *r.Count, nil
}

// complete sends a completion for one token and returns the prompt tokens
// the engine reports.
func (e *engine) complete(ctx context.Context, model, prompt string) (int, error) {
	b, err := e.do(ctx, http.MethodPost, "/v1/completions", map[string]any{
		"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": false,
	})
	if err != nil {
		return 0, fmt.Errorf("completion: %w", wrapStatus(err))
	}
	var r struct {
		Usage *struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("%w: completion: %v", ErrEngine, err)
	}
	if r.Usage == nil {
		return 0, nil
	}
	return r.Usage.PromptTokens, nil
}

// wrapStatus marks an engine's error answer with ErrEngine.
func wrapStatus(err error) error {
	var st *errStatus
	if errors.As(err, &st) {
		return fmt.Errorf("%w: %w", ErrEngine, err)
	}
	return err
}

// scrape reads the engine's metrics page: its load through package load,
// and the TTFT histogram's sum and count over every series (data-parallel
// ranks) but SGLang's per-priority breakdowns.
func (e *engine) scrape(ctx context.Context) (*snapshot, error) {
	start := time.Now()
	b, err := e.do(ctx, http.MethodGet, "/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", wrapStatus(err))
	}
	took := time.Since(start).Seconds()
	rep, err := load.Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: read metrics: %w", ErrEngine, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: read metrics: %w", ErrEngine, err)
	}
	snap := &snapshot{report: rep, scrapeSecs: took}
	found := false
	for _, name := range ttftFamilies {
		fam, ok := families[name]
		if !ok {
			continue
		}
		found = true
	series:
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "priority" && l.GetValue() != "" {
					continue series
				}
			}
			h := m.GetHistogram()
			if h == nil {
				return nil, fmt.Errorf("%w: %s is not a histogram", ErrNoTTFT, name)
			}
			snap.ttftSum += h.GetSampleSum()
			snap.ttftCount += float64(h.GetSampleCount())
		}
	}
	if !found {
		return nil, fmt.Errorf("%w (looked for %s)", ErrNoTTFT, strings.Join(ttftFamilies, ", "))
	}
	return snap, nil
}

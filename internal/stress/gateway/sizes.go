package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/chattemplate"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// SizesLoad is gw-sizes: chat requests huge in one dimension each (one
// message, the number of messages, of tools, the nesting of a tool call's
// arguments), sent one at a time through a gateway that tokenizes them.
type SizesLoad struct {
	SizeScale
	// Reps is how many times each body is sent. Must be positive.
	Reps int
	// MaxWait is the gateway's tokenizer.max_wait: how long a request
	// waits for its tokens. Must be positive.
	MaxWait time.Duration
	// TokenizerDir holds the Hugging Face families' tokenizer files, one
	// directory each (`make tokenizers`). Families lists those to run a
	// leg with besides builtin:sim; a family whose files are missing is
	// skipped with a note.
	TokenizerDir string
	Families     []string
}

// Validate reports every setting that cannot run.
func (l SizesLoad) Validate() error {
	errs := []error{stress.Positive("reps", l.Reps), stress.Positive("max_wait", l.MaxWait)}
	for _, v := range []struct {
		name string
		n    int
	}{{"message_bytes", l.MessageBytes}, {"messages", l.Messages}, {"tools", l.Tools}, {"depth", l.Depth}} {
		errs = append(errs, stress.NotNegative(v.name, v.n))
	}
	return errors.Join(errs...)
}

// SizesLeg is one tokenizer's run of every body.
type SizesLeg struct {
	Tokenizer string        `json:"tokenizer"`
	Bodies    []SizesFigure `json:"bodies"`
}

// SizesFigure is what one body got, over its repetitions.
type SizesFigure struct {
	Body  string `json:"body"`
	Bytes int    `json:"bytes"`
	// Statuses, Outcomes and ErrorMessages are per repetition: the HTTP
	// status, the gateway's tokenizer result for it (tokenized, slow,
	// template, ...; inferrail_tokenized_requests_total) and, for a
	// refusal, the OpenAI error's message.
	Statuses      []int    `json:"statuses"`
	Outcomes      []string `json:"outcomes"`
	ErrorMessages []string `json:"error_messages,omitempty"`
	// PromptTokens is the gateway's count when it tokenized the prompt.
	PromptTokens int `json:"prompt_tokens,omitempty"`
	// AnswerSeconds is each repetition's time from sending to the whole
	// answer; TokenizeSeconds the gateway's inferrail_tokenize_seconds
	// for it (the wait, at most tokenizer.max_wait).
	AnswerSeconds   []float64 `json:"answer_seconds"`
	TokenizeSeconds []float64 `json:"tokenize_seconds"`
	// DirectSeconds is each repetition sent straight to the simulator
	// right after, the reference on this shared machine; AddedSeconds the
	// median answer through the gateway less the median straight.
	DirectSeconds []float64 `json:"direct_seconds"`
	AddedSeconds  float64   `json:"added_seconds"`
	// HarnessSeconds is the same tokenization (parse, render, encode, no
	// piece cache) done once in the harness process, to its end: how long
	// a worker stays busy with the body when the request stopped waiting.
	HarnessSeconds float64 `json:"harness_seconds"`
	HarnessResult  string  `json:"harness_result"`
	// Bad is set when an answer was neither a 200 nor an OpenAI error
	// of 4xx.
	Bad string `json:"bad,omitempty"`
}

// sizesBudget is the time the spec gives each body.
const sizesBudget = 500 * time.Millisecond

func runGWSizes(ctx context.Context, r *gwRun) error {
	l := r.c.Sizes
	// The many-tools and nested-arguments bodies send tools, which vLLM
	// serves only with a tool call parser.
	sims, err := r.simChildren(ctx, 1, append([]string{"--zero-latency"}, procs.SimToolCallArgs()...))
	if err != nil {
		return err
	}
	legs := []string{"builtin:sim"}
	for _, fam := range l.Families {
		dir, err := filepath.Abs(filepath.Join(l.TokenizerDir, fam))
		if err == nil {
			_, err = os.Stat(filepath.Join(dir, "tokenizer.json"))
		}
		if err != nil {
			r.note("Family %s skipped: no tokenizer.json in %s (run `make tokenizers`).", fam, filepath.Join(l.TokenizerDir, fam))
			continue
		}
		legs = append(legs, dir)
	}
	bodies := sizeBodies(procs.SimModel, l.SizeScale)
	var all []SizesLeg
	for _, tok := range legs {
		leg, err := r.sizesLeg(ctx, sims, tok, bodies)
		if err != nil {
			return err
		}
		all = append(all, leg)
	}
	r.res.Sizes = all
	sizesChecks(r, all)
	return nil
}

// sizesLeg sends every body l.Reps times through a fresh gateway whose
// model tokenizes with tok, which it stops before returning.
func (r *gwRun) sizesLeg(ctx context.Context, sims []*gwReplica, tok string, bodies []sizeBody) (SizesLeg, error) {
	l := r.c.Sizes
	leg := SizesLeg{Tokenizer: tok}
	if tok != "builtin:sim" {
		leg.Tokenizer = filepath.Base(tok)
	}
	cfg := gwConfig(sims, healthDefault)
	cfg.Models[0].Tokenizer = tok
	// A family's tokens are not the simulator's: the startup comparison
	// with the engine's /tokenize would turn predictions off.
	cfg.Tokenizer.Verify = tok == "builtin:sim"
	cfg.Tokenizer.MaxWait = config.Duration(l.MaxWait)
	gw, err := r.gateway(ctx, cfg)
	if err != nil {
		return leg, err
	}
	defer r.stopGateway(gw)
	harness, err := harnessTokenizer(tok)
	if err != nil {
		return leg, err
	}
	client := gwClient(1)
	defer client.CloseIdleConnections()
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	warmChats(ctx, client, gw, 5, procs.SimModel)
	for _, b := range bodies {
		f := SizesFigure{Body: b.Name, Bytes: len(b.Body)}
		for range l.Reps {
			if err := f.send(ctx, client, admin, gw, b.Body); err != nil {
				return leg, err
			}
			f.DirectSeconds = append(f.DirectSeconds, sendDirect(ctx, client, sims[0].URL, b.Body))
		}
		f.AddedSeconds = median(f.AnswerSeconds) - median(f.DirectSeconds)
		start := time.Now()
		f.HarnessResult = harness(b.Body)
		f.HarnessSeconds = time.Since(start).Seconds()
		r.log.Info("gw-sizes body", "tokenizer", leg.Tokenizer, "body", b.Name, "outcomes", f.Outcomes, "statuses", f.Statuses,
			"answer_seconds", f.AnswerSeconds, "harness_seconds", f.HarnessSeconds)
		leg.Bodies = append(leg.Bodies, f)
	}
	return leg, nil
}

// send sends body once and records what it got.
func (f *SizesFigure) send(ctx context.Context, client, admin *http.Client, gw *procs.Gateway, body []byte) error {
	before, err := gw.Metrics(ctx, admin)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, gw.URL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	status, msg, tokens, sendErr := exchangeSized(client, req)
	f.AnswerSeconds = append(f.AnswerSeconds, time.Since(start).Seconds())
	f.Statuses = append(f.Statuses, status)
	if msg != "" {
		f.ErrorMessages = append(f.ErrorMessages, msg)
	}
	if sendErr != nil && f.Bad == "" {
		f.Bad = sendErr.Error()
	}
	if tokens > 0 {
		f.PromptTokens = tokens
	}
	after, err := gw.Metrics(ctx, admin)
	if err != nil {
		return err
	}
	outcome := "none"
	for result, n := range after.ByLabel("inferrail_tokenized_requests_total", "result") {
		if n > before.ByLabel("inferrail_tokenized_requests_total", "result")[result] {
			outcome = result
		}
	}
	f.Outcomes = append(f.Outcomes, outcome)
	f.TokenizeSeconds = append(f.TokenizeSeconds, after.Sum("inferrail_tokenize_seconds_sum")-before.Sum("inferrail_tokenize_seconds_sum"))
	return nil
}

// sendDirect sends body straight to the engine at url and returns the
// time to its whole answer, whatever it is.
func sendDirect(ctx context.Context, client *http.Client, url string, body []byte) float64 {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	_, _, _, _ = exchangeSized(client, req)
	return time.Since(start).Seconds()
}

// median is the middle of v (the mean of the middle two), 0 when empty.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

// exchangeSized sends req and reads the answer: its status, the message
// of an OpenAI error, the gateway's prompt token count, and an error when
// the answer is neither a good chat nor an OpenAI error of 4xx.
func exchangeSized(client *http.Client, req *http.Request) (status int, msg string, tokens int, err error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, "", 0, err
	}
	tokens, _ = strconv.Atoi(resp.Header.Get(openai.HeaderPromptTokens))
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, "", tokens, stress.CheckFull(data, 4)
	}
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error == nil || e.Error.Message == "" {
		return resp.StatusCode, "", tokens, fmt.Errorf("status %d without an OpenAI error: %.200s", resp.StatusCode, data)
	}
	if resp.StatusCode/100 != 4 {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, e.Error.Message)
	}
	return resp.StatusCode, fmt.Sprintf("%d %s: %.160s", resp.StatusCode, e.Error.Type, e.Error.Message), tokens, err
}

// harnessTokenizer returns the tokenization the gateway does for a chat
// body with tok (builtin:sim or a tokenizer directory), without a piece
// cache, as a function answering "tokenized (n)" or the error.
func harnessTokenizer(tok string) (func(body []byte) string, error) {
	var ids func(p *tokenize.Prompt) ([]int, error)
	if tok == "builtin:sim" {
		s := simtok.New()
		ids = func(p *tokenize.Prompt) ([]int, error) { return s.PromptIDs(p), nil }
	} else {
		t, err := hf.Load(tok)
		if err != nil {
			return nil, err
		}
		chat, err := chattemplate.New(t, chattemplate.Options{})
		if err != nil {
			return nil, err
		}
		ids = chat.ChatIDs
	}
	return func(body []byte) string {
		p, err := tokenize.ParseChatRequest(body)
		if err == nil {
			var out []int
			if out, err = ids(p); err == nil {
				return fmt.Sprintf("tokenized (%d)", len(out))
			}
		}
		s := err.Error()
		return s[:min(len(s), 120)]
	}, nil
}

func sizesChecks(r *gwRun, legs []SizesLeg) {
	var bad, slowest, mostAdded string
	var worst, worstTok, added float64
	answered, n := 0, 0
	for _, leg := range legs {
		for _, f := range leg.Bodies {
			for i, s := range f.AnswerSeconds {
				n++
				if f.Statuses[i] == http.StatusOK || f.Statuses[i]/100 == 4 {
					answered++
				}
				if s > worst {
					worst, slowest = s, leg.Tokenizer+" "+f.Body
				}
				worstTok = max(worstTok, f.TokenizeSeconds[i])
			}
			if f.AddedSeconds > added {
				added, mostAdded = f.AddedSeconds, leg.Tokenizer+" "+f.Body
			}
			if f.Bad != "" && bad == "" {
				bad = leg.Tokenizer + " " + f.Body + ": " + f.Bad
			}
		}
	}
	r.check("every body answered: a chat, or a 4xx OpenAI error", fmt.Sprintf("%d of %d", n, n),
		fmt.Sprintf("%d %s", answered, bad), answered == n && bad == "")
	r.check("each tokenized or refused within half a second (the gateway's wait for tokens)", "under 0.5 s",
		fmt.Sprintf("longest wait %s", stress.Secs(worstTok)), worstTok < sizesBudget.Seconds())
	r.check("each answered within half a second (the client's time, the engine's included)", "under 0.5 s",
		fmt.Sprintf("longest %s (%s)", stress.Secs(worst), slowest), worst < sizesBudget.Seconds())
	r.check("what the gateway adds to the engine's own answer (median through it less median straight to it)", "under 0.5 s",
		fmt.Sprintf("at most %s (%s)", stress.Secs(added), mostAdded), added < sizesBudget.Seconds())
	r.note("A request whose tokens are not ready within tokenizer.max_wait (here 400 ms, leaving the rest of the half second to reading " +
		"and checking the body) is routed without a prediction (outcome slow) and its worker told to stop; the harness column is how long " +
		"the same tokenization takes to finish, what a worker would spend on it if it were not stopped.")
}

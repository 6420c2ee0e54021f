package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferrail/inferrail/internal/tokenize"
)

// body is a generated request body as a test reads it.
type body struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools         []json.RawMessage `json:"tools"`
	MaxTokens     int               `json:"max_tokens"`
	IgnoreEOS     bool              `json:"ignore_eos"`
	Stream        bool              `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func decode(t testing.TB, r Request) body {
	t.Helper()
	var b body
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	return b
}

func generate(t testing.TB, spec Spec) []Request {
	t.Helper()
	reqs, err := Generate(spec)
	if err != nil {
		t.Fatalf("Generate(%+v): %v", spec, err)
	}
	if len(reqs) == 0 {
		t.Fatalf("Generate(%+v): no requests", spec)
	}
	return reqs
}

func tokens(s string) int { return simTok.Count(s) }

func TestValidate(t *testing.T) {
	ok := Spec{Workload: W1, Model: "m", Rate: 1, Requests: 10}
	tests := []struct {
		name string
		edit func(*Spec)
		want []string // every message expected, in order
	}{
		{"ok", func(*Spec) {}, nil},
		{"unknown_workload", func(s *Spec) { s.Workload = "w7" }, []string{`workload: unknown workload "w7"`}},
		{"no_model", func(s *Spec) { s.Model = "" }, []string{"model: required"}},
		{"zero_rate", func(s *Spec) { s.Rate = 0 }, []string{"rate: must be > 0"}},
		{"negative_rate", func(s *Spec) { s.Rate = -1 }, []string{"rate: must be > 0"}},
		{"nan_rate", func(s *Spec) { s.Rate = math.NaN() }, []string{"rate: must be a finite number"}},
		// A schedule is made whole before the run: these ran out of memory.
		{"rate_1e308", func(s *Spec) { s.Rate, s.Requests, s.Duration = 1e308, 0, time.Second }, []string{
			"rate: 1e+308 req/s over 1s is 1e+308 requests, more than the 10000000 a run may make"}},
		{"w6_200000_a_minute", func(s *Spec) { s.Workload, s.Rate, s.Requests, s.Duration = W6, 200000, 0, time.Minute }, []string{
			"rate: 200000 req/s over 1m0s is 1.2e+07 requests, more than the 10000000"}},
		{"ten_million_a_minute", func(s *Spec) { s.Rate, s.Requests, s.Duration = 1e7/60, 0, time.Minute }, nil},
		{"requests_past_bound", func(s *Spec) { s.Requests = 10_000_001 }, []string{"requests: 10000001 requests is more than the 10000000"}},
		{"both_cuts", func(s *Spec) { s.Duration = time.Minute }, []string{"duration: exactly one of duration and requests must be > 0"}},
		{"no_cut", func(s *Spec) { s.Requests = 0 }, []string{"duration: exactly one of duration and requests must be > 0"}},
		{"gamma_no_cv", func(s *Spec) { s.Arrivals = Gamma }, []string{"cv: must be > 0 with gamma arrivals"}},
		{"gamma_negative_cv", func(s *Spec) { s.Arrivals, s.CV = Gamma, -2 }, []string{"cv: must be > 0"}},
		{"poisson_cv", func(s *Spec) { s.CV = 2 }, []string{"cv: only with gamma arrivals"}},
		{"unknown_arrivals", func(s *Spec) { s.Arrivals = "uniform" }, []string{`arrivals: unknown arrival process "uniform"`}},
		{"unknown_ramp", func(s *Spec) { s.Ramp = "weekly" }, []string{`ramp: unknown ramp "weekly"`}},
		{"amplitude_too_big", func(s *Spec) { s.Ramp, s.RampAmplitude = Diurnal, 1 }, []string{"ramp_amplitude: must be in [0, 1)"}},
		{"amplitude_flat", func(s *Spec) { s.RampAmplitude = 0.3 }, []string{"ramp_amplitude: only with the diurnal ramp"}},
		{"system_prompts_w6", func(s *Spec) { s.Workload, s.SystemPrompts = W6, 3 }, []string{"system_prompts: only for"}},
		{"zipf_w1", func(s *Spec) { s.Zipf = 1 }, []string{"zipf: only for hot and w4"}},
		{"negative_output", func(s *Spec) { s.OutputTokens = -1 }, []string{"output_tokens: must be >= 0"}},
		{"sharegpt_w1", func(s *Spec) { s.ShareGPTPath = "x.json" }, []string{"sharegpt_path: only for w2"}},
		{"trace_fields_w1", func(s *Spec) { s.TracePath, s.TimeScale = "t.jsonl", 2 }, []string{"trace_path: only for the trace workload", "time_scale: only for the trace workload"}},
		{"trace_rate", func(s *Spec) { s.Workload, s.TracePath = Trace, "t.jsonl" }, []string{"rate: must be 0 for trace"}},
		{"trace_no_path", func(s *Spec) { s.Workload, s.Rate = Trace, 0 }, []string{"trace_path: required for trace"}},
		{"trace_arrivals", func(s *Spec) { s.Workload, s.Rate, s.TracePath, s.Arrivals, s.CV = Trace, 0, "t", Gamma, 2 }, []string{"arrivals: must be empty for trace"}},
		{"trace_both_cuts", func(s *Spec) { s.Workload, s.Rate, s.TracePath, s.Duration = Trace, 0, "t", time.Second }, []string{"duration: at most one of duration and requests may cut a trace"}},
		{"max_prompt_w1", func(s *Spec) { s.MaxPromptTokens = 100 }, []string{"max_prompt_tokens: only for w2, w3 and trace"}},
		{"several", func(s *Spec) { s.Model, s.Rate = "", 0 }, []string{"model: required", "rate: must be > 0"}},
		{"w8_gamma_default_cv", func(s *Spec) { s.Workload, s.Arrivals = W8, Gamma }, nil},
		{"w8_cv", func(s *Spec) { s.Workload, s.CV = W8, 4 }, nil},
		{"trace_whole", func(s *Spec) { s.Workload, s.Rate, s.Requests, s.TracePath = Trace, 0, 0, "t" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.edit(&s)
			err := s.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tt.want) {
				t.Fatalf("Validate() = %q, want %d messages %q", got, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("Validate() message %d = %q, want prefix %q", i, got[i], tt.want[i])
				}
			}
			if _, err := Generate(s); err == nil {
				t.Errorf("Generate accepted a spec Validate rejects")
			}
		})
	}
}

// TestPromptTokens checks every workload's bodies and their PromptTokens
// against the simulator's own tokenization.
func TestPromptTokens(t *testing.T) {
	for _, spec := range typicalSpecs(t, 20) {
		t.Run(spec.Workload, func(t *testing.T) {
			reqs := generate(t, spec)
			for i, r := range reqs {
				if i > 0 && r.At < reqs[i-1].At {
					t.Fatalf("request %d at %v before request %d at %v", i, r.At, i-1, reqs[i-1].At)
				}
				b := decode(t, r)
				if r.Path != ChatPath || b.Model != spec.Model || !b.Stream || !b.StreamOptions.IncludeUsage || !b.IgnoreEOS {
					t.Fatalf("request %d: path %s, body %.200s", i, r.Path, r.Body)
				}
				if b.MaxTokens != r.MaxTokens || r.MaxTokens < 1 {
					t.Errorf("request %d: max_tokens %d, MaxTokens %d", i, b.MaxTokens, r.MaxTokens)
				}
				ids, _, err := promptIDs(&r)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if len(ids) != r.PromptTokens {
					t.Fatalf("request %d: PromptTokens = %d, simulator counts %d", i, r.PromptTokens, len(ids))
				}
				if r.Kind == "" || (r.Session != "") != (spec.Workload == W2 || spec.Workload == W3) {
					t.Fatalf("request %d: kind %q, session %q", i, r.Kind, r.Session)
				}
			}
		})
	}
}

// typicalSpecs returns a spec of every workload but trace.
func typicalSpecs(t testing.TB, requests int) []Spec {
	var specs []Spec
	for _, w := range Workloads() {
		if w == Trace {
			continue
		}
		specs = append(specs, Spec{Workload: w, Model: "m", Rate: 10, Requests: requests, Seed: 7})
	}
	specs = append(specs, Spec{Workload: W2, Model: "m", Rate: 10, Requests: requests, Seed: 7, ShareGPTPath: writeShareGPT(t)})
	return specs
}

func TestDeterministic(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine generating every workload twice, where the race detector has nothing to find; make norace runs it")
	}
	for _, spec := range typicalSpecs(t, 200) {
		t.Run(spec.Workload, func(t *testing.T) {
			a, b := generate(t, spec), generate(t, spec)
			if !slices.EqualFunc(a, b, equalRequest) {
				t.Fatal("the same spec gave different requests")
			}
			spec.Seed++
			c := generate(t, spec)
			if slices.EqualFunc(a, c, equalRequest) {
				t.Fatal("another seed gave the same requests")
			}
		})
	}
}

func equalRequest(a, b Request) bool {
	return a.At == b.At && a.Path == b.Path && bytes.Equal(a.Body, b.Body) && a.Session == b.Session &&
		a.Kind == b.Kind && a.MaxTokens == b.MaxTokens && a.PromptTokens == b.PromptTokens
}

func TestSharedPromptShape(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of cases, where the race detector has nothing to find; make norace runs it")
	}
	tests := []struct {
		workload string
		prompts  int
	}{{W1, 8}, {W8, 8}, {Hot, 8}, {Mix, 8}, {W1, 32}}
	for _, tt := range tests {
		t.Run(tt.workload, func(t *testing.T) {
			const n = 1000
			spec := Spec{Workload: tt.workload, Model: "m", Rate: 10, Requests: n, Seed: 3}
			if tt.prompts != 8 {
				spec.SystemPrompts = tt.prompts
			}
			systems := map[string]int{}
			kinds := map[string]int{}
			for _, r := range generate(t, spec) {
				b := decode(t, r)
				kinds[r.Kind]++
				if r.Kind == W6 {
					if len(b.Messages) != 1 || b.Messages[0].Role != "user" {
						t.Fatalf("w6 request: %.200s", r.Body)
					}
					checkRange(t, "w6 prompt", tokens(b.Messages[0].Content), w6Prompt)
					continue
				}
				if len(b.Messages) != 2 || b.Messages[0].Role != "system" || b.Messages[1].Role != "user" {
					t.Fatalf("request: %.200s", r.Body)
				}
				checkRange(t, "system prompt", tokens(b.Messages[0].Content), sharedSystemLen)
				checkRange(t, "question", tokens(b.Messages[1].Content), questionLen)
				checkRange(t, "output", r.MaxTokens, w1Output)
				systems[b.Messages[0].Content]++
			}
			if len(systems) != tt.prompts {
				t.Errorf("%d distinct system prompts, want %d", len(systems), tt.prompts)
			}
			counts := make([]int, 0, len(systems))
			for _, n := range systems {
				counts = append(counts, n)
			}
			slices.Sort(counts)
			top := float64(counts[len(counts)-1]) / float64(n-kinds[W6])
			switch tt.workload {
			case Hot: // Zipf 1.1 over 8: the first holds 1/H(8, 1.1) ≈ 0.386
				if math.Abs(top-0.386) > 0.04 {
					t.Errorf("hottest prompt has %.3f of requests, want about 0.386", top)
				}
			case Mix:
				if share := float64(kinds[W6]) / n; math.Abs(share-0.5) > 0.05 {
					t.Errorf("w6 share %.3f, want about 0.5", share)
				}
			default:
				if want := 1 / float64(tt.prompts); top > 2*want {
					t.Errorf("most used prompt has %.3f of requests, want about %.3f", top, want)
				}
			}
		})
	}
}

func checkRange(t testing.TB, what string, n int, s span) {
	t.Helper()
	if n < s.lo || n > s.hi {
		t.Fatalf("%s of %d tokens, want %d to %d", what, n, s.lo, s.hi)
	}
}

// TestSessions checks that each turn of a conversation or agent loop
// resends the previous turn's prompt as its prefix, token for token, after
// its think time.
func TestSessions(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine generating sessions, where the race detector has nothing to find; make norace runs it")
	}
	tests := []struct {
		name  string
		spec  Spec
		think span // seconds between turns
	}{
		{"w2", Spec{Workload: W2, Model: "m", Rate: 5, Duration: 5 * time.Minute, Seed: 1}, chatThinkSecs},
		{"w2_sharegpt", Spec{Workload: W2, Model: "m", Rate: 5, Duration: 5 * time.Minute, Seed: 1, ShareGPTPath: writeShareGPT(t)}, chatThinkSecs},
		{"w3", Spec{Workload: W3, Model: "m", Rate: 5, Duration: 5 * time.Minute, Seed: 1}, agentGapSecs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sessions := map[string][]Request{}
			for _, r := range generate(t, tt.spec) {
				sessions[r.Session] = append(sessions[r.Session], r)
			}
			multi := 0
			for name, turns := range sessions {
				if len(turns) > 1 {
					multi++
				}
				var prev []int
				for i, r := range turns {
					ids, _, err := promptIDs(&r)
					if err != nil {
						t.Fatal(err)
					}
					if i > 0 {
						if !slices.Equal(ids[:min(len(prev), len(ids))], prev) || len(ids) <= len(prev) {
							t.Fatalf("session %s turn %d does not extend turn %d", name, i, i-1)
						}
						gap := (r.At - turns[i-1].At).Seconds()
						if gap < float64(tt.think.lo) || gap > float64(tt.think.hi) {
							t.Fatalf("session %s turn %d: %.1f s after the previous, want %d to %d", name, i, gap, tt.think.lo, tt.think.hi)
						}
					}
					prev = ids
				}
			}
			if multi < len(sessions)/2 {
				t.Errorf("%d of %d sessions have more than one turn", multi, len(sessions))
			}
		})
	}
}

func TestAgentShape(t *testing.T) {
	reqs := generate(t, Spec{Workload: W3, Model: "m", Rate: 5, Requests: 300, Seed: 2})
	var tools json.RawMessage
	for _, r := range reqs {
		b := decode(t, r)
		if len(b.Tools) != len(agentTools) {
			t.Fatalf("%d tools, want %d", len(b.Tools), len(agentTools))
		}
		all, _ := json.Marshal(b.Tools)
		if tools == nil {
			tools = all
		} else if !bytes.Equal(all, tools) {
			t.Fatal("tool definitions differ between requests")
		}
		checkRange(t, "output", r.MaxTokens, agentOutput)
		// system, task, then a call and a result per step.
		if len(b.Messages)%2 != 0 || b.Messages[0].Role != "system" || b.Messages[1].Role != "user" {
			t.Fatalf("messages: %.300s", r.Body)
		}
		for i := 2; i < len(b.Messages); i += 2 {
			call, result := b.Messages[i], b.Messages[i+1]
			if call.Role != "assistant" || len(call.ToolCalls) != 1 || result.Role != "tool" || result.ToolCallID != call.ToolCalls[0].ID {
				t.Fatalf("step %d: %+v %+v", i/2, call, result)
			}
			checkRange(t, "tool result", tokens(result.Content), agentResult)
		}
	}
}

func TestRAGShape(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of cases, where the race detector has nothing to find; make norace runs it")
	}
	const n = 4000
	reqs := generate(t, Spec{Workload: W4, Model: "m", Rate: 10, Requests: n, Seed: 5})
	docs := map[string]int{}
	firsts := map[string]int{}
	draws := 0
	for _, r := range reqs {
		b := decode(t, r)
		if len(b.Messages) != 2 || b.Messages[0].Content != ragInstruction.s {
			t.Fatalf("messages: %.300s", r.Body)
		}
		body, question, ok := strings.Cut(b.Messages[1].Content, ragQuestionTag.s)
		if !ok || !strings.HasPrefix(body, ragHeader.s) {
			t.Fatalf("user message: %.300s", b.Messages[1].Content)
		}
		checkRange(t, "question", tokens(question), ragQuestion)
		parts := strings.Split(strings.TrimSuffix(strings.TrimPrefix(body, ragHeader.s), "\n\n"), "\n\n")
		checkRange(t, "documents", len(parts), docsPerReq)
		seen := map[string]bool{}
		for k, p := range parts {
			_, doc, _ := strings.Cut(p, "] ")
			checkRange(t, "document", tokens(doc), docLen)
			if seen[doc] {
				t.Fatalf("a document twice in one request")
			}
			seen[doc] = true
			docs[doc]++
			draws++
			if k == 0 {
				firsts[doc]++
			}
		}
	}
	counts := make([]int, 0, len(docs))
	for _, c := range docs {
		counts = append(counts, c)
	}
	slices.Sort(counts)
	slices.Reverse(counts)
	// Zipf 1.0 over 2,000: the first document has weight 1/H(2000) ≈ 0.122,
	// the second half of that; a draw avoiding repeats only lowers it.
	top := float64(counts[0]) / float64(draws)
	if top < 0.07 || top > 0.14 {
		t.Errorf("top document in %.3f of draws, want about 0.1", top)
	}
	if ratio := float64(counts[0]) / float64(counts[1]); ratio < 1.5 || ratio > 2.7 {
		t.Errorf("first and second documents drawn %d and %d times, want a ratio near 2", counts[0], counts[1])
	}
	if len(docs) < 500 {
		t.Errorf("only %d distinct documents", len(docs))
	}
}

func TestFewShotShape(t *testing.T) {
	reqs := generate(t, Spec{Workload: W5, Model: "m", Rate: 10, Requests: 500, Seed: 5})
	blocks := map[string]bool{}
	for _, r := range reqs {
		b := decode(t, r)
		blocks[b.Messages[0].Content] = true
		if n := strings.Count(b.Messages[0].Content, "Q: "); n != fewShotExamples {
			t.Fatalf("%d worked examples, want %d", n, fewShotExamples)
		}
		checkRange(t, "question", tokens(strings.TrimPrefix(b.Messages[1].Content, "Q: ")), fewShotQuestion)
		checkRange(t, "output", r.MaxTokens, fewShotOutput)
	}
	if len(blocks) != defaultFewShotBlocks {
		t.Errorf("%d blocks, want %d", len(blocks), defaultFewShotBlocks)
	}
}

func TestOutputTokens(t *testing.T) {
	for _, spec := range typicalSpecs(t, 50) {
		spec.OutputTokens = 77
		for _, r := range generate(t, spec) {
			if r.MaxTokens != 77 || decode(t, r).MaxTokens != 77 {
				t.Fatalf("%s: max_tokens %d, want 77", spec.Workload, r.MaxTokens)
			}
		}
	}
}

func TestMaxPromptTokens(t *testing.T) {
	for _, w := range []string{W2, W3} {
		spec := Spec{Workload: w, Model: "m", Rate: 5, Requests: 500, Seed: 1, MaxPromptTokens: 3000}
		for _, r := range generate(t, spec) {
			if r.PromptTokens+r.MaxTokens > 3000 {
				if strings.Count(string(r.Body), `"role":"user"`) > 1 || strings.Contains(string(r.Body), `"role":"tool"`) {
					t.Fatalf("%s: a later turn of %d+%d tokens", w, r.PromptTokens, r.MaxTokens)
				}
			}
		}
	}
}

// TestOracleByWorkload checks the oracle hit rate is where each workload's
// design puts it.
func TestOracleByWorkload(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine generating every workload, where the race detector has nothing to find; make norace runs it")
	}
	tests := []struct {
		workload string
		lo, hi   float64
	}{
		{W1, 0.85, 1}, {Hot, 0.85, 1}, {W8, 0.85, 1}, {W5, 0.85, 1},
		{W3, 0.6, 0.95}, {W2, 0.3, 0.9}, {Mix, 0.5, 0.9}, {W4, 0.1, 0.6},
		{W6, 0, 0.01},
	}
	for _, tt := range tests {
		t.Run(tt.workload, func(t *testing.T) {
			reqs := generate(t, Spec{Workload: tt.workload, Model: "m", Rate: 10, Requests: 400, Seed: 11})
			got, err := OracleHitRate(reqs, 16)
			if err != nil {
				t.Fatal(err)
			}
			if got < tt.lo || got > tt.hi {
				t.Errorf("OracleHitRate = %.3f, want %.2f to %.2f", got, tt.lo, tt.hi)
			}
			t.Logf("OracleHitRate = %.3f", got)
		})
	}
}

func TestOracleErrors(t *testing.T) {
	good := Request{Path: ChatPath, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)}
	if _, err := OracleHitRate([]Request{good}, 0); err == nil {
		t.Error("block size 0 accepted")
	}
	bad := []Request{good, {Path: ChatPath, Body: []byte(`{`)}, {Path: "/v1/embeddings", Body: good.Body}}
	_, err := OracleHitRate(bad, 16)
	if err == nil || !strings.Contains(err.Error(), "request 1:") || !strings.Contains(err.Error(), "request 2:") {
		t.Errorf("OracleHitRate(bad) = %v, want errors naming requests 1 and 2", err)
	}
	if got, err := OracleHitRate(nil, 16); got != 0 || err != nil {
		t.Errorf("OracleHitRate(nil) = %v, %v, want 0, nil", got, err)
	}
}

// TestOracleHandMade checks the oracle on requests whose sharing is known.
func TestOracleHandMade(t *testing.T) {
	const bs = 4
	completion := func(at time.Duration, prompt string) Request {
		b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "add_special_tokens": false})
		return Request{At: at, Path: "/v1/completions", Body: b}
	}
	// Two-byte words end with a space: one token each.
	a := strings.Repeat("a ", 8)                           // 8 tokens: 2 blocks
	b := strings.Repeat("a ", 8) + strings.Repeat("b ", 5) // shares a's 2 blocks
	c := strings.Repeat("c ", 9)
	reqs := []Request{
		completion(2*time.Second, b), // after a despite coming first
		completion(time.Second, a),   // first: nothing cached
		completion(3*time.Second, c),
		completion(4*time.Second, a), // all 8 cached, but the last token is computed: 1 block
		completion(5*time.Second, c), // 9 tokens: 2 blocks cached
	}
	an, err := Analyze(reqs, bs)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{13, 8, 9, 8, 9}; !slices.Equal(an.PromptTokens, want) {
		t.Errorf("PromptTokens = %v, want %v", an.PromptTokens, want)
	}
	if want := []int{8, 0, 0, 4, 8}; !slices.Equal(an.CachedTokens, want) {
		t.Errorf("CachedTokens = %v, want %v", an.CachedTokens, want)
	}
	if want := 20.0 / 47; math.Abs(an.HitRate()-want) > 1e-12 {
		t.Errorf("HitRate = %v, want %v", an.HitRate(), want)
	}
	// A cache salt keeps equal prompts apart.
	salted, _ := json.Marshal(map[string]any{"model": "m", "prompt": a, "add_special_tokens": false, "cache_salt": "s"})
	an, err = Analyze([]Request{completion(0, a), {At: 1, Path: "/v1/completions", Body: salted}}, bs)
	if err != nil || an.Cached != 0 {
		t.Errorf("salted: cached %v, %v, want 0", an, err)
	}
}

func writeShareGPT(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sharegpt.json")
	if err := os.WriteFile(path, []byte(shareGPTSample), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// shareGPTSample covers the shapes ParseShareGPT meets: system prompts,
// alternate role names, text that needs escaping or holds special tokens,
// a conversation ending on the user, a broken alternation, and one with no
// user at all.
const shareGPTSample = `[
 {"id": "a1", "conversations": [
  {"from": "human", "value": "What is a prefix cache?"},
  {"from": "gpt", "value": "It keeps the KV blocks of earlier prompts.\nSo a shared prefix is computed once."},
  {"from": "human", "value": "And \"routing\" on it? <|im_end|> <tool_call> é 日本"},
  {"from": "gpt", "value": "Send each request where its prefix lives:\t{\"a\": 1}"}]},
 {"id": 2, "conversations": [
  {"from": "system", "value": "You are terse."},
  {"from": "user", "value": "Say hi"},
  {"from": "assistant", "value": "hi"},
  {"from": "user", "value": "Again"}]},
 {"id": "b3", "conversations": [
  {"from": "human", "value": "one"},
  {"from": "human", "value": "two"},
  {"from": "gpt", "value": "never reached"}]},
 {"id": "c4", "conversations": [{"from": "gpt", "value": "no user"}]},
 {"id": "d5", "conversations": [
  {"from": "human", "value": "Tell me a story about caches."},
  {"from": "gpt", "value": "Once there was a block that was never evicted, and every prompt that came by found it warm."},
  {"from": "human", "value": "More."},
  {"from": "chatgpt", "value": "The end."},
  {"from": "human", "value": "Thanks"},
  {"from": "bard", "value": "You are welcome."}]}
]`

func TestParseShareGPT(t *testing.T) {
	convs, err := ParseShareGPT(strings.NewReader(shareGPTSample))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range convs {
		got = append(got, c.ID+":"+c.System+":"+strings.Repeat("T", len(c.Turns)))
	}
	want := []string{"a1::TT", "2:You are terse.:TT", "b3::T", "d5::TTT"}
	if !slices.Equal(got, want) {
		t.Errorf("conversations %q, want %q", got, want)
	}
	if convs[1].Turns[1].Reply != "" || convs[2].Turns[0].User != "one" {
		t.Errorf("turns: %+v %+v", convs[1].Turns, convs[2].Turns)
	}
	for _, bad := range []string{``, `{}`, `[{"conversations": 3}]`, `[{"conversations": []}`} {
		if _, err := ParseShareGPT(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseShareGPT(%q) accepted", bad)
		}
	}
	_, err = Generate(Spec{Workload: W2, Model: "m", Rate: 1, Requests: 1, ShareGPTPath: filepath.Join(t.TempDir(), "missing.json")})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}

func TestShareGPTReplay(t *testing.T) {
	reqs := generate(t, Spec{Workload: W2, Model: "m", Rate: 2, Requests: 200, Seed: 4, ShareGPTPath: writeShareGPT(t)})
	for _, r := range reqs {
		b := decode(t, r)
		last := b.Messages[len(b.Messages)-1]
		if last.Role != "user" {
			t.Fatalf("last message from %s", last.Role)
		}
		// The turn asks for the recorded reply's length.
		if last.Content == "What is a prefix cache?" {
			want := tokens("It keeps the KV blocks of earlier prompts.\nSo a shared prefix is computed once.")
			if r.MaxTokens != want {
				t.Errorf("max_tokens %d, want the recorded reply's %d", r.MaxTokens, want)
			}
		}
		if b.Messages[0].Role == "system" && b.Messages[0].Content != "You are terse." {
			t.Errorf("system %q", b.Messages[0].Content)
		}
	}
}

func TestExactTokenText(t *testing.T) {
	for n := range 200 {
		s := appendWords(nil, uint64(n)*31, n)
		if got := tokens(string(s)); got != n {
			t.Fatalf("appendWords(%d) has %d tokens", n, got)
		}
		if n > 0 && s[len(s)-1] != ' ' {
			t.Fatalf("appendWords(%d) ends with %q", n, s[len(s)-1])
		}
	}
}

// TestRenderMatchesTemplate checks the generator's token arithmetic against
// the template on a chat with tools and calls.
func TestRenderMatchesTemplate(t *testing.T) {
	src := newAgentSource(newGen(Spec{Workload: W3, Model: "m", Seed: 1, MaxPromptTokens: 1 << 20}))
	reqs := src.start(0, nil)
	for _, r := range reqs {
		p, err := tokenize.ParseChatRequest(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(simTok.PromptIDs(p)); got != r.PromptTokens {
			t.Fatalf("PromptTokens %d, template gives %d", r.PromptTokens, got)
		}
	}
}

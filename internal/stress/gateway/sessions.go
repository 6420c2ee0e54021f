package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
)

// SessionsLoad is gw-sessions: conversations over shared system prompts
// through a cache-aware policy with session affinity, explain requests
// mixed in.
type SessionsLoad struct {
	// Requests at Rate per second over Simulators, each a turn of one of
	// Sessions conversations; each conversation keeps one of
	// SystemPrompts system prompts (of SystemWords words), drawn by a Zipf
	// law of exponent Zipf. All positive.
	Requests, Rate, Simulators, Sessions, SystemPrompts, SystemWords int
	Zipf                                                             float64
	// ExplainEvery sends every ExplainEvery-th turn to /admin/explain as
	// well. Must be positive.
	ExplainEvery int
	// Policy routes the model; MaxTokens each turn asks for.
	Policy    string
	MaxTokens int
	Seed      uint64
}

// Validate reports every setting that cannot run.
func (l SessionsLoad) Validate() error {
	errs := []error{stress.Positive("requests", l.Requests), stress.Positive("rate", l.Rate), stress.Positive("simulators", l.Simulators),
		stress.Positive("sessions", l.Sessions), stress.Positive("system_prompts", l.SystemPrompts), stress.Positive("system_words", l.SystemWords),
		stress.Positive("explain_every", l.ExplainEvery), stress.Positive("max_tokens", l.MaxTokens), stress.Required("policy", l.Policy)}
	if !(l.Zipf > 0) {
		errs = append(errs, fmt.Errorf("zipf: must be positive, got %v", l.Zipf))
	}
	return errors.Join(errs...)
}

// SessionsFigures are what gw-sessions measured.
type SessionsFigures struct {
	Requests int `json:"requests"`
	stress.Failures
	AchievedRate float64             `json:"achieved_rate"`
	Latency      measure.Percentiles `json:"latency"`
	// PerReplica counts turns by the replica that answered; BusiestShare
	// is the largest count over all.
	PerReplica   map[string]int `json:"per_replica"`
	BusiestShare float64        `json:"busiest_share"`
	// FollowUps are turns after a conversation's first that were answered;
	// Kept those answered by the replica of the conversation's turn before.
	FollowUps int     `json:"follow_ups"`
	Kept      int     `json:"kept"`
	KeptShare float64 `json:"kept_share"`
	// Explains were sent to /admin/explain; ExplainErrors failed or
	// answered without a winner.
	Explains      int      `json:"explains"`
	ExplainErrors int      `json:"explain_errors"`
	ExplainSample []string `json:"explain_samples,omitempty"`
	// PromptShares is each system prompt's share of the turns, most
	// popular first.
	PromptShares []float64 `json:"prompt_shares"`
}

// sessionsSetup starts the simulators and a gateway routing with the
// scenario's policy, a tokenizer and session affinity.
func sessionsSetup(ctx context.Context, r *gwRun) error {
	l := r.c.Sessions
	var err error
	r.sims, r.gw, err = r.simFleet(ctx, l.Simulators, []string{"--max-num-seqs", "256"}, func(cfg *config.Config) {
		cfg.Models[0].Policy = l.Policy
		cfg.Models[0].Tokenizer = "builtin:sim"
		cfg.Routing.SessionAffinity = true
	})
	return err
}

// sessionTurn is what the schedule sends as chat i.
type sessionTurn struct {
	session, turn, prompt int
	body                  []byte
}

// sessionTurns draws the conversations and their turns.
func sessionTurns(l SessionsLoad) []sessionTurn {
	r := rand.New(rand.NewPCG(l.Seed, 0x5e5510))
	weights := make([]float64, l.SystemPrompts)
	for k := range weights {
		weights[k] = math.Pow(float64(k+1), -l.Zipf)
		if k > 0 {
			weights[k] += weights[k-1]
		}
	}
	system := make([]string, l.SystemPrompts)
	for k := range system {
		system[k] = stress.Babble(rand.New(rand.NewPCG(l.Seed, uint64(k)+1)), l.SystemWords)
	}
	prompts := make([]int, l.Sessions)
	for s := range prompts {
		i, _ := slices.BinarySearch(weights, r.Float64()*weights[len(weights)-1])
		prompts[s] = min(i, l.SystemPrompts-1)
	}
	turns := make([]int, l.Sessions)
	out := make([]sessionTurn, l.Requests)
	for i := range out {
		s := r.IntN(l.Sessions)
		t := sessionTurn{session: s, turn: turns[s], prompt: prompts[s]}
		turns[s]++
		b := []byte(`{"model":`)
		b = openai.AppendString(b, procs.SimModel)
		b = append(b, `,"messages":[{"role":"system","content":`...)
		b = openai.AppendString(b, system[t.prompt])
		b = append(b, `},{"role":"user","content":`...)
		b = openai.AppendString(b, "Conversation "+strconv.Itoa(s)+", turn "+strconv.Itoa(t.turn)+": "+stress.Babble(r, 10)+"?")
		b = append(b, `}],"max_tokens":`...)
		b = strconv.AppendInt(b, int64(l.MaxTokens), 10)
		t.body = append(b, '}')
		out[i] = t
	}
	return out
}

func runGWSessions(ctx context.Context, r *gwRun) error {
	l := r.c.Sessions
	gw := r.gw
	turns := sessionTurns(l)
	client, admin := gwClient(1024), procs.AdminClient()
	defer client.CloseIdleConnections()
	defer admin.CloseIdleConnections()
	f := &SessionsFigures{Requests: l.Requests}
	r.res.Sessions = f
	var explainMu sync.Mutex
	var explain stress.ErrorTally
	start := time.Now().Add(20 * time.Millisecond)
	shots := stress.OpenLoop(ctx, start, stress.FixedSchedule(l.Rate, l.Requests), faultRequestTimeout, func(ctx context.Context, i int) (int, string, error) {
		t := turns[i]
		session := "conversation-" + strconv.Itoa(t.session)
		if i%l.ExplainEvery == 0 {
			err := postExplain(ctx, admin, gw.AdminURL, t.body, session)
			explainMu.Lock()
			f.Explains++
			if err != nil {
				f.ExplainErrors++
				explain.Add(measure.Classify(ctx, err))
			}
			explainMu.Unlock()
		}
		return postTurn(ctx, client, gw.URL+"/v1/chat/completions", t.body, session, l.MaxTokens)
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	_, _, f.ExplainSample = explain.Result()
	tallySessions(f, turns, shots, l)
	r.check("errors", "0", fmt.Sprintf("%d of %d turns, %d of %d explains", f.Errors, f.Requests, f.ExplainErrors, f.Explains),
		f.Errors == 0 && f.ExplainErrors == 0)
	r.check("busiest replica's share of the turns", "reported (an even share is "+strconv.FormatFloat(100/float64(l.Simulators), 'f', 1, 64)+"%)",
		fmt.Sprintf("%.1f%% (%s)", f.BusiestShare*100, formatCounts(f.PerReplica)), f.BusiestShare > 0)
	r.check("turns kept on their conversation's replica", "reported",
		fmt.Sprintf("%.1f%% (%d of %d follow-up turns)", f.KeptShare*100, f.Kept, f.FollowUps), f.FollowUps > 0)
	return nil
}

// tallySessions fills f from the shots.
func tallySessions(f *SessionsFigures, turns []sessionTurn, shots []stress.Shot, l SessionsLoad) {
	f.Errors, f.ErrorKinds, f.ErrorSamples = stress.TallyShots(shots)
	f.PerReplica = map[string]int{}
	last := make([]string, l.Sessions)
	promptCounts := make([]int, l.SystemPrompts)
	var lat []time.Duration
	var lastSent time.Duration
	// Turns in the order sent: a conversation's turn before is the one
	// sent before it.
	order := make([]int, len(shots))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(shots[a].Sent - shots[b].Sent) })
	for _, i := range order {
		s, t := shots[i], turns[i]
		lastSent = max(lastSent, s.Sent)
		promptCounts[t.prompt]++
		if s.Err != nil {
			continue
		}
		lat = append(lat, s.Done-s.Sched)
		f.PerReplica[s.Replica]++
		if prev := last[t.session]; prev != "" {
			f.FollowUps++
			if prev == s.Replica {
				f.Kept++
			}
		}
		last[t.session] = s.Replica
	}
	f.Latency = measure.Summarize(lat)
	if lastSent > 0 {
		f.AchievedRate = float64(len(shots)-1) / lastSent.Seconds()
	}
	busiest, served := 0, 0
	for _, n := range f.PerReplica {
		busiest, served = max(busiest, n), served+n
	}
	if served > 0 {
		f.BusiestShare = float64(busiest) / float64(served)
	}
	if f.FollowUps > 0 {
		f.KeptShare = float64(f.Kept) / float64(f.FollowUps)
	}
	slices.SortFunc(promptCounts, func(a, b int) int { return b - a })
	for _, n := range promptCounts {
		f.PromptShares = append(f.PromptShares, float64(n)/float64(max(1, len(shots))))
	}
}

// postTurn sends a turn of a conversation and checks its answer.
func postTurn(ctx context.Context, client *http.Client, url string, body []byte, session string, maxTokens int) (int, string, error) {
	return sendChat(ctx, client, url, body, maxTokens, openai.HeaderSession, session)
}

// postExplain asks the admin port what the policy would do with a turn;
// it must answer 200 with a winner.
func postExplain(ctx context.Context, client *http.Client, adminURL string, body []byte, session string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, adminURL+"/admin/explain/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(openai.HeaderSession, session)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return measure.Failf(measure.KindStatus, "explain status %d: %s", resp.StatusCode, bytes.TrimSpace(data[:min(len(data), 300)]))
	}
	var x struct {
		Winner string `json:"winner"`
	}
	if err := json.Unmarshal(data, &x); err != nil || x.Winner == "" {
		return measure.Failf(measure.KindJSON, "explain without a winner: %.200s", data)
	}
	return nil
}

func (w *mdWriter) sessions(f *SessionsFigures) {
	shares := make([]string, 0, 4)
	for _, s := range f.PromptShares[:min(4, len(f.PromptShares))] {
		shares = append(shares, fmt.Sprintf("%.1f%%", s*100))
	}
	w.kv(row("Turns (errors)", fmt.Sprintf("%d (%d)", f.Requests, f.Errors)),
		row("Achieved rate", fmt.Sprintf("%.0f req/s", f.AchievedRate)),
		row("Latency p50 / p99", fmt.Sprintf("%s / %s", usec(f.Latency.P50), usec(f.Latency.P99))),
		row("Turns by replica", formatCounts(f.PerReplica)),
		row("Busiest replica's share", fmt.Sprintf("%.1f%%", f.BusiestShare*100)),
		row("Follow-up turns kept on their replica", fmt.Sprintf("%.1f%% (%d of %d)", f.KeptShare*100, f.Kept, f.FollowUps)),
		row("Explains (errors)", fmt.Sprintf("%d (%d)", f.Explains, f.ExplainErrors)),
		row("The most used system prompts' shares", strings.Join(shares, ", ")))
	for _, s := range append(slices.Clone(f.ErrorSamples), f.ExplainSample...) {
		w.p("Error: `%s`\n\n", strings.ReplaceAll(s, "`", "'"))
	}
}

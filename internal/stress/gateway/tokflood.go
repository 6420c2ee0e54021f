package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
)

// TokenFloodLoad is gw-tokenize-flood: many long prompts at once through a
// gateway with one tokenizer worker.
type TokenFloodLoad struct {
	// Prompts are sent at once, each a different text. Must be positive.
	Prompts int
	// Words is each prompt's length in words. Must be positive.
	Words int
	// Workers is the gateway's tokenizer.workers. Must be positive.
	Workers int
	// Replicas is the number of simulator children. Must be positive.
	Replicas int
}

// Validate reports every setting that cannot run.
func (l TokenFloodLoad) Validate() error {
	return errors.Join(stress.Positive("prompts", l.Prompts), stress.Positive("words", l.Words),
		stress.Positive("workers", l.Workers), stress.Positive("replicas", l.Replicas))
}

// TokenFloodFigures is what gw-tokenize-flood measured.
type TokenFloodFigures struct {
	Prompts      int            `json:"prompts"`
	Words        int            `json:"words"`
	BodyBytes    int            `json:"body_bytes"`
	Workers      int            `json:"workers"`
	Served       int            `json:"served"`
	Errors       int            `json:"errors"`
	ErrorKinds   map[string]int `json:"error_kinds,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`
	// Outcomes are the gateway's tokenizer results over the flood
	// (inferrail_tokenized_requests_total): tokenized, busy (the queue
	// was full), slow (not done within tokenizer.max_wait).
	Outcomes map[string]float64 `json:"outcomes"`
	// Predicted answers carried the gateway's prompt token count; Exact
	// of them equal the engine's usage.prompt_tokens.
	Predicted int `json:"predicted"`
	Exact     int `json:"exact"`
	// EngineTokens is one prompt's length as the engine counted it.
	EngineTokens int                 `json:"engine_prompt_tokens"`
	Latency      measure.Percentiles `json:"latency"`
	WallSeconds  float64             `json:"wall_seconds"`
	// TokenizeWait is the gateway's inferrail_tokenize_seconds over the
	// flood: mean wait per request.
	TokenizeWaitMean float64 `json:"tokenize_wait_mean_seconds"`
}

func runGWTokenFlood(ctx context.Context, r *gwRun) error {
	l := r.c.TokenFlood
	sims, gw, err := r.simFleet(ctx, l.Replicas, floodSimArgs, func(cfg *config.Config) {
		cfg.Models[0].Tokenizer = "builtin:sim"
		cfg.Tokenizer.Workers = l.Workers
	})
	if err != nil {
		return err
	}
	admin := procs.AdminClient()
	defer admin.CloseIdleConnections()
	client := gwClient(l.Prompts)
	defer client.CloseIdleConnections()
	warmChats(ctx, client, gw, 10, procs.SimModel)
	bodies := make([][]byte, l.Prompts)
	for i := range bodies {
		b := stress.AppendChat(nil, procs.SimModel, floodPrompt(i, l.Words), 1)
		bodies[i] = append(b, '}')
	}
	f := &TokenFloodFigures{Prompts: l.Prompts, Words: l.Words, BodyBytes: len(bodies[0]), Workers: l.Workers}
	before, err := gw.Metrics(ctx, admin)
	if err != nil {
		return err
	}
	f.flood(ctx, client, gw.URL+"/v1/chat/completions", bodies)
	after, err := gw.Metrics(ctx, admin)
	if err != nil {
		return err
	}
	f.Outcomes = map[string]float64{}
	b := before.ByLabel("inferrail_tokenized_requests_total", "result")
	for k, v := range after.ByLabel("inferrail_tokenized_requests_total", "result") {
		if d := v - b[k]; d > 0 {
			f.Outcomes[k] = d
		}
	}
	if n := after.Sum("inferrail_tokenize_seconds_count") - before.Sum("inferrail_tokenize_seconds_count"); n > 0 {
		f.TokenizeWaitMean = (after.Sum("inferrail_tokenize_seconds_sum") - before.Sum("inferrail_tokenize_seconds_sum")) / n
	}
	_, _ = waitIdle(ctx, admin, gw, sims, 10*time.Second)
	r.res.TokenFlood = f
	without := f.Outcomes["busy"] + f.Outcomes["slow"]
	r.check("every request served", fmt.Sprintf("%d of %d", l.Prompts, l.Prompts), fmt.Sprintf("%d, %d errors", f.Served, f.Errors),
		f.Served == l.Prompts && f.Errors == 0)
	r.check("those that could not wait routed without a prediction", "busy + slow = answers without a prediction",
		fmt.Sprintf("tokenized %.0f, busy %.0f, slow %.0f; %d answers without a prediction", f.Outcomes["tokenized"], f.Outcomes["busy"],
			f.Outcomes["slow"], f.Served-f.Predicted), int(without) == f.Served-f.Predicted && int(f.Outcomes["tokenized"]) == f.Predicted)
	r.check("every prediction exact", fmt.Sprintf("%d of %d", f.Predicted, f.Predicted), fmt.Sprintf("%d", f.Exact), f.Exact == f.Predicted)
	return nil
}

// floodPrompt is prompt i of words words, its text its own from the
// first word on.
func floodPrompt(i, words int) string {
	b := append([]byte("Prompt "), strconv.Itoa(i)...)
	for j := range words {
		b = append(b, ' ')
		b = append(b, sizeWords[(i+j*(1+i%7))%len(sizeWords)]...)
		if j%50 == 0 {
			b = strconv.AppendInt(append(b, ' '), int64(i*words+j), 10)
		}
	}
	return string(b)
}

// flood sends every body at once and reads the answers.
func (f *TokenFloodFigures) flood(ctx context.Context, client *http.Client, url string, bodies [][]byte) {
	var mu sync.Mutex
	var tally stress.ErrorTally
	var lat []time.Duration
	start := time.Now()
	var wg sync.WaitGroup
	for _, body := range bodies {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			t := time.Now()
			predicted, engine, err := postCounted(rctx, client, url, body)
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				tally.Add(measure.Classify(rctx, err))
				return
			}
			f.Served++
			lat = append(lat, d)
			f.EngineTokens = engine
			if predicted > 0 {
				f.Predicted++
				if predicted == engine {
					f.Exact++
				}
			}
		})
	}
	wg.Wait()
	f.WallSeconds = time.Since(start).Seconds()
	f.Latency = measure.Summarize(lat)
	f.Errors, f.ErrorKinds, f.ErrorSamples = tally.Result()
}

// postCounted posts a chat and returns the gateway's prompt token count (0
// without a prediction) and the engine's usage.prompt_tokens.
func postCounted(ctx context.Context, client *http.Client, url string, body []byte) (predicted, engine int, err error) {
	resp, err := stress.Post(ctx, client, url, body, "application/json")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	if err := stress.CheckFull(data, 1); err != nil {
		return 0, 0, err
	}
	var u struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &u); err != nil {
		return 0, 0, err
	}
	predicted, _ = strconv.Atoi(resp.Header.Get(openai.HeaderPromptTokens))
	return predicted, u.Usage.PromptTokens, nil
}

// floodSimArgs let a simulator take prompts of 20,000 words (some 45,000
// of its tokens) and hold a few at once.
var floodSimArgs = []string{"--zero-latency", "--max-model-len", "65536", "--num-gpu-blocks-override", "16384"}

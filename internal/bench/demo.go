package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// DemoConfig says where the demo's gateway is and how much to send.
type DemoConfig struct {
	Gateway     string // base URL of the client port
	Model       string // model name or alias to ask for
	Requests    int    // chats to send
	Concurrency int
	Wait        time.Duration // how long to wait for the gateway and its replicas
}

// demoRow is one chat the demo sent.
type demoRow struct {
	n            int
	replica      string
	status       int
	promptTokens int
	cachedTokens int
	latency      time.Duration
	err          string
}

// Demo sends a short burst of chats through a gateway, each starting with
// one of a few shared system prompts, and prints which replica served what
// and how much of each prompt it found cached.
func Demo(ctx context.Context, c DemoConfig, out io.Writer) error {
	client := &http.Client{Timeout: 30 * time.Second}
	if err := waitReady(ctx, client, c.Gateway, c.Wait); err != nil {
		return err
	}
	systems := []string{
		"You are a support agent for a bicycle shop. Answer briefly and politely, and ask for the order number when a customer mentions an order.",
		"You translate English product descriptions into plain French, keeping every measurement and model name exactly as written.",
		"You review Go code. Point out data races, leaked goroutines and unchecked errors first, style last.",
	}
	for i := range systems {
		systems[i] = strings.Repeat(systems[i]+" ", 6)
	}
	rows := make([]demoRow, c.Requests)
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, c.Concurrency))
	for i := range c.Requests {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rows[i] = demoChat(ctx, client, c, i, systems[i%len(systems)])
		})
		// A little spacing, so later requests find earlier ones cached.
		time.Sleep(15 * time.Millisecond)
	}
	wg.Wait()

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "request\tsystem prompt\treplica\tstatus\tprompt tokens\tcached tokens\tlatency\t")
	perReplica := map[string][3]int{}
	for _, r := range rows {
		if r.err != "" {
			fmt.Fprintf(tw, "%d\t%d\t-\t-\t-\t-\t%s\t\n", r.n, r.n%len(systems)+1, r.err)
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t%d\t%s\t\n", r.n, r.n%len(systems)+1, r.replica, r.status, r.promptTokens, r.cachedTokens, r.latency.Round(time.Millisecond))
		s := perReplica[r.replica]
		perReplica[r.replica] = [3]int{s[0] + 1, s[1] + r.promptTokens, s[2] + r.cachedTokens}
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	ids := make([]string, 0, len(perReplica))
	for id := range perReplica {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replica\trequests\tprompt tokens\tcached tokens\thit rate\t")
	for _, id := range ids {
		s := perReplica[id]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f%%\t\n", id, s[0], s[1], s[2], 100*float64(s[2])/float64(max(1, s[1])))
	}
	return tw.Flush()
}

func demoChat(ctx context.Context, client *http.Client, c DemoConfig, n int, system string) demoRow {
	body, _ := json.Marshal(map[string]any{
		"model": c.Model,
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": fmt.Sprintf("Question number %d: what should I do next?", n)},
		},
		"max_tokens": 24,
	})
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Gateway+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return demoRow{n: n, err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return demoRow{n: n, err: err.Error()}
	}
	defer resp.Body.Close()
	var v struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = json.Unmarshal(raw, &v)
	row := demoRow{n: n, replica: resp.Header.Get("X-Inferrail-Replica"), status: resp.StatusCode,
		promptTokens: v.Usage.PromptTokens, latency: time.Since(start)}
	if d := v.Usage.PromptTokensDetails; d != nil {
		row.cachedTokens = d.CachedTokens
	}
	if resp.StatusCode != http.StatusOK {
		row.err = fmt.Sprintf("status %d: %.80s", resp.StatusCode, raw)
	}
	return row
}

// waitReady polls the gateway until it answers and lists a model card with
// engine metadata, so its replicas have been probed.
func waitReady(ctx context.Context, client *http.Client, base string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
		if resp, err := client.Do(req); err == nil {
			var list struct {
				Data []struct {
					MaxModelLen *int `json:"max_model_len"`
				} `json:"data"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if len(list.Data) > 0 && list.Data[0].MaxModelLen != nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gateway at %s not ready within %v", base, wait)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

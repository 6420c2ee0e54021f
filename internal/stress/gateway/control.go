package gateway

// gw-control: the live control plane under open-loop traffic. The same
// schedule runs through the gateway with no shadow and with six policies
// in shadow and the shadow log on, switched by patches on the one running
// gateway, so the two are side by side; then a storm of config patches
// and admin reads runs under the same rate, and the shadow log is replayed
// offline.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/gateway"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/policy"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/stress"
)

// ControlLoad is gw-control.
type ControlLoad struct {
	// Rate is the open loop's requests per second. Must be positive.
	Rate int
	// Requests is the number of requests of each overhead leg (four legs:
	// none, shadows, shadows, none) and of the patch storm. Must be
	// positive.
	Requests int
	// Warmup requests go before each leg, unmeasured. Must not be negative.
	Warmup int
	// MaxTokens is each chat's max_tokens. Must be positive.
	MaxTokens int
	// PatchEvery is the time between two patches of the storm. Must be
	// positive.
	PatchEvery time.Duration
	// AdminReaders read the admin API in a loop during the storm, each
	// request after the last. Must not be negative.
	AdminReaders int
	// Seed draws the Poisson schedule.
	Seed uint64
	// Timeout bounds each request. Zero means 10 s.
	Timeout time.Duration
}

// Validate reports every setting that cannot run.
func (l ControlLoad) Validate() error {
	return errors.Join(append(validateLegs(l.Requests, l.Warmup, l.MaxTokens, l.Timeout),
		stress.Positive("rate", l.Rate), stress.Positive("patch_every", int(l.PatchEvery)),
		stress.NotNegative("admin_readers", l.AdminReaders))...)
}

// ControlFigures are what gw-control measured.
type ControlFigures struct {
	// Shadows are the policies in shadow in the shadowed legs.
	Shadows []string `json:"shadows"`
	// Legs are the overhead legs in the order run; None and Shadowed pool
	// the two of each kind, and Added* are Shadowed's percentiles minus
	// None's.
	Legs      []OverheadLeg `json:"legs"`
	None      OverheadLeg   `json:"none"`
	Shadowed  OverheadLeg   `json:"shadowed"`
	AddedP50  float64       `json:"added_p50_seconds"`
	AddedP99  float64       `json:"added_p99_seconds"`
	AddedMean float64       `json:"added_mean_seconds"`
	// ShadowDecisions and ShadowDropped are the shadow worker's counts after
	// the shadowed legs: decisions per shadow, requests left out.
	ShadowDecisions int64 `json:"shadow_decisions"`
	ShadowDropped   int64 `json:"shadow_dropped"`

	// Storm is the leg run while patches and admin reads hammered the
	// admin port.
	Storm        OverheadLeg         `json:"storm"`
	Patches      int                 `json:"patches"`
	PatchErrors  int                 `json:"patch_errors"`
	PatchSamples []string            `json:"patch_error_samples,omitempty"`
	ApplyTime    measure.Percentiles `json:"apply_time"`      // apply_secs of the applied patches
	PatchLatency measure.Percentiles `json:"patch_latency"`   // each PATCH's round trip, from the client
	AdminReads   int                 `json:"admin_reads"`     // GETs of the admin API during the storm
	AdminErrors  int                 `json:"admin_errors"`    // those that failed
	Generation   uint64              `json:"last_generation"` // the generation in effect after the storm

	// Replay is the shadow log replayed offline after the gateway stopped.
	LogBytes    int64                `json:"shadow_log_bytes"`
	Replay      gateway.ReplayReport `json:"replay"`
	ReplaySecs  float64              `json:"replay_seconds"`
	ReplayError string               `json:"replay_error,omitempty"`
}

// controlShadows are the policies gw-control runs in shadow: every one but
// cost_model, which routes.
var controlShadows = slices.DeleteFunc(policy.Names(), func(n string) bool { return n == policy.CostModel })

// controlSetup starts the fleet with the shadow log in the scenario's
// temporary directory.
func controlSetup(ctx context.Context, r *gwRun) error {
	dir, err := os.MkdirTemp("", "inferrail-gw-control-")
	if err != nil {
		return err
	}
	r.dirs = append(r.dirs, dir)
	r.sims, r.gw, err = r.simFleet(ctx, 3, overheadSimArgs, func(cfg *config.Config) {
		cfg.Routing.DefaultPolicy = policy.CostModel
		cfg.Models[0].Policy = ""
		cfg.Models[0].Tokenizer = "builtin:sim"
		cfg.Observability.ShadowLog = filepath.Join(dir, "shadow.jsonl")
		cfg.Server.ReloadInterval = 0 // the file never changes; patches only
	})
	return err
}

func runGWControl(ctx context.Context, r *gwRun) error {
	l := r.c.Control
	f := &ControlFigures{Shadows: controlShadows}
	r.res.Control = f
	admin := &adminClient{base: r.gw.AdminURL, client: gwClient(8)}
	pair := newOverheadPair(r.gw, r.sims, l.Timeout, l.MaxTokens)
	defer pair.close()
	body := func(i int) []byte { return gwChatBody(procs.SimModel, i, l.MaxTokens) }
	bodies := func(int) (func(int) []byte, func(int) []byte) { return body, body }

	shadowsOn, _ := json.Marshal(map[string]any{"routing": map[string]any{"shadow": controlShadows}})
	order := []string{"none", "shadows", "shadows", "none"}
	leg := 0
	legs, err := pair.legs(ctx, r.log, []string{"gateway", "gateway", "gateway", "gateway"}, overheadSpec{
		Rate: l.Rate, Requests: l.Requests, Warmup: l.Warmup, Seed: l.Seed, Bodies: bodies,
		GatewayLeg: func() func() {
			patch := `{"routing":{"shadow":null}}`
			if order[leg] == "shadows" {
				patch = string(shadowsOn)
			}
			if _, err := admin.patch(ctx, patch); err != nil {
				r.note("switching leg %d to %s failed: %v", leg+1, order[leg], err)
			}
			leg++
			return nil
		}})
	if err != nil {
		return err
	}
	for i := range legs {
		legs[i].Target = order[i]
	}
	f.Legs, f.None, f.Shadowed = legs, poolTarget("none", legs), poolTarget("shadows", legs)
	f.AddedP50 = f.Shadowed.Latency.P50 - f.None.Latency.P50
	f.AddedP99 = f.Shadowed.Latency.P99 - f.None.Latency.P99
	f.AddedMean = f.Shadowed.Latency.Mean - f.None.Latency.Mean
	if sh, err := admin.shadow(ctx); err == nil {
		f.ShadowDropped = sh.Dropped
		for _, v := range sh.Shadows {
			f.ShadowDecisions = max(f.ShadowDecisions, v.Decisions)
		}
	}

	if err := r.controlStorm(ctx, pair, admin, body, f); err != nil {
		return err
	}
	r.stopGateway(r.gw)
	r.replayShadowLog(f)
	r.controlChecks(f)
	return nil
}

// controlStorm runs the schedule once more under a storm of patches and
// admin reads.
func (r *gwRun) controlStorm(ctx context.Context, pair *overheadPair, admin *adminClient, body func(int) []byte, f *ControlFigures) error {
	l := r.c.Control
	patches := stormPatches(r.sims)
	stormCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var apply, roundTrip []time.Duration
	wg.Go(func() {
		t := time.NewTicker(l.PatchEvery)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-stormCtx.Done():
				return
			case <-t.C:
			}
			// A patch started in the storm is seen through, even past
			// its end: a slow machine may take longer than the storm.
			start := time.Now()
			ans, err := admin.patch(ctx, patches[i%len(patches)])
			took := time.Since(start)
			mu.Lock()
			f.Patches++
			switch {
			case err != nil:
				f.PatchErrors++
				if len(f.PatchSamples) < measure.MaxErrorSamples {
					f.PatchSamples = append(f.PatchSamples, err.Error())
				}
			default:
				roundTrip = append(roundTrip, took)
				if ans.Result == "applied" {
					apply = append(apply, time.Duration(ans.ApplySecs*float64(time.Second)))
				}
				f.Generation = ans.Generation
			}
			mu.Unlock()
		}
	})
	for range l.AdminReaders {
		wg.Go(func() {
			paths := []string{"/admin/config", "/admin/shadow", "/admin/replicas", "/metrics"}
			for i := 0; stormCtx.Err() == nil; i++ {
				err := admin.get(stormCtx, paths[i%len(paths)])
				mu.Lock()
				if stormCtx.Err() == nil {
					f.AdminReads++
					if err != nil {
						f.AdminErrors++
					}
				}
				mu.Unlock()
			}
		})
	}
	legs, err := pair.legs(ctx, r.log, []string{"gateway"}, overheadSpec{Rate: l.Rate, Requests: l.Requests, Seed: l.Seed + 1,
		Bodies: func(int) (func(int) []byte, func(int) []byte) { return body, body }})
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	f.Storm = legs[0]
	f.Storm.Target = "storm"
	f.ApplyTime, f.PatchLatency = measure.Summarize(apply), measure.Summarize(roundTrip)
	return nil
}

// stormPatches are the patches the storm rotates through: the policy, a
// split, the shadows and the replica set, each undone by a later one.
func stormPatches(sims []*gwReplica) []string {
	replicas := func(reps []*gwReplica) string {
		var items []string
		for _, s := range reps {
			items = append(items, fmt.Sprintf(`{"id":%q,"url":%q,"models":[%q],"max_concurrency":2048,"max_pending":2048}`, s.ID, s.URL, procs.SimModel))
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	return []string{
		`{"routing":{"default_policy":"kv_aware","epsilon":2}}`,
		`{"routing":{"split":{"cost_model":75,"p2c":25}}}`,
		`{"routing":{"shadow":["least_request","prefix_hash"]}}`,
		`{"replicas":` + replicas(sims[:2]) + `}`,
		`{"routing":{"default_policy":"cost_model","epsilon":1,"split":null}}`,
		`{"routing":{"shadow":null}}`,
		`{"replicas":` + replicas(sims) + `}`,
	}
}

// replayShadowLog replays the stopped gateway's shadow log.
func (r *gwRun) replayShadowLog(f *ControlFigures) {
	var path string
	if cfg, err := config.Parse([]byte(r.gw.ConfigYAML)); err == nil {
		path = cfg.Observability.ShadowLog
	}
	file, err := os.Open(path)
	if err != nil {
		f.ReplayError = err.Error()
		return
	}
	defer file.Close()
	if st, err := file.Stat(); err == nil {
		f.LogBytes = st.Size()
	}
	start := time.Now()
	f.Replay, err = gateway.ReplayShadow(file)
	f.ReplaySecs = time.Since(start).Seconds()
	if err != nil {
		f.ReplayError = err.Error()
	}
}

func (r *gwRun) controlChecks(f *ControlFigures) {
	r.check("request errors, shadows off and on", "0", fmt.Sprintf("%d and %d", f.None.Errors, f.Shadowed.Errors),
		f.None.Errors == 0 && f.Shadowed.Errors == 0)
	r.check("latency six shadows and the shadow log add, at p99", "none measurable (within the legs' own spread)",
		fmt.Sprintf("%s (p50 %s)", ms(f.AddedP99), ms(f.AddedP50)), true)
	r.check("requests left out of the shadow", "0", fmt.Sprint(f.ShadowDropped), f.ShadowDropped == 0)
	r.check("request errors under the patch storm", "0", fmt.Sprint(f.Storm.Errors), f.Storm.Errors == 0)
	r.check("patches refused or failed", "0", fmt.Sprintf("%d of %d", f.PatchErrors, f.Patches), f.PatchErrors == 0 && f.Patches > 0)
	r.check("admin reads failed", "0", fmt.Sprintf("%d of %d", f.AdminErrors, f.AdminReads), f.AdminErrors == 0)
	r.check("patch apply time p50 / p99", "reported", fmt.Sprintf("%s / %s", ms(f.ApplyTime.P50), ms(f.ApplyTime.P99)), f.ApplyTime.N > 0)
	r.check("shadow log replayed offline to every pick", "every pick equal", fmt.Sprintf("%d picks of %d requests in %.2f s%s",
		f.Replay.Picks, f.Replay.Decisions, f.ReplaySecs, stress.OrText(prefixed(": ", f.ReplayError), "")), f.ReplayError == "" && f.Replay.Picks > 0)
	r.note("The added latency's check is informational: on a shared two-core machine the shadow worker competes with the gateway, the " +
		"simulators and the load generator for the same CPUs, so its cost shows as CPU in the legs' figures.")
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// adminClient talks to the gateway's admin port.
type adminClient struct {
	base   string
	client *http.Client
}

// do sends a request for path on the admin port; the caller closes the
// answer's body.
func (a *adminClient) do(ctx context.Context, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return nil, err
	}
	return a.client.Do(req)
}

// patchAnswer is what a PATCH /admin/config answered.
type patchAnswer struct {
	Generation uint64  `json:"generation"`
	Result     string  `json:"result"`
	ApplySecs  float64 `json:"apply_secs"`
	Error      string  `json:"error"`
}

func (a *adminClient) patch(ctx context.Context, body string) (patchAnswer, error) {
	var ans patchAnswer
	resp, err := a.do(ctx, http.MethodPatch, "/admin/config", strings.NewReader(body))
	if err != nil {
		return ans, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return ans, err
	}
	if resp.StatusCode != http.StatusOK {
		return ans, fmt.Errorf("PATCH %s: %d %s", body, resp.StatusCode, data)
	}
	return ans, json.Unmarshal(data, &ans)
}

// shadowAnswer is what GET /admin/shadow answered.
type shadowAnswer struct {
	Dropped int64 `json:"dropped"`
	Shadows []struct {
		Policy    string `json:"policy"`
		Decisions int64  `json:"decisions"`
	} `json:"shadows"`
}

func (a *adminClient) shadow(ctx context.Context) (shadowAnswer, error) {
	var ans shadowAnswer
	resp, err := a.do(ctx, http.MethodGet, "/admin/shadow", nil)
	if err != nil {
		return ans, err
	}
	defer resp.Body.Close()
	return ans, json.NewDecoder(resp.Body).Decode(&ans)
}

// get reads an admin path whole; an answer other than 200 is an error.
func (a *adminClient) get(ctx context.Context, path string) error {
	resp, err := a.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return nil
}

func (w *mdWriter) control(f *ControlFigures) {
	w.p("Shadows (%s) and the shadow log against none, on one gateway switched by patches; every leg runs the same schedule:\n\n", strings.Join(f.Shadows, ", "))
	w.p("| Leg | Requests | Errors | Achieved req/s | p50 | p90 | p99 | max | Gateway CPU per request |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, lg := range append(slices.Clone(f.Legs), f.None, f.Shadowed, f.Storm) {
		w.p("| %s | %d | %d | %.0f | %s | %s | %s | %s | %s |\n", lg.Target, lg.Requests, lg.Errors, lg.AchievedRate,
			usec(lg.Latency.P50), usec(lg.Latency.P90), usec(lg.Latency.P99), usec(lg.Latency.Max), usec(lg.CPUPerRequest))
	}
	w.p("\n(The rows after the four legs pool each kind's two legs; *storm* ran under the patches and admin reads.)\n\n")
	w.kv([2]string{"Added by the shadows and the log, p50 / p99 / mean", fmt.Sprintf("%s / %s / %s", usec(f.AddedP50), usec(f.AddedP99), usec(f.AddedMean))},
		[2]string{"Shadow decisions per shadow / left out", fmt.Sprintf("%d / %d", f.ShadowDecisions, f.ShadowDropped)},
		[2]string{"Patches (errors)", fmt.Sprintf("%d (%d)", f.Patches, f.PatchErrors)},
		[2]string{"Apply time p50 / p99 / max", fmt.Sprintf("%s / %s / %s", usec(f.ApplyTime.P50), usec(f.ApplyTime.P99), usec(f.ApplyTime.Max))},
		[2]string{"PATCH round trip p50 / p99", fmt.Sprintf("%s / %s", usec(f.PatchLatency.P50), usec(f.PatchLatency.P99))},
		[2]string{"Admin reads (errors)", fmt.Sprintf("%d (%d)", f.AdminReads, f.AdminErrors)},
		[2]string{"Generation after the storm", fmt.Sprint(f.Generation)},
		[2]string{"Shadow log", fmt.Sprintf("%.1f MiB, %d generations, %d requests, %d picks replayed in %.2f s", float64(f.LogBytes)/(1<<20),
			f.Replay.Generations, f.Replay.Decisions, f.Replay.Picks, f.ReplaySecs)})
	for _, s := range f.PatchSamples {
		w.p("Patch error: `%s`\n\n", strings.ReplaceAll(s, "`", "'"))
	}
	if f.ReplayError != "" {
		w.p("Replay error: `%s`\n\n", strings.ReplaceAll(f.ReplayError, "`", "'"))
	}
}

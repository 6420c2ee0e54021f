package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/procs"
)

// FleetOptions say how to start a benchmark fleet: simulator children
// behind a gateway child, or behind a peer router child when Policy names
// one (peer:<router>:<policy>).
type FleetOptions struct {
	// SimBinary and GatewayBinary are the executables to start.
	// GatewayBinary is not needed in front of a peer router.
	SimBinary, GatewayBinary string
	// SimEnv and GatewayEnv are added to the children's environments. Nil
	// adds nothing.
	SimEnv, GatewayEnv []string
	// PeerVenv is the venv the peer routers are installed in
	// (bench/peers/venv.sh makes it). Required for a peer policy.
	PeerVenv string
	// Replicas is the number of simulators. Must be >= 1.
	Replicas int
	// SimArgs are passed to every simulator after the harness's own:
	// --served-model-name Model, --enable-prompt-tokens-details and
	// procs.SimToolCallArgs.
	// Prefix caching is on unless they turn it off. Nil adds nothing.
	SimArgs []string
	// Model is the model every simulator serves and the gateway routes.
	// Required.
	Model string
	// Policy is the gateway's routing policy for Model, or a peer router
	// and its policy. Required.
	Policy string
	// BlockSize is the simulators' KV block size, which the gateway's index
	// cuts prompts into. Zero means 16.
	BlockSize int
	// Seed seeds the gateway's randomized policies. Zero means 1.
	Seed int64
	// Speedup, when above 1, runs the simulators that many times faster
	// (--speedup) and shrinks the gateway's cost model and load-signal
	// timings alike, so the fleet behaves as at speedup 1 on a faster
	// clock. The gateway's load scrapes and their timeout shrink no
	// further than config.MinPeriod, the shortest period its config
	// takes. Peer routers are started as they are.
	Speedup float64
	// Index is the gateway's index.mode (RunSpec.Index): with exact or
	// auto the simulators publish KV events on loopback ports and the
	// gateway follows them. Empty means approximate.
	Index string
	// Gateways is how many gateways, with the same config, to start in
	// front of the simulators: each follows every engine and the client
	// sends to each in turn (Fleet.URLs). Zero means 1; not with a peer
	// router.
	Gateways int
	// Capture, if not empty, is the file the gateway captures the traffic
	// to (observability.capture.path). Not with a peer router or more than
	// one gateway.
	Capture string
	// GatewayPatch is a JSON merge patch applied to the generated gateway
	// config before Speedup shrinks its times (RunSpec.GatewayPatch).
	// Empty means none.
	GatewayPatch string
	// Logger receives the children's life cycle at Debug. Nil discards.
	Logger *slog.Logger
}

// Fleet is a running benchmark fleet: the harness's fleet of simulator
// children behind a gateway or peer router child. Stop ends it.
type Fleet = harness.Fleet

// fleetModelArgs are the simulator flags every fleet sets: the agent
// workload sends tools, which vLLM serves only with a tool call parser.
func fleetModelArgs(model string) []string {
	return append([]string{"--served-model-name", model, "--enable-prompt-tokens-details"}, procs.SimToolCallArgs()...)
}

// StartFleet starts o.Replicas simulators and a gateway (o.Gateways of
// them) in front of them, with a config it generates: the model tokenized
// with builtin:sim so the gateway predicts cached tokens, o.Policy, o.Index (the simulators
// publishing KV events for exact and auto), caps high enough never to
// refuse a request, and warn-level JSON logs. It returns once every gateway
// reports every replica healthy. For a peer policy it starts that router
// instead of the gateway and returns once the router reports every
// simulator healthy.
func StartFleet(ctx context.Context, o FleetOptions) (*Fleet, error) {
	if o.Replicas < 1 {
		return nil, errors.New("start fleet: replicas must be >= 1")
	}
	// The simulator reads --served-model-name as vLLM's list of names, one
	// per word: a model a capture names "org/my model" would be two.
	if strings.ContainsFunc(o.Model, unicode.IsSpace) || strings.HasPrefix(o.Model, "-") {
		return nil, fmt.Errorf("start fleet: model %q: the simulator serves no name with a space or a leading dash; give another with --model", o.Model)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Capture != "" && (procs.IsPeerPolicy(o.Policy) || o.Gateways > 1) {
		return nil, errors.New("start fleet: a traffic capture needs one gateway of ours, not a peer router or several gateways")
	}
	var peer procs.PeerPolicy
	if procs.IsPeerPolicy(o.Policy) {
		var err error
		if peer, err = procs.ParsePeerPolicy(o.Policy); err != nil {
			return nil, fmt.Errorf("start fleet: %w", err)
		}
		if o.PeerVenv == "" {
			return nil, fmt.Errorf("start fleet: %s: %w: no venv given", o.Policy, procs.ErrNoPeerVenv)
		}
	}
	f := &Fleet{}
	args := append(fleetModelArgs(o.Model), o.SimArgs...)
	if o.Speedup > 1 {
		args = append(args, "--speedup", strconv.FormatFloat(o.Speedup, 'g', -1, 64))
	}
	kv := o.Index == IndexExact || o.Index == IndexAuto
	if err := f.StartSims(ctx, o.Replicas, procs.SimOptions{Binary: o.SimBinary, Args: args, Env: o.SimEnv, KVEvents: kv, Logger: o.Logger}); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	if peer.Router != "" {
		if err := f.StartPeer(ctx, procs.PeerOptions{Venv: o.PeerVenv, Policy: peer, Logger: o.Logger}); err != nil {
			return nil, errors.Join(err, f.Stop())
		}
		return f, nil
	}
	cfg, err := fleetConfig(o, f.Replicas())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("start fleet: %w", err), f.Stop())
	}
	if err := f.StartGateways(ctx, max(1, o.Gateways), procs.GatewayOptions{Binary: o.GatewayBinary, Env: o.GatewayEnv, Config: cfg, Logger: o.Logger}); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	if err := f.WaitHealthy(ctx, 15*time.Second); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	return f, nil
}

// fleetConfig is the gateway config of a fleet: an error only when
// o.GatewayPatch does not apply.
func fleetConfig(o FleetOptions, replicas []harness.Replica) (*config.Config, error) {
	cfg := harness.GatewayConfig(replicas, harness.GatewayOptions{Model: o.Model, Policy: o.Policy, Tokenizer: "builtin:sim",
		BlockSize: o.BlockSize, Caps: 4096, Seed: o.Seed, RequestTimeout: 10 * time.Minute, LogLevel: "warn", IndexMode: o.Index})
	if o.GatewayPatch != "" {
		patched, err := cfg.Patch([]byte(o.GatewayPatch))
		if err != nil {
			return nil, fmt.Errorf("gateway patch: %w", err)
		}
		cfg = patched
	}
	cfg.Observability.Capture.Path = o.Capture
	if f := o.Speedup; f > 1 {
		// What the gateway predicts and how fresh it wants its engine
		// reports are times on the model's clock.
		cm := &cfg.Routing.CostModel
		cm.PrefillTokenSecs /= f
		cm.PrefillPairSecs /= f
		cm.PrefillFixedSecs /= f
		cm.DecodeInterferenceSecs /= f
		faster := func(d *config.Duration, floor config.Duration) { *d = fasterDuration(*d, f, floor) }
		faster(&cfg.Routing.HotPrefix.Window, 1)
		// The gateway repeats a scrape no sooner than config.MinPeriod: at
		// a speedup past 10 the default 100 ms would fall below it and the
		// gateway refuse its config. A scrape of loopback takes no less
		// than that either.
		faster(&cfg.Load.ScrapeInterval, config.MinPeriod)
		faster(&cfg.Load.ScrapeTimeout, config.MinPeriod)
		faster(&cfg.Load.MaxAge, 1)
		// max_age must cover interval and timeout, which the floor may have
		// kept longer than the speedup would make them.
		cfg.Load.MaxAge = max(cfg.Load.MaxAge, cfg.Load.ScrapeInterval+cfg.Load.ScrapeTimeout)
		// Engines confirm routed prompts sooner on the faster clock.
		faster(&cfg.Index.SpeculativeTTL, 1)
	}
	return cfg, nil
}

// fasterDuration is d on a clock f times faster, but no shorter than
// floor unless d itself is: a time the gateway's config bounds below stays
// valid at every speedup, one it refused already (a patch's) stays refused,
// and one that was set (> 0) does not become 0, which can mean off.
func fasterDuration(d config.Duration, f float64, floor config.Duration) config.Duration {
	if d <= 0 {
		return d
	}
	return max(config.Duration(float64(d)/f), min(floor, d))
}

// engineReading is what the engines' counters said at one moment.
type engineReading struct {
	// hits adds up the prefix cache counters (tokens) of every engine.
	hits EngineHits
	// served counts each engine's finished requests, in the order of the
	// URLs read: vllm:request_success_total without those that ended in
	// an abort or an error.
	served []float64
}

// engineCounters reads the counters of the engines at urls.
func engineCounters(ctx context.Context, client *http.Client, urls []string) (engineReading, error) {
	var r engineReading
	for _, u := range urls {
		p, err := procs.ScrapePage(ctx, client, u+"/metrics")
		if err != nil {
			return engineReading{}, err
		}
		r.hits.Queries += p.Sum("vllm:prefix_cache_queries_total")
		r.hits.Hits += p.Sum("vllm:prefix_cache_hits_total")
		r.hits.Preemptions += p.Sum("vllm:num_preemptions_total")
		const name = "vllm:request_success_total"
		r.served = append(r.served, p.Sum(name)-p.Sum(name, procs.Label("finished_reason", "abort"))-p.Sum(name, procs.Label("finished_reason", "error")))
	}
	return r, nil
}

// servedSince counts the requests each engine finished from a to b, keyed
// by the replica names the gateway's config gives them (sim-1, sim-2, …).
func (b engineReading) servedSince(a engineReading) map[string]int {
	if len(a.served) != len(b.served) {
		return nil
	}
	m := make(map[string]int, len(b.served))
	for i := range b.served {
		m[harness.SimID(i)] = int(math.Round(b.served[i] - a.served[i]))
	}
	return m
}

// since is the engines' counters from a to b.
func (b EngineHits) since(a EngineHits) *EngineHits {
	d := &EngineHits{Queries: b.Queries - a.Queries, Hits: b.Hits - a.Hits, Preemptions: b.Preemptions - a.Preemptions}
	d.HitRate = ratio(d.Hits, d.Queries)
	return d
}

package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/procs"
)

// Fleet is the children a run drives: simulators, and the gateway or the
// peer router in front of them. Every child started through it belongs to
// it until Stop.
type Fleet struct {
	// URL is the router's client port, where requests go: the first
	// gateway's when there are several.
	URL string
	// URLs are the client ports of every router, in the order started:
	// one, or one per gateway.
	URLs []string
	// Gateway is the inferrail-gateway in front of Sims (the first one),
	// or Peer the peer router; nil until started.
	Gateway *procs.Gateway
	Peer    *procs.Peer
	// Gateways are every gateway child in front of Sims, in the order
	// started; Gateway is the first.
	Gateways []*procs.Gateway
	// Sims are the simulator children, sim-1, sim-2, … in order.
	Sims []*procs.Sim
}

// SimID is the replica name of the fleet's i-th simulator (from 0) in the
// gateway configs the harness generates.
func SimID(i int) string { return "sim-" + strconv.Itoa(i+1) }

// StartSims starts n simulator children with o, after those already
// started. On an error the ones started stay in the fleet, for Stop.
func (f *Fleet) StartSims(ctx context.Context, n int, o procs.SimOptions) error {
	for range n {
		p, err := procs.StartSim(ctx, o)
		if err != nil {
			return err
		}
		f.Sims = append(f.Sims, p)
	}
	return nil
}

// StartGateway starts a gateway child with o, after any already started;
// the first one's client port becomes URL, and every one's joins URLs.
func (f *Fleet) StartGateway(ctx context.Context, o procs.GatewayOptions) error {
	gw, err := procs.StartGateway(ctx, o)
	if err != nil {
		return err
	}
	if f.Gateway == nil {
		f.Gateway, f.URL = gw, gw.URL
	}
	f.Gateways = append(f.Gateways, gw)
	f.URLs = append(f.URLs, gw.URL)
	return nil
}

// StartGateways starts n gateway children with the same options, each on
// ports of its own: gateways side by side in front of the same engines,
// the same config, following the same KV event streams. On an error the
// ones started stay in the fleet, for Stop.
func (f *Fleet) StartGateways(ctx context.Context, n int, o procs.GatewayOptions) error {
	for range n {
		if err := f.StartGateway(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// StartPeer starts a peer router child with o in front of the fleet's
// simulators; URL becomes its client port.
func (f *Fleet) StartPeer(ctx context.Context, o procs.PeerOptions) error {
	o.Workers = f.SimURLs()
	p, err := procs.StartPeer(ctx, o)
	if err != nil {
		return err
	}
	f.Peer, f.URL, f.URLs = p, p.URL, []string{p.URL}
	return nil
}

// SimURLs are the base URLs of the fleet's simulators.
func (f *Fleet) SimURLs() []string {
	urls := make([]string, len(f.Sims))
	for i, s := range f.Sims {
		urls[i] = s.URL
	}
	return slices.Clip(urls)
}

// Replicas are the fleet's simulators as the gateway's replicas.
func (f *Fleet) Replicas() []Replica {
	out := make([]Replica, len(f.Sims))
	for i, s := range f.Sims {
		out[i] = Replica{ID: SimID(i), URL: s.URL, KVEndpoint: s.KVEndpoint, KVReplayEndpoint: s.KVReplayEndpoint}
	}
	return out
}

// WaitHealthy polls every gateway's metrics until each reports every
// replica passing its probes, for at most limit in all.
func (f *Fleet) WaitHealthy(ctx context.Context, limit time.Duration) error {
	client := procs.AdminClient()
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(limit)
	for i, gw := range f.Gateways {
		for {
			p, err := gw.Metrics(ctx, client)
			if err == nil && int(p.Sum("inferrail_replica_healthy")) == len(f.Sims) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: replicas not all healthy within %v (last scrape error: %v)", gatewayName(i, len(f.Gateways)), limit, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// gatewayName names the i-th of n gateways in errors: "gateway" when it
// is the only one, else "gateway 1", "gateway 2", ….
func gatewayName(i, n int) string {
	if n <= 1 {
		return "gateway"
	}
	return "gateway " + strconv.Itoa(i+1)
}

// Stop ends the router, then the simulators, and reports every child that
// did not stop cleanly or had exited on its own. It may be called more than
// once.
func (f *Fleet) Stop() error {
	return errors.Join(append(f.StopRouter(), f.StopSims()...)...)
}

// StopRouter ends the gateways or the peer router and drops them from the
// fleet, one error for each way one failed; read their logs before.
func (f *Fleet) StopRouter() []error {
	var errs []error
	if p := f.Peer; p != nil {
		errs = append(errs, exitedEarly(p.Exited(), string(p.Policy.Router), p.Output)...)
		errs = appendErr(errs, "", p.Stop())
	}
	for i, gw := range f.Gateways {
		name := gatewayName(i, len(f.Gateways))
		errs = append(errs, exitedEarly(gw.Exited(), name, gw.Output)...)
		if len(f.Gateways) > 1 {
			errs = appendErr(errs, name+": ", gw.Stop())
		} else {
			errs = appendErr(errs, "", gw.Stop())
		}
	}
	f.Peer, f.Gateway, f.Gateways, f.URLs = nil, nil, nil, nil
	return errs
}

// StopSims ends the simulators and drops them from the fleet, one error
// for each way one failed.
func (f *Fleet) StopSims() []error {
	var errs []error
	for i, s := range f.Sims {
		errs = append(errs, exitedEarly(s.Exited(), SimID(i), s.Output)...)
		errs = appendErr(errs, SimID(i)+": ", s.Stop())
	}
	f.Sims = nil
	return errs
}

// exitedEarly reports a child that exited before it was asked to stop:
// that is a result of the run, not a failure of the harness.
func exitedEarly(exited <-chan struct{}, name string, output func() string) []error {
	select {
	case <-exited:
		return []error{errors.New(name + " exited during the run: " + output())}
	default:
		return nil
	}
}

func appendErr(errs []error, prefix string, err error) []error {
	if err == nil {
		return errs
	}
	if prefix == "" {
		return append(errs, err)
	}
	return append(errs, fmt.Errorf("%s%w", prefix, err))
}

// Replica is one engine behind a generated gateway config.
type Replica struct {
	ID, URL string
	// KVEndpoint and KVReplayEndpoint are the engine's KV event sockets,
	// followed when the index mode is exact or auto; empty for an engine
	// that publishes none.
	KVEndpoint, KVReplayEndpoint string
}

// GatewayOptions say what a generated gateway config holds beyond its
// replicas.
type GatewayOptions struct {
	// Model is routed to every replica, also under Aliases.
	Model   string
	Aliases []string
	// Policy, Tokenizer and BlockSize are the model's; empty or zero keep
	// the gateway's defaults.
	Policy, Tokenizer string
	BlockSize         int
	// Caps is every replica's max_concurrency and max_pending, high enough
	// that the breakers never refuse a request of the run.
	Caps int
	// Seed seeds the randomized policies. Zero means 1.
	Seed int64
	// RequestTimeout is server.request_timeout.
	RequestTimeout time.Duration
	// LogLevel is the JSON log's level.
	LogLevel string
	// IndexMode is index.mode: approximate, exact or auto. Empty keeps the
	// gateway's default (approximate).
	IndexMode string
}

// GatewayConfig is the config of a gateway child in front of replicas:
// o's model on every one of them, each replica's KV event sockets, o's
// index mode, loopback ports chosen at start, a quick shutdown, a
// connection pool large enough for the harness's load, and JSON logs the
// harness reads.
func GatewayConfig(replicas []Replica, o GatewayOptions) *config.Config {
	cfg := config.Default()
	cfg.Models = []config.Model{{Name: o.Model, Aliases: o.Aliases, Policy: o.Policy, Tokenizer: o.Tokenizer, BlockSize: o.BlockSize}}
	if split, ok := ParseSplit(o.Policy); ok {
		cfg.Models[0].Policy, cfg.Models[0].Split = "", split
	}
	for _, r := range replicas {
		cfg.Replicas = append(cfg.Replicas, config.Replica{ID: r.ID, URL: r.URL, Models: []string{o.Model},
			MaxConcurrency: o.Caps, MaxPending: o.Caps,
			KVEvents: config.ReplicaKVEvents{Endpoint: r.KVEndpoint, ReplayEndpoint: r.KVReplayEndpoint}})
	}
	if o.IndexMode != "" {
		cfg.Index.Mode = o.IndexMode
	}
	cfg.Routing.Seed = o.Seed
	if cfg.Routing.Seed == 0 {
		cfg.Routing.Seed = 1
	}
	cfg.Server.RequestTimeout = config.Duration(o.RequestTimeout)
	cfg.Server.ShutdownTimeout = config.Duration(2 * time.Second)
	cfg.Upstream.MaxIdleConnsPerHost = 1024
	cfg.Logging = config.Logging{Level: o.LogLevel, Format: "json"}
	return &cfg
}

// splitPrefix starts a policy that is an A/B split, as in
// "split:cost_model=90,kv_aware=10".
const splitPrefix = "split:"

// ParseSplit reads a policy written as an A/B split: "split:" and
// policy=percent pairs separated by commas. ok is false for a policy that
// is not written as a split; a malformed one gives the pairs it could read,
// which the gateway's config validation then refuses.
func ParseSplit(policy string) (split config.Split, ok bool) {
	rest, ok := strings.CutPrefix(policy, splitPrefix)
	if !ok {
		return nil, false
	}
	for _, pair := range strings.Split(rest, ",") {
		name, pct, _ := strings.Cut(pair, "=")
		n, err := strconv.Atoi(pct)
		if err != nil {
			n = -1 // refused by validation: a percent from 0 to 100
		}
		split = append(split, config.SplitArm{Policy: name, Percent: n})
	}
	return split, true
}

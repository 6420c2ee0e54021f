package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/workload"
)

// RunSpec is everything that decides what one open-loop run measures. A
// result file records it, so a sweep can tell a finished run from one
// planned differently.
type RunSpec struct {
	// Point names the sweep point the run belongs to; empty outside a sweep.
	Point string `json:"point,omitempty"`
	// Policy is the gateway's routing policy; empty when URL is set.
	Policy string `json:"policy,omitempty"`
	// Rep numbers the repetitions of a point (0, 1, …); each has its own
	// workload seed.
	Rep int `json:"rep"`
	// Workload says which requests are sent and when.
	Workload workload.Spec `json:"workload"`
	// URL is an existing target (a gateway or an engine) instead of a fleet
	// the run starts itself; empty for a fleet.
	URL string `json:"url,omitempty"`
	// Replicas is the number of simulators of the run's own fleet, and
	// SimArgs their extra flags.
	Replicas int `json:"replicas,omitempty"`
	// Sized marks a run of a sizing point, one of several fleet sizes of
	// one load: its file name names its size.
	Sized   bool     `json:"sized,omitempty"`
	SimArgs []string `json:"sim_args,omitempty"`
	// Warmup is left out of the figures: a duration ("10s") or a fraction
	// of the requests ("0.1").
	Warmup string `json:"warmup,omitempty"`
	// SLO judges goodput.
	SLO SLO `json:"slo"`
	// Timeout bounds each request. Zero means 5 minutes.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Speedup runs the run's own fleet on a clock this many times faster
	// than the model's: the simulators' --speedup, the schedule and the
	// gateway's time constants all shrink by it, and every figure is
	// scaled back, so results read in the model's time. 0 or 1: real time.
	Speedup float64 `json:"speedup,omitempty"`
	// Index is the gateway's index.mode: exact or auto start the
	// simulators publishing KV events the gateway follows. Empty is the
	// gateway's default, approximate (the runs before the option), and
	// IndexMode says so.
	Index string `json:"index,omitempty"`
	// Gateways is how many gateways, with the same config, the run's own
	// fleet puts in front of its simulators, the client sending the
	// requests to each in turn. 0 or 1: one (the runs before the option).
	Gateways int `json:"gateways,omitempty"`
	// Variant names GatewayPatch in file names and summaries; empty when
	// there is no patch.
	Variant string `json:"variant,omitempty"`
	// GatewayPatch is a JSON merge patch (RFC 7396) applied to the gateway
	// config the run generates, before the speedup shrinks its times: the
	// way to measure a setting other than the default. Empty means none.
	GatewayPatch string `json:"gateway_patch,omitempty"`
}

// GatewayCount is how many gateways the run's fleet has: Gateways, at
// least 1.
func (s *RunSpec) GatewayCount() int { return max(1, s.Gateways) }

// IndexMode is the run's index mode, Index or approximate.
func (s *RunSpec) IndexMode() string {
	if s.Index == "" {
		return IndexApproximate
	}
	return s.Index
}

// Index modes a run's gateway can have (config index.mode).
const (
	IndexApproximate = "approximate"
	IndexExact       = "exact"
	IndexAuto        = "auto"
)

// NormalizeIndex turns an index mode as given (empty, approximate, exact
// or auto) into RunSpec.Index, where approximate is empty so that a run
// planned with it is the same run as one planned before the option.
func NormalizeIndex(mode string) (string, error) {
	switch mode {
	case "", IndexApproximate:
		return "", nil
	case IndexExact, IndexAuto:
		return mode, nil
	}
	return "", fmt.Errorf("index: must be approximate, exact or auto, not %q", mode)
}

// Validate reports every problem with s at once.
func (s *RunSpec) Validate() error {
	var errs []error
	if s.URL == "" {
		if s.Replicas < 1 || s.Replicas > maxReplicas {
			errs = append(errs, fmt.Errorf("replicas: must be within 1-%d, not %d", maxReplicas, s.Replicas))
		}
		if s.Policy == "" {
			errs = append(errs, errors.New("policy: required for a fleet of the run's own"))
		}
		if err := checkPolicy(s.Policy); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := ParseWarmup(s.Warmup); err != nil {
		errs = append(errs, err)
	}
	if s.SLO.TTFT <= 0 || s.SLO.TPOT <= 0 {
		errs = append(errs, errors.New("slo: ttft and tpot must be > 0"))
	}
	if s.Workload.Workload == "" {
		errs = append(errs, errors.New("workload: required"))
	}
	if w := &s.Workload; w.Workload != "trace" {
		if !(w.Rate > 0) || math.IsInf(w.Rate, 1) {
			errs = append(errs, errors.New("workload.rate: must be a finite number > 0"))
		} else if err := workload.CheckRunSize(w.Rate, w.Duration, w.Requests); err != nil {
			errs = append(errs, fmt.Errorf("workload: %w", err))
		}
	}
	if s.Workload.Duration <= 0 && s.Workload.Requests <= 0 && s.Workload.Workload != "trace" {
		errs = append(errs, errors.New("workload: a duration or a request count is required"))
	}
	var bounds rangeCheck
	s.checkBounds(&bounds, "")
	errs = append(errs, bounds.errs...)
	if s.Speedup != 0 && !(s.Speedup >= 1 && s.Speedup <= maxSpeedup) {
		errs = append(errs, fmt.Errorf("speedup: must be 0 (none) or within 1-%d, got %v", maxSpeedup, s.Speedup))
	}
	for _, a := range s.SimArgs {
		if a == "--speedup" || a == "-speedup" || strings.HasPrefix(a, "--speedup=") || strings.HasPrefix(a, "-speedup=") {
			errs = append(errs, errors.New("sim_args: --speedup is the run's speedup setting, not a simulator flag to pass"))
		}
	}
	if s.URL != "" && s.Speedup > 1 {
		errs = append(errs, errors.New("speedup: only for a fleet of the run's own, not an existing url"))
	}
	if s.Gateways < 0 || s.Gateways > maxGateways {
		errs = append(errs, fmt.Errorf("gateways: must be within 0-%d, got %d", maxGateways, s.Gateways))
	}
	if s.Gateways > 1 && (s.URL != "" || procs.IsPeerPolicy(s.Policy)) {
		errs = append(errs, errors.New("gateways: several only for gateways of the run's own, not an existing url or a peer router"))
	}
	if s.Index != "" {
		if n, err := NormalizeIndex(s.Index); err != nil || n == "" {
			errs = append(errs, fmt.Errorf("index: must be empty (approximate), exact or auto, not %q", s.Index))
		}
		if s.URL != "" || procs.IsPeerPolicy(s.Policy) {
			errs = append(errs, errors.New("index: only for a gateway of the run's own, not an existing url or a peer router"))
		}
	}
	if s.GatewayPatch != "" {
		if s.URL != "" || procs.IsPeerPolicy(s.Policy) {
			errs = append(errs, errors.New("gateway_patch: only for a gateway of the run's own, not an existing url or a peer router"))
		} else if !jsonObject(s.GatewayPatch) {
			errs = append(errs, errors.New("gateway_patch: must be a JSON object"))
		}
		if s.Variant == "" {
			errs = append(errs, errors.New("variant: a gateway patch needs a name"))
		}
	} else if s.Variant != "" {
		errs = append(errs, errors.New("variant: names a gateway patch, and there is none"))
	}
	return errors.Join(errs...)
}

// maxSpeedup bounds RunSpec.Speedup as the simulator bounds --speedup.
const maxSpeedup = 1000

// maxReplicas bounds a run's fleet, and a sweep's fleet sizes: each
// replica is a simulator child process.
const maxReplicas = 64

// maxGateways bounds RunSpec.Gateways: each is a child process.
const maxGateways = 16

// clock is the factor between the model's time and the run's wall clock:
// Speedup, or 1.
func (s *RunSpec) clock() float64 {
	if s.Speedup > 1 {
		return s.Speedup
	}
	return 1
}

// Equal reports whether s and t plan the same run: their JSON forms, as
// recorded in result files, are the same.
func (s *RunSpec) Equal(t *RunSpec) bool {
	a, errA := json.Marshal(s)
	b, errB := json.Marshal(t)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// rateMultiplier is a trace run's rate multiplier, 1 where the spec
// leaves the default (0).
func (s *RunSpec) rateMultiplier() float64 {
	return s.Workload.WithDefaults().RateMultiplier
}

// blockSize is the simulators' KV block size: --block-size among SimArgs,
// else 16.
func (s *RunSpec) blockSize() int {
	bs := 16
	for i, a := range s.SimArgs {
		v, ok := strings.CutPrefix(a, "--block-size=")
		if !ok && (a == "--block-size" || a == "-block-size") && i+1 < len(s.SimArgs) {
			v, ok = s.SimArgs[i+1], true
		}
		if n, err := strconv.Atoi(v); ok && err == nil && n > 0 {
			bs = n
		}
	}
	return bs
}

// FileName is the name of the run's result file: point (or workload),
// rate (a trace's rate multiplier), repetition, policy, the index mode
// unless approximate and gwN for N > 1 gateways, each made safe for a file
// name.
func (s *RunSpec) FileName() string {
	name := s.Point
	if name == "" {
		name = s.Workload.Workload
	}
	rate := "rate" + nameNumber(s.Workload.Rate)
	if s.Workload.Workload == "trace" {
		rate = "x" + nameNumber(s.rateMultiplier())
		if ts := s.Workload.WithDefaults().TimeScale; ts != 1 {
			// Another time scale is another rate: its runs must not
			// overwrite the default's.
			rate += "ts" + nameNumber(ts)
		}
	}
	gws := ""
	if s.Gateways > 1 {
		gws = "gw" + strconv.Itoa(s.Gateways)
	}
	size := ""
	if s.Sized {
		size = "r" + strconv.Itoa(s.Replicas)
	}
	parts := []string{name, rate, size, "rep" + strconv.Itoa(s.Rep), s.Policy, s.Variant, s.Index, gws}
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('_')
		}
		for _, r := range p {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
				b.WriteRune(r)
			} else {
				b.WriteByte('-')
			}
		}
	}
	return b.String() + ".json"
}

// nameNumber writes v for a file name: in full, as every committed name
// has it, unless that is long (a multiplier of 1e300 wrote 301 digits,
// past what a file name may hold), then with an exponent.
func nameNumber(v float64) string {
	if s := strconv.FormatFloat(v, 'f', -1, 64); len(s) <= 24 {
		return s
	}
	// "1e300" and "1e-300": a '+' would become '-' below.
	return strings.Replace(strconv.FormatFloat(v, 'g', -1, 64), "e+", "e", 1)
}

// RunResult is one run's result file.
type RunResult struct {
	Spec        RunSpec             `json:"spec"`
	Command     string              `json:"command,omitempty"`
	Environment measure.Environment `json:"environment"`
	// Setup says what ran.
	Setup RunSetup `json:"setup"`
	// Started is when the schedule began, RFC 3339 UTC.
	Started      string       `json:"started"`
	Measurements Measurements `json:"measurements"`
	// Machine says how busy the machine was during the run.
	Machine procs.MachineShare `json:"machine"`
	// Notes say what to keep in mind when reading the figures.
	Notes []string `json:"notes,omitempty"`
	// StopErrors are the children that did not stop cleanly or exited
	// during the run.
	StopErrors []string `json:"stop_errors,omitempty"`
	// GatewayLog is what the gateway child logged at warn and above.
	GatewayLog *procs.GatewayLog `json:"gateway_log,omitempty"`
	// PeerLog is what a peer router child logged at warning and above.
	PeerLog *procs.PeerLog `json:"peer_log,omitempty"`
	// PeerDecisions are a peer router's own counts of its routing
	// decisions by outcome, warmup included, read after the last response
	// (vllm-router's vllm_router_prefix_routing_decisions_total:
	// prefix_hit, prefix_miss, load_imbalance, missing_tokens); nil for a
	// router without such a counter.
	PeerDecisions map[string]int `json:"peer_decisions,omitempty"`
	// Index is the gateway's /admin/index after the last response: each
	// replica's blocks and prediction source, and in modes exact and auto
	// each engine's event stream (why a replica did not follow it, if it
	// did not).
	Index *procs.IndexStatus `json:"index,omitempty"`
	// GatewayIndexes is every gateway's /admin/index after the last
	// response, when the run had several (Index is the first's), and
	// Agreement how their KV event streams compared (modes exact and
	// auto).
	GatewayIndexes []*procs.IndexStatus `json:"gateway_indexes,omitempty"`
	Agreement      *IndexAgreement      `json:"index_agreement,omitempty"`
}

// RunSetup says what a run's fleet was.
type RunSetup struct {
	// Gateway says what was in front of the simulators: inferrail-gateway
	// or a peer router.
	Gateway       string   `json:"gateway,omitempty"`
	Simulators    string   `json:"simulators,omitempty"`
	SimArgs       []string `json:"sim_args,omitempty"`
	GatewayConfig string   `json:"gateway_config,omitempty"`
	// IndexMode is the gateway's index.mode; empty in front of a peer
	// router.
	IndexMode string `json:"index_mode,omitempty"`
	// Gateways is how many gateway children stood in front of the
	// simulators; 0 in front of a peer router.
	Gateways int `json:"gateways,omitempty"`
	// Peer is the peer router in place of the gateway; nil for the gateway.
	Peer *PeerSetup `json:"peer,omitempty"`
}

// PeerSetup is the peer router a run put in front of its simulators.
type PeerSetup struct {
	// Router is the PyPI package (vllm-router, sglang-router) and Version
	// its version.
	Router  string `json:"router"`
	Version string `json:"version"`
	// Policy is the router's own policy name.
	Policy string `json:"policy"`
	// Argv is the command line it was started with (its ports were the
	// run's).
	Argv []string `json:"argv"`
}

// WriteRunResult writes r as indented JSON to path, through a temporary
// file so that a stopped sweep never leaves half a result behind.
func WriteRunResult(path string, r *RunResult) error { return harness.WriteJSON(path, r) }

// ReadRunResult reads a result file.
func ReadRunResult(path string) (*RunResult, error) { return harness.ReadJSON[RunResult](path) }

// ReadRunResults reads every *.json result file in dir, in name order.
// Files that are not run results (no spec) are skipped quietly; what is
// not a regular file (a FIFO, a link to a device) is skipped too, and
// skipped names each of those (see harness.ReadDir).
func ReadRunResults(dir string) (results []*RunResult, skipped []string, err error) {
	all, skipped, err := harness.ReadDir[RunResult](dir)
	if err != nil {
		return nil, nil, err
	}
	for i := range all {
		if all[i].Spec.Workload.Workload != "" {
			results = append(results, &all[i])
		}
	}
	return results, skipped, nil
}

// done reports whether path holds the result of exactly spec.
func done(path string, spec *RunSpec) bool {
	r, err := ReadRunResult(path)
	return err == nil && r.Spec.Equal(spec)
}

// checkPolicy rejects a malformed peer policy; the gateway's own policy
// names are left to its config validation.
func checkPolicy(name string) error {
	if !procs.IsPeerPolicy(name) {
		return nil
	}
	_, err := procs.ParsePeerPolicy(name)
	return err
}

// UsesPeers reports whether any of runs puts a peer router in front of its
// simulators.
func UsesPeers(runs []RunSpec) bool {
	return slices.ContainsFunc(runs, func(s RunSpec) bool { return procs.IsPeerPolicy(s.Policy) })
}

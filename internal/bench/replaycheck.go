package bench

// The replay check: a traffic capture taken by the gateway during a run,
// replayed as a trace run, should reproduce the run it captured, its
// oracle hit rate and every policy's hit rate.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/inferrail/inferrail/internal/workload"
)

// ReplayCheckConfig says what a replay check runs.
type ReplayCheckConfig struct {
	// Spec is the live runs' spec; each of Policies replaces its Policy.
	// It needs a fleet of its own and one gateway.
	Spec RunSpec
	// Policies are run live, each with the gateway capturing the traffic,
	// and then on the first policy's capture replayed. At least one.
	Policies []string
	// Out is the directory the captures, the result files and summary.md
	// are written to. Required.
	Out string
}

// ReplayRow is one policy's live run against its replay.
type ReplayRow struct {
	Policy string `json:"policy"`
	// Requests measured (after warmup) live and in the replay.
	LiveRequests   int `json:"live_requests"`
	ReplayRequests int `json:"replay_requests"`
	// Hit rates from the engines' usage, and the workloads' oracle hit
	// rates (the ceiling an unlimited prefix cache reaches).
	LiveHitRate      float64 `json:"live_hit_rate"`
	ReplayHitRate    float64 `json:"replay_hit_rate"`
	LiveOracle       float64 `json:"live_oracle"`
	ReplayOracle     float64 `json:"replay_oracle"`
	LiveSucceeded    int     `json:"live_succeeded"`
	ReplaySucceeded  int     `json:"replay_succeeded"`
	CaptureFile      string  `json:"capture_file"`
	ReplayedCapture  string  `json:"replayed_capture"`
	LiveResultFile   string  `json:"live_result_file"`
	ReplayResultFile string  `json:"replay_result_file"`
	// Others is the larger share of the machine's CPU that other
	// processes took during the live run or the replay: on a saturated
	// machine health probes and queues time out differently from run to
	// run, and hit rates with them.
	Others float64 `json:"others_cpu_share"`
}

// HitRateGap is how far the replay's hit rate is from the live run's, in
// points of hit rate (0.01 is one percentage point).
func (r *ReplayRow) HitRateGap() float64 { return math.Abs(r.ReplayHitRate - r.LiveHitRate) }

// OracleGap is how far the replay's oracle hit rate is from the live
// run's, in points of hit rate.
func (r *ReplayRow) OracleGap() float64 { return math.Abs(r.ReplayOracle - r.LiveOracle) }

// ReplayPoint names the replays of a replay check, in their result files
// (replay_x1_rep0_<policy>.json) and reports.
const ReplayPoint = "replay"

// ReplaySpec is the trace run that replays capture, taken during a run of
// live: the same fleet, policy, warmup and clock, with the capture's
// arrivals (taken on the live run's faster clock, so stretched back by
// its speedup). Its point is ReplayPoint: a live run of a trace at ×1
// would otherwise have the replay's file name, and the replay's result
// would overwrite the live one's.
func ReplaySpec(live RunSpec, capture string) RunSpec {
	s := live
	s.Point = ReplayPoint
	s.Workload = workload.Spec{Workload: workload.Trace, Model: live.Workload.Model, TracePath: capture,
		TimeScale: live.clock(), RateMultiplier: 1, Seed: live.Workload.Seed}
	return s
}

// ReplayCheck runs every policy live with the gateway capturing its
// traffic, then replays the first policy's capture under every policy,
// and returns each policy's figures side by side. The capture of a run
// does not depend on its policy (the arrivals, prompts and outputs are
// the workload's), so one capture stands for all.
func ReplayCheck(ctx context.Context, c ReplayCheckConfig, env RunEnv) ([]ReplayRow, error) {
	if len(c.Policies) == 0 || c.Out == "" {
		return nil, errors.New("replay check: at least one policy and an output directory are required")
	}
	if c.Spec.URL != "" || c.Spec.GatewayCount() > 1 {
		return nil, errors.New("replay check: needs a fleet of its own with one gateway")
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return nil, err
	}
	rows := make([]ReplayRow, len(c.Policies))
	for i, p := range c.Policies {
		s := c.Spec
		s.Policy = p
		rows[i].Policy = p
		rows[i].CaptureFile = filepath.Join(c.Out, "capture-"+strings.TrimSuffix(s.FileName(), ".json")+".jsonl")
		if err := os.Remove(rows[i].CaptureFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		e := env
		e.Capture = rows[i].CaptureFile
		res, err := measureInto(ctx, s, e, c.Out)
		if err != nil {
			return nil, fmt.Errorf("replay check: live %s: %w", p, err)
		}
		rows[i].LiveResultFile = s.FileName()
		rows[i].LiveRequests, rows[i].LiveSucceeded, rows[i].LiveHitRate = res.Measurements.Measured, res.Measurements.Succeeded, res.Measurements.HitRate
		rows[i].LiveOracle = oracleOf(res)
		rows[i].Others = res.Machine.Others
	}
	replayed := rows[0].CaptureFile
	for i, p := range c.Policies {
		s := ReplaySpec(c.Spec, replayed)
		s.Policy = p
		res, err := measureInto(ctx, s, env, c.Out)
		if err != nil {
			return nil, fmt.Errorf("replay check: replay %s: %w", p, err)
		}
		r := &rows[i]
		r.ReplayedCapture, r.ReplayResultFile = replayed, s.FileName()
		r.ReplayRequests, r.ReplaySucceeded, r.ReplayHitRate = res.Measurements.Measured, res.Measurements.Succeeded, res.Measurements.HitRate
		r.ReplayOracle = oracleOf(res)
		r.Others = max(r.Others, res.Machine.Others)
	}
	return rows, nil
}

// measureInto measures s and writes its result file into dir.
func measureInto(ctx context.Context, s RunSpec, env RunEnv, dir string) (*RunResult, error) {
	res, err := Measure(ctx, s, env)
	if err != nil {
		return nil, err
	}
	return res, WriteRunResult(filepath.Join(dir, s.FileName()), res)
}

func oracleOf(r *RunResult) float64 {
	if o := r.Measurements.OracleHitRate; o != nil {
		return *o
	}
	return math.NaN()
}

// RenderReplayCheck writes the rows as a Markdown table, the gaps in
// percentage points.
func RenderReplayCheck(rows []ReplayRow) string {
	var b strings.Builder
	b.WriteString("| policy | succeeded live | replay | hit rate live | replay | gap (points) | oracle live | replay | gap (points) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d of %d | %d of %d | %.4f | %.4f | %.2f | %.4f | %.4f | %.2f |\n", r.Policy, r.LiveSucceeded, r.LiveRequests,
			r.ReplaySucceeded, r.ReplayRequests, r.LiveHitRate, r.ReplayHitRate, 100*r.HitRateGap(), r.LiveOracle, r.ReplayOracle, 100*r.OracleGap())
	}
	return b.String()
}

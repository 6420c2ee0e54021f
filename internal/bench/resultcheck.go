package bench

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/inferrail/inferrail/internal/harness"
	"github.com/inferrail/inferrail/internal/measure"
	"github.com/inferrail/inferrail/internal/workload"
)

var _ harness.Checker = (*RunResult)(nil)

// A result file is read back by reports, sweeps and plot, and a value no
// run writes made them print nonsense: a p99 of 1e300 s came out as
// -9,223,372,036,854,775,808 ms (an int64 overflow) and replicas -7 as
// "smallest fleet -7". Check refuses such a file, naming the field; the
// bounds are far past anything a run writes.
const (
	maxResultSeconds = 1e6 // a latency or window: 11 days, past any timeout
	maxResultRate    = 1e9 // requests or tokens per second
	maxResultCount   = 1e12
	maxResultRatio   = 1e6 // a ratio without a natural bound (of the oracle, estimate errors)
	maxResultFleet   = 4096
)

// rangeCheck collects the fields of a result outside their range.
type rangeCheck struct{ errs []error }

// num notes field when v is not within [lo, hi] (NaN never is).
func (c *rangeCheck) num(field string, v, lo, hi float64) {
	if !(v >= lo && v <= hi) {
		c.errs = append(c.errs, fmt.Errorf("%s: %v is outside [%v, %v]", field, v, lo, hi))
	}
}

func (c *rangeCheck) share(field string, v float64)   { c.num(field, v, 0, 1) }
func (c *rangeCheck) seconds(field string, v float64) { c.num(field, v, 0, maxResultSeconds) }
func (c *rangeCheck) count(field string, n int)       { c.num(field, float64(n), 0, maxResultCount) }

// duration notes field when d is not within [0, maxResultSeconds], written
// as a flag takes it (300h, not 1.08e+06).
func (c *rangeCheck) duration(field string, d time.Duration) {
	if limit := time.Duration(maxResultSeconds) * time.Second; d < 0 || d > limit {
		c.errs = append(c.errs, fmt.Errorf("%s: %v is outside [0s, %v]", field, d, limit))
	}
}

// dist checks a percentile summary of seconds; lo is its least value
// (below 0 for a difference of times).
func (c *rangeCheck) dist(field string, p measure.Percentiles, lo float64) {
	c.count(field+".n", p.N)
	for _, v := range []struct {
		name string
		v    float64
	}{{"mean", p.Mean}, {"p50", p.P50}, {"p90", p.P90}, {"p99", p.P99}, {"p999", p.P999}, {"max", p.Max}} {
		c.num(field+"."+v.name+"_seconds", v.v, lo, maxResultSeconds)
	}
}

// Check reports every value of r outside the range a run could have
// written, each naming its field (harness.ReadJSON calls it on every
// result file read, adding the file's name).
func (r *RunResult) Check() error {
	var c rangeCheck
	s := &r.Spec
	s.checkBounds(&c, "spec.")
	// RunSpec.Validate bounds these two more closely, by the same limits.
	c.num("spec.gateways", float64(s.Gateways), 0, maxGateways)
	c.num("spec.speedup", s.Speedup, 0, maxSpeedup)
	r.Measurements.check(&c)
	return errors.Join(c.errs...)
}

// checkBounds notes the numbers of s outside the range a result file may
// hold, each field named after prefix. RunSpec.Validate and Check both
// call it, so that a run never writes a result its readers refuse: a
// --timeout of 300h once ran, and then every report of its directory
// failed on the file.
func (s *RunSpec) checkBounds(c *rangeCheck, prefix string) {
	c.num(prefix+"rep", float64(s.Rep), 0, MaxReps)
	c.num(prefix+"replicas", float64(s.Replicas), 0, maxResultFleet)
	c.num(prefix+"workload.rate", s.Workload.Rate, 0, maxResultRate)
	c.num(prefix+"workload.rate_multiplier", s.Workload.RateMultiplier, 0, maxResultRate)
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"slo.ttft", s.SLO.TTFT}, {"slo.tpot", s.SLO.TPOT}, {"timeout", s.Timeout}, {"workload.duration", s.Workload.Duration}} {
		c.duration(prefix+d.name, d.d)
	}
}

// check notes what of m is out of range.
func (m *Measurements) check(c *rangeCheck) {
	c.num("measurements.requests", float64(m.Requests), 0, workload.MaxRequests)
	c.num("measurements.warmup", float64(m.Warmup), 0, float64(m.Requests))
	c.num("measurements.measured", float64(m.Measured), 0, float64(m.Requests))
	c.num("measurements.succeeded", float64(m.Succeeded), 0, float64(m.Measured))
	failed := 0
	for k, n := range m.Errors {
		c.count("measurements.errors."+k, n)
		failed += n
	}
	c.num("measurements.errors (all kinds)", float64(failed), 0, float64(m.Measured))
	c.seconds("measurements.window_seconds", m.WindowSeconds)
	for _, d := range []struct {
		name string
		p    measure.Percentiles
	}{{"ttft", m.TTFT}, {"tpot", m.TPOT}, {"itl", m.ITL}, {"e2e", m.E2E}} {
		c.dist("measurements."+d.name, d.p, 0)
	}
	c.dist("measurements.send_lag", m.SendLag, -maxResultSeconds)
	if v := m.TTFTP99WithFailures; v != nil {
		c.seconds("measurements.ttft_p99_with_failures_seconds", *v)
	}
	c.num("measurements.throughput_rps", m.ThroughputRPS, 0, maxResultRate)
	c.num("measurements.goodput_rps", m.GoodputRPS, 0, maxResultRate)
	c.num("measurements.output_tokens_per_sec", m.OutputTokensPerSec, 0, maxResultRate)
	c.share("measurements.good_fraction", m.GoodFraction)
	c.share("measurements.hit_rate", m.HitRate)
	c.share("measurements.busiest_share", m.BusiestShare)
	c.num("measurements.prompt_tokens", float64(m.PromptTokens), 0, math.MaxInt64)
	c.num("measurements.cached_tokens", float64(m.CachedTokens), 0, float64(m.PromptTokens))
	if e := m.Engine; e != nil {
		c.share("measurements.engine.hit_rate", e.HitRate)
	}
	for _, v := range []struct {
		name string
		v    *float64
	}{{"oracle_hit_rate", m.OracleHitRate}, {"hit_rate_of_oracle", m.HitRateOfOracle},
		{"engine_hit_rate_of_oracle", m.EngineHitRateOfOracle}, {"predicted_hit_rate_of_oracle", m.PredictedHitRateOfOracle}} {
		if v.v != nil {
			c.num("measurements."+v.name, *v.v, 0, maxResultRatio)
		}
	}
	for k, n := range m.Replicas {
		c.count("measurements.replicas."+k, n)
	}
	for k, v := range m.ReplicaTTFTP99 {
		c.seconds("measurements.replica_ttft_p99."+k, v)
	}
	m.checkParts(c)
}

// checkParts notes what of m's optional parts is out of range.
func (m *Measurements) checkParts(c *rangeCheck) {
	if p := m.Prediction; p != nil {
		c.share("measurements.prediction.exact", p.Exact)
		c.num("measurements.prediction.mean_error_tokens", p.MeanError, -maxResultCount, maxResultCount)
	}
	if e := m.Estimate; e != nil {
		c.num("measurements.estimate.mean_abs", e.MeanAbs, 0, maxResultRatio)
		c.num("measurements.estimate.p90_abs", e.P90Abs, 0, maxResultRatio)
	}
	if t := m.Turns; t != nil {
		c.share("measurements.turns.kept_share", t.KeptShare)
	}
	if h := m.Herding; h != nil {
		c.num("measurements.herding.mean_excess_in_flight", h.MeanExcess, 0, maxResultCount)
		c.num("measurements.herding.mean_excess_waiting", h.MeanExcessWaiting, 0, maxResultCount)
		c.share("measurements.herding.piled", h.Piled)
		c.share("measurements.herding.piled_waiting", h.PiledWaiting)
	}
	for _, parts := range []struct {
		name string
		m    map[string]KindFigures
	}{{"kinds", m.Kinds}, {"arms", m.Arms}} {
		for k, f := range parts.m {
			at := "measurements." + parts.name + "." + k
			c.count(at+".measured", f.Measured)
			c.num(at+".succeeded", float64(f.Succeeded), 0, float64(f.Measured))
			c.dist(at+".ttft", f.TTFT, 0)
			c.dist(at+".e2e", f.E2E, 0)
			c.share(at+".hit_rate", f.HitRate)
		}
	}
	for i, g := range m.Gateways {
		at := fmt.Sprintf("measurements.gateways[%d]", i)
		c.count(at+".measured", g.Measured)
		c.num(at+".succeeded", float64(g.Succeeded), 0, float64(g.Measured))
		c.seconds(at+".ttft_p99", g.TTFTP99)
		c.share(at+".hit_rate", g.HitRate)
	}
}

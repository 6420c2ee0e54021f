package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/workload"
)

// IndexDemo is the second part of `make demo`: W2 (multi-turn chats) under
// cost_model with the gateway's index in each of Modes in turn, the same
// requests at the same times on a cold fleet each.
type IndexDemo struct {
	// Rate is W2's mean offered rate in req/s and Requests the run's
	// length; zero Requests skips this part.
	Rate     float64
	Requests int
	// Speedup runs the fleets that many times faster than the model's
	// clock (RunSpec.Speedup).
	Speedup float64
	// Modes are the index modes compared, the first the baseline.
	Modes []string
}

// DefaultIndexDemo is W2 at 12 req/s (the committed sweep's median rate)
// for 300 requests, four times faster than the model's clock: about ten
// seconds a run on a 2-core machine.
func DefaultIndexDemo() IndexDemo {
	return IndexDemo{Rate: 12, Requests: 300, Speedup: 4, Modes: []string{IndexApproximate, IndexExact}}
}

// specs are the demo's runs, one per mode.
func (d *IndexDemo) specs(seed uint64) ([]RunSpec, error) {
	var runs []RunSpec
	for _, m := range d.Modes {
		idx, err := NormalizeIndex(m)
		if err != nil {
			return nil, err
		}
		s := RunSpec{
			Policy: "cost_model", Replicas: 3, Warmup: "0.1", SLO: DefaultSLO(), Timeout: time.Minute, Speedup: d.Speedup, Index: idx,
			Workload: workload.Spec{Workload: workload.W2, Model: procs.SimModel, Rate: d.Rate, Requests: d.Requests, Seed: seed},
		}
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("index %s: %w", m, err)
		}
		runs = append(runs, s)
	}
	return runs, nil
}

// runIndexDemo carries out d's runs, writes their result files under dir
// and prints their table.
func runIndexDemo(ctx context.Context, d IndexDemo, seed uint64, dir string, env RunEnv, out io.Writer) error {
	runs, err := d.specs(seed)
	if err != nil || len(runs) == 0 {
		return err
	}
	fmt.Fprintf(out, "\nW2 (multi-turn chats) at %g req/s, %d requests, cost_model: the gateway's index approximate (its own routing decisions)\n", d.Rate, d.Requests)
	fmt.Fprintf(out, "against exact (every simulator's KV events), each on a cold fleet with the same requests at the same times.\n\n")
	results, err := measureEach(ctx, runs, env, dir, out, "demo: index", func(s RunSpec) string { return s.IndexMode() }, func(m *Measurements) string {
		return fmt.Sprintf("%d of %d measured succeeded", m.Succeeded, m.Measured)
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprint(out, RenderIndexTable(results))
	return nil
}

// measureEach carries out runs in turn, each on a cold fleet of its own,
// writes their result files under dir and prints a line a run as it ends:
// its label, then detail of its measurements and how long it took. A failed
// run stops the rest; its error reads errPrefix, the run's label and why.
func measureEach(ctx context.Context, runs []RunSpec, env RunEnv, dir string, out io.Writer, errPrefix string,
	label func(RunSpec) string, detail func(*Measurements) string) ([]*RunResult, error) {
	var results []*RunResult
	for _, s := range runs {
		start := time.Now()
		r, err := Measure(ctx, s, env) // its progress goes to env's display meanwhile
		if err != nil {
			fmt.Fprintf(out, "%-14s failed\n", label(s))
			return nil, fmt.Errorf("%s %s: %w", errPrefix, label(s), err)
		}
		if err := WriteRunResult(filepath.Join(dir, s.FileName()), r); err != nil {
			return nil, err
		}
		results = append(results, r)
		fmt.Fprintf(out, "%-14s %s, %.0f s\n", label(s), detail(&r.Measurements), time.Since(start).Seconds())
	}
	return results, nil
}

// RenderIndexTable writes a row per run: its index mode, how many
// cached-token predictions were exact, over and under, the hit rate and
// TTFT, and whether the gateway followed every engine's events to the end.
func RenderIndexTable(results []*RunResult) string {
	if len(results) == 0 {
		return "no results\n"
	}
	table := [][]string{{"index", "exact", "over", "under", "hit rate", "TTFT p50", "TTFT p99", "followed events", "errors"}}
	for _, r := range results {
		m := &r.Measurements
		exact, over, under := "–", "–", "–"
		if p := m.Prediction; p != nil {
			exact, over, under = share(p.Exact), share(p.Over), share(p.Under)
		}
		followed := "–"
		if st := r.Index; st != nil && len(st.KVEvents) > 0 {
			followed = yesNo(st.Following())
			for _, k := range st.KVEvents {
				if k.Reason != "" {
					followed += " (" + k.ID + ": " + k.Reason + ")"
				}
			}
		}
		errs := 0
		for _, n := range m.Errors {
			errs += n
		}
		table = append(table, []string{r.Spec.IndexMode(), exact, over, under, share(m.HitRate),
			msecText(m.TTFT.P50) + " ms", msecText(m.TTFT.P99) + " ms", followed, fmt.Sprintf("%d/%d", errs, m.Measured)})
	}
	var b strings.Builder
	writeAligned(&b, table)
	return b.String()
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inferrail/inferrail/internal/procs"
	"github.com/inferrail/inferrail/internal/workload"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// DemoConfig says what `make demo` sends: a short W1 run, open loop, under
// each of Policies in turn.
type DemoConfig struct {
	// Rate is the mean offered rate in req/s, and Duration the schedule's
	// length.
	Rate     float64
	Duration time.Duration
	// SystemPrompts is W1's number of shared system prompts; zero means the
	// workload's default (8).
	SystemPrompts int
	// Seed is the workload seed.
	Seed uint64
	// Policies run in turn on the same requests at the same times, each on
	// a cold fleet; the first is the baseline the others are compared with.
	Policies []string
	// Out is the directory for the result files, the chart and the report.
	// Required.
	Out string
	// Index is the second part: W2 with the gateway's index approximate
	// against exact. Its results go to Out/index.
	Index IndexDemo
}

// DefaultDemoConfig is `make demo`'s: W1 with 16 system prompts at 5
// req/s for 40 s, round_robin then cost_model. One simulator's cache
// (65k tokens) cannot hold 16 prompts of 2k–8k tokens but three together
// can, so round_robin keeps evicting and missing where cost_model keeps
// each prompt on one replica; no request comes near the timeout. Then
// DefaultIndexDemo. On a 2-core machine it takes about two minutes.
func DefaultDemoConfig() DemoConfig {
	return DemoConfig{Rate: 5, Duration: 40 * time.Second, SystemPrompts: 16, Seed: 1, Policies: []string{"round_robin", "cost_model"},
		Index: DefaultIndexDemo()}
}

// spec is the run every policy of the demo gets.
func (c *DemoConfig) spec() RunSpec {
	return RunSpec{
		Replicas: 3, Warmup: "0.1", SLO: DefaultSLO(), Timeout: time.Minute,
		Workload: workload.Spec{Workload: workload.W1, Model: procs.SimModel, Rate: c.Rate, Duration: c.Duration,
			Seed: c.Seed, SystemPrompts: c.SystemPrompts},
	}
}

// Demo is the showcase: for each policy, three simulators and the gateway
// start cold, W1's requests go out on their schedule, and the fleet stops;
// then it prints a table comparing the policies, draws a chart and writes
// the result files and their report under c.Out; last, unless
// c.Index.Requests is 0, it runs W2 with each of c.Index.Modes and prints
// how exact each mode's predictions were. Failed requests make it
// return an error after the table.
func Demo(ctx context.Context, c DemoConfig, env RunEnv, out io.Writer) error {
	if c.Out == "" || len(c.Policies) == 0 {
		return errors.New("demo: an output directory and at least one policy are required")
	}
	runs := ComparePlan(c.spec(), c.Policies, 1)
	for _, s := range runs {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("demo: %s: %w", s.Policy, err)
		}
	}
	prompts := "8"
	if c.SystemPrompts > 0 {
		prompts = fmt.Sprint(c.SystemPrompts)
	}
	fmt.Fprintf(out, "W1 (%s shared system prompts of 2k–8k tokens, short questions) at %g req/s for %v, open loop.\n", prompts, c.Rate, c.Duration)
	fmt.Fprintf(out, "Each policy gets the same requests at the same times on a cold fleet: 3 simulators behind the gateway.\n\n")
	results, err := measureEach(ctx, runs, env, c.Out, out, "demo:", func(s RunSpec) string { return s.Policy }, func(m *Measurements) string {
		return fmt.Sprintf("%d requests (the first %d as warmup), %d of %d measured succeeded", m.Requests, m.Warmup, m.Succeeded, m.Measured)
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprint(out, RenderDemoTable(results))

	rows := pointRows(results)
	png, err := renderDemoChart(fmt.Sprintf("W1 at %g req/s: time to first token", c.Rate), rows)
	if err != nil {
		return fmt.Errorf("demo: chart: %w", err)
	}
	chart := filepath.Join(c.Out, "demo-ttft.png")
	if err := os.WriteFile(chart, png, 0o644); err != nil {
		return err
	}
	report, skipped, err := WriteRunReport(c.Out, filepath.Join(c.Out, "report"))
	for _, s := range skipped {
		fmt.Fprintln(out, "warning:", s)
	}
	if err != nil {
		return fmt.Errorf("demo: report: %w", err)
	}
	if err := runIndexDemo(ctx, c.Index, c.Seed, filepath.Join(c.Out, "index"), env, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nchart:   %s\nreport:  %s\nresults: %s\n", chart, report, c.Out)
	var failed, measured int
	for _, r := range rows {
		failed += r.Errors
		measured += r.Requests
	}
	if failed > 0 {
		return fmt.Errorf("demo: %d of %d measured requests failed", failed, measured)
	}
	return nil
}

// RenderDemoTable writes the demo's comparison: a row per policy, then
// how each policy after the first compares with the first.
func RenderDemoTable(results []*RunResult) string {
	var b strings.Builder
	rows := pointRows(results)
	if len(rows) == 0 {
		return "no results\n"
	}
	table := [][]string{{"policy", "TTFT p50", "TTFT p99", "e2e p50", "e2e p99", "hit rate", "busiest", "goodput", "within SLO", "errors"}}
	for _, r := range rows {
		table = append(table, []string{r.Policy,
			msecText(r.TTFTP50) + " ms", msecText(r.TTFTP99) + " ms", msecText(r.E2EP50) + " ms", msecText(r.E2EP99) + " ms",
			share(r.HitRate), share(r.BusiestShare), num2(r.Goodput) + " req/s", share(r.GoodFraction),
			fmt.Sprintf("%d/%d", r.Errors, r.Requests)})
	}
	writeAligned(&b, table)
	base := rows[0]
	for _, r := range rows[1:] {
		fmt.Fprintf(&b, "\n%s against %s: p99 TTFT %s, p50 TTFT %s, hit rate %s → %s, goodput %s.\n", r.Policy, base.Policy,
			relText(r.TTFTP99, base.TTFTP99, "lower", "higher"), relText(r.TTFTP50, base.TTFTP50, "lower", "higher"),
			share(base.HitRate), share(r.HitRate), relText(r.Goodput, base.Goodput, "lower", "higher"))
	}
	return b.String()
}

// writeAligned writes rows as columns two spaces apart, the first aligned
// left and the others right.
func writeAligned(b *strings.Builder, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range rows {
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			switch {
			case i == 0:
				b.WriteString(cell + pad)
			default:
				b.WriteString("  " + pad + cell)
			}
		}
		b.WriteByte('\n')
	}
}

// relText says how v compares with base: "87% lower", "12% higher", or
// "the same" within half a percent; a p99 no served request set (runP99)
// is above every other.
func relText(v, base float64, lower, higher string) string {
	switch {
	case unreachable(v) && unreachable(base):
		return "both " + unreachableText
	case unreachable(v):
		return unreachableText
	case unreachable(base):
		return lower + ", the other's " + unreachableText
	case base == 0 || math.IsNaN(v) || math.IsNaN(base):
		return "–"
	}
	d := v/base - 1
	switch {
	case math.Abs(d) < 0.005:
		return "the same"
	case d < 0:
		return share(-d) + " " + lower
	}
	return share(d) + " " + higher
}

// renderDemoChart draws TTFT p50, p90 and p99 as bars, a group per
// percentile and a bar per policy.
func renderDemoChart(title string, rows []PolicyRow) ([]byte, error) {
	p, legend := newChart(title, "", "seconds")
	p.NominalX("TTFT p50", "TTFT p90", "TTFT p99")
	width := vg.Points(60) / vg.Length(max(1, len(rows)))
	others := 0
	for i, r := range rows {
		vs := plotter.Values{r.TTFTP50, r.TTFTP90, r.TTFTP99}
		texts := make([]string, len(vs))
		for j, v := range vs {
			texts[j] = barLabel(v)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				vs[j] = 0 // no bar, and a label that says why
			}
		}
		bars, err := plotter.NewBarChart(vs, width)
		if err != nil {
			return nil, err
		}
		c, _, other := policyStyle(r.Policy, others)
		if other {
			others++
		}
		bars.Color, bars.LineStyle.Width = c, 0
		bars.Offset = (vg.Length(i) - vg.Length(len(rows)-1)/2) * width
		labels, err := plotter.NewLabels(plotter.XYLabels{
			XYs:    plotter.XYs{{X: 0, Y: vs[0]}, {X: 1, Y: vs[1]}, {X: 2, Y: vs[2]}},
			Labels: texts,
		})
		if err != nil {
			return nil, err
		}
		for j := range labels.TextStyle {
			labels.TextStyle[j].XAlign = draw.XCenter
			labels.TextStyle[j].Font.Size = vg.Points(9)
		}
		labels.Offset = vg.Point{X: bars.Offset, Y: vg.Points(3)}
		p.Add(bars, labels)
		legend.Add(fmt.Sprintf("%s (hit rate %s)", r.Policy, share(r.HitRate)), bars)
	}
	return pngBytes(p, legend)
}

// barLabel is a bar's value in ms, or s from 10 s on.
func barLabel(v float64) string {
	if v >= 10 && !unreachable(v) {
		return strconv.FormatFloat(v, 'f', 1, 64) + " s"
	}
	return msecText(v) + " ms"
}

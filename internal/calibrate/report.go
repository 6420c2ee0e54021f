package calibrate

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
)

// WriteReport prints the run: the engine and seed, every probe with its
// residual (slower repetitions, outliers and unrepeated shapes marked), the
// fit over the rest, the HTTP time the engine's TTFT leaves out, and the
// cost_model fragment.
func (r *Result) WriteReport(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("engine %s (%s), model %s\n", r.URL, r.Engine, r.Model)
	ew.printf("seed %d (rerun with --seed %d for the same prompts, on an engine that has not cached them)\n", r.Seed, r.Seed)
	ew.printf("design: uncached %v, cached %v, %d repetitions; prompt lengths planned with %s\n\n",
		r.Design.Uncached, r.Design.Cached, r.Design.Reps, r.Tokenizer)

	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tplanned u\tplanned c\tprompt\tcached\tcomputed\tTTFT ms\tHTTP ms\tresidual ms\t\t")
	var fitted []Probe
	outliers, slower, unrepeated := 0, 0, 0
	for _, p := range r.Probes {
		resid, mark := "-", ""
		switch {
		case p.Kind == "warmup":
		case p.Unrepeated:
			resid, mark = fmt.Sprintf("%.3f", p.Residual*1e3), "unrepeated"
			unrepeated++
		case p.Slower:
			resid, mark = fmt.Sprintf("%.3f", p.Residual*1e3), "slower"
			slower++
		case p.Outlier:
			resid, mark = fmt.Sprintf("%.3f", p.Residual*1e3), "outlier"
			outliers++
		default:
			resid = fmt.Sprintf("%.3f", p.Residual*1e3)
			fitted = append(fitted, p)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%s\t%s\t\n", p.Kind, p.PlannedUncached, p.PlannedCached,
			p.PromptTokens, p.Cached, p.Uncached(), p.TTFT*1e3, p.HTTP*1e3, resid, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var sq, worst, sumTTFT float64
	var overhead []float64
	for _, p := range fitted {
		sq += p.Residual * p.Residual
		worst = math.Max(worst, math.Abs(p.Residual))
		sumTTFT += p.TTFT
		overhead = append(overhead, p.HTTP-p.TTFT)
	}
	n := float64(len(fitted))
	p := r.Params
	ew.printf("\nfit over %d probes, the fastest of each shape; %d more left out as slower repetitions, %d as outliers, %d as shapes measured fewer than %d times (non-negative least squares of P(u, c) = a·u + b·u·(c + u/2) + d):\n",
		len(fitted), slower, outliers, unrepeated, r.Design.Reps)
	ew.printf("  a = %.6g µs per computed token\n", p.TokenSecs*1e6)
	ew.printf("  b = %.6g ns per (computed, attended) token pair\n", p.PairSecs*1e9)
	ew.printf("  d = %.6g ms per prefill\n", p.FixedSecs*1e3)
	if n > 0 {
		ew.printf("  residuals: rms %.4g ms, largest %.4g ms; mean TTFT %.4g ms\n", math.Sqrt(sq/n)*1e3, worst*1e3, sumTTFT/n*1e3)
		slices.Sort(overhead)
		ew.printf("HTTP time beyond the engine's TTFT (not fitted): median %.3g ms, largest %.3g ms\n",
			overhead[len(overhead)/2]*1e3, overhead[len(overhead)-1]*1e3)
	}
	ew.printf("\n")
	ew.write(p.Fragment())
	return ew.err
}

// errWriter keeps the first write error and drops everything after it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

func (e *errWriter) write(b []byte) { _, _ = e.Write(b) }

func (e *errWriter) printf(format string, args ...any) { _, _ = fmt.Fprintf(e, format, args...) }

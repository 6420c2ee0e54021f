package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/decisionlog"
	"github.com/inferrail/inferrail/internal/measure"
)

// TailOptions say what WriteTail shows.
type TailOptions struct {
	// Top is how many of the slowest measured requests to list; 0 means
	// those that set the p99: the request at its nearest rank and every
	// one above it (for n requests, n − ⌈0.99·n⌉ + 1, at least one).
	Top int
	// MissShare: a request is a miss when its engine found less than this
	// share of its prompt cached. Default 0.5.
	MissShare float64
	// Speedup is the run's --speedup: the decision log's seconds are on the
	// fleet's clock, that many times faster than the outcomes'. 0 means 1.
	Speedup float64
}

// maxLine bounds one line of an outcomes file or a decision log: a
// decision names every replica, so a fleet of thousands fits.
const maxLine = 16 << 20

// maxOutcomeMS bounds the times of an outcome: far past any request, and
// a time.Duration still.
const maxOutcomeMS = 1e9

// ReadOutcomes reads an outcomes file (WriteOutcomes), refusing a time
// that is negative or past maxOutcomeMS.
func ReadOutcomes(r io.Reader) ([]OutcomeLine, error) {
	var outs []OutcomeLine
	err := eachLine(r, func(n int, line []byte) error {
		var o OutcomeLine
		if err := json.Unmarshal(line, &o); err != nil {
			return fmt.Errorf("outcomes line %d: %w", n, err)
		}
		times := []struct {
			name string
			ms   float64
		}{{"sched_ms", o.SchedMS}, {"ttft_ms", o.TTFTMS}, {"e2e_ms", o.E2EMS}, {"estimated_ms", o.EstimatedMS}}
		for _, t := range times {
			if !(t.ms >= 0 && t.ms <= maxOutcomeMS) {
				return fmt.Errorf("outcomes line %d: %s: must be in [0, %.0e], not %g", n, t.name, maxOutcomeMS, t.ms)
			}
		}
		outs = append(outs, o)
		return nil
	})
	return outs, err
}

// TailWarnings says what looks wrong with a tail's inputs: outcome lines
// with neither a status nor an error (another file given as outcomes), a
// decision log that matches none of the requests.
func TailWarnings(outs []OutcomeLine, decs map[string]*decisionlog.Record) []string {
	var warns []string
	unlike, matched := 0, 0
	for _, o := range outs {
		if o.Status == 0 && o.ErrKind == "" {
			unlike++
		}
		if decs[o.RequestID] != nil {
			matched++
		}
	}
	if unlike > 0 {
		warns = append(warns, fmt.Sprintf("%d of the %d outcome lines have neither a status nor an error: is it a run's --outcomes file?", unlike, len(outs)))
	}
	if decs != nil && matched == 0 {
		warns = append(warns, fmt.Sprintf("the decision log matches none of the %d requests by request ID: is it this run's?", len(outs)))
	}
	return warns
}

// ReadDecisions reads a gateway's decision log, keyed by request ID: a
// request's last decision (its last attempt's) is kept.
func ReadDecisions(r io.Reader) (map[string]*decisionlog.Record, error) {
	decs := map[string]*decisionlog.Record{}
	err := eachLine(r, func(n int, line []byte) error {
		rec := &decisionlog.Record{}
		if err := json.Unmarshal(line, rec); err != nil {
			return fmt.Errorf("decision log line %d: %w", n, err)
		}
		decs[rec.RequestID] = rec
		return nil
	})
	return decs, err
}

// eachLine calls fn with each non-blank line of r, numbered from 1.
func eachLine(r io.Reader, fn func(n int, line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		if line := sc.Bytes(); len(bytes.TrimSpace(line)) > 0 {
			if err := fn(n, line); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("a line longer than %d bytes", maxLine)
		}
		return err
	}
	return nil
}

// WriteTail describes the slowest measured requests of a run: where each
// went, what its engine had cached against what the gateway predicted, and,
// given the run's decision log (decs may be nil), how it was decided and
// what every candidate looked like then. It counts the misses among the
// measured requests and among the slowest, since a handful of misses of
// long prompts is enough to set a short run's p99.
func WriteTail(w io.Writer, outs []OutcomeLine, decs map[string]*decisionlog.Record, o TailOptions) {
	share := cmp.Or(o.MissShare, 0.5)
	speedup := cmp.Or(o.Speedup, 1)
	var measured []OutcomeLine
	warm := 0
	for _, l := range outs {
		switch {
		case l.Warmup:
			warm++
		case l.ErrKind == "" && l.Status/100 == 2:
			measured = append(measured, l)
		}
	}
	fmt.Fprintf(w, "%d requests succeeded after the warmup (%d in the warmup, %d failed)\n", len(measured), warm, len(outs)-warm-len(measured))
	if len(measured) == 0 {
		return
	}
	slices.SortStableFunc(measured, func(a, b OutcomeLine) int { return cmp.Compare(b.TTFTMS, a.TTFTMS) })
	ttfts := make([]time.Duration, len(measured))
	for i, l := range measured {
		ttfts[len(measured)-1-i] = time.Duration(l.TTFTMS * float64(time.Millisecond))
	}
	top := o.Top
	if top <= 0 {
		// Those at or above the nearest-rank p99, the request that is the
		// p99 included: n/100 left it out.
		top = len(measured) - measure.Rank(len(measured), 0.99)
	}
	top = min(top, len(measured))
	miss := func(l OutcomeLine) bool { return float64(l.CachedTokens) < share*float64(l.PromptTokens) }
	misses, topMisses := 0, 0
	how := map[string]int{}
	for i, l := range measured {
		if !miss(l) {
			continue
		}
		misses++
		if i < top {
			topMisses++
		}
		if d := decs[l.RequestID]; d != nil {
			how[decidedHow(d)]++
		}
	}
	fmt.Fprintf(w, "TTFT p99 %.0f ms; misses (under %g of the prompt cached) %d, of them %d among the slowest %d\n",
		measure.Percentile(ttfts, 0.99)*1000, share, misses, topMisses, top)
	if len(how) > 0 {
		parts := make([]string, 0, len(how))
		for _, k := range slices.Sorted(maps.Keys(how)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, how[k]))
		}
		fmt.Fprintf(w, "misses by how they were decided: %s\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "the slowest %d:\n", top)
	for _, l := range measured[:top] {
		pred := "none"
		if l.PredictedCached >= 0 {
			pred = fmt.Sprint(l.PredictedCached)
		}
		fmt.Fprintf(w, "  #%d at %.3f s: TTFT %.0f ms (estimated %.0f) on %s, prompt %d, cached %d (predicted %s)",
			l.Index, l.SchedMS/1000, l.TTFTMS, l.EstimatedMS, cmp.Or(l.Replica, "?"), l.PromptTokens, l.CachedTokens, pred)
		d := decs[l.RequestID]
		if d == nil {
			fmt.Fprintln(w)
			continue
		}
		fmt.Fprintf(w, ", %s\n", decidedHow(d))
		for _, c := range d.Candidates {
			fmt.Fprintf(w, "      %s %s: in flight %d, queued prefill %.0f ms", c.Replica, c.State, c.InFlight, c.QueuedPrefillSecs*speedup*1000)
			if c.Running != nil && c.KVUsage != nil {
				// The engine's own report: a queue for KV blocks shows as
				// waiting requests beside a full cache.
				fmt.Fprintf(w, ", engine running %d", *c.Running)
				if c.Waiting != nil {
					fmt.Fprintf(w, " waiting %g", *c.Waiting)
				}
				fmt.Fprintf(w, " KV use %.2f", *c.KVUsage)
			}
			if c.CachedTokens != nil {
				fmt.Fprintf(w, ", cached %d", *c.CachedTokens)
			}
			if c.EstimatedTTFTSecs != nil {
				fmt.Fprintf(w, ", estimate %.0f ms", *c.EstimatedTTFTSecs*speedup*1000)
			}
			if c.SetAside != "" {
				fmt.Fprintf(w, ", set aside by %s", c.SetAside)
			}
			fmt.Fprintln(w)
		}
	}
}

// decidedHow names what decided a decision: what steered it, else the
// cost model's deciding term, else "plain".
func decidedHow(d *decisionlog.Record) string {
	switch {
	case d.Steered != "":
		return "steered " + d.Steered
	case d.DecidedBy != "":
		return "decided by " + d.DecidedBy
	}
	return "plain"
}

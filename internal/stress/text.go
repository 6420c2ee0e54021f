package stress

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/measure"
)

// OrDefault is d, or def when d is zero.
func OrDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Secs writes seconds in the unit that suits them.
func Secs(s float64) string {
	switch {
	case s == 0:
		return "–"
	case s < 0.001:
		return fmt.Sprintf("%.0f µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.1f ms", s*1e3)
	}
	return fmt.Sprintf("%.2f s", s)
}

// MiB writes bytes in MiB.
func MiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// OrText is s, or def when s is empty.
func OrText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// SortByScenario sorts results in the order of the scenario names (those
// of unknown scenarios last), scenario giving each one's name.
func SortByScenario[T any](results []T, names []string, scenario func(*T) string) {
	rank := func(s string) int {
		if i := slices.Index(names, s); i >= 0 {
			return i
		}
		return len(names)
	}
	slices.SortFunc(results, func(a, b T) int { return rank(scenario(&a)) - rank(scenario(&b)) })
}

// WriteReproduce writes a report's closing section: intro, then the
// distinct commands, in order, the results came from.
func WriteReproduce(w io.Writer, intro string, commands []string) {
	fmt.Fprintf(w, "## Reproduce\n\n%s", intro)
	var cmds []string
	for _, c := range commands {
		if c != "" && !slices.Contains(cmds, c) {
			cmds = append(cmds, c)
		}
	}
	if len(cmds) == 0 {
		fmt.Fprint(w, "\n")
		return
	}
	fmt.Fprint(w, " The results above came from:\n\n```sh\nmake build\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "%s\n", c)
	}
	fmt.Fprint(w, "```\n")
}

// WriteMeasured opens a result's provenance in a report: when it was
// measured and on which commit, the sentence left open for more.
func WriteMeasured(w io.Writer, e measure.Environment) {
	fmt.Fprintf(w, "Measured %s on commit %s", e.Date, OrText(e.GitCommit, "unknown"))
	if e.GitDirty {
		fmt.Fprint(w, " (the work tree had uncommitted changes)")
	}
}

// WriteErrors writes the failures of a run under label in a report: how
// many of each kind, in name order, then each sample as code; nothing when
// there were none.
func WriteErrors(w io.Writer, label string, kinds map[string]int, samples []string) {
	if len(kinds) == 0 && len(samples) == 0 {
		return
	}
	var ks []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		ks = append(ks, fmt.Sprintf("%s %d", k, kinds[k]))
	}
	fmt.Fprintf(w, "%s errors: %s.\n", label, OrText(strings.Join(ks, ", "), "none"))
	for _, s := range samples {
		fmt.Fprintf(w, "- `%s`\n", strings.ReplaceAll(s, "`", "'"))
	}
	fmt.Fprintln(w)
}

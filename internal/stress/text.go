package stress

import (
	"fmt"
	"io"
	"slices"
	"time"
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

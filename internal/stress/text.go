package stress

import (
	"fmt"
	"time"
)

// Prefixed puts path in front of each error joined in err.
func Prefixed(path string, err error) []error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("%s.%w", path, e)
	}
	return out
}

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

package config

import (
	"fmt"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written in YAML with a unit, as time.ParseDuration
// reads it: "250ms", "2s", "1m30s". A bare number such as 5 is rejected,
// since it could mean seconds or milliseconds; write 5s, or 0s for zero.
//
// It marshals as a whole number of the largest of s, ms, us and ns that
// holds it exactly: 60s stays "60s" and 1.5s becomes "1500ms".
type Duration time.Duration

// String returns d as it marshals, such as "250ms" or "60s".
func (d Duration) String() string {
	if d == 0 {
		return "0s"
	}
	sign := ""
	n := uint64(d)
	if d < 0 {
		sign = "-"
		n = -n // also right for math.MinInt64
	}
	for _, u := range [...]struct {
		ns   uint64
		name string
	}{{1e9, "s"}, {1e6, "ms"}, {1e3, "us"}} {
		if n%u.ns == 0 {
			return sign + strconv.FormatUint(n/u.ns, 10) + u.name
		}
	}
	return sign + strconv.FormatUint(n, 10) + "ns"
}

// MarshalYAML writes d as [Duration.String] does.
func (d Duration) MarshalYAML() (any, error) {
	return d.String(), nil
}

// UnmarshalYAML reads a duration with a unit. A bad value is reported as a
// *yaml.TypeError, so a decoder keeps going and reports the others too.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, msg := parseDuration(n)
	if msg != "" {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
	}
	*d = v
	return nil
}

// parseDuration reads a scalar node as a Duration, or returns the rule it
// breaks. A null node is not a value; callers skip it before.
func parseDuration(n *yaml.Node) (Duration, string) {
	if n.Kind != yaml.ScalarNode {
		return 0, "must be a duration such as 250ms or 2s"
	}
	tag := n.ShortTag()
	if _, err := time.ParseDuration(n.Value + "ns"); err == nil || tag == "!!int" || tag == "!!float" {
		// A bare number: it would be a duration with a unit after it.
		return 0, "must have a unit, such as 250ms or 2s"
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil || tag != "!!str" {
		return 0, "must be a duration such as 250ms or 2s"
	}
	return Duration(v), ""
}

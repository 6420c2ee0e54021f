package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Split shares a model's traffic between policies: each arm names a policy
// and the percent of requests it routes. Arms keep the order they are
// written in, which is the order a request's draw walks them. Nil means no
// split.
type Split []SplitArm

// SplitArm is one policy of a Split and its share.
type SplitArm struct {
	Policy  string
	Percent int
}

// MarshalYAML writes the split as a mapping from policy to percent, in
// order, as it is read.
func (s Split) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, a := range s {
		n.Content = append(n.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: a.Policy},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(a.Percent)})
	}
	return n, nil
}

// UnmarshalYAML reads a mapping from policy to percent; yaml's strict
// decoder uses it, our own decoder reads splits with splitArms.
func (s *Split) UnmarshalYAML(n *yaml.Node) error {
	d := newDecoder(n)
	out := d.splitArms(n, "split")
	if len(d.errs) > 0 {
		msgs := make([]string, len(d.errs))
		for i, e := range d.errs {
			msgs[i] = e.Error()
		}
		return &yaml.TypeError{Errors: msgs}
	}
	*s = out
	return nil
}

// splitArms decodes a split's mapping. Keys are policy names (checked by
// Validate), values whole percents.
func (d *decoder) splitArms(n *yaml.Node, path string) Split {
	if n.Kind != yaml.MappingNode {
		d.reject(path, n, "must be a mapping of policy names to percents, such as {cost_model: 90, kv_aware: 10}")
		return nil
	}
	var out Split // an empty mapping is no split
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name, ok := d.key(k, path)
		if !ok {
			continue
		}
		kp := path + "." + name
		if first, ok := seen[name]; ok {
			d.duplicate(kp, k, first)
			continue
		}
		seen[name] = k.Line
		d.lines[kp] = k.Line
		if val = d.visit(val); val == nil {
			return out
		}
		var pct int
		d.scalar(val, reflect.ValueOf(&pct).Elem(), kp)
		if d.bad[kp] {
			d.bad[path] = true // its sum means nothing now
		}
		out = append(out, SplitArm{Policy: name, Percent: pct})
	}
	return out
}

// split checks a split: known policies, each at most once, whole
// percents from 0 to 100 that add up to 100.
func (v *validator) split(path string, s Split) {
	if len(s) == 0 {
		return
	}
	sum := 0
	for _, a := range s {
		p := path + "." + a.Policy
		if !isPolicy(a.Policy) {
			v.fail(p, "is not a policy: must be one of %s", strings.Join(policies, ", "))
		}
		if a.Percent < 0 || a.Percent > maxPercent {
			v.fail(p, "must be a percent from 0 to 100")
		}
		sum += a.Percent
	}
	if sum != maxPercent {
		v.fail(path, "percents must add up to 100, not %d", sum)
	}
}

// shadow checks a list of shadow policies: known, each at most once.
func (v *validator) shadow(path string, names []string) {
	seen := map[string]bool{}
	for i, name := range names {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case !isPolicy(name):
			v.fail(p, "must be one of %s, not %q", strings.Join(policies, ", "), name)
		case seen[name]:
			v.fail(p, "%q is listed twice", name)
		}
		seen[name] = true
	}
}

// PolicyList is a list of policy names where an empty list and no list
// differ: a model's shadow: [] means none, no shadow key means
// routing.shadow. It is written out whenever it is not nil.
type PolicyList []string

// IsZero tells yaml's omitempty that only a nil list is left out.
func (l PolicyList) IsZero() bool { return l == nil }

// JSONObject is a JSON object held as its text. In YAML it is written either
// as a mapping or as a string holding the JSON. Empty means none.
type JSONObject string

// MarshalYAML writes the object as the string that holds it, so that it
// reads back unchanged.
func (o JSONObject) MarshalYAML() (any, error) { return string(o), nil }

// UnmarshalYAML reads a mapping or a string; yaml's strict decoder uses it,
// our own decoder reads objects with jsonObject.
func (o *JSONObject) UnmarshalYAML(n *yaml.Node) error {
	s, msg := jsonObjectText(n)
	if msg != "" {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
	}
	*o = JSONObject(s)
	return nil
}

// jsonObjectText turns a YAML mapping into its JSON text, or returns the
// text of a string as it is (Validate checks it is an object).
func jsonObjectText(n *yaml.Node) (string, string) {
	const want = "must be a mapping, or a string holding a JSON object"
	switch n.Kind {
	case yaml.ScalarNode:
		var s string
		if n.ShortTag() != "!!str" || n.Decode(&s) != nil {
			return "", want
		}
		return s, ""
	case yaml.MappingNode:
		if len(n.Content) == 0 {
			return "", "" // {} is none, as ""
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return "", want
		}
		b, err := json.Marshal(v)
		if err != nil {
			// Keys that are not strings, or values JSON has no form for.
			return "", "must be a mapping that JSON can hold: string keys, and numbers, strings, booleans, null, lists and mappings as values"
		}
		return string(b), ""
	}
	return "", want
}

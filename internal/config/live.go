package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"go.yaml.in/yaml/v3"
)

// RestartOnly returns the paths of the keys whose values differ between cur
// and next and that the gateway cannot change while it runs: everything but
// routing, retry, flow, logging.log_prompts, server.reload_interval, the
// static replicas and each model's policy, split, shadow, cost_model,
// aliases, limits and ttft_target.
// A list of a different length is named as a whole (a model added is
// "models"). Paths are in the order of the document; nil when next differs
// from cur only in what can change live.
func RestartOnly(cur, next *Config) []string {
	var out []string
	diff("", reflect.ValueOf(cur).Elem(), reflect.ValueOf(next).Elem(), func(path string) {
		if !isLive(path) {
			out = append(out, path)
		}
	})
	return out
}

// liveKeys are the keys that change while the gateway runs, with what is
// under them; models' keys are matched below any models[i].
var (
	liveKeys      = []string{"routing", "retry", "flow", "replicas", "logging.log_prompts", "server.reload_interval"}
	liveModelKeys = []string{"policy", "split", "shadow", "cost_model", "aliases", "limits", "ttft_target"}
)

func isLive(path string) bool {
	under := func(path, key string) bool {
		return path == key || strings.HasPrefix(path, key+".") || strings.HasPrefix(path, key+"[")
	}
	for _, k := range liveKeys {
		if under(path, k) {
			return true
		}
	}
	if rest, ok := strings.CutPrefix(path, "models["); ok {
		if _, key, ok := strings.Cut(rest, "]."); ok {
			for _, k := range liveModelKeys {
				if under(key, k) {
					return true
				}
			}
		}
	}
	return false
}

// leafTypes compare as wholes: their parts have no paths of their own.
var leafTypes = map[reflect.Type]bool{durationType: true, splitType: true, jsonObjectType: true}

// diff calls changed with the path of every key whose value differs between
// a and b, two values of one config type, at the deepest level both have.
func diff(path string, a, b reflect.Value, changed func(string)) {
	t := a.Type()
	switch {
	case leafTypes[t]:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			changed(path)
		}
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			p := name
			if path != "" {
				p = path + "." + name
			}
			diff(p, a.Field(i), b.Field(i), changed)
		}
	case t.Kind() == reflect.Slice:
		if a.Len() != b.Len() {
			changed(path)
			return
		}
		for i := range a.Len() {
			diff(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i), changed)
		}
	case t.Kind() == reflect.Pointer:
		switch {
		case a.IsNil() && b.IsNil():
		case a.IsNil() || b.IsNil():
			changed(path)
		default:
			diff(path, a.Elem(), b.Elem(), changed)
		}
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			changed(path)
		}
	}
}

// JSON returns c as JSON: the keys and values its YAML file would hold,
// in the file's order, durations as text such as "2s".
func (c *Config) JSON() ([]byte, error) {
	var doc yaml.Node
	if err := doc.Encode(c); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := writeJSON(&b, &doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeJSON writes a YAML node tree that yaml encoded from a config (no
// aliases, string keys) as JSON, keeping the order of mappings.
func writeJSON(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			b.Write(k)
			b.WriteByte(':')
			if err := writeJSON(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, item); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return err
		}
		s, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("config value %q has no JSON form: %w", n.Value, err)
		}
		b.Write(s)
	default:
		return fmt.Errorf("config: unexpected YAML node kind %d", n.Kind)
	}
	return nil
}

// ErrPatch is returned by Patch for a body that is not a JSON merge patch.
var ErrPatch = errors.New("not a JSON merge patch")

// Patch applies a JSON merge patch (RFC 7396) to c and parses the result as
// a config file is parsed: decoded strictly onto the defaults and
// validated, every problem reported at once. A key set to null is removed,
// so it takes its default. c is not changed.
func (c *Config) Patch(patch []byte) (*Config, error) {
	if !json.Valid(patch) {
		return nil, fmt.Errorf("%w: the body is not valid JSON", ErrPatch)
	}
	doc, err := c.JSON()
	if err != nil {
		return nil, err
	}
	merged, err := jsonpatch.MergePatch(doc, patch)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPatch, err)
	}
	// JSON is YAML: the merged document is read as a config file is.
	return Parse(merged)
}

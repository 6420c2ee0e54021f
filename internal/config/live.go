package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
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
	diff(nil, reflect.ValueOf(cur).Elem(), reflect.ValueOf(next).Elem(), func(path string) {
		if !isLive(path) {
			out = append(out, path)
		}
	})
	return out
}

// Same reports whether a and b say the same: no key's value differs
// between them. A list that is empty and one that is absent say the same,
// as they would in a file. It walks both configs once, far cheaper than
// comparing their JSON, so that a reload or patch that changes nothing is
// told apart at once.
func Same(a, b *Config) bool {
	same := true
	diff(nil, reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), func(string) { same = false })
	return same
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
// Lists of one length are the same but for a PolicyList, whose nil and
// empty say different things.
// A path's text is built only for a key that differs: most do not, and a
// reload compares every key.
func diff(at *step, a, b reflect.Value, changed func(string)) {
	t := a.Type()
	switch {
	case leafTypes[t]:
		if t == splitType {
			if !sameSplit(a.Interface().(Split), b.Interface().(Split)) {
				changed(at.String())
			}
			return
		}
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			changed(at.String())
		}
	case t.Kind() == reflect.Struct:
		for i, f := range keyFields(t) {
			diff(&step{up: at, key: f.name, item: -1}, a.Field(i), b.Field(i), changed)
		}
	case t.Kind() == reflect.Slice:
		if a.Len() != b.Len() || (t == policyListType && a.IsNil() != b.IsNil()) {
			// A policy list that is empty says none; one that is absent
			// says the default's.
			changed(at.String())
			return
		}
		for i := range a.Len() {
			diff(&step{up: at, item: i}, a.Index(i), b.Index(i), changed)
		}
	case t.Kind() == reflect.Pointer:
		switch {
		case a.IsNil() && b.IsNil():
		case a.IsNil() || b.IsNil():
			changed(at.String())
		default:
			diff(at, a.Elem(), b.Elem(), changed)
		}
	case !sameScalar(a, b):
		changed(at.String())
	}
}

// sameSplit reports whether two splits share traffic alike: the same
// arms, in any order (arms are drawn in the order of their names, and a
// patch's merge writes a split's keys in no fixed order). Empty and none
// are the same.
func sameSplit(a, b Split) bool {
	if len(a) != len(b) {
		return false
	}
	byPolicy := func(x, y SplitArm) int { return strings.Compare(x.Policy, y.Policy) }
	return slices.Equal(slices.SortedFunc(slices.Values(a), byPolicy), slices.SortedFunc(slices.Values(b), byPolicy))
}

// sameScalar compares two values of one type that is not a struct, list or
// pointer; the common kinds without boxing them.
func sameScalar(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.String:
		return a.String() == b.String()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// step is one level of a path into a config: a key of a mapping, or the
// item-th item of a list when item is not negative. The root is nil.
type step struct {
	up   *step
	key  string
	item int
}

// String returns the path as errors and RestartOnly name it, such as
// "models[0].cost_model".
func (s *step) String() string {
	if s == nil {
		return ""
	}
	up := s.up.String()
	switch {
	case s.item >= 0:
		return up + "[" + strconv.Itoa(s.item) + "]"
	case up == "":
		return s.key
	}
	return up + "." + s.key
}

// ErrPatch is returned by Patch for a body that is not a JSON merge patch.
var ErrPatch = errors.New("not a JSON merge patch")

// Patch applies a JSON merge patch (RFC 7396) to c and parses the result as
// a config file is parsed: decoded strictly onto the defaults and
// validated, every problem reported at once. A key set to null is removed,
// so it takes its default. c is not changed.
func (c *Config) Patch(patch []byte) (*Config, error) {
	doc, err := c.JSON()
	if err != nil {
		return nil, err
	}
	return PatchDocument(doc, patch)
}

// PatchDocument is Patch of the config whose JSON is doc, for a caller
// that keeps a config's JSON rather than encode it again for every patch.
func PatchDocument(doc, patch []byte) (*Config, error) {
	tree, err := jsonDocument(patch, MaxNodes)
	if errors.Is(err, errTooDeep) || errors.Is(err, errTooWide) {
		return nil, fmt.Errorf("%w: %v", ErrPatch, err)
	}
	if ce, ok := errors.AsType[*Error](err); ok {
		// Too long or too large: refused as the body is, but naming
		// where, as a config file's problems do.
		ce.Err = ErrPatch
		return nil, ce
	}
	if err != nil {
		return nil, fmt.Errorf("%w: the body is not valid JSON", ErrPatch)
	}
	// Merging keeps the last of a key set twice; a config file with a key
	// set twice is refused, and so is a patch.
	if path := duplicateKey(tree.Content[0], ""); path != "" {
		return nil, &Error{Path: path, Msg: "duplicate key"}
	}
	merged, err := jsonpatch.MergePatch(doc, patch)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPatch, err)
	}
	return parseMerged(merged)
}

// duplicateKey returns the path of the first key n sets twice in one
// object, "" when none does.
func duplicateKey(n *yaml.Node, path string) string {
	switch n.Kind {
	case yaml.MappingNode:
		seen := make(map[string]bool, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			kp := k
			if path != "" {
				kp = path + "." + k
			}
			if seen[k] {
				return kp
			}
			seen[k] = true
			if d := duplicateKey(n.Content[i+1], kp); d != "" {
				return d
			}
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			if d := duplicateKey(item, fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
	}
	return ""
}

// parseMerged reads a patch's merged document. JSON is YAML, so it is
// decoded as a config file is, but read without the YAML scanner and
// without yaml's second opinion: JSON holds none of what that is asked
// for, and a patch is applied under traffic.
func parseMerged(merged []byte) (*Config, error) {
	// The merged document is the config in effect with a patch that was
	// read within the bounds, so it is no larger than the two: not
	// bounded again, since the config's JSON spells out every default and
	// can hold more nodes than the file it was read from.
	tree, err := jsonDocument(merged, math.MaxInt)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPatch, err)
	}
	return decodeDocument(tree, "", nil)
}

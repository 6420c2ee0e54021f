package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"pgregory.net/rapid"
)

// yamlJSON is the reference JSON: c encoded by yaml's encoder into a
// document, whose nodes are then written as JSON, each scalar decoded as
// yaml reads it. It is slow, and obviously what a config file would hold.
func yamlJSON(c *Config) ([]byte, error) {
	var doc yaml.Node
	if err := doc.Encode(c); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err := nodeJSON(&b, &doc)
	return b.Bytes(), err
}

func nodeJSON(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		return nodeJSON(b, n.Content[0])
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(n.Content[i].Value)
			b.Write(k)
			b.WriteByte(':')
			if err := nodeJSON(b, n.Content[i+1]); err != nil {
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
			if err := nodeJSON(b, item); err != nil {
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
			return err
		}
		b.Write(s)
	default:
		return fmt.Errorf("unexpected node kind %d", n.Kind)
	}
	return nil
}

// TestJSONMatchesYAML: Config.JSON writes what yaml's encoder would, for
// valid configs over the whole schema and for configs with every field of
// every type filled at random (so a field added later is covered without
// a generator of its own).
func TestJSONMatchesYAML(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of cases, where the race detector has nothing to find; make norace runs it")
	}
	check := func(t *rapid.T, c *Config) {
		got, err := c.JSON()
		if err != nil {
			t.Fatalf("JSON: %v", err)
		}
		want, err := yamlJSON(c)
		if err != nil {
			// yaml's encoder cannot write some strings (" A\n": a block
			// scalar it then cannot read); ours still writes valid JSON.
			if !json.Valid(got) {
				t.Fatalf("JSON is not valid: %s", got)
			}
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("JSON differs from yaml's encoding:\n got %s\nwant %s", got, want)
		}
	}
	t.Run("valid", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			c := genConfig.Draw(t, "config")
			check(t, &c)
		})
	})
	t.Run("any", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			c := Default()
			fillRandom(t, reflect.ValueOf(&c).Elem(), "config", 0)
			check(t, &c)
		})
	})
}

// fillRandom sets every field under v to a random value of its kind:
// sometimes zero, empty or nil, so that omitempty is exercised.
func fillRandom(t *rapid.T, v reflect.Value, label string, depth int) {
	if !rapid.Bool().Draw(t, label+"_set") {
		v.SetZero()
		return
	}
	switch {
	case v.Type() == splitType:
		var s Split
		for i := range rapid.IntRange(0, 3).Draw(t, label+"_n") {
			s = append(s, SplitArm{Policy: genName.Draw(t, fmt.Sprintf("%s_%d", label, i)), Percent: rapid.IntRange(-5, 200).Draw(t, fmt.Sprintf("%s_%d_pct", label, i))})
		}
		v.Set(reflect.ValueOf(s))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillRandom(t, v.Field(i), fmt.Sprintf("%s.%s", label, v.Type().Field(i).Name), depth+1)
			}
		}
	case reflect.Slice:
		n := rapid.IntRange(0, 2).Draw(t, label+"_len")
		if depth > 6 {
			n = 0
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			fillRandom(t, s.Index(i), fmt.Sprintf("%s[%d]", label, i), depth+1)
		}
		v.Set(s)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillRandom(t, p.Elem(), label+"*", depth+1)
		v.Set(p)
	case reflect.String:
		v.SetString(rapid.OneOf(genName, rapid.String(), rapid.SampledFrom([]string{"", "2s", "1e3", "0x1F", "<&>", "\u2028"})).Draw(t, label))
	case reflect.Bool:
		v.SetBool(rapid.Bool().Draw(t, label))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(rapid.Int64Range(-1<<40, 1<<40).Draw(t, label) >> (64 - v.Type().Bits()) << (64 - v.Type().Bits()) >> (64 - v.Type().Bits()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(rapid.Uint64().Draw(t, label) >> (64 - v.Type().Bits()))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(rapid.OneOf(rapid.Float64Range(-1e9, 1e9), rapid.SampledFrom([]float64{0, 1, 2, 0.5, 1e-9, 1e21, 123456789.125})).Draw(t, label))
	default:
		t.Fatalf("%s: no generator for kind %s; teach fillRandom", label, v.Kind())
	}
}

// TestSameMatchesJSON: two configs are the Same exactly when their JSON is
// equal once every split's arms are sorted, for a config filled at random and a copy with at most one value
// changed (nil and empty lists included).
func TestSameMatchesJSON(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of cases, where the race detector has nothing to find; make norace runs it")
	}
	rapid.Check(t, func(t *rapid.T) {
		a := Default()
		fillRandom(t, reflect.ValueOf(&a).Elem(), "a", 0)
		b := deepCopy(reflect.ValueOf(a)).Interface().(Config)
		var leaves []reflect.Value
		collectLeaves(reflect.ValueOf(&b).Elem(), &leaves)
		if len(leaves) > 0 && rapid.Bool().Draw(t, "change") {
			leaf := leaves[rapid.IntRange(0, len(leaves)-1).Draw(t, "leaf")]
			if leaf.Kind() == reflect.Slice && leaf.Len() == 0 && rapid.Bool().Draw(t, "flip_nil") {
				if leaf.IsNil() {
					leaf.Set(reflect.MakeSlice(leaf.Type(), 0, 0))
				} else {
					leaf.SetZero()
				}
			} else {
				fillRandom(t, leaf, "b", 5)
			}
		}
		// Splits are compared as sets of arms: the JSON of each with its
		// arms sorted.
		na, nb := deepCopy(reflect.ValueOf(a)), deepCopy(reflect.ValueOf(b))
		sortSplits(na)
		sortSplits(nb)
		sa, sb := na.Interface().(Config), nb.Interface().(Config)
		ja, errA := sa.JSON()
		jb, errB := sb.JSON()
		if errA != nil || errB != nil {
			t.Fatalf("JSON: %v, %v", errA, errB)
		}
		if got, want := Same(&a, &b), bytes.Equal(ja, jb); got != want {
			t.Fatalf("Same = %v, JSON equal = %v:\n%s\n%s", got, want, ja, jb)
		}
	})
}

// deepCopy copies v with nothing shared: lists and pointers are new.
func deepCopy(v reflect.Value) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			out.Field(i).Set(deepCopy(v.Field(i)))
		}
	case reflect.Slice:
		if !v.IsNil() {
			out.Set(reflect.MakeSlice(v.Type(), v.Len(), v.Len()))
			for i := range v.Len() {
				out.Index(i).Set(deepCopy(v.Index(i)))
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			p := reflect.New(v.Type().Elem())
			p.Elem().Set(deepCopy(v.Elem()))
			out.Set(p)
		}
	default:
		out.Set(v)
	}
	return out
}

// collectLeaves appends every value under v that is not a struct: the
// scalars, lists and pointers a change can set.
func collectLeaves(v reflect.Value, out *[]reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			collectLeaves(v.Field(i), out)
		}
	case reflect.Slice:
		*out = append(*out, v)
		if v.Type() != splitType {
			for i := range v.Len() {
				collectLeaves(v.Index(i), out)
			}
		}
	case reflect.Pointer:
		*out = append(*out, v)
		if !v.IsNil() {
			collectLeaves(v.Elem(), out)
		}
	default:
		*out = append(*out, v)
	}
}

// TestPatchMatchesFileParser: a patch holding a valid config, or any values
// at all of every key, is applied as the file parser would read the merged
// document (checkPatchAgainstYAML).
func TestPatchMatchesFileParser(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine drawing and checking thousands of cases, where the race detector has nothing to find; make norace runs it")
	}
	base, err := Load(filepath.Join("testdata", "full.good.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		c := Default()
		if rapid.Bool().Draw(t, "valid") {
			c = genConfig.Draw(t, "config")
		} else {
			fillRandom(t, reflect.ValueOf(&c).Elem(), "patch", 0)
		}
		patch, err := c.JSON()
		if err != nil {
			t.Fatal(err)
		}
		checkPatchAgainstYAML(t, base, patch)
	})
}

// sortSplits sorts the arms of every split under v, which must be settable
// or hold only what is (a deepCopy's result is).
func sortSplits(v reflect.Value) {
	switch {
	case v.Type() == splitType:
		slices.SortFunc(v.Interface().(Split), func(x, y SplitArm) int { return strings.Compare(x.Policy, y.Policy) })
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			sortSplits(v.Field(i))
		}
	case v.Kind() == reflect.Slice:
		for i := range v.Len() {
			sortSplits(v.Index(i))
		}
	case v.Kind() == reflect.Pointer && !v.IsNil():
		sortSplits(v.Elem())
	}
}

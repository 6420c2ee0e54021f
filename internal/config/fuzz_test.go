package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
)

// maxFuzzInput caps fuzz inputs: a config file is small, and a cap keeps
// each run short enough to notice a slow one.
const maxFuzzInput = 64 << 10

// slow is far longer than Parse takes on any input of maxFuzzInput bytes
// (tens of milliseconds), even under the race detector on a busy machine,
// and far shorter than an expanded alias bomb would take.
const slow = 5 * time.Second

// FuzzParse feeds Parse arbitrary bytes. It must not panic or take long;
// what it rejects, short of a YAML syntax error, it explains with *Error
// values; what it accepts validates and survives a marshal round trip.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range append(files, exampleFile, localFile) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		bomb(""),
		bomb("models: *l9\n"),
		bomb("models: [{name: m, aliases: *l9}]\n"),
		schemaBomb(),
		"x: &x {<<: *x}\nserver: {<<: *x}\n",
		"models: [{name: m}]\nreplicas: [{id: r, url: 'http://h/', models: [m]}]\n",
		"models: [{name: m}]\ndiscovery: {dns: [{name: p, url: 'http://p', models: [m], refresh: 1ms}]}\n",
		"", "~", "[]", "- a", "---\n---\n", "\xff\xfe", "%YAML 1.1\n---\na: 1\n", "!!map {}", "? a\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxFuzzInput {
			t.Skip("larger than a config file")
		}
		start := time.Now()
		cfg, err := Parse(data)
		if took := time.Since(start); took > slow {
			t.Errorf("Parse took %v on %d bytes", took, len(data))
		}
		if err != nil {
			if cfg != nil {
				t.Fatalf("Parse returned both a config and %v", err)
			}
			if _, perr := parseYAML(data); perr != nil {
				return // a syntax error, reported as yaml reports it
			}
			for _, e := range unjoin(err) {
				var ce *Error
				if !errors.As(e, &ce) || ce.Msg == "" {
					t.Fatalf("Parse error %q (%T) is not an explained *Error", e, e)
				}
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that does not validate: %v", err)
		}
		if err := strictDecode(data); err != nil {
			t.Fatalf("Parse accepted what yaml's strict decoder rejects: %v", err)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(Parse(data))): %v\n%s", err, out)
		}
		if diff := cmp.Diff(cfg, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip mismatch (-first +second):\n%s", diff)
		}
	})
}

// FuzzPatch applies arbitrary bytes as a merge patch to the full config:
// either the result applies and validates, or the patch is refused with
// *Error values or ErrPatch, and the config it was applied to is unchanged
// either way.
func FuzzPatch(f *testing.F) {
	for _, s := range []string{
		`{}`, `null`, `[]`, `"x"`, `{"routing":{"split":{"p2c":null,"kv_aware":null}}}`,
		`{"routing":{"split":{"cost_model":90,"kv_aware":10},"shadow":["least_request"]}}`,
		`{"routing":{"epsilon":null,"seed":9223372036854775807}}`, `{"replicas":null}`, `{"models":[{"name":"m"}]}`,
		`{"server":{"listen":"127.0.0.1:1"}}`, `{"routing":{"split":{"p2c":1e400}}}`, `{"a":`, `{"retry":{"backoff":"1h"}}`,
		`{"models":[{"name":"meta-llama/Llama-3.1-8B-Instruct","chat_template_kwargs":{"x":[1,{"y":null}]}}]}`,
		`{"routing":{"epsilon":0.5,"epsilon":2}}`, `{"replicas":[{"id":"a","id":"b"}]}`,
	} {
		f.Add([]byte(s))
	}
	base, err := Load(filepath.Join("testdata", "full.good.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, patch []byte) {
		if len(patch) > maxFuzzInput {
			return
		}
		cur, err := Load(filepath.Join("testdata", "full.good.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := cur.Patch(patch)
		if diff := cmp.Diff(base, cur, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("Patch changed the config it was applied to:\n%s", diff)
		}
		checkPatchAgainstYAML(t, cur, patch)
		if err != nil {
			if errors.Is(err, ErrPatch) {
				return
			}
			for _, e := range unjoin(err) {
				var ce *Error
				if !errors.As(e, &ce) && !isYAMLError(e) {
					t.Fatalf("refused with %T %v, not an *Error", e, e)
				}
			}
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("a patched config that does not validate: %v", err)
		}
	})
}

// isYAMLError reports an error of the YAML parser itself: merged JSON the
// parser refuses (it is stricter than JSON about some escapes).
func isYAMLError(err error) bool {
	var te *yaml.TypeError
	var ce *Error
	return errors.As(err, &te) || strings.HasPrefix(err.Error(), "yaml: ") ||
		errors.As(err, &ce) && ce.Path == "" && (strings.Contains(ce.Msg, "not allowed in YAML") || strings.Contains(ce.Msg, "not UTF-8")) // textError's
}

// checkPatchAgainstYAML holds the reading of a patch's merged document
// (parseMerged, JSON read into nodes) to the obvious way: the document
// parsed as a config file, YAML scanner and yaml's strict decoder
// included. Where the file parser accepts it, parseMerged returns the same
// config; where it refuses it with problems of the config, parseMerged
// refuses it with the same problems. (YAML refuses some JSON escapes,
// which parseMerged reads.) The merge is done here once: the merge
// library writes a merged object's keys in no fixed order.
func checkPatchAgainstYAML(t interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}, cur *Config, patch []byte) {
	t.Helper()
	doc, err := cur.JSON()
	if err != nil {
		t.Fatal(err)
	}
	merged, err := jsonpatch.MergePatch(doc, patch)
	if err != nil || !json.Valid(patch) {
		return
	}
	if bytes.ContainsAny(merged, "\u0085\u2028\u2029") {
		// YAML reads these characters as line breaks and folds them to a
		// space inside a quoted string, where JSON keeps them: the file
		// parser reading JSON text is no reference for them.
		return
	}
	got, err := parseMerged(merged)
	want, werr := Parse(merged)
	switch {
	case werr == nil:
		if err != nil {
			t.Fatalf("a patch refused %s, which parses as a file: %v", merged, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("a patch and the file parser disagree on %s (-file +patch):\n%s", merged, diff)
		}
	case isYAMLError(werr) || strings.Contains(werr.Error(), "strict yaml decoding"):
		// The YAML scanner's own limits; nothing to compare.
	default:
		if err == nil {
			t.Fatalf("a patch accepted %s, which the file parser refuses: %v", merged, werr)
		}
		if w, g := problemTexts(werr), problemTexts(err); !slices.Equal(w, g) {
			t.Fatalf("problems differ for %s:\nfile:  %q\npatch: %q", merged, w, g)
		}
	}
}

// problemTexts lists an error's problems by path and message, lines left
// out and in order: a patch's merged document has no lines worth naming.
func problemTexts(err error) []string {
	var out []string
	for _, p := range Problems(err) {
		msg, _, _ := strings.Cut(p.Msg, "; it is first set at line")
		out = append(out, p.Path+": "+msg)
	}
	slices.Sort(out) // by line in a file, in decoding order in a patch
	return out
}

package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	return errors.As(err, &te) || strings.HasPrefix(err.Error(), "yaml: ")
}

package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"
)

func loadFull(t *testing.T) *Config {
	t.Helper()
	cfg, err := Load(filepath.Join("testdata", "full.good.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// clone copies a config through its JSON, which Patch relies on keeping
// every value.
func clone(t *testing.T, c *Config) *Config {
	t.Helper()
	out, err := c.Patch([]byte(`{}`))
	if err != nil {
		t.Fatalf("Patch({}): %v", err)
	}
	return out
}

// TestRestartOnly: a change to what the gateway builds at start is named
// by its path; a change to what can change live is not.
func TestRestartOnly(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"nothing", func(c *Config) {}, nil},
		{"routing", func(c *Config) {
			c.Routing.Epsilon, c.Routing.Split, c.Routing.Shadow = 3, Split{{"p2c", 100}}, nil
			c.Routing.HotPrefix.Window *= 2
		}, nil},
		{"retry and log_prompts", func(c *Config) { c.Retry.MaxAttempts = 7; c.Logging.LogPrompts = !c.Logging.LogPrompts }, nil},
		{"reload interval", func(c *Config) { c.Server.ReloadInterval = 0 }, nil},
		{"replicas", func(c *Config) {
			c.Replicas[0].URL = "http://10.0.0.99:8000"
			c.Replicas = append(c.Replicas, Replica{ID: "new", URL: "http://x:1", Models: []string{"Qwen/Qwen3-8B"}, MaxConcurrency: 1, MaxPending: 1})
		}, nil},
		{"a model's live keys", func(c *Config) {
			m := &c.Models[0]
			m.Policy, m.Split, m.Shadow, m.Aliases = "cost_model", Split{{"kv_aware", 100}}, []string{"p2c"}, []string{"other"}
			m.CostModel = nil
			m.Limits.RequestsPerMinute = 60
		}, nil},
		{"listeners", func(c *Config) { c.Server.Listen = "127.0.0.1:1"; c.Server.AdminListen = "127.0.0.1:2" },
			[]string{"server.listen", "server.admin_listen"}},
		{"a model's tokenizer and block size", func(c *Config) { c.Models[1].Tokenizer = "builtin:sim"; c.Models[0].BlockSize = 64 },
			[]string{"models[0].block_size", "models[1].tokenizer"}},
		{"the model list", func(c *Config) { c.Models = c.Models[:1] }, []string{"models"}},
		{"a model's name", func(c *Config) { c.Models[1].Name = "other" }, []string{"models[1].name"}},
		{"chat template kwargs", func(c *Config) { c.Models[1].ChatTemplateKwargs = `{"x":1}` }, []string{"models[1].chat_template_kwargs"}},
		{"startup sections", func(c *Config) {
			c.Health.Interval *= 2
			c.Discovery.DNS[0].Refresh *= 2
			c.Upstream.HTTP2 = !c.Upstream.HTTP2
			c.Load.MaxAge *= 2
			c.Tokenizer.Workers++
			c.Index.Mode = IndexExact
			c.Logging.Level = "warn"
			c.Observability.ShadowLog = ""
		}, []string{"discovery.dns[0].refresh", "health.interval", "upstream.http2", "load.max_age", "tokenizer.workers",
			"index.mode", "logging.level", "observability.shadow_log"}},
		{"live and restart-only together", func(c *Config) { c.Routing.Kappa = 0.5; c.Index.DefaultCapacityBlocks++ },
			[]string{"index.default_capacity_blocks"}},
	} {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			cur := loadFull(t)
			next := clone(t, cur)
			tt.change(next)
			if got := RestartOnly(cur, next); !slices.Equal(got, tt.want) {
				t.Errorf("RestartOnly = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestPatch applies merge patches to the full config: what they set,
// remove (back to the default) or break.
func TestPatch(t *testing.T) {
	for _, tt := range []struct {
		name    string
		patch   string
		check   func(t *testing.T, c *Config)
		errs    []string // messages, without lines; nil when it applies
		isPatch bool     // the error is ErrPatch
	}{
		{name: "empty", patch: `{}`, check: func(t *testing.T, c *Config) {
			if diff := cmp.Diff(loadFull(t), c, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("{} changed the config (-before +after):\n%s", diff)
			}
		}},
		// A split is a mapping, so a patch merges into it: a policy is
		// dropped by setting it to null.
		{name: "split and shadow", patch: `{"routing": {"split": {"p2c": null, "cost_model": 90, "kv_aware": 10}, "shadow": ["least_request"]}}`,
			check: func(t *testing.T, c *Config) {
				got := slices.SortedFunc(slices.Values(c.Routing.Split), func(a, b SplitArm) int { return strings.Compare(a.Policy, b.Policy) })
				if !slices.Equal(got, Split{{"cost_model", 90}, {"kv_aware", 10}}) || !slices.Equal(c.Routing.Shadow, []string{"least_request"}) {
					t.Errorf("split %v, shadow %v", c.Routing.Split, c.Routing.Shadow)
				}
			}},
		{name: "null takes the default", patch: `{"routing": {"epsilon": null, "split": null}, "retry": null}`,
			check: func(t *testing.T, c *Config) {
				d := Default()
				if c.Routing.Epsilon != d.Routing.Epsilon || c.Routing.Split != nil || c.Retry != d.Retry {
					t.Errorf("epsilon %v, split %v, retry %+v; want defaults", c.Routing.Epsilon, c.Routing.Split, c.Retry)
				}
			}},
		{name: "a list is replaced whole", patch: `{"replicas": [{"id": "solo", "url": "http://127.0.0.1:9", "models": ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"]}]}`,
			check: func(t *testing.T, c *Config) {
				if len(c.Replicas) != 1 || c.Replicas[0].MaxConcurrency != defaultMaxConcurrency {
					t.Errorf("replicas %+v: want one, with its defaults", c.Replicas)
				}
			}},
		// The split merges with kv_aware's 25.
		{name: "invalid values, all reported", patch: `{"routing": {"epsilon": -1, "split": {"p2c": 50}}, "retry": {"max_attempts": "3"}}`,
			errs: []string{"routing.split: percents must add up to 100, not 75", "routing.epsilon: must be > 0", "retry.max_attempts: must be an integer"}},
		{name: "unknown key", patch: `{"routing": {"splt": {}}}`, errs: []string{"routing.splt: unknown key"}},
		// Merging would keep the last; a file with a key set twice is refused.
		{name: "duplicate key", patch: `{"routing": {"epsilon": 0.5, "epsilon": 2}}`, errs: []string{"routing.epsilon: duplicate key"}},
		{name: "duplicate key in a list", patch: `{"replicas": [{"id": "a", "url": "http://127.0.0.1:9", "id": "b"}]}`, errs: []string{"replicas[0].id: duplicate key"}},
		{name: "not JSON", patch: `{"routing":`, isPatch: true},
		{name: "not an object", patch: `[1]`, errs: []string{"must be a mapping of keys to values"}},
	} {
		t.Run(strings.ReplaceAll(tt.name, " ", "_"), func(t *testing.T) {
			cur := loadFull(t)
			before := clone(t, cur)
			got, err := cur.Patch([]byte(tt.patch))
			if diff := cmp.Diff(before, cur, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("Patch changed the config it was applied to:\n%s", diff)
			}
			switch {
			case tt.isPatch:
				if !errors.Is(err, ErrPatch) {
					t.Fatalf("Patch = %v, want ErrPatch", err)
				}
			case tt.errs != nil:
				if err == nil {
					t.Fatal("Patch applied, want errors")
				}
				var msgs []string
				for _, e := range unjoin(err) {
					var ce *Error
					if !errors.As(e, &ce) {
						t.Fatalf("error %v is not a *Error", e)
					}
					m := ce.Msg
					if ce.Path != "" {
						m = ce.Path + ": " + m
					}
					msgs = append(msgs, m)
				}
				slices.Sort(msgs)
				want := slices.Sorted(slices.Values(tt.errs))
				if !slices.Equal(msgs, want) {
					t.Errorf("errors %q, want %q", msgs, want)
				}
			default:
				if err != nil {
					t.Fatalf("Patch: %v", err)
				}
				tt.check(t, got)
			}
		})
	}
}

// TestJSONRoundTrip: any valid config, written as JSON and read back as
// a config file, is the same config, so an empty patch changes nothing.
func TestJSONRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genConfig.Draw(t, "config")
		got, err := c.Patch([]byte(`{}`))
		if err != nil {
			j, _ := c.JSON()
			t.Fatalf("Patch({}): %v\n%s", err, j)
		}
		if diff := cmp.Diff(c, *got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip through JSON (-config +read back):\n%s", diff)
		}
		// An empty shadow list means none, no list routing's: the two
		// must not merge.
		for i := range c.Models {
			if (c.Models[i].Shadow == nil) != (got.Models[i].Shadow == nil) {
				t.Fatalf("models[%d].shadow %#v read back as %#v", i, c.Models[i].Shadow, got.Models[i].Shadow)
			}
		}
	})
}

// TestSplitAndKwargsForms: a split keeps its written order; kwargs read
// as a mapping or as a string of JSON are the same object.
func TestSplitAndKwargsForms(t *testing.T) {
	base := "replicas: [{id: a, url: \"http://127.0.0.1:1\", models: [m]}]\n"
	a, err := Parse([]byte(base + "models: [{name: m, chat_template_kwargs: {enable_thinking: false, n: 2}}]\nrouting: {split: {p2c: 30, cost_model: 70}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse([]byte(base + "models: [{name: m, chat_template_kwargs: '{\"enable_thinking\":false,\"n\":2}'}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.Models[0].ChatTemplateKwargs != b.Models[0].ChatTemplateKwargs {
		t.Errorf("kwargs as a mapping %q, as a string %q", a.Models[0].ChatTemplateKwargs, b.Models[0].ChatTemplateKwargs)
	}
	if want := (Split{{"p2c", 30}, {"cost_model", 70}}); !slices.Equal(a.Routing.Split, want) {
		t.Errorf("split %v, want %v in written order", a.Routing.Split, want)
	}
}

// TestSpecExampleLoads: the product specification's example config, as
// written there, loads: every key it names under server, models[],
// routing and observability is one we accept.
func TestSpecExampleLoads(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "spec-example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ModelSplit("llama-8b"); !slices.Equal(got, Split{{"least_request", 100}}) {
		t.Errorf("the model with its own policy: split %v", got)
	}
	if !slices.Equal(cfg.Routing.Split, Split{{"cost_model", 90}, {"kv_aware", 10}}) || !slices.Equal(cfg.Routing.Shadow, PolicyList{"least_request"}) {
		t.Errorf("routing.split %v, routing.shadow %v", cfg.Routing.Split, cfg.Routing.Shadow)
	}
	if cfg.Models[0].ChatTemplateKwargs != `{"enable_thinking":false}` || cfg.Observability.ShadowLog == "" || cfg.Observability.DecisionLog.SampleRate != 0.01 {
		t.Errorf("kwargs %q, observability %+v", cfg.Models[0].ChatTemplateKwargs, cfg.Observability)
	}
}

// TestProblems: Problems lists every problem of a config error with its
// path and line, and a plain error as its message alone.
func TestProblems(t *testing.T) {
	_, err := Parse([]byte("models: [{name: m}]\nreplicas: [{id: r, url: 'http://h:1', models: [m]}]\nrouting: {epsilon: -1, kappa: 2}\n"))
	got := Problems(err)
	if len(got) != 2 || got[0].Path != "routing.epsilon" || got[1].Path != "routing.kappa" || got[0].Line != 3 {
		t.Errorf("Problems = %+v", got)
	}
	if got := Problems(errors.New("read config: no such file")); len(got) != 1 || got[0].Msg != "read config: no such file" || got[0].Path != "" {
		t.Errorf("Problems of a plain error = %+v", got)
	}
	if got := Problems(nil); got != nil {
		t.Errorf("Problems(nil) = %+v", got)
	}
}

// A patch nested past MaxJSONDepth is refused before it is merged (the
// merge costs the square of the depth), and said to be too deep rather
// than not JSON, however deep it goes.
func TestPatchDepth(t *testing.T) {
	nested := func(depth int) []byte {
		// {"routing": {"a": {"a": ... {}}}}: depth objects in all.
		return []byte(strings.Repeat(`{"routing":`, 1) + strings.Repeat(`{"a":`, depth-2) + `{}` + strings.Repeat(`}`, depth-1))
	}
	cur := loadFull(t)
	_, err := cur.Patch(nested(MaxJSONDepth))
	var ce *Error
	if !errors.As(err, &ce) || ce.Path != "routing.a" || ce.Msg != "unknown key" {
		t.Errorf("a patch %d deep: %v, want it read and refused as routing.a: unknown key", MaxJSONDepth, err)
	}
	for _, depth := range []int{MaxJSONDepth + 1, 10_001, 100_000} {
		_, err := cur.Patch(nested(depth))
		if !errors.Is(err, ErrPatch) || !strings.Contains(err.Error(), fmt.Sprintf("nested more than %d deep", MaxJSONDepth)) {
			t.Errorf("a patch %d deep: %v, want ErrPatch saying it is nested too deep", depth, err)
		}
	}
}

// A patch holding an object wider than MaxJSONMembers is refused before it
// is merged: the merge costs the square of an object's width (40,000 keys
// took 4.5 s, holding the lock every other patch waits on; found by a
// review). A narrower one is read and judged.
func TestPatchWidth(t *testing.T) {
	wide := func(keys int) []byte {
		var b strings.Builder
		b.WriteString(`{"routing":{`)
		for i := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":1`, i)
		}
		b.WriteString(`}}`)
		return []byte(b.String())
	}
	cur := loadFull(t)
	_, err := cur.Patch(wide(MaxJSONMembers / 2))
	var ce *Error
	if !errors.As(err, &ce) || ce.Msg != "unknown key" {
		t.Errorf("a patch %d wide: %v, want it read and refused for an unknown key", MaxJSONMembers/2, err)
	}
	for _, keys := range []int{MaxJSONMembers + 1, 40_000} {
		_, err := cur.Patch(wide(keys))
		if !errors.Is(err, ErrPatch) || !strings.Contains(err.Error(), fmt.Sprintf("more than %d keys", MaxJSONMembers)) {
			t.Errorf("a patch %d wide: %v, want ErrPatch saying an object is too wide", keys, err)
		}
	}
}

// A patch holding a list longer than MaxListItems, or more than MaxNodes
// nodes in all, is refused as soon as the reader gets there, with ErrPatch
// and the list's path: never read to its end nor merged, so that a body
// cut off right after the bound is refused the same way, not as "not
// JSON". A list at the bound is read and judged as any other (a review
// found a list of 500,000 numbers took 3-4 s and 200 MB to refuse).
func TestPatchLongList(t *testing.T) {
	list := func(items int) string { return "[" + strings.Repeat("1,", items-1) + "1]" }
	many := func(lists int) string {
		return "[" + strings.Repeat(list(MaxListItems)+",", lists-1) + list(MaxListItems) + "]"
	}
	tooLong := fmt.Sprintf("a list may hold at most %d items", MaxListItems)
	tooMany := fmt.Sprintf("the document holds more than %d keys and values", MaxNodes)
	for _, tt := range []struct {
		name     string
		patch    string
		path     string // of the *Error, with ErrPatch
		msg      string // "": read and judged, not refused for its size
		judgedAt string // the first problem's path, when read and judged
	}{
		{name: "at_the_bound", patch: `{"nope":` + list(MaxListItems) + `}`, judgedAt: "nope"},
		{name: "one_more", patch: `{"routing":{"shadow":` + list(MaxListItems+1) + `}}`, path: "routing.shadow", msg: tooLong},
		{name: "500000_replicas", patch: `{"replicas":[` + strings.Repeat(`{"id":"r"},`, 499_999) + `{"id":"r"}]}`, path: "replicas", msg: tooLong},
		{name: "in_a_list", patch: `{"replicas":[{"models":` + list(500_000) + `}]}`, path: "replicas[0].models", msg: tooLong},
		// Anything past the bound is never read: here it is not JSON.
		{name: "cut_off_after_the_bound", patch: `{"nope":[` + strings.Repeat("1,", MaxListItems+1) + `oops`, path: "nope", msg: tooLong},
		{name: "a_list_as_the_patch", patch: list(MaxListItems + 1), path: "", msg: tooLong},
		{name: "lists_adding_up", patch: `{"replicas":` + many(5) + `}`, msg: tooMany},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadFull(t).Patch([]byte(tt.patch))
			ce, ok := errors.AsType[*Error](err)
			if tt.msg == "" {
				if !ok || errors.Is(err, ErrPatch) || ce.Path != tt.judgedAt {
					t.Fatalf("Patch = %.200v; want it read and judged, the first problem at %s", err, tt.judgedAt)
				}
				return
			}
			if !ok || !errors.Is(err, ErrPatch) || ce.Path != tt.path || ce.Msg != tt.msg {
				t.Fatalf("Patch = %.200v (%#v); want ErrPatch and %s: %s", err, ce, tt.path, tt.msg)
			}
			if got := Problems(err); len(got) != 1 {
				t.Errorf("Problems = %d problems, want the one", len(got))
			}
		})
	}
}

package config

import (
	"fmt"
	"math"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"
	"pgregory.net/rapid"
)

// drawDuration draws a duration in [lo, hi], mostly round, sometimes not, so
// every unit of Duration.String is exercised.
func drawDuration(t *rapid.T, label string, lo, hi Duration) Duration {
	round := rapid.SampledFrom([]Duration{1, Duration(time.Microsecond), Duration(time.Millisecond), Duration(time.Second)}).Draw(t, label+"_unit")
	if hi/round > lo/round+1 && rapid.Bool().Draw(t, label+"_round") {
		return round * Duration(rapid.Int64Range(int64(lo/round)+1, int64(hi/round)).Draw(t, label))
	}
	return Duration(rapid.Int64Range(int64(lo), int64(hi)).Draw(t, label))
}

var (
	// names are model names and aliases: any printable text, including what
	// YAML must quote (null, 1.0, "a: b", "- x").
	genName = rapid.OneOf(
		rapid.StringN(1, 24, -1).Filter(isModelName),
		rapid.SampledFrom([]string{"null", "~", "true", "1.0", "0x10", "<<", "a: b", "a #b", "#", "- x", "[x]", "'", `"`, "*a", "&a", "!x", "%x", "@x", "`x", "a  b", "é", "x·y", "日本"}),
	)
	genID    = rapid.StringMatching(`[A-Za-z0-9._-]{1,63}`)
	genGroup = rapid.StringMatching(`[A-Za-z0-9._-]{1,40}`)
	genHost  = rapid.OneOf(
		rapid.StringMatching(`[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,3}`),
		rapid.StringMatching(`(25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})(\.(25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})){3}`),
		rapid.SampledFrom([]string{"[::1]", "[fd00::1]", "localhost"}),
	)
	genPath = rapid.StringMatching(`(/[A-Za-z0-9._~-]{1,8}|/%[0-9A-F]{2}){0,3}`)
)

func drawURL(t *rapid.T, label string) string {
	u := rapid.SampledFrom([]string{"http", "https"}).Draw(t, label+"_scheme") + "://" + genHost.Draw(t, label+"_host")
	if rapid.Bool().Draw(t, label+"_has_port") {
		u += fmt.Sprintf(":%d", rapid.IntRange(1, 65535).Draw(t, label+"_port"))
	}
	return u + genPath.Draw(t, label+"_path")
}

func drawListen(t *rapid.T, label string, port int) string {
	host := rapid.SampledFrom([]string{"", "0.0.0.0", "127.0.0.1", "localhost", "[::1]", "[::]"}).Draw(t, label+"_host")
	return fmt.Sprintf("%s:%d", host, port)
}

// genConfig generates configs that Validate accepts, over the whole schema.
var genConfig = rapid.Custom(func(t *rapid.T) Config {
	c := Default()
	port := rapid.IntRange(0, 65535).Draw(t, "listen_port")
	c.Server.Listen = drawListen(t, "listen", port)
	c.Server.AdminListen = drawListen(t, "admin_listen", (port+1)%65536)
	c.Server.RequestTimeout = drawDuration(t, "request_timeout", 1, Duration(time.Hour))
	c.Server.HeaderReadTimeout = drawDuration(t, "header_read_timeout", 1, Duration(time.Hour))
	c.Server.ShutdownTimeout = drawDuration(t, "shutdown_timeout", 0, Duration(time.Hour))
	c.Server.MaxBodyBytes = rapid.Int64Range(1, math.MaxInt64).Draw(t, "max_body_bytes")
	c.Server.CORSAllowedOrigins = rapid.SliceOfN(rapid.SampledFrom([]string{"*", "https://app.example.com", "http://localhost:3000", "http://[::1]:8000"}), 0, 3).Draw(t, "cors_allowed_origins")

	// Names and aliases share one namespace: draw them together, distinct.
	nModels := rapid.IntRange(1, 4).Draw(t, "models")
	nAliases := rapid.IntRange(0, 4).Draw(t, "aliases")
	names := rapid.SliceOfNDistinct(genName, nModels+nAliases, nModels+nAliases, rapid.ID[string]).Draw(t, "names")
	policies := append([]string{""}, policies...)
	for i := range nModels {
		c.Models = append(c.Models, Model{Name: names[i], Policy: rapid.SampledFrom(policies).Draw(t, "policy")})
	}
	for _, a := range names[nModels:] {
		m := &c.Models[rapid.IntRange(0, nModels-1).Draw(t, "alias_of")]
		m.Aliases = append(m.Aliases, a)
	}
	drawModels := func(label string) []string {
		return rapid.SliceOfNDistinct(rapid.SampledFrom(names[:nModels]), 1, nModels, rapid.ID[string]).Draw(t, label)
	}
	drawLimits := func(label string) (int, int) {
		mc := rapid.IntRange(1, math.MaxInt32).Draw(t, label+"_max_concurrency")
		return mc, rapid.IntRange(1, mc).Draw(t, label+"_max_pending")
	}

	nReplicas := rapid.IntRange(0, 4).Draw(t, "replicas")
	nGroups := rapid.IntRange(0, 3).Draw(t, "groups")
	if nReplicas+nGroups == 0 {
		nGroups = 1
	}
	ids := rapid.SliceOfNDistinct(genID, nReplicas, nReplicas, rapid.ID[string]).Draw(t, "ids")
	for _, id := range ids {
		r := Replica{ID: id, URL: drawURL(t, "url"), Models: drawModels("replica_models")}
		r.MaxConcurrency, r.MaxPending = drawLimits("replica")
		c.Replicas = append(c.Replicas, r)
	}
	taken := map[string]bool{}
	for _, id := range ids {
		taken[id] = true
	}
	groupNames := rapid.SliceOfNDistinct(genGroup.Filter(func(s string) bool { return !taken[s] }),
		nGroups, nGroups, rapid.ID[string]).Draw(t, "group_names")
	for _, name := range groupNames {
		g := DNSGroup{Name: name, URL: drawURL(t, "group_url"), Models: drawModels("group_models")}
		g.Refresh = drawDuration(t, "refresh", MinPeriod, Duration(time.Hour))
		g.MaxConcurrency, g.MaxPending = drawLimits("group")
		c.Discovery.DNS = append(c.Discovery.DNS, g)
	}
	// Every model needs a server: give each unserved one to the first.
	served := map[string]bool{}
	for _, r := range c.Replicas {
		for _, m := range r.Models {
			served[m] = true
		}
	}
	for _, g := range c.Discovery.DNS {
		for _, m := range g.Models {
			served[m] = true
		}
	}
	for _, m := range c.Models {
		if served[m.Name] {
			continue
		}
		if len(c.Replicas) > 0 {
			c.Replicas[0].Models = append(c.Replicas[0].Models, m.Name)
		} else {
			c.Discovery.DNS[0].Models = append(c.Discovery.DNS[0].Models, m.Name)
		}
	}

	c.Routing.DefaultPolicy = rapid.SampledFrom(policies[1:]).Draw(t, "default_policy")
	c.Routing.Split = drawSplit(t, "split")
	c.Routing.Shadow = drawShadow(t, "shadow")
	if rapid.Bool().Draw(t, "reloads") {
		c.Server.ReloadInterval = drawDuration(t, "reload_interval", MinPeriod, Duration(time.Hour))
	}
	for i := range c.Models {
		m := &c.Models[i]
		m.Split, m.Shadow = drawSplit(t, "model_split"), drawShadow(t, "model_shadow")
		if rapid.Bool().Draw(t, "has_kwargs") {
			m.ChatTemplateKwargs = JSONObject(rapid.SampledFrom([]string{`{"enable_thinking":false}`, `{"a":[1,2,{"b":null}],"c":"x: y"}`, `{}`}).Draw(t, "kwargs"))
		}
	}
	if rapid.Bool().Draw(t, "has_shadow_log") {
		c.Observability.ShadowLog = rapid.StringMatching(`/[a-z]{1,8}/[a-z.]{1,12}`).Draw(t, "shadow_log")
	}
	c.Routing.Seed = rapid.Int64().Draw(t, "seed")

	h := &c.Health
	h.Interval = drawDuration(t, "interval", MinPeriod, Duration(time.Hour))
	h.Timeout = drawDuration(t, "timeout", 1, h.Interval)
	h.UnhealthyThreshold = rapid.IntRange(1, 1000).Draw(t, "unhealthy_threshold")
	h.HealthyThreshold = rapid.IntRange(1, 1000).Draw(t, "healthy_threshold")
	h.EjectionBackoff = drawDuration(t, "ejection_backoff", 1, Duration(time.Hour))
	h.MaxEjectionBackoff = drawDuration(t, "max_ejection_backoff", h.EjectionBackoff, Duration(24*time.Hour))
	h.MaxEjectionPercent = rapid.IntRange(0, 100).Draw(t, "max_ejection_percent")

	c.Retry.MaxAttempts = rapid.IntRange(1, 100).Draw(t, "max_attempts")
	c.Retry.Backoff = drawDuration(t, "backoff", 0, Duration(time.Minute))
	c.Retry.MaxBackoff = drawDuration(t, "max_backoff", c.Retry.Backoff, Duration(time.Hour))

	c.Upstream.HTTP2 = rapid.Bool().Draw(t, "http2")
	c.Upstream.ConnectTimeout = drawDuration(t, "connect_timeout", 1, Duration(time.Minute))
	c.Upstream.MaxIdleConnsPerHost = rapid.IntRange(1, 1<<20).Draw(t, "max_idle_conns_per_host")

	c.Logging.Level = rapid.SampledFrom([]string{"debug", "info", "warn", "error"}).Draw(t, "level")
	c.Logging.Format = rapid.SampledFrom([]string{"text", "json"}).Draw(t, "format")
	c.Logging.LogPrompts = rapid.Bool().Draw(t, "log_prompts")
	drawAuth(t, &c)

	o := &c.Observability
	o.OTLPProtocol = rapid.SampledFrom([]string{OTLPHTTP, OTLPGRPC}).Draw(t, "otlp_protocol")
	if rapid.Bool().Draw(t, "tracing") {
		o.OTLPEndpoint = drawURL(t, "otlp_endpoint")
		if o.OTLPProtocol == OTLPGRPC {
			u, _ := url.Parse(o.OTLPEndpoint)
			o.OTLPEndpoint = u.Scheme + "://" + u.Host
		}
	}
	o.TraceSampleRatio = rapid.Float64Range(0, 1).Draw(t, "trace_sample_ratio")
	o.DecisionLog.SampleRate = rapid.Float64Range(0, 1).Draw(t, "decision_log_sample_rate")
	if o.DecisionLog.SampleRate > 0 || rapid.Bool().Draw(t, "decision_log_path") {
		o.DecisionLog.Path = rapid.StringMatching(`/[a-z0-9._-]{1,20}(/[a-z0-9._ -]{1,20}){0,3}`).Draw(t, "decision_log_path")
		if o.DecisionLog.Path == o.ShadowLog {
			o.DecisionLog.Path += ".d" // one file may not be both
		}
	}
	o.DecisionLog.MaxSizeMB = rapid.IntRange(1, 1<<20).Draw(t, "max_size_mb")
	o.DecisionLog.MaxFiles = rapid.IntRange(0, 1000).Draw(t, "max_files")
	return c
})

// drawSplit draws no split or a valid one: distinct policies whose percents
// add up to 100.
func drawSplit(t *rapid.T, label string) Split {
	if rapid.Bool().Draw(t, label+"_none") {
		return nil
	}
	names := rapid.SliceOfNDistinct(rapid.SampledFrom(policies), 1, len(policies), rapid.ID[string]).Draw(t, label+"_policies")
	s := make(Split, len(names))
	left := maxPercent
	for i, n := range names {
		p := left
		if i < len(names)-1 {
			p = rapid.IntRange(0, left).Draw(t, label+"_percent")
		}
		s[i], left = SplitArm{Policy: n, Percent: p}, left-p
	}
	return s
}

// drawShadow draws no list, an empty one or distinct policies.
func drawShadow(t *rapid.T, label string) PolicyList {
	switch rapid.IntRange(0, 2).Draw(t, label+"_kind") {
	case 0:
		return nil
	case 1:
		return PolicyList{}
	}
	return rapid.SliceOfNDistinct(rapid.SampledFrom(policies), 1, len(policies), rapid.ID[string]).Draw(t, label)
}

// TestRoundTrip marshals random valid configs with yaml and parses them
// back: every value must survive, including durations and names that YAML
// has to quote.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genConfig.Draw(t, "config")
		if err := c.Validate(); err != nil {
			t.Fatalf("the generator made an invalid config:\n%v", err)
		}
		out, err := yaml.Marshal(&c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		got, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(config)): %v\n%s", err, out)
		}
		if diff := cmp.Diff(c, *got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip mismatch (-marshaled +parsed):\n%s\n%s", diff, out)
		}
	})
}

// TestDurationRoundTrip checks that every duration marshals to a text that
// parses back to it.
func TestDurationRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := Duration(rapid.Int64().Draw(t, "d"))
		s := d.String()
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(s), &n); err != nil {
			t.Fatalf("yaml.Unmarshal(%q): %v", s, err)
		}
		got, msg := parseDuration(n.Content[0])
		if msg != "" || got != d {
			t.Fatalf("parseDuration(%q) = %d, %q; want %d", s, got, msg, d)
		}
		if strings.ContainsAny(s, "mh") && !strings.HasSuffix(s, "ms") {
			t.Fatalf("String() = %q uses minutes or hours", s)
		}
	})
}

package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Error is one problem in a config: the key's path, the rule it breaks, and
// where the key is when the config came from YAML.
type Error struct {
	// File is the file Load read; empty from Parse and Validate.
	File string
	// Line is the 1-based line of the key in the YAML source; 0 when not
	// known, as from Validate on a Config built in code.
	Line int
	// Path names the key, such as "replicas[2].url"; empty for the document
	// as a whole.
	Path string
	// Msg is the rule, such as "must be an absolute http or https URL".
	Msg string
	// Err, when not nil, is what errors.Is finds the problem to be:
	// ErrPatch for a patch refused before it was read whole. Nil for most.
	Err error
}

func (e *Error) Unwrap() error { return e.Err }

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// policies are the routing policies a model may name.
var policies = []string{"round_robin", "random", "least_request", "p2c", "prefix_hash", "kv_aware", "cost_model"}

// hotDemands are the counts routing.hot_prefix.demand may name.
var hotDemands = []string{"prefill", "prompt", "share"}

const (
	maxIDLen    = 63 // replica IDs
	maxGroupLen = 40 // DNS group names, which prefix their members' IDs
	// maxReplicas bounds the static list: each replica holds health,
	// metrics and index state, and every decision looks at all of a
	// model's replicas (a PATCH of 20,000 took 1.2 GB).
	maxReplicas = 4096
	maxPercent  = 100
	// maxTokenizerWorkers bounds tokenizer.workers: far more than the cores
	// of any machine, and small enough that the pool's queue (64 per
	// worker) is a size make accepts.
	maxTokenizerWorkers = 1024
	idCharsMessage      = "may only hold letters, digits, '.', '_' and '-'"
)

// Validate reports every problem of c at once, joined with errors.Join, each
// an *Error without a line. It changes nothing and does no I/O: addresses and
// URLs are checked for form, not resolved or dialed.
func (c *Config) Validate() error {
	errs := c.validate()
	joined := make([]error, len(errs))
	for i, e := range errs {
		joined[i] = e
	}
	return errors.Join(joined...)
}

// validate returns the problems of c in the order of its fields.
func (c *Config) validate() []*Error {
	v := &validator{}
	v.server(&c.Server)
	v.auth(c)
	v.models(c.Models)
	v.replicas(c)
	v.routing(&c.Routing)
	v.health(&c.Health)
	v.retry(&c.Retry)
	v.flow(c)
	v.upstream(&c.Upstream)
	v.load(&c.Load)
	if w := c.Tokenizer.Workers; w < 1 || w > maxTokenizerWorkers {
		v.fail("tokenizer.workers", "must be between 1 and %d", maxTokenizerWorkers)
	}
	v.positive("tokenizer.max_wait", c.Tokenizer.MaxWait)
	v.atLeast("tokenizer.cache_tokens", c.Tokenizer.CacheTokens, 0)
	v.index(c)
	v.logging(&c.Logging)
	v.observability(&c.Observability)
	return v.errs
}

type validator struct {
	errs []*Error
	// canonical maps every model name and alias to its model's name, as
	// ResolveModel does.
	canonical map[string]string
}

func (v *validator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, &Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) positive(path string, d Duration) {
	if d <= 0 {
		v.fail(path, "must be > 0")
	}
}

// MinPeriod is the shortest period of anything the gateway repeats on a
// timer (file rereads, probes, scrapes, DNS lookups): shorter is a busy
// loop, not a setting.
const MinPeriod = Duration(10 * time.Millisecond)

// period checks a repeating timer's period.
func (v *validator) period(path string, d Duration) {
	if d < MinPeriod {
		v.fail(path, "must be >= %s", MinPeriod)
	}
}

func (v *validator) atLeast(path string, n, low int) {
	if n < low {
		v.fail(path, "must be >= %d", low)
	}
}

func (v *validator) server(s *Server) {
	listen := v.listenAddr("server.listen", s.Listen)
	admin := v.listenAddr("server.admin_listen", s.AdminListen)
	if listen != nil && admin != nil && listen.overlaps(admin) {
		v.fail("server.admin_listen", "must not listen where server.listen (%s) does", s.Listen)
	}
	v.positive("server.request_timeout", s.RequestTimeout)
	v.positive("server.header_read_timeout", s.HeaderReadTimeout)
	if s.ReloadInterval != 0 && s.ReloadInterval < MinPeriod {
		v.fail("server.reload_interval", "must be 0 (off) or >= %s", MinPeriod)
	}
	if s.ShutdownTimeout < 0 {
		v.fail("server.shutdown_timeout", "must be >= 0")
	}
	if s.MaxBodyBytes <= 0 {
		v.fail("server.max_body_bytes", "must be > 0")
	}
	for i, o := range s.CORSAllowedOrigins {
		if o != "*" && !isWebOrigin(o) {
			v.fail(fmt.Sprintf("server.cors_allowed_origins[%d]", i), `must be "*" or an origin such as https://app.example.com (scheme, host and port only), got %q`, o)
		}
	}
}

// isWebOrigin reports whether s is a web origin as browsers send it in
// Origin: http or https, a host, an optional port, and nothing else.
func isWebOrigin(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.Hostname() != "" &&
		u.User == nil && u.Path == "" && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery && u.Opaque == "" &&
		s == u.Scheme+"://"+u.Host && validPort(u)
}

// validPort reports whether u names no port, or one of 1-65535.
func validPort(u *url.URL) bool {
	if strings.HasSuffix(u.Host, ":") {
		return false
	}
	p := u.Port()
	n, err := strconv.Atoi(p)
	return p == "" || err == nil && n >= 1 && n <= 65535
}

// hostPort is a checked listen address.
type hostPort struct {
	host string
	port int
}

// overlaps reports whether two listeners would claim the same socket: the
// same fixed port on the same host, or on any host when one is a wildcard.
func (a *hostPort) overlaps(b *hostPort) bool {
	if a.port == 0 || a.port != b.port {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return a.host == b.host || wildcard(a.host) || wildcard(b.host)
}

func (v *validator) listenAddr(path, addr string) *hostPort {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.fail(path, "must be host:port, such as 127.0.0.1:8080")
		return nil
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		v.fail(path, "must have a numeric port between 0 and 65535")
		return nil
	}
	if !isListenHost(host) {
		v.fail(path, "must have an IP address or a host name before the port, or nothing for every address")
		return nil
	}
	return &hostPort{host: host, port: p}
}

// isListenHost reports whether host is empty, an IP address (with a zone) or
// a host name.
func isListenHost(host string) bool {
	if host == "" {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return len(host) <= 253 && strings.IndexFunc(host, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '-' || r == '_')
	}) < 0
}

func (v *validator) models(models []Model) {
	v.canonical = map[string]string{}
	for _, m := range models {
		v.canonical[m.Name] = m.Name
	}
	for _, m := range models {
		for _, a := range m.Aliases {
			if _, ok := v.canonical[a]; !ok {
				v.canonical[a] = m.Name
			}
		}
	}
	if len(models) == 0 {
		v.fail("models", "at least one model is required")
		return
	}
	seen := map[string]string{} // name or alias → path where it first appears
	unique := func(path, name string) {
		if first, ok := seen[name]; ok {
			v.fail(path, "%q is already used at %s", name, first)
			return
		}
		seen[name] = path
	}
	for i, m := range models {
		p := fmt.Sprintf("models[%d]", i)
		switch {
		case m.Name == "":
			v.fail(p+".name", "required")
		case !isModelName(m.Name):
			v.fail(p+".name", modelNameMessage)
		default:
			unique(p+".name", m.Name)
		}
		for j, a := range m.Aliases {
			ap := fmt.Sprintf("%s.aliases[%d]", p, j)
			switch {
			case a == "":
				v.fail(ap, "must not be empty")
			case !isModelName(a):
				v.fail(ap, modelNameMessage)
			default:
				unique(ap, a)
			}
		}
		if m.Policy != "" && !isPolicy(m.Policy) {
			v.fail(p+".policy", "must be empty or one of %s, not %q", strings.Join(policies, ", "), m.Policy)
		}
		v.split(p+".split", m.Split)
		v.shadow(p+".shadow", m.Shadow)
		v.atLeast(p+".block_size", m.BlockSize, 0)
		if m.Tokenizer == "builtin:sim" {
			// Nothing would read them: a setting that silently does nothing
			// reads as one that works.
			for _, k := range []struct {
				key string
				set bool
			}{
				{"chat_template", m.ChatTemplate != ""},
				{"chat_template_content_format", m.ChatTemplateContentFormat != ""},
				{"chat_template_kwargs", m.ChatTemplateKwargs != ""},
			} {
				if k.set {
					v.fail(p+"."+k.key, "must be empty with tokenizer builtin:sim, which renders the simulator's own template")
				}
			}
		}
		switch m.ChatTemplateContentFormat {
		case "", "auto", "string", "openai":
		default:
			v.fail(p+".chat_template_content_format", "must be empty or one of auto, string, openai, not %q", m.ChatTemplateContentFormat)
		}
		if m.ChatTemplateKwargs != "" {
			var kw map[string]json.RawMessage
			if err := json.Unmarshal([]byte(m.ChatTemplateKwargs), &kw); err != nil || kw == nil {
				v.fail(p+".chat_template_kwargs", "must be a JSON object")
			}
			for _, k := range []string{"chat_template", "tokenize"} {
				if _, ok := kw[k]; ok {
					v.fail(p+".chat_template_kwargs", "must not set %s: vLLM refuses it", k)
				}
			}
		}
		if o := m.CostModel; o != nil {
			for _, f := range []struct {
				key string
				v   *float64
			}{
				{"prefill_token_secs", o.PrefillTokenSecs},
				{"prefill_pair_secs", o.PrefillPairSecs},
				{"prefill_fixed_secs", o.PrefillFixedSecs},
				{"decode_interference_secs", o.DecodeInterferenceSecs},
			} {
				if f.v != nil {
					v.coefficient(p+".cost_model."+f.key, *f.v)
				}
			}
		}
	}
}

const modelNameMessage = "must be printable text without leading or trailing spaces"

// isModelName reports whether s can name a model: printable UTF-8 that no
// space begins or ends, so that "llama " cannot pass for "llama" and no
// name spans lines.
func isModelName(s string) bool {
	if !utf8.ValidString(s) || strings.TrimSpace(s) != s {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0
}

func isPolicy(name string) bool {
	for _, p := range policies {
		if p == name {
			return true
		}
	}
	return false
}

// replicas checks the static replicas, the DNS groups and that every model
// is served by one of them.
func (v *validator) replicas(c *Config) {
	if len(c.Replicas) == 0 && len(c.Discovery.DNS) == 0 {
		v.fail("replicas", "at least one replica or discovery.dns group is required")
	}
	if len(c.Replicas) > maxReplicas {
		v.fail("replicas", "at most %d replicas may be listed, got %d", maxReplicas, len(c.Replicas))
	}
	served := map[string]bool{}
	ids := map[string]string{} // replica ID → its path
	for i := range c.Replicas {
		r := &c.Replicas[i]
		p := fmt.Sprintf("replicas[%d]", i)
		if v.name(p+".id", r.ID, maxIDLen) {
			if first, ok := ids[r.ID]; ok {
				v.fail(p+".id", "%q is already used at %s", r.ID, first)
			} else {
				ids[r.ID] = p + ".id"
			}
		}
		v.url(p+".url", r.URL)
		v.servedModels(p+".models", r.Models, served)
		v.limits(p, r.MaxConcurrency, r.MaxPending)
		v.atLeast(p+".kv_capacity_blocks", r.KVCapacityBlocks, 0)
		v.zmqEndpoint(p+".kv_events.endpoint", r.KVEvents.Endpoint)
		v.zmqEndpoint(p+".kv_events.replay_endpoint", r.KVEvents.ReplayEndpoint)
	}
	groups := map[string]string{}
	for i := range c.Discovery.DNS {
		g := &c.Discovery.DNS[i]
		p := fmt.Sprintf("discovery.dns[%d]", i)
		if v.name(p+".name", g.Name, maxGroupLen) {
			if first, ok := groups[g.Name]; ok {
				v.fail(p+".name", "%q is already used at %s", g.Name, first)
			} else if first, ok := ids[g.Name]; ok {
				v.fail(p+".name", "%q is already used at %s", g.Name, first)
			} else {
				groups[g.Name] = p + ".name"
			}
		}
		v.url(p+".url", g.URL)
		v.servedModels(p+".models", g.Models, served)
		v.period(p+".refresh", g.Refresh)
		v.limits(p, g.MaxConcurrency, g.MaxPending)
		v.atLeast(p+".kv_capacity_blocks", g.KVCapacityBlocks, 0)
	}
	v.memberIDs(c, groups)
	if len(c.Replicas) == 0 && len(c.Discovery.DNS) == 0 {
		return // already reported once above, not once per model
	}
	for i, m := range c.Models {
		if m.Name != "" && isModelName(m.Name) && !served[m.Name] {
			v.fail(fmt.Sprintf("models[%d]", i), "no replica or dns group serves it")
		}
	}
}

// memberIDs refuses a static replica ID that a DNS group's member could
// have (the group's name, "-", an IP, "-", a port; fleet.MemberID): the two
// would share an ID, and with it metric series and index state. groups maps
// each good group name to its path.
func (v *validator) memberIDs(c *Config, groups map[string]string) {
	for i := range c.Replicas {
		id := c.Replicas[i].ID
		for j := range c.Discovery.DNS {
			name := c.Discovery.DNS[j].Name
			if gp, ok := groups[name]; ok && isMemberID(id, name) {
				v.fail(fmt.Sprintf("replicas[%d].id", i), "%q has the form of a member ID of the dns group at %s (%s-<ip>-<port>)", id, gp, name)
			}
		}
	}
}

// isMemberID reports whether id has the form of a member ID of group.
func isMemberID(id, group string) bool {
	rest, ok := strings.CutPrefix(id, group+"-")
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return false
	}
	_, err := netip.ParseAddr(rest[:i])
	port := rest[i+1:]
	return err == nil && port != "" && strings.IndexFunc(port, func(r rune) bool { return r < '0' || r > '9' }) < 0
}

func (v *validator) index(c *Config) {
	ix := &c.Index
	v.atLeast("index.default_capacity_blocks", ix.DefaultCapacityBlocks, 1)
	switch ix.Mode {
	case IndexApproximate, IndexExact, IndexAuto:
	default:
		v.fail("index.mode", "must be approximate, exact or auto, got %q", ix.Mode)
	}
	if ix.SpeculativeTTL < 0 {
		v.fail("index.speculative_ttl", "must be >= 0")
	}
	if ix.KVEvents.Port < 1 || ix.KVEvents.Port > 65535 {
		v.fail("index.kv_events.port", "must be within 1-65535")
	}
	if ix.KVEvents.ReplayPort < 0 || ix.KVEvents.ReplayPort > 65535 {
		v.fail("index.kv_events.replay_port", "must be within 0-65535")
	}
	v.positive("index.kv_events.silence", ix.KVEvents.Silence)
}

// zmqEndpoint checks an optional ZeroMQ endpoint a gateway connects to:
// tcp://host:port with a host and a port of 1-65535.
func (v *validator) zmqEndpoint(path, s string) {
	if s == "" {
		return
	}
	rest, ok := strings.CutPrefix(s, "tcp://")
	host, port, err := net.SplitHostPort(rest)
	n, perr := strconv.Atoi(port)
	switch {
	case !ok:
		v.fail(path, "must be a tcp:// endpoint, got %q", s)
	case err != nil || host == "" || host == "*":
		v.fail(path, "must be tcp://host:port, got %q", s)
	case perr != nil || n < 1 || n > 65535:
		v.fail(path, "port must be within 1-65535, got %q", s)
	}
}

// name checks a replica ID or group name and reports whether it is good.
func (v *validator) name(path, s string, maxLen int) bool {
	switch {
	case s == "":
		v.fail(path, "required")
	case len(s) > maxLen:
		v.fail(path, "must be at most %d characters", maxLen)
	case strings.IndexFunc(s, func(r rune) bool { return !isIDChar(r) }) >= 0:
		v.fail(path, idCharsMessage)
	default:
		return true
	}
	return false
}

func isIDChar(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' ||
		r == '.' || r == '_' || r == '-'
}

func (v *validator) url(path, s string) {
	if s == "" {
		v.fail(path, "required")
		return
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Opaque != "" || u.Hostname() == "":
		v.fail(path, "must be an absolute http or https URL")
	case u.User != nil:
		v.fail(path, "must not hold a user or password")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#"):
		v.fail(path, "must not have a query or fragment")
	default:
		if strings.HasSuffix(u.Host, ":") {
			v.fail(path, "must have a port between 1 and 65535 after the colon")
		} else if port := u.Port(); port != "" {
			if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
				v.fail(path, "must have a port between 1 and 65535 after the colon")
			}
		}
	}
}

// servedModels checks the models list of a replica or group and marks the
// models it serves.
func (v *validator) servedModels(path string, names []string, served map[string]bool) {
	if len(names) == 0 {
		v.fail(path, "at least one model is required")
		return
	}
	listed := map[string]bool{}
	for i, name := range names {
		p := fmt.Sprintf("%s[%d]", path, i)
		if name == "" {
			v.fail(p, "must not be empty")
			continue
		}
		if listed[name] {
			v.fail(p, "%q is listed twice", name)
			continue
		}
		listed[name] = true
		canonical, ok := v.canonical[name]
		switch {
		case !ok:
			v.fail(p, "%q is not a configured model", name)
		case canonical != name:
			v.fail(p, "%q is an alias; name the model %q", name, canonical)
		default:
			served[name] = true
		}
	}
}

func (v *validator) limits(path string, maxConcurrency, maxPending int) {
	v.atLeast(path+".max_concurrency", maxConcurrency, 1)
	v.atLeast(path+".max_pending", maxPending, 1)
	if maxConcurrency >= 1 && maxPending > maxConcurrency {
		v.fail(path+".max_pending", "must be <= max_concurrency (%d)", maxConcurrency)
	}
}

func (v *validator) routing(r *Routing) {
	if !isPolicy(r.DefaultPolicy) {
		v.fail("routing.default_policy", "must be one of %s, not %q", strings.Join(policies, ", "), r.DefaultPolicy)
	}
	v.split("routing.split", r.Split)
	v.shadow("routing.shadow", r.Shadow)
	if r.Epsilon <= 0 {
		v.fail("routing.epsilon", "must be > 0")
	}
	if r.Kappa < 0 || r.Kappa > 1 {
		v.fail("routing.kappa", "must be between 0 and 1")
	}
	v.atLeast("routing.short_prompt_tokens", r.ShortPromptTokens, 0)
	if r.KVGuard != "usage" && r.KVGuard != "free_blocks" {
		v.fail("routing.kv_guard", "must be usage or free_blocks, not %q", r.KVGuard)
	}
	cm := r.CostModel
	v.coefficient("routing.cost_model.prefill_token_secs", cm.PrefillTokenSecs)
	v.coefficient("routing.cost_model.prefill_pair_secs", cm.PrefillPairSecs)
	v.coefficient("routing.cost_model.prefill_fixed_secs", cm.PrefillFixedSecs)
	v.coefficient("routing.cost_model.decode_interference_secs", cm.DecodeInterferenceSecs)
	v.atLeast("routing.prefix_hash.blocks", r.PrefixHash.Blocks, 1)
	v.nonNegative("routing.kv_aware.cache_weight", r.KVAware.CacheWeight)
	v.nonNegative("routing.kv_aware.load_weight", r.KVAware.LoadWeight)
	v.atLeast("routing.hot_prefix.blocks", r.HotPrefix.Blocks, 0)
	v.positive("routing.hot_prefix.window", r.HotPrefix.Window)
	if u := r.HotPrefix.Utilization; u <= 0 || u > 1 {
		v.fail("routing.hot_prefix.utilization", "must be > 0 and <= 1")
	}
	if d := r.HotPrefix.Demand; !slices.Contains(hotDemands, d) {
		v.fail("routing.hot_prefix.demand", "must be prefill, prompt or share, got %q", d)
	}
}

func (v *validator) nonNegative(path string, f float64) {
	if f < 0 {
		v.fail(path, "must be >= 0")
	}
}

// MaxCoefficientSecs bounds each cost model coefficient: far above any
// engine's (a second per token is already absurd), and low enough that no
// estimate overflows to +Inf, which JSON cannot carry.
const MaxCoefficientSecs = 3600

// coefficient checks a cost model coefficient, in seconds.
func (v *validator) coefficient(path string, f float64) {
	switch {
	case f < 0:
		v.fail(path, "must be >= 0")
	case !(f <= MaxCoefficientSecs): // NaN too
		v.fail(path, "must be at most %d", MaxCoefficientSecs)
	}
}

func (v *validator) health(h *Health) {
	v.period("health.interval", h.Interval)
	v.positive("health.timeout", h.Timeout)
	if h.Interval > 0 && h.Timeout > h.Interval {
		v.fail("health.timeout", "must be <= health.interval (%s)", h.Interval)
	}
	if h.UnhealthyInterval != 0 && h.UnhealthyInterval < MinPeriod || h.Interval > 0 && h.UnhealthyInterval > h.Interval {
		v.fail("health.unhealthy_interval", "must be 0 or between %s and health.interval (%s)", MinPeriod, h.Interval)
	}
	v.atLeast("health.unhealthy_threshold", h.UnhealthyThreshold, 1)
	v.atLeast("health.healthy_threshold", h.HealthyThreshold, 1)
	v.positive("health.ejection_backoff", h.EjectionBackoff)
	if h.MaxEjectionBackoff < h.EjectionBackoff {
		v.fail("health.max_ejection_backoff", "must be >= health.ejection_backoff (%s)", h.EjectionBackoff)
	}
	if h.MaxEjectionPercent < 0 || h.MaxEjectionPercent > maxPercent {
		v.fail("health.max_ejection_percent", "must be between 0 and 100")
	}
}

func (v *validator) retry(r *Retry) {
	v.atLeast("retry.max_attempts", r.MaxAttempts, 1)
	if r.Backoff < 0 {
		v.fail("retry.backoff", "must be >= 0")
	}
	if r.MaxBackoff < r.Backoff {
		v.fail("retry.max_backoff", "must be >= retry.backoff (%s)", r.Backoff)
	}
}

func (v *validator) upstream(u *Upstream) {
	v.positive("upstream.connect_timeout", u.ConnectTimeout)
	v.atLeast("upstream.max_idle_conns_per_host", u.MaxIdleConnsPerHost, 1)
}

func (v *validator) load(l *EngineLoad) {
	v.period("load.scrape_interval", l.ScrapeInterval)
	v.positive("load.scrape_timeout", l.ScrapeTimeout)
	// A report is dated when its scrape is sent, so the newest one can be
	// as old as one interval plus one scrape's time when the next lands: a
	// shorter max_age would count healthy engines as missing.
	if l.MaxAge < l.ScrapeInterval+max(l.ScrapeTimeout, 0) {
		v.fail("load.max_age", "must be >= load.scrape_interval + load.scrape_timeout (%s)", l.ScrapeInterval+max(l.ScrapeTimeout, 0))
	}
}

func (v *validator) logging(l *Logging) {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		v.fail("logging.level", "must be one of debug, info, warn, error, not %q", l.Level)
	}
	switch l.Format {
	case "text", "json":
	default:
		v.fail("logging.format", "must be text or json, not %q", l.Format)
	}
}

// SharedEngines describes each static replica that names the same engine
// as an earlier one (the same scheme, host and port and path, the host's
// case and an IPv4 address written as IPv6 aside). Allowed, since a test
// rig may want it, but each such replica has its own caps and its own
// share of the index, so the engine runs up to the sum of their caps: the
// gateway warns at start and --check notes it.
func (c *Config) SharedEngines() []string {
	var out []string
	first := map[string]string{}
	for i := range c.Replicas {
		r := &c.Replicas[i]
		key, ok := engineKey(r.URL)
		if !ok {
			continue
		}
		if id, seen := first[key]; seen {
			out = append(out, fmt.Sprintf("replicas %s and %s name one engine (%s): each has its own max_concurrency and index, so the engine may run the sum", id, r.ID, r.URL))
			continue
		}
		first[key] = r.ID
	}
	return out
}

// engineKey is a replica URL reduced to the engine it reaches.
func engineKey(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", false
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(host) + ":" + port + strings.TrimRight(u.EscapedPath(), "/"), true
}

package config

import (
	"math"
	"time"
)

// Config is one gateway config file. Its zero value is not valid: start from
// [Default], or use [Parse] or [Load], which decode onto it.
//
// A Config is a plain value: nothing in this package changes one after Parse
// returns it, and it is safe for concurrent reads.
type Config struct {
	Server Server `yaml:"server"`
	// Auth holds the API keys of both ports.
	Auth Auth `yaml:"auth"`
	// Models are the models the gateway serves, in the order GET /v1/models
	// lists them. At least one is required.
	Models []Model `yaml:"models"`
	// Replicas are the statically configured engines. Replicas and
	// Discovery.DNS may each be empty, but not both.
	Replicas  []Replica `yaml:"replicas"`
	Discovery Discovery `yaml:"discovery"`
	Routing   Routing   `yaml:"routing"`
	Health    Health    `yaml:"health"`
	Retry     Retry     `yaml:"retry"`
	// Flow makes requests wait for room in priority classes instead of
	// getting 503 when every replica is full.
	Flow      Flow       `yaml:"flow"`
	Upstream  Upstream   `yaml:"upstream"`
	Load      EngineLoad `yaml:"load"`
	Tokenizer Tokenizer  `yaml:"tokenizer"`
	Index     Index      `yaml:"index"`
	Logging   Logging    `yaml:"logging"`
	// Observability configures what the gateway records beside its
	// metrics: traces, the decision log and the shadow log. Read at start
	// only.
	Observability Observability `yaml:"observability"`
}

// Server configures the gateway's listeners and request limits.
type Server struct {
	// Listen is the host:port of the client (OpenAI API) listener.
	// Default "0.0.0.0:8080"; port 0 picks a free port.
	Listen string `yaml:"listen"`
	// AdminListen is the host:port of the admin listener (metrics and admin
	// API). Default "127.0.0.1:9090". It may not be the address of Listen.
	AdminListen string `yaml:"admin_listen"`
	// RequestTimeout bounds reading a request body and waiting for a
	// stream's response head, all retries included; a request that does
	// not stream gets its head with the whole answer and waits for it as
	// long as that takes. Must be > 0; default 60s.
	RequestTimeout Duration `yaml:"request_timeout"`
	// HeaderReadTimeout is how long a client has to send request headers,
	// and how long an idle keep-alive connection stays open. Must be > 0;
	// default 10s.
	HeaderReadTimeout Duration `yaml:"header_read_timeout"`
	// ShutdownTimeout is how long running streams may finish after SIGTERM.
	// Must be >= 0; 0 closes them at once. Default 30s.
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// MaxBodyBytes is the largest request body accepted, in bytes; larger
	// bodies get 413. Must be > 0; default 33554432 (32 MiB).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReloadInterval is how often the config file is reread; it is applied
	// when it changed and a second read 100ms later finds the same bytes
	// (else at a later look, once the writer is done). Must be 0 or >= 10ms; 0
	// rereads it only on SIGHUP or POST /admin/reload. Default 2s.
	ReloadInterval Duration `yaml:"reload_interval"`
	// TLS serves the client port over TLS; default plain HTTP.
	TLS ServerTLS `yaml:"tls"`
	// CORSAllowedOrigins are the web origins (scheme://host[:port]) whose
	// pages may call the client port from a browser, or "*" for every
	// one, as vLLM allows by default. Empty: no CORS headers, and a
	// browser's preflight is refused (401 with keys, else 405). Default
	// ["*"].
	CORSAllowedOrigins []string `yaml:"cors_allowed_origins"`
}

// Model is one model the gateway serves.
type Model struct {
	// Name is the model name clients send and engines serve. Required, and
	// unique across every model's name and aliases.
	Name string `yaml:"name"`
	// Aliases are other names clients may use for the model; the gateway
	// rewrites them to Name before forwarding. Each is unique across every
	// model's name and aliases. Nil means none.
	Aliases []string `yaml:"aliases,omitempty"`
	// Policy is the routing policy for this model: one of round_robin,
	// random, least_request, p2c, prefix_hash, kv_aware or cost_model. Empty
	// means Routing.DefaultPolicy.
	Policy string `yaml:"policy,omitempty"`
	// Split shares the model's traffic between policies, overriding Policy
	// and routing.split. Nil means none.
	Split Split `yaml:"split,omitempty"`
	// Shadow lists policies that choose a replica for each of the model's
	// requests without routing it, replacing routing.shadow for this model
	// (an empty list means none). Nil means routing.shadow.
	Shadow PolicyList `yaml:"shadow,omitempty"`
	// CostModel overrides routing.cost_model for this model, key by key
	// (a key left out keeps routing.cost_model's value). Nil means none.
	CostModel *CostModelOverride `yaml:"cost_model,omitempty"`
	// Tokenizer lets the gateway compute the model's prompt tokens as the
	// engines do: "builtin:sim" for the simulator's, a directory holding
	// tokenizer.json, or org/name[@revision] in the local Hugging Face
	// cache. Empty means none: the model routes without cache predictions.
	Tokenizer string `yaml:"tokenizer,omitempty"`
	// BlockSize is the engines' KV block size in tokens, which the gateway
	// cuts prompts into for its index. Default 16, vLLM's; 0 also means 16.
	BlockSize int `yaml:"block_size"`
	// ChatTemplate is the engines' --chat-template for a Hugging Face
	// tokenizer: the template text, the name of one of the tokenizer's
	// named templates, or, as vLLM reads the flag, the path of a file
	// holding it (a value without '{', '}' or a newline; read when the
	// tokenizer loads). Empty means the chat template of the tokenizer's
	// tokenizer_config.json.
	ChatTemplate string `yaml:"chat_template,omitempty"`
	// ChatTemplateContentFormat is the engines'
	// --chat-template-content-format: auto, string or openai. Empty means
	// auto, which detects the format from the template as vLLM does.
	ChatTemplateContentFormat string `yaml:"chat_template_content_format,omitempty"`
	// ChatTemplateKwargs is the engines' --default-chat-template-kwargs, a
	// JSON object as that flag takes it: template variables every chat
	// request gets, which a request's chat_template_kwargs override key by
	// key. Empty means none.
	// Written as a mapping or as a string holding the JSON.
	ChatTemplateKwargs JSONObject `yaml:"chat_template_kwargs,omitempty"`
	// Limits are the model's rate limits, across every key. Default none.
	Limits Limits `yaml:"limits"`
	// TTFTTarget is the time to first token the model's requests ask for
	// when neither x-inferrail-ttft-target-ms nor their key names one:
	// such a request is admitted only while some replica's estimated TTFT
	// meets it. 0, the default, means none. At most 1h.
	TTFTTarget Duration `yaml:"ttft_target"`
}

// Blocks returns the model's block size in tokens.
func (m *Model) Blocks() int {
	if m.BlockSize <= 0 {
		return defaultBlockSize
	}
	return m.BlockSize
}

// Replica is one statically configured engine.
type Replica struct {
	// ID names the replica in metrics, logs and response headers. Required,
	// unique among replicas, at most 63 characters of [A-Za-z0-9._-], and
	// not of the form of a DNS group's member IDs (<group>-<ip>-<port>).
	ID string `yaml:"id"`
	// URL is the engine's base URL: absolute http or https, with a host,
	// optionally a path, without user info, query or fragment. Parse trims a
	// trailing slash. Required.
	URL string `yaml:"url"`
	// Models are the names (not aliases) of the configured models this
	// replica serves. At least one.
	Models []string `yaml:"models"`
	// MaxConcurrency caps requests in flight to this replica. Must be >= 1;
	// default 256.
	MaxConcurrency int `yaml:"max_concurrency"`
	// MaxPending caps streams to this replica still waiting for a response
	// head (a request that does not stream gets its head with the whole
	// answer and counts against MaxConcurrency alone). Must be >= 1 and
	// <= MaxConcurrency; default 64, or MaxConcurrency when that is less.
	MaxPending int `yaml:"max_pending"`
	// KVCapacityBlocks is the engine's KV cache size in blocks, the size of
	// the gateway's shadow of it. 0 means what the engine reports, else
	// Index.DefaultCapacityBlocks.
	KVCapacityBlocks int `yaml:"kv_capacity_blocks"`
	// KVEvents is where the engine publishes its KV cache events, read
	// when index.mode is exact or auto. Empty fields take index.kv_events'
	// defaults on the replica URL's host.
	KVEvents ReplicaKVEvents `yaml:"kv_events"`
}

// ReplicaKVEvents names one engine's KV event sockets, as ZeroMQ
// endpoints tcp://host:port.
type ReplicaKVEvents struct {
	// Endpoint is the engine's PUB socket (vLLM's kv-events-config
	// endpoint). Empty: tcp://<url host>:<index.kv_events.port>.
	Endpoint string `yaml:"endpoint"`
	// ReplayEndpoint is its replay socket. Empty: on the url host at
	// index.kv_events.replay_port, or none when that is 0.
	ReplayEndpoint string `yaml:"replay_endpoint"`
	// Topic is the topic prefix to subscribe to. Empty: index.kv_events.topic.
	Topic string `yaml:"topic"`
}

// Discovery configures replicas found at run time.
type Discovery struct {
	// DNS groups turn every address a name resolves to into a replica.
	// Nil means none.
	DNS []DNSGroup `yaml:"dns"`
}

// DNSGroup is a DNS name whose addresses are replicas, such as a Kubernetes
// headless service. Each address becomes a replica named
// <name>-<ip>-<port>.
type DNSGroup struct {
	// Name names the group. Required, unique among groups, different from
	// every replica ID, at most 40 characters of [A-Za-z0-9._-].
	Name string `yaml:"name"`
	// URL is the base URL of every member, its host the name to resolve:
	// the same rules as Replica.URL. The port is the URL's, or the scheme's
	// default. Required.
	URL string `yaml:"url"`
	// Models are the names (not aliases) of the configured models every
	// member serves. At least one.
	Models []string `yaml:"models"`
	// Refresh is how often the name is resolved again. Must be >= 10ms;
	// default 5s.
	Refresh Duration `yaml:"refresh"`
	// MaxConcurrency caps requests in flight to each member. Must be >= 1;
	// default 256.
	MaxConcurrency int `yaml:"max_concurrency"`
	// MaxPending caps each member's streams still waiting for a response
	// head, as Replica.MaxPending. Must be >= 1 and <= MaxConcurrency;
	// default 64, or MaxConcurrency when that is less.
	MaxPending int `yaml:"max_pending"`
	// KVCapacityBlocks is each member's KV cache size in blocks, as for
	// Replica. 0 means what the engines report.
	KVCapacityBlocks int `yaml:"kv_capacity_blocks"`
}

// Routing configures how a replica is chosen.
type Routing struct {
	// DefaultPolicy is the policy of every model without its own (see
	// Model.Policy for the names). Default least_request.
	DefaultPolicy string `yaml:"default_policy"`
	// Split shares traffic between policies by percent, for every model
	// without its own policy or split: a request's arm follows from its
	// conversation key, else its request ID. Nil means DefaultPolicy
	// routes everything.
	Split Split `yaml:"split,omitempty"`
	// Shadow lists policies that choose a replica for every routed request
	// without routing it, so that their choices can be compared with the
	// routing policy's (GET /admin/shadow). Nil means none.
	Shadow PolicyList `yaml:"shadow,omitempty"`
	// Seed seeds the randomized policies, so a fixed seed replays the same
	// choices. 0, the default, seeds from the clock at start.
	Seed int64 `yaml:"seed"`
	// Epsilon sets cost_model's bounded-load cap: no replica is given more
	// than ceil((1+epsilon)·(in_flight+1)/n) requests. Must be > 0; default 1.
	Epsilon float64 `yaml:"epsilon"`
	// Kappa is the KV cache use (0 to 1) above which cost_model sets a
	// replica aside for prompts with more than ShortPromptTokens to compute
	// there, unless every replica is above it. Default 0.92.
	Kappa float64 `yaml:"kappa"`
	// ShortPromptTokens is the prompt length (tokens to compute) under which
	// KV pressure is ignored. Must be >= 0; default 256.
	ShortPromptTokens int `yaml:"short_prompt_tokens"`
	// KVGuard is which replicas above Kappa the KV-pressure guard sets
	// aside: "free_blocks" (default) only those whose free blocks are
	// fewer than the prompt would compute there; "usage" every one.
	KVGuard string `yaml:"kv_guard"`
	// SessionAffinity sends a cost_model request naming its conversation
	// (x-session-id header, else the body's user field) back to the
	// conversation's last replica while the load guards allow it; other
	// policies do not read it. Default true: a client that
	// names its conversation expects its next turn where its history is.
	SessionAffinity bool `yaml:"session_affinity"`
	// HistoryAffinity sends a request session affinity did not place that
	// extends an earlier prompt (a conversation's next turn) back to that
	// prompt's replica when the index no longer knows where its history is,
	// while the load guards allow it. Default false.
	HistoryAffinity bool `yaml:"history_affinity"`
	// Pace prices each replica's estimates by its engine's pace: how the
	// times to first token it delivered lately compare with what the cost
	// model estimated for them (streamed responses; half-life 30 s), so an
	// engine slower than its peers is priced slower. Paces are learned
	// and reported (inferrail_replica_pace) either way. Default true.
	Pace bool `yaml:"pace"`
	// EngineQueue prices the requests an engine reports waiting that the
	// gateway did not send (another gateway's, a client's sent straight to
	// the engine, or requests preempted and queued again) as queued
	// prefill, each at the mean prefill of the gateway's own recent
	// requests to that replica, less what the engine has run since its
	// report. It is what keeps several gateways in front of the same
	// engines from piling onto the one each sees idle. Default true.
	EngineQueue bool `yaml:"engine_queue"`
	// QueueFloor prices a replica's queued prefill at no less than the
	// requests its engine reports waiting (not yet scheduled), each at the
	// mean prefill of the gateway's own requests there still waiting for
	// their first byte (of its recent requests there while none waits), and
	// counting no more than can still wait: the gateway's own requests
	// without a first byte and the others' the report counted. The
	// gateway's own queue drains as its estimates, at their paces, say, so
	// an engine that falls behind them (past its KV cache's edge, where
	// requests wait for free blocks rather than for compute) otherwise
	// reads as empty while requests wait on it. Default false.
	QueueFloor bool `yaml:"queue_floor"`
	// BacklogCost ranks cost_model's replicas by their TTFT estimate plus
	// the request's extra prefill there (beyond the least any allowed
	// replica would need) once per request their engine reports waiting.
	// Recomputing a context away from the replica that holds it delays the
	// requests that queue behind it there, which the request's own
	// estimate does not see; a backlog that long takes as long to clear.
	// Default false.
	BacklogCost bool `yaml:"backlog_cost"`
	// CostModel holds cost_model's prefill parameters for every model
	// without its own.
	CostModel CostModel `yaml:"cost_model"`
	// PrefixHash tunes prefix_hash.
	PrefixHash PrefixHash `yaml:"prefix_hash"`
	// KVAware tunes kv_aware.
	KVAware KVAware `yaml:"kv_aware"`
	// HotPrefix tunes cost_model's replication of hot root prefixes.
	HotPrefix HotPrefix `yaml:"hot_prefix"`
}

// CostModel is cost_model's estimate of a prefill: computing u tokens after
// c cached ones takes a·u + b·u·(c + u/2) + d seconds. inferrail-calibrate
// measures a, b and d on an idle engine.
type CostModel struct {
	// PrefillTokenSecs is a, seconds per computed token. Must be between 0
	// and 3600; default 0.0001.
	PrefillTokenSecs float64 `yaml:"prefill_token_secs"`
	// PrefillPairSecs is b, seconds per pair of computed and attended
	// tokens. Must be between 0 and 3600; default 0.0000000033.
	PrefillPairSecs float64 `yaml:"prefill_pair_secs"`
	// PrefillFixedSecs is d, seconds per prefill. Must be between 0 and
	// 3600; default 0.005.
	PrefillFixedSecs float64 `yaml:"prefill_fixed_secs"`
	// DecodeInterferenceSecs is the wait a running request adds to a new
	// one's first token. Must be between 0 and 3600; default 0.0005.
	DecodeInterferenceSecs float64 `yaml:"decode_interference_secs"`
}

// CostModelOverride is a model's own cost model: each key set replaces
// routing.cost_model's; nil keys keep it.
type CostModelOverride struct {
	PrefillTokenSecs       *float64 `yaml:"prefill_token_secs"`
	PrefillPairSecs        *float64 `yaml:"prefill_pair_secs"`
	PrefillFixedSecs       *float64 `yaml:"prefill_fixed_secs"`
	DecodeInterferenceSecs *float64 `yaml:"decode_interference_secs"`
}

// Apply returns base with o's keys laid over it.
func (o *CostModelOverride) Apply(base CostModel) CostModel {
	if o == nil {
		return base
	}
	for _, f := range []struct {
		v   *float64
		dst *float64
	}{
		{o.PrefillTokenSecs, &base.PrefillTokenSecs},
		{o.PrefillPairSecs, &base.PrefillPairSecs},
		{o.PrefillFixedSecs, &base.PrefillFixedSecs},
		{o.DecodeInterferenceSecs, &base.DecodeInterferenceSecs},
	} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	return base
}

// PrefixHash tunes the prefix_hash policy.
type PrefixHash struct {
	// Blocks is how many leading KV blocks of a prompt choose its replica.
	// Must be >= 1; default 4.
	Blocks int `yaml:"blocks"`
}

// KVAware weighs kv_aware's two terms: cache_weight·cached/prompt minus
// load_weight·in_flight/busiest.
type KVAware struct {
	// CacheWeight must be >= 0; default 1.
	CacheWeight float64 `yaml:"cache_weight"`
	// LoadWeight must be >= 0; default 1.
	LoadWeight float64 `yaml:"load_weight"`
}

// HotPrefix tunes how cost_model spreads a root prefix whose prefill demand
// is more than one replica should carry.
type HotPrefix struct {
	// Blocks is the length of a root prefix in KV blocks; 0 turns hot
	// prefix replication off. Must be >= 0; default 4.
	Blocks int `yaml:"blocks"`
	// Window is the decay window of the demand count. Must be > 0; default 10s.
	Window Duration `yaml:"window"`
	// Utilization is the share of one replica's time (0 to 1] a root
	// prefix's prefill may take before it gets more owners. Default 0.5.
	Utilization float64 `yaml:"utilization"`
	// Demand is what makes a prefix hot: "share" (the default), the
	// prefill the chosen replicas compute or the prefix's share of the
	// fleet's arrivals in replicas' worth, whichever is more; "prefill",
	// the computed prefill alone; "prompt", each request's whole prompt's
	// prefill as if nothing were cached.
	Demand string `yaml:"demand"`
	// Copies credits a replica without the root prefix with the waiting a
	// copy there would have saved the prefix's requests lately, so that a
	// copy is made where its one miss costs less than that. Default true.
	Copies bool `yaml:"copies"`
}

// Health configures active health checks and passive ejection.
type Health struct {
	// Interval is the time between two probes of a replica. Must be
	// >= 10ms; default 1s.
	Interval Duration `yaml:"interval"`
	// Timeout bounds one probe. Must be > 0 and <= Interval; default 500ms.
	Timeout Duration `yaml:"timeout"`
	// UnhealthyInterval is the time between two probes of a replica that
	// probes took out of rotation, so that one restarting is back soon
	// after it answers; a port that refuses connections costs little to
	// ask. 0 (the default) means a quarter of Interval; else at least 10ms
	// and at most Interval.
	UnhealthyInterval Duration `yaml:"unhealthy_interval"`
	// UnhealthyThreshold is the number of failed probes in a row that take a
	// replica out of rotation, and of failed requests in a row that eject
	// it. Must be >= 1; default 3.
	UnhealthyThreshold int `yaml:"unhealthy_threshold"`
	// HealthyThreshold is the number of passing probes in a row that bring
	// a replica back. Must be >= 1; default 1.
	HealthyThreshold int `yaml:"healthy_threshold"`
	// EjectionBackoff is how long a first ejection lasts; each repeat
	// doubles it. Must be > 0; default 5s.
	EjectionBackoff Duration `yaml:"ejection_backoff"`
	// MaxEjectionBackoff caps the doubling. Must be >= EjectionBackoff;
	// default 60s.
	MaxEjectionBackoff Duration `yaml:"max_ejection_backoff"`
	// MaxEjectionPercent is the largest share, in percent, of a model's
	// healthy replicas that failed requests may eject. 0 to 100; default 50.
	MaxEjectionPercent int `yaml:"max_ejection_percent"`
}

// Retry configures retries on another replica, which happen only before the
// first response byte reaches the client.
type Retry struct {
	// MaxAttempts counts every attempt, the first included; 1 means no retry.
	// Must be >= 1; default 3.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff is the wait before the first retry; it doubles on each
	// further one. Must be >= 0; default 25ms.
	Backoff Duration `yaml:"backoff"`
	// MaxBackoff caps the doubling. Must be >= Backoff; default 250ms.
	MaxBackoff Duration `yaml:"max_backoff"`
}

// Upstream configures the gateway's connections to engines.
type Upstream struct {
	// HTTP2 speaks h2c with prior knowledge to engines instead of HTTP/1.1.
	// Default false.
	HTTP2 bool `yaml:"http2"`
	// ConnectTimeout bounds dialing an engine. Must be > 0; default 2s.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// MaxIdleConnsPerHost is the number of idle connections kept to each
	// engine. Must be >= 1; default 256.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
	// TLS configures connections to https:// engines.
	TLS UpstreamTLS `yaml:"tls"`
}

// Tokenizer tunes how the gateway tokenizes prompts at its edge.
type Tokenizer struct {
	// Workers is the number of goroutines that tokenize bodies over 1 KiB
	// (smaller ones are tokenized inline). Must be between 1 and 1024;
	// default 4.
	Workers int `yaml:"workers"`
	// MaxWait bounds how long a request waits for its tokens, queueing
	// included; past it the request is routed without a prediction. Must be
	// > 0; default 50ms.
	MaxWait Duration `yaml:"max_wait"`
	// CacheTokens bounds the tokens of repeated prompt pieces (shared system
	// prompts, earlier turns) kept tokenized per model, a piece counted at
	// its text's bytes over four when that is more than its tokens. Must
	// be >= 0; 0 turns the cache off. Default 4194304.
	CacheTokens int `yaml:"cache_tokens"`
	// Verify compares, at startup, each model's tokens for a few probe
	// requests with an engine's /tokenize; a model whose tokens differ
	// routes without predictions. Default true; turn it off only for
	// engines that stand in for the model without its tokenizer.
	Verify bool `yaml:"verify"`
}

// Index tunes the gateway's KV index, its picture of every replica's cache.
type Index struct {
	// DefaultCapacityBlocks is a replica's cache size in blocks when neither
	// the config nor its engine says. Must be >= 1; default 16384.
	DefaultCapacityBlocks int `yaml:"default_capacity_blocks"`
	// Mode says where predictions come from: "approximate" (the gateway's
	// own routing decisions; the default), "exact" (each engine's KV
	// events, a replica falling back to approximate while its stream is
	// down, silent or not caught up) or "auto" (exact, and a replica whose
	// events over-predict its engine's cache hits also falls back).
	Mode string `yaml:"mode"`
	// SpeculativeTTL is how long a prompt routed to an events-fed replica
	// counts as cached there before the engine's events confirm it. Must be
	// >= 0; 0 turns speculation off. Default 2s.
	SpeculativeTTL Duration `yaml:"speculative_ttl"`
	// KVEvents are the defaults of every replica's kv_events.
	KVEvents KVEvents `yaml:"kv_events"`
}

// Index modes.
const (
	IndexApproximate = "approximate"
	IndexExact       = "exact"
	IndexAuto        = "auto"
)

// KVEvents are how the gateway reaches engines' KV event streams unless a
// replica says otherwise.
type KVEvents struct {
	// Port is the engines' PUB port on their URL host. 1-65535; default
	// 5557, vLLM's.
	Port int `yaml:"port"`
	// ReplayPort is the engines' replay port on their URL host; 0 (the
	// default, as vLLM has no replay socket unless configured) means none.
	ReplayPort int `yaml:"replay_port"`
	// Topic is the topic prefix to subscribe to. Default "", every topic.
	Topic string `yaml:"topic"`
	// Silence is how long a stream may say nothing while its engine
	// reports new prompts before the replica falls back to approximate
	// predictions. Must be > 0; default 3s.
	Silence Duration `yaml:"silence"`
}

// EngineLoad tunes how the gateway reads engines' own metrics pages.
type EngineLoad struct {
	// ScrapeInterval is the time between scrapes of one engine's /metrics.
	// Must be >= 10ms; default 100ms.
	ScrapeInterval Duration `yaml:"scrape_interval"`
	// ScrapeTimeout bounds one scrape (pages are also capped at 4 MiB).
	// Default 100ms.
	ScrapeTimeout Duration `yaml:"scrape_timeout"`
	// MaxAge is how old an engine's report, counted from when its scrape
	// was sent, may be before routing treats it as missing and falls back to
	// the gateway's own counts. At least ScrapeInterval + ScrapeTimeout.
	// Default 250ms.
	MaxAge Duration `yaml:"max_age"`
}

// Logging configures the gateway's log.
type Logging struct {
	// Level is the lowest level logged: debug, info, warn or error.
	// Default info.
	Level string `yaml:"level"`
	// Format is text or json. Default text.
	Format string `yaml:"format"`
	// LogPrompts allows request bodies in logs. Default false: bodies are
	// never logged.
	LogPrompts bool `yaml:"log_prompts"`
}

// Defaults of list items, which Default cannot hold.
const (
	defaultMaxConcurrency = 256
	defaultMaxPending     = 64
	// pendingUnset marks a max_pending the file leaves out, until the
	// decoder knows max_concurrency: the default is the smaller of the two,
	// so an engine that takes 32 sequences needs max_concurrency alone.
	// No file writes it: a -1, say, is refused as any value below 1 is.
	pendingUnset     = math.MinInt
	defaultRefresh   = Duration(5 * time.Second)
	defaultBlockSize = 16
)

// Default returns a Config holding every default, without models, replicas
// or DNS groups; it does not validate until those are added.
func Default() Config {
	return Config{
		Server: Server{
			Listen:             "0.0.0.0:8080",
			AdminListen:        "127.0.0.1:9090",
			RequestTimeout:     Duration(60 * time.Second),
			HeaderReadTimeout:  Duration(10 * time.Second),
			ShutdownTimeout:    Duration(30 * time.Second),
			MaxBodyBytes:       32 << 20,
			CORSAllowedOrigins: []string{"*"},
			ReloadInterval:     Duration(2 * time.Second),
		},
		Auth: Auth{ReloadInterval: Duration(time.Second)},
		Routing: Routing{
			DefaultPolicy:     "least_request",
			Epsilon:           1,
			Kappa:             0.92,
			ShortPromptTokens: 256,
			KVGuard:           "free_blocks",
			SessionAffinity:   true,
			Pace:              true,
			EngineQueue:       true,
			CostModel: CostModel{
				PrefillTokenSecs:       0.0001,
				PrefillPairSecs:        0.0000000033,
				PrefillFixedSecs:       0.005,
				DecodeInterferenceSecs: 0.0005,
			},
			PrefixHash: PrefixHash{Blocks: 4},
			KVAware:    KVAware{CacheWeight: 1, LoadWeight: 1},
			HotPrefix:  HotPrefix{Blocks: 4, Window: Duration(10 * time.Second), Utilization: 0.5, Demand: "share", Copies: true},
		},
		Health: Health{
			Interval:           Duration(time.Second),
			Timeout:            Duration(500 * time.Millisecond),
			UnhealthyThreshold: 3,
			HealthyThreshold:   1,
			EjectionBackoff:    Duration(5 * time.Second),
			MaxEjectionBackoff: Duration(60 * time.Second),
			MaxEjectionPercent: 50,
		},
		Retry: Retry{
			MaxAttempts: 3,
			Backoff:     Duration(25 * time.Millisecond),
			MaxBackoff:  Duration(250 * time.Millisecond),
		},
		Upstream: Upstream{
			ConnectTimeout:      Duration(2 * time.Second),
			MaxIdleConnsPerHost: 256,
		},
		Flow:      Flow{FairShareWindow: Duration(5 * time.Second), PacePrefills: true},
		Tokenizer: Tokenizer{Workers: 4, MaxWait: Duration(50 * time.Millisecond), CacheTokens: 4 << 20, Verify: true},
		Index: Index{DefaultCapacityBlocks: 16384, Mode: IndexApproximate, SpeculativeTTL: Duration(2 * time.Second),
			KVEvents: KVEvents{Port: 5557, Silence: Duration(3 * time.Second)}},
		Load: EngineLoad{
			ScrapeInterval: Duration(100 * time.Millisecond),
			ScrapeTimeout:  Duration(100 * time.Millisecond),
			MaxAge:         Duration(250 * time.Millisecond),
		},
		Logging:       Logging{Level: "info", Format: "text"},
		Observability: defaultObservability(),
	}
}

// defaultReplica and defaultDNSGroup are what a list item starts from before
// its keys are decoded onto it.
func defaultModel() Model { return Model{BlockSize: defaultBlockSize} }

func defaultReplica() Replica {
	return Replica{MaxConcurrency: defaultMaxConcurrency, MaxPending: pendingUnset}
}

func defaultDNSGroup() DNSGroup {
	return DNSGroup{Refresh: defaultRefresh, MaxConcurrency: defaultMaxConcurrency, MaxPending: pendingUnset}
}

// ResolveModel returns the name of the model that name names, either as its
// name or as one of its aliases, and whether there is one. It scans the
// models, so a hot path should build its own map once per Config.
func (c *Config) ResolveModel(name string) (canonical string, ok bool) {
	for _, m := range c.Models {
		if m.Name == name {
			return m.Name, true
		}
	}
	for _, m := range c.Models {
		for _, a := range m.Aliases {
			if a == name {
				return m.Name, true
			}
		}
	}
	return "", false
}

// ModelSplit returns the policies that route the model that name (a model
// name or alias) names, with their shares: its own split, else its own
// policy alone, else routing.split, else routing.default_policy alone.
func (c *Config) ModelSplit(name string) Split {
	if m := c.model(name); m != nil {
		switch {
		case m.Split != nil:
			return m.Split
		case m.Policy != "":
			return Split{{Policy: m.Policy, Percent: maxPercent}}
		}
	}
	if c.Routing.Split != nil {
		return c.Routing.Split
	}
	return Split{{Policy: c.Routing.DefaultPolicy, Percent: maxPercent}}
}

// ModelShadow returns the shadow policies of the model that name names: its
// own list when it has one, else routing.shadow.
func (c *Config) ModelShadow(name string) PolicyList {
	if m := c.model(name); m != nil && m.Shadow != nil {
		return m.Shadow
	}
	return c.Routing.Shadow
}

// model returns the model that name (a name or alias) names, or nil.
func (c *Config) model(name string) *Model {
	canonical, ok := c.ResolveModel(name)
	if !ok {
		return nil
	}
	for i := range c.Models {
		if c.Models[i].Name == canonical {
			return &c.Models[i]
		}
	}
	return nil
}

// ModelCostModel returns the cost model of the model that name names:
// routing.cost_model with the model's own keys laid over it.
func (c *Config) ModelCostModel(name string) CostModel {
	if m := c.model(name); m != nil {
		return m.CostModel.Apply(c.Routing.CostModel)
	}
	return c.Routing.CostModel
}

// defaultPending is the max_pending of an item that leaves it out: 64, or
// its max_concurrency when that is less (and at least 1, so that a bad
// max_concurrency is the one error reported).
func defaultPending(maxPending *int, maxConcurrency int) {
	if *maxPending == pendingUnset {
		*maxPending = max(min(defaultMaxPending, maxConcurrency), 1)
	}
}

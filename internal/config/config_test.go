package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.yaml.in/yaml/v3"

	"github.com/inferrail/inferrail/internal/filewatch"
)

const (
	exampleFile = "../../deploy/inferrail.example.yaml"
	localFile   = "../../deploy/local.yaml"
)

// messages returns the message of every error joined in err.
func messages(err error) []string {
	var out []string
	for _, e := range unjoin(err) {
		out = append(out, e.Error())
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func sec(n int64) Duration { return Duration(time.Duration(n) * time.Second) }
func ms(n int64) Duration  { return Duration(time.Duration(n) * time.Millisecond) }

func TestGoodFiles(t *testing.T) {
	full := Default()
	full.Server = Server{
		Listen:             "127.0.0.1:18080",
		AdminListen:        "127.0.0.1:19090",
		RequestTimeout:     sec(90),
		HeaderReadTimeout:  sec(5),
		ShutdownTimeout:    0,
		MaxBodyBytes:       1 << 20,
		ReloadInterval:     ms(500),
		CORSAllowedOrigins: []string{"*"},
	}
	full.Models = []Model{
		{Name: "meta-llama/Llama-3.1-8B-Instruct", Aliases: []string{"llama-8b", "llama"}, Policy: "p2c", Tokenizer: "builtin:sim", BlockSize: 32,
			CostModel: &CostModelOverride{PrefillPairSecs: ptr(0.000000004), DecodeInterferenceSecs: ptr(0.0)}},
		{Name: "Qwen/Qwen3-8B", Policy: "round_robin", BlockSize: 16, Shadow: []string{},
			ChatTemplateKwargs: `{"depth":2,"enable_thinking":false}`},
	}
	full.Replicas = []Replica{
		{ID: "gpu-0", URL: "http://10.0.0.10:8000/engine", Models: []string{"meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"}, MaxConcurrency: 128, MaxPending: 32, KVCapacityBlocks: 18000,
			KVEvents: ReplicaKVEvents{Endpoint: "tcp://10.0.0.10:6557", ReplayEndpoint: "tcp://10.0.0.10:6558", Topic: "kv"}},
		{ID: "gpu_1.b", URL: "https://[fd00::1]:8443", Models: []string{"Qwen/Qwen3-8B"}, MaxConcurrency: 1, MaxPending: 1},
	}
	full.Discovery.DNS = []DNSGroup{{
		Name: "llama-pool", URL: "http://vllm.inference.svc.cluster.local:8000",
		Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}, Refresh: sec(2), MaxConcurrency: 64, MaxPending: 16, KVCapacityBlocks: 9000,
	}}
	full.Tokenizer = Tokenizer{Workers: 2, MaxWait: Duration(20 * time.Millisecond), Verify: false}
	full.Index = Index{DefaultCapacityBlocks: 4096, Mode: IndexAuto, SpeculativeTTL: Duration(1500 * time.Millisecond),
		KVEvents: KVEvents{Port: 5600, ReplayPort: 5601, Topic: "events", Silence: sec(5)}}
	full.Load = EngineLoad{ScrapeInterval: Duration(50 * time.Millisecond), ScrapeTimeout: Duration(40 * time.Millisecond), MaxAge: Duration(200 * time.Millisecond)}
	full.Routing = Routing{
		DefaultPolicy: "random", Split: Split{{"p2c", 75}, {"kv_aware", 25}}, Shadow: []string{"least_request", "cost_model"}, Seed: -42, Epsilon: 0.25, Kappa: 0.8, ShortPromptTokens: 0, KVGuard: "free_blocks", SessionAffinity: true, HistoryAffinity: true, Pace: true, QueueFloor: true, BacklogCost: true,
		CostModel:  CostModel{PrefillTokenSecs: 0.00005, PrefillPairSecs: 2e-9, PrefillFixedSecs: 0, DecodeInterferenceSecs: 0.001},
		PrefixHash: PrefixHash{Blocks: 8},
		KVAware:    KVAware{CacheWeight: 2, LoadWeight: 0.5},
		HotPrefix:  HotPrefix{Blocks: 2, Window: sec(30), Utilization: 1, Demand: "prompt", Copies: true},
	}
	full.Health = Health{
		Interval: sec(2), Timeout: sec(2), UnhealthyThreshold: 5, HealthyThreshold: 2,
		EjectionBackoff: sec(1), MaxEjectionBackoff: sec(1), MaxEjectionPercent: 100,
	}
	full.Retry = Retry{MaxAttempts: 1}
	full.Upstream = Upstream{HTTP2: true, ConnectTimeout: ms(100), MaxIdleConnsPerHost: 1}
	full.Logging = Logging{Level: "debug", Format: "json", LogPrompts: true}
	full.Observability = Observability{OTLPEndpoint: "http://collector:4317", OTLPProtocol: OTLPGRPC, TraceSampleRatio: 0.25,
		DecisionLog: DecisionLog{Path: "/var/log/inferrail/decisions.jsonl", SampleRate: 0.01, MaxSizeMB: 20},
		Capture:     Capture{Path: "/var/log/inferrail/capture.jsonl", SampleRate: 0.5, MaxSizeMB: 50, MaxFiles: 3, MaxBlockIDs: 200000},
		ShadowLog:   "/var/log/inferrail/shadow.jsonl"}

	minimal := Default()
	minimal.Models = []Model{{Name: "m", BlockSize: 16}}
	minimal.Replicas = []Replica{{ID: "r", URL: "http://127.0.0.1:8000", Models: []string{"m"}, MaxConcurrency: 256, MaxPending: 64}}

	dnsOnly := Default()
	dnsOnly.Models = []Model{{Name: "meta-llama/Llama-3.1-8B-Instruct", Aliases: []string{"llama-8b"}, BlockSize: 16}}
	dnsOnly.Discovery.DNS = []DNSGroup{{
		Name: "llama-pool", URL: "https://vllm.inference.svc.cluster.local",
		Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}, Refresh: sec(5), MaxConcurrency: 256, MaxPending: 64,
	}}

	anchors := Default()
	anchors.Models = []Model{{Name: "m", Aliases: []string{"m-alias"}, BlockSize: 16}, {Name: "n", Aliases: []string{"n-alias"}, BlockSize: 16}}
	both := []string{"m", "n"}
	anchors.Replicas = []Replica{
		{ID: "gpu-0", URL: "http://10.0.0.10:8000", Models: both, MaxConcurrency: 8, MaxPending: 4},
		{ID: "gpu-1", URL: "http://10.0.0.11:8000", Models: both, MaxConcurrency: 8, MaxPending: 4},
		{ID: "gpu-2", URL: "http://10.0.0.12:8000", Models: both, MaxConcurrency: 8, MaxPending: 2},
	}

	withAuth := Default()
	withAuth.Server.AdminListen = "[::1]:9090"
	withAuth.Server.TLS = ServerTLS{CertFile: "/etc/inferrail/tls.crt", KeyFile: "/etc/inferrail/tls.key", ClientCAFile: "/etc/inferrail/clients.pem"}
	withAuth.Auth = Auth{KeysFile: "keys.yaml", AdminKeysFile: "admin-keys.yaml", ReloadInterval: ms(250)}
	withAuth.Models = []Model{{Name: "m", BlockSize: 16, Limits: Limits{RequestsPerMinute: 600, PromptTokensPerMinute: MaxPerMinute}}}
	withAuth.Replicas = []Replica{{ID: "r", URL: "https://engine.internal:8443", Models: []string{"m"}, MaxConcurrency: 256, MaxPending: 64}}
	withAuth.Upstream.TLS = UpstreamTLS{CAFile: "/etc/inferrail/engines-ca.pem", CertFile: "/etc/inferrail/gateway.crt",
		KeyFile: "/etc/inferrail/gateway.key", ServerName: "vllm.internal"}

	tests := map[string]Config{
		"auth.good.yaml":     withAuth,
		"minimal.good.yaml":  minimal,
		"full.good.yaml":     full,
		"dns-only.good.yaml": dnsOnly,
		"anchors.good.yaml":  anchors,
	}
	files, err := filepath.Glob("testdata/*.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(tests) {
		t.Errorf("testdata has %d good files, the table %d", len(files), len(tests))
	}
	for name, want := range tests {
		t.Run(strings.TrimSuffix(name, ".good.yaml"), func(t *testing.T) {
			got, err := Load(filepath.Join("testdata", name))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(want, *got); diff != "" {
				t.Errorf("Load(%s) mismatch (-want +got):\n%s", name, diff)
			}
		})
	}
}

// badFiles lists every message each bad file must produce, in order.
var badFiles = map[string][]string{
	"unknown-keys.bad.yaml": {
		"line 2: serve: unknown key",
		"line 6: server.read_timeout: unknown key",
		"line 9: models[0].tokeniser: unknown key",
		"line 14: replicas[0].kv_blocks: unknown key",
		"line 20: discovery.dns[0].port: unknown key",
		"line 21: discovery.static: unknown key",
		"line 22: surprises: unknown key",
	},
	"duplicate-keys.bad.yaml": {
		"line 4: models[0].name: duplicate key; it is first set at line 3",
		"line 11: health.interval: duplicate key; it is first set at line 10",
		"line 12: models: duplicate key; it is first set at line 2",
	},
	"types.bad.yaml": {
		"line 2: server: must be a mapping of keys to values",
		"line 4: models[0].name: must be a string",
		"line 5: models[1]: must not be null",
		"line 7: models[2].aliases: must be a list",
		"line 11: replicas[0].models[1]: must not be null",
		"line 12: replicas[0].max_concurrency: must be an integer",
		"line 13: replicas[0].max_pending: must be an integer",
		"line 15: routing.seed: must be an integer",
		"line 17: health.interval: must have a unit, such as 250ms or 2s",
		"line 18: health.timeout: must have a unit, such as 250ms or 2s",
		"line 19: health.ejection_backoff: must be a duration such as 250ms or 2s",
		"line 20: health.max_ejection_backoff: must be a duration such as 250ms or 2s",
		"line 21: health.unhealthy_threshold: must be an integer",
		"line 23: retry.backoff: must have a unit, such as 250ms or 2s",
		"line 25: upstream.http2: must be true or false",
		"line 27: logging.log_prompts: must be true or false",
		"line 28: logging.level: must be a string",
	},
	"two-documents.bad.yaml": {
		"line 7: a config file holds one YAML document, but another starts here",
	},
	"syntax.bad.yaml": {
		"yaml: line 6: mapping values are not allowed in this context",
	},
	"not-a-mapping.bad.yaml": {
		"line 1: must be a mapping of keys to values",
	},
	"merge.bad.yaml": {
		"line 5: models[0]: a merge key (<<) names a mapping that contains it",
		"line 7: replicas[0]: a merge key (<<) must name a mapping or a list of mappings",
		"line 11: replicas[0]: keys must be strings",
		"line 13: replicas[0]: keys must be strings",
	},
	"empty.bad.yaml": {
		"models: at least one model is required",
		"replicas: at least one replica or discovery.dns group is required",
	},
	"server.bad.yaml": {
		"line 8: server.listen: must be host:port, such as 127.0.0.1:8080",
		"line 9: server.admin_listen: must have a numeric port between 0 and 65535",
		"line 10: server.request_timeout: must be > 0",
		"line 11: server.header_read_timeout: must be > 0",
		"line 12: server.shutdown_timeout: must be >= 0",
		"line 13: server.max_body_bytes: must be > 0",
	},
	"auth.bad.yaml": {
		"line 4: models[0].limits.requests_per_minute: must be between 0 (no limit) and 10000000000",
		"line 5: models[0].limits.prompt_tokens_per_minute: must be between 0 (no limit) and 10000000000",
		"line 11: server.tls.cert_file: required with server.tls.key_file",
		"line 13: server.tls.client_ca_file: needs server.tls.cert_file: client certificates are asked for over TLS only",
		"line 16: auth.admin_keys_file: must not be auth.keys_file: every client key would open the admin port",
		"line 17: auth.reload_interval: must be >= 10ms",
		"line 19: upstream.tls.key_file: required with upstream.tls.cert_file",
		"line 21: upstream.tls.server_name: must be a host name or an IP address",
	},
	"flow.bad.yaml": {
		"line 3: models[0].ttft_target: must be between 0s (none) and 1h",
		"line 10: flow.class_max_queued.standard: must be at most flow.max_queued (10)",
		"line 10: flow.class_max_queued.sheddable: must be >= 0",
		"line 11: flow.key_max_queued: must be >= 0",
		"line 12: flow.max_wait: must be >= 0",
	},
	"listen-host.bad.yaml": {
		"line 2: server.listen: must have an IP address or a host name before the port, or nothing for every address",
	},
	"same-port.bad.yaml": {
		"line 4: server.admin_listen: must not listen where server.listen (:9090) does",
	},
	"control.bad.yaml": {
		"line 2: server.reload_interval: must be 0 (off) or >= 10ms",
		"line 5: models[0].split: percents must add up to 100, not 120",
		`line 6: models[0].shadow[1]: "p2c" is listed twice`,
		`line 6: models[0].shadow[2]: must be one of round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model, not "fastest"`,
		"line 9: models[1].split: must be a mapping of policy names to percents, such as {cost_model: 90, kv_aware: 10}",
		"line 10: models[1].chat_template_kwargs: must be a mapping, or a string holding a JSON object",
		"line 12: models[2].split.cost_model: must be an integer",
		"line 12: models[2].split.kv_aware: must be an integer",
		"line 16: routing.split.fastest: is not a policy: must be one of round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model",
		"line 16: routing.split.p2c: must be a percent from 0 to 100",
		"line 17: routing.shadow: must be a list",
	},
	"routing.bad.yaml": {
		"line 4: models[0].cost_model.prefill_token_secs: must be >= 0",
		"line 5: models[0].cost_model.prefill_fixed_secs: must be a number",
		"line 9: routing.epsilon: must be > 0",
		"line 10: routing.kappa: must be between 0 and 1",
		"line 11: routing.short_prompt_tokens: must be >= 0",
		"line 13: routing.cost_model.prefill_pair_secs: must be a number",
		"line 14: routing.cost_model.decode_interference_secs: must be >= 0",
		"line 15: routing.prefix_hash.blocks: must be >= 1",
		"line 16: routing.kv_aware.cache_weight: must be >= 0",
		"line 17: routing.hot_prefix.blocks: must be >= 0",
		"line 17: routing.hot_prefix.window: must be > 0",
		"line 17: routing.hot_prefix.utilization: must be > 0 and <= 1",
		`line 17: routing.hot_prefix.demand: must be prefill, prompt or share, got "uncached"`,
		`line 18: routing.kv_guard: must be usage or free_blocks, not "blocks"`,
		"line 20: health.unhealthy_interval: must be 0 or between 10ms and health.interval (1s)",
	},
	"models.bad.yaml": {
		`line 4: models[0].aliases[1]: "llama" is already used at models[0].name`,
		"line 5: models[1].name: required",
		"line 6: models[1].aliases[0]: must not be empty",
		`line 7: models[2].name: "llama-8b" is already used at models[0].aliases[0]`,
		"line 7: models[2]: no replica or dns group serves it",
		`line 8: models[2].policy: must be empty or one of round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model, not "kv-aware"`,
		`line 10: models[3].aliases[1]: "q" is already used at models[3].aliases[0]`,
		`line 11: models[3].policy: must be empty or one of round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model, not "Round_Robin"`,
		`line 12: models[4].name: "llama" is already used at models[0].name`,
		"line 13: models[5].name: must be printable text without leading or trailing spaces",
		"line 14: models[5].aliases[0]: must be printable text without leading or trailing spaces",
	},
	"index.bad.yaml": {
		`line 8: replicas[0].kv_events.endpoint: must be a tcp:// endpoint, got "ipc:///tmp/kv"`,
		`line 9: replicas[0].kv_events.replay_endpoint: must be tcp://host:port, got "tcp://*:5558"`,
		`line 14: replicas[1].kv_events.endpoint: port must be within 1-65535, got "tcp://127.0.0.1:0"`,
		`line 15: replicas[1].kv_events.replay_endpoint: must be tcp://host:port, got "tcp://127.0.0.1"`,
		`line 17: index.mode: must be approximate, exact or auto, got "exactly"`,
		"line 18: index.speculative_ttl: must be >= 0",
		"line 20: index.kv_events.port: must be within 1-65535",
		"line 21: index.kv_events.replay_port: must be within 0-65535",
		"line 22: index.kv_events.silence: must be > 0",
	},
	"replicas.bad.yaml": {
		"line 6: replicas[0].id: may only hold letters, digits, '.', '_' and '-'",
		"line 9: replicas[1].id: required",
		"line 10: replicas[1].models: at least one model is required",
		"line 11: replicas[2].id: must be at most 63 characters",
		`line 13: replicas[2].models[1]: "m-alias" is an alias; name the model "m"`,
		`line 13: replicas[2].models[2]: "gpt-4" is not a configured model`,
		`line 13: replicas[2].models[3]: "m" is listed twice`,
		"line 13: replicas[2].models[4]: must not be empty",
		"line 17: replicas[3].max_concurrency: must be >= 1",
		"line 18: replicas[3].max_pending: must be >= 1",
		`line 19: replicas[4].id: "dup" is already used at replicas[3].id`,
		"line 23: replicas[4].max_pending: must be <= max_concurrency (16)",
	},
	"urls.bad.yaml": {
		"line 4: replicas[0].url: required",
		"line 5: replicas[1].url: must be an absolute http or https URL",
		"line 6: replicas[2].url: must be an absolute http or https URL",
		"line 7: replicas[3].url: must be an absolute http or https URL",
		"line 8: replicas[4].url: must not have a query or fragment",
		"line 9: replicas[5].url: must not have a query or fragment",
		"line 10: replicas[6].url: must not hold a user or password",
		"line 11: replicas[7].url: must have a port between 1 and 65535 after the colon",
		"line 12: replicas[8].url: must have a port between 1 and 65535 after the colon",
		"line 13: replicas[9].url: must have a port between 1 and 65535 after the colon",
		"line 14: replicas[10].url: must be an absolute http or https URL",
		"line 15: replicas[11].url: must be an absolute http or https URL",
	},
	"dns.bad.yaml": {
		`line 9: discovery.dns[0].name: "gpu-0" is already used at replicas[0].id`,
		"line 12: discovery.dns[1].name: must be at most 40 characters",
		"line 13: discovery.dns[1].url: must be an absolute http or https URL",
		`line 14: discovery.dns[1].models[0]: "nope" is not a configured model`,
		"line 15: discovery.dns[1].refresh: must be >= 10ms",
		"line 16: discovery.dns[2].name: may only hold letters, digits, '.', '_' and '-'",
		"line 18: discovery.dns[2].models: at least one model is required",
		"line 20: discovery.dns[2].max_pending: must be <= max_concurrency (4)",
		"line 21: discovery.dns[3].name: required",
		`line 26: discovery.dns[5].name: "pool-e" is already used at discovery.dns[4].name`,
		"line 29: discovery.dns[5].refresh: must be >= 10ms",
	},
	"member-id.bad.yaml": {
		`line 4: replicas[0].id: "pool-127.0.0.1-45001" has the form of a member ID of the dns group at discovery.dns[0].name (pool-<ip>-<port>)`,
		`line 10: replicas[2].id: "pool-a-10.0.0.1-80" has the form of a member ID of the dns group at discovery.dns[1].name (pool-a-<ip>-<port>)`,
	},
	"chat.bad.yaml": {
		`line 4: models[0].chat_template_content_format: must be empty or one of auto, string, openai, not "OpenAI"`,
		"line 5: models[0].chat_template_kwargs: must not set tokenize: vLLM refuses it",
		"line 7: models[1].chat_template_kwargs: must be a JSON object",
		"line 11: models[2].chat_template: must be empty with tokenizer builtin:sim, which renders the simulator's own template",
		"line 12: models[2].chat_template_content_format: must be empty with tokenizer builtin:sim, which renders the simulator's own template",
		"line 13: models[2].chat_template_kwargs: must be empty with tokenizer builtin:sim, which renders the simulator's own template",
	},
	"observability.bad.yaml": {
		"line 8: observability.otlp_endpoint: must be an absolute http or https URL",
		`line 9: observability.otlp_protocol: must be http/protobuf or grpc, not "http/json"`,
		"line 10: observability.trace_sample_ratio: must be between 0 and 1",
		"line 12: observability.decision_log.sample_rate: must be between 0 and 1",
		"line 13: observability.decision_log.max_size_mb: must be >= 1",
		"line 14: observability.decision_log.max_files: must be >= 0",
	},
	"observability-grpc.bad.yaml": {
		"line 8: observability.otlp_endpoint: must have no path with otlp_protocol grpc: a gRPC collector is named by its address",
		"line 11: observability.decision_log.path: must name a file, not a directory",
	},
	"unserved.bad.yaml": {
		"line 4: models[1]: no replica or dns group serves it",
	},
	"sections.bad.yaml": {
		`line 9: routing.default_policy: must be one of round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model, not ""`,
		"line 11: health.interval: must be >= 10ms",
		"line 12: health.timeout: must be > 0",
		"line 13: health.unhealthy_threshold: must be >= 1",
		"line 14: health.healthy_threshold: must be >= 1",
		"line 15: health.ejection_backoff: must be > 0",
		"line 16: health.max_ejection_backoff: must be >= health.ejection_backoff (0s)",
		"line 17: health.max_ejection_percent: must be between 0 and 100",
		"line 19: retry.max_attempts: must be >= 1",
		"line 20: retry.backoff: must be >= 0",
		"line 21: retry.max_backoff: must be >= retry.backoff (-1ms)",
		"line 23: upstream.connect_timeout: must be > 0",
		"line 24: upstream.max_idle_conns_per_host: must be >= 1",
		`line 26: logging.level: must be one of debug, info, warn, error, not "verbose"`,
		`line 27: logging.format: must be text or json, not "JSON"`,
	},
	"timeouts.bad.yaml": {
		// max_ejection_backoff is not in the file: the line is its section's.
		"line 8: health.max_ejection_backoff: must be >= health.ejection_backoff (90s)",
		"line 10: health.timeout: must be <= health.interval (1s)",
		"line 12: retry.max_backoff: must be >= retry.backoff (1s)",
		"line 16: load.scrape_timeout: must be > 0",
		"line 17: load.max_age: must be >= load.scrape_interval + load.scrape_timeout (200ms)",
		"line 19: tokenizer.workers: must be between 1 and 1024",
		"line 20: tokenizer.max_wait: must be > 0",
		"line 22: index.default_capacity_blocks: must be >= 1",
	},
	"ordering.bad.yaml": {
		`line 4: logging.format: must be text or json, not "yaml"`,
		"line 6: health.timeout: must be <= health.interval (1s)",
		`line 10: replicas[0].models[1]: "llama" is not a configured model`,
		"line 11: replicas[0].max_pending: must be <= max_concurrency (256)",
		`line 14: models[0].policy: must be empty or one of round_robin, random, least_request, p2c, prefix_hash, kv_aware, cost_model, not "fastest"`,
		"line 17: server.admin_listen: must not listen where server.listen (:8080) does",
		"line 18: server.typo: unknown key",
	},
}

func TestBadFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(badFiles) {
		t.Errorf("testdata has %d bad files, the table %d", len(files), len(badFiles))
	}
	for name, want := range badFiles {
		t.Run(strings.TrimSuffix(name, ".bad.yaml"), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse(data)
			if cfg != nil || err == nil {
				t.Fatalf("Parse(%s) = %+v, %v; want an error", name, cfg, err)
			}
			if diff := cmp.Diff(want, messages(err)); diff != "" {
				t.Errorf("Parse(%s) messages (-want +got):\n%s", name, diff)
			}
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join("testdata", "same-port.bad.yaml")
	_, err := Load(path)
	want := path + ":4: server.admin_listen: must not listen where server.listen (:9090) does"
	if err == nil || err.Error() != want {
		t.Errorf("Load(%s) = %v, want %s", path, err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.File != path || e.Line != 4 || e.Path != "server.admin_listen" {
		t.Errorf("Load(%s) error = %#v, want an *Error with file, line and path", path, e)
	}

	path = filepath.Join("testdata", "syntax.bad.yaml")
	_, err = Load(path)
	want = path + ": yaml: line 6: mapping values are not allowed in this context"
	if err == nil || err.Error() != want {
		t.Errorf("Load(%s) = %v, want %s", path, err, want)
	}

	// What yaml refuses without a line (a byte not UTF-8, a control
	// character) is named with its line.
	for text, want := range map[string]string{
		"models: []\n# caf\xe9\n":        "x.yaml:2: the file is not UTF-8 here (a byte 0xe9)",
		"models: []\nreplicas: [\x00]\n": "x.yaml:2: a control character (U+0000) is not allowed in YAML",
		"a: \u0085ok\nb: \u0086\n":       "x.yaml:2: a control character (U+0086) is not allowed in YAML",
	} {
		if _, err := ParseFile([]byte(text), "x.yaml"); err == nil || err.Error() != want {
			t.Errorf("ParseFile(%q) = %v, want %s", text, err, want)
		}
	}

	_, err = Load(filepath.Join("testdata", "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want os.ErrNotExist", err)
	}
}

// TestYAMLStrictDecoder checks that yaml's own strict decoder, which Parse
// consults after its own, rejects unknown keys at every level and duplicated
// keys: the custom types (Duration) and list items must not switch it off.
func TestYAMLStrictDecoder(t *testing.T) {
	const base = "models: [{name: m}]\nreplicas: [{id: r, url: 'http://h', models: [m]}]\n"
	if err := strictDecode([]byte(base)); err != nil {
		t.Fatalf("strictDecode(base) = %v", err)
	}
	for name, doc := range map[string]string{
		"top":        base + "surprises: {}\n",
		"section":    base + "health: {interval: 1s, jitter: 1s}\n",
		"model":      "models: [{name: m, tokeniser: x}]\nreplicas: [{id: r, url: 'http://h', models: [m]}]\n",
		"replica":    "models: [{name: m}]\nreplicas: [{id: r, url: 'http://h', models: [m], weight: 2}]\n",
		"dns":        base + "discovery: {dns: [{name: p, url: 'http://p', models: [m], port: 1}]}\n",
		"duplicate":  base + "retry: {max_attempts: 1, max_attempts: 2}\n",
		"duplicate2": base + "retry: {}\nretry: {}\n",
		"duration":   base + "health: {interval: 5}\n",
	} {
		if err := strictDecode([]byte(doc)); err == nil {
			t.Errorf("%s: yaml's strict decoder accepted %q", name, doc)
		}
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("%s: Parse accepted %q", name, doc)
		}
	}
}

// schemaKeys lists the key paths of a type, with [] for list items:
// "server.listen", "replicas[].id".
func schemaKeys(t reflect.Type, prefix string, out map[string]bool) {
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		out[p] = true
		ft := f.Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && !leafTypes[ft] {
			schemaKeys(ft.Elem(), p+"[]", out)
		} else if ft.Kind() == reflect.Struct && !leafTypes[ft] {
			schemaKeys(ft, p, out)
		}
	}
}

// documentKeys lists the key paths of a YAML document as schemaKeys does,
// and those of keys without a comment on their line.
func documentKeys(n *yaml.Node, prefix string, keys map[string]bool, uncommented *[]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		documentKeys(n.Content[0], prefix, keys, uncommented)
	case yaml.SequenceNode:
		for _, item := range n.Content {
			documentKeys(item, prefix+"[]", keys, uncommented)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if prefix != "" {
				p = prefix + "." + k.Value
			}
			keys[p] = true
			section := v.Kind == yaml.MappingNode && v.Style != yaml.FlowStyle
			if !section && k.LineComment == "" && v.LineComment == "" {
				*uncommented = append(*uncommented, p)
			}
			if v.Kind == yaml.MappingNode && (k.Value == "split" || k.Value == "chat_template_kwargs") {
				continue // a value that is a mapping, not a section of keys
			}
			documentKeys(v, p, keys, uncommented)
		}
	}
}

// TestExampleFile keeps deploy/inferrail.example.yaml true: it parses, it
// states every default as Default has it, and it names every key of the
// schema, each with a comment.
func TestExampleFile(t *testing.T) {
	cfg, err := Load(exampleFile)
	if err != nil {
		t.Fatalf("Load(%s): %v", exampleFile, err)
	}
	def := Default()
	for _, s := range []struct {
		name      string
		got, want any
	}{
		{"server", cfg.Server, def.Server},
		{"auth", cfg.Auth, def.Auth},
		{"routing", cfg.Routing, def.Routing},
		{"health", cfg.Health, def.Health},
		{"retry", cfg.Retry, def.Retry},
		{"flow", cfg.Flow, def.Flow},
		{"upstream", cfg.Upstream, def.Upstream},
		{"tokenizer", cfg.Tokenizer, def.Tokenizer},
		{"index", cfg.Index, def.Index},
		{"load", cfg.Load, def.Load},
		{"logging", cfg.Logging, def.Logging},
		{"observability", cfg.Observability, def.Observability},
	} {
		if diff := cmp.Diff(s.want, s.got); diff != "" {
			t.Errorf("%s in %s differs from Default() (-default +file):\n%s", s.name, exampleFile, diff)
		}
	}
	if len(cfg.Models) != 1 || len(cfg.Replicas) != 1 || len(cfg.Discovery.DNS) != 1 {
		t.Fatalf("%s has %d models, %d replicas, %d dns groups; want one of each",
			exampleFile, len(cfg.Models), len(cfg.Replicas), len(cfg.Discovery.DNS))
	}
	m := cfg.Models[0]
	wantM := defaultModel()
	wantM.Name, wantM.Aliases = m.Name, m.Aliases
	if diff := cmp.Diff(wantM, m); diff != "" {
		t.Errorf("%s: models[0] does not state the defaults (-default +file):\n%s", exampleFile, diff)
	}
	r := cfg.Replicas[0]
	wantR := defaultReplica()
	wantR.ID, wantR.URL, wantR.Models = r.ID, r.URL, r.Models
	defaultPending(&wantR.MaxPending, wantR.MaxConcurrency)
	if diff := cmp.Diff(wantR, r); diff != "" {
		t.Errorf("%s: replicas[0] does not state the defaults (-default +file):\n%s", exampleFile, diff)
	}
	g := cfg.Discovery.DNS[0]
	wantG := defaultDNSGroup()
	wantG.Name, wantG.URL, wantG.Models = g.Name, g.URL, g.Models
	defaultPending(&wantG.MaxPending, wantG.MaxConcurrency)
	if diff := cmp.Diff(wantG, g); diff != "" {
		t.Errorf("%s: discovery.dns[0] does not state the defaults (-default +file):\n%s", exampleFile, diff)
	}

	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	schema, found := map[string]bool{}, map[string]bool{}
	var uncommented []string
	schemaKeys(reflect.TypeFor[Config](), "", schema)
	documentKeys(&doc, "", found, &uncommented)
	for k := range schema {
		if !found[k] {
			t.Errorf("%s does not mention %s", exampleFile, k)
		}
	}
	for k := range found {
		if !schema[k] {
			t.Errorf("%s mentions %s, which is not in the schema", exampleFile, k)
		}
	}
	slices.Sort(uncommented)
	for _, k := range uncommented {
		t.Errorf("%s: %s has no comment on its line", exampleFile, k)
	}
}

func TestLocalFile(t *testing.T) {
	cfg, err := Load(localFile)
	if err != nil {
		t.Fatalf("Load(%s): %v", localFile, err)
	}
	want := Default()
	want.Models = []Model{{Name: "inferrail/sim-8b", Aliases: []string{"sim"}, Tokenizer: "builtin:sim", BlockSize: 16}}
	want.Routing.DefaultPolicy = "cost_model"
	for i, port := range []string{"8001", "8002", "8003"} {
		r := defaultReplica()
		r.ID = "sim-" + strconv.Itoa(i+1)
		r.URL = "http://127.0.0.1:" + port
		r.Models = []string{"inferrail/sim-8b"}
		defaultPending(&r.MaxPending, r.MaxConcurrency)
		want.Replicas = append(want.Replicas, r)
	}
	if diff := cmp.Diff(want, *cfg, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Load(%s) mismatch (-want +got):\n%s", localFile, diff)
	}
	if got, ok := cfg.ResolveModel("sim"); !ok || got != "inferrail/sim-8b" {
		t.Errorf("ResolveModel(sim) = %q, %v; want inferrail/sim-8b, true", got, ok)
	}
}

func TestDefaultNeedsModelsAndReplicas(t *testing.T) {
	c := Default()
	want := []string{
		"models: at least one model is required",
		"replicas: at least one replica or discovery.dns group is required",
	}
	if diff := cmp.Diff(want, messages(c.Validate())); diff != "" {
		t.Errorf("Default().Validate() (-want +got):\n%s", diff)
	}
}

// TestValidateIsPure checks that Validate reports without lines, on a Config
// built in code, and changes nothing, not even an unnormalized URL.
func TestValidateIsPure(t *testing.T) {
	c := Default()
	c.Models = []Model{{Name: "m", Aliases: []string{"a"}}}
	c.Replicas = []Replica{{ID: "r", URL: "http://h:1/", Models: []string{"a"}, MaxConcurrency: 1, MaxPending: 2}}
	before := c
	before.Models = slices.Clone(c.Models)
	before.Replicas = slices.Clone(c.Replicas)
	want := []string{
		`replicas[0].models[0]: "a" is an alias; name the model "m"`,
		"replicas[0].max_pending: must be <= max_concurrency (1)",
		"models[0]: no replica or dns group serves it",
	}
	for range 2 {
		if diff := cmp.Diff(want, messages(c.Validate())); diff != "" {
			t.Errorf("Validate() (-want +got):\n%s", diff)
		}
	}
	if diff := cmp.Diff(before, c); diff != "" {
		t.Errorf("Validate changed the config (-before +after):\n%s", diff)
	}
	for _, err := range unjoin(c.Validate()) {
		var e *Error
		if !errors.As(err, &e) || e.Line != 0 || e.File != "" {
			t.Errorf("Validate error %#v: want an *Error without file or line", err)
		}
	}
}

// TestReplicaCountBounded checks that the static list is bounded, at the
// bound and one past it.
func TestReplicaCountBounded(t *testing.T) {
	for _, n := range []int{maxReplicas, maxReplicas + 1} {
		c := Default()
		c.Models = []Model{{Name: "m"}}
		for i := range n {
			c.Replicas = append(c.Replicas, Replica{ID: fmt.Sprintf("r%d", i), URL: fmt.Sprintf("http://h%d:1", i), Models: []string{"m"}, MaxConcurrency: 1, MaxPending: 1})
		}
		var want []string
		if n > maxReplicas {
			want = []string{fmt.Sprintf("replicas: at most %d replicas may be listed, got %d", maxReplicas, n)}
		}
		if diff := cmp.Diff(want, messages(c.Validate())); diff != "" {
			t.Errorf("%d replicas: Validate() (-want +got):\n%s", n, diff)
		}
	}
}

// TestFileSizeBounded: a config file with a list longer than MaxListItems,
// or more than MaxNodes nodes in all, is refused after parsing with one
// problem that names the list and its line, rather than decoded with a
// problem for each item (a list of 500,000 numbers took 3.5 s of CPU and
// 560 MB). A list at the bound is decoded as any other.
func TestFileSizeBounded(t *testing.T) {
	const base = "models: [{name: m}]\nreplicas: [{id: r, url: 'http://h:1', models: [m]}]\n"
	list := func(items int) string { return "[" + strings.Repeat("1, ", items-1) + "1]" }
	for _, tt := range []struct {
		name string
		doc  string
		want Error // Msg "" with Path: decoded, its first problem at Path
	}{
		{name: "at_the_bound", doc: base + "nope: " + list(MaxListItems) + "\n", want: Error{Path: "nope"}},
		{name: "one_more", doc: base + "routing:\n  shadow: " + list(MaxListItems+1) + "\n",
			want: Error{File: "big.yaml", Line: 4, Path: "routing.shadow", Msg: fmt.Sprintf("a list may hold at most %d items, not %d", MaxListItems, MaxListItems+1)}},
		{name: "block_list_in_a_list", doc: "models: [{name: m}]\nreplicas:\n  - id: r\n    models:\n" + strings.Repeat("      - m\n", 100_000),
			want: Error{File: "big.yaml", Line: 5, Path: "replicas[0].models", Msg: fmt.Sprintf("a list may hold at most %d items, not %d", MaxListItems, 100_000)}},
		{name: "lists_adding_up", doc: base + "nope: [" + strings.Repeat(list(MaxListItems)+", ", 4) + list(MaxListItems) + "]\n",
			want: Error{File: "big.yaml", Msg: fmt.Sprintf("the document holds %d keys and values, more than the %d a config may hold", 5*(MaxListItems+1)+19, MaxNodes)}}, // the five lists and their items, and the 19 nodes of the rest
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFile([]byte(tt.doc), "big.yaml")
			errs := unjoin(err)
			ce, ok := errors.AsType[*Error](err)
			if !ok {
				t.Fatalf("ParseFile = %.200v, want an *Error", err)
			}
			if tt.want.Msg == "" {
				if ce.Path != tt.want.Path {
					t.Errorf("ParseFile = %.200v, want it decoded and its first problem at %s", err, tt.want.Path)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("ParseFile = %d problems (%.200v), want one", len(errs), err)
			}
			if diff := cmp.Diff(tt.want, *ce); diff != "" {
				t.Errorf("ParseFile problem (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveModelAndPolicy(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "full.good.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Routing.Split = nil
	for _, tt := range []struct {
		name, canonical string
		ok              bool
		policy          string
	}{
		{"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", true, "p2c"},
		{"llama-8b", "meta-llama/Llama-3.1-8B-Instruct", true, "p2c"},
		{"llama", "meta-llama/Llama-3.1-8B-Instruct", true, "p2c"},
		{"Qwen/Qwen3-8B", "Qwen/Qwen3-8B", true, "round_robin"},
		{"qwen/qwen3-8b", "", false, "random"}, // names are case sensitive
		{"", "", false, "random"},
	} {
		canonical, ok := cfg.ResolveModel(tt.name)
		if canonical != tt.canonical || ok != tt.ok {
			t.Errorf("ResolveModel(%q) = %q, %v; want %q, %v", tt.name, canonical, ok, tt.canonical, tt.ok)
		}
		want := Split{{Policy: tt.policy, Percent: 100}}
		if got := cfg.ModelSplit(tt.name); !slices.Equal(got, want) {
			t.Errorf("ModelSplit(%q) = %v, want %v", tt.name, got, want)
		}
	}
	cfg.Models[1].Policy = ""
	if got := cfg.ModelSplit("Qwen/Qwen3-8B"); !slices.Equal(got, Split{{"random", 100}}) {
		t.Errorf("ModelSplit of a model without a policy = %v, want routing.default_policy random", got)
	}
	// A split: the model's own wins over its policy, and routing's over
	// the default policy only.
	cfg.Routing.Split = Split{{"kv_aware", 30}, {"p2c", 70}}
	if got := cfg.ModelSplit("Qwen/Qwen3-8B"); !slices.Equal(got, cfg.Routing.Split) {
		t.Errorf("ModelSplit with routing.split = %v, want %v", got, cfg.Routing.Split)
	}
	if got := cfg.ModelSplit("llama"); !slices.Equal(got, Split{{"p2c", 100}}) {
		t.Errorf("ModelSplit of a model with its own policy under routing.split = %v, want its policy", got)
	}
	cfg.Models[0].Split = Split{{"cost_model", 100}}
	if got := cfg.ModelSplit("llama"); !slices.Equal(got, cfg.Models[0].Split) {
		t.Errorf("ModelSplit of a model with its own split = %v, want it", got)
	}
	// Shadows: the model's own list, even empty, else routing's.
	cfg.Routing.Shadow = []string{"p2c"}
	if got := cfg.ModelShadow("llama"); !slices.Equal(got, []string{"p2c"}) {
		t.Errorf("ModelShadow without its own = %v, want routing.shadow", got)
	}
	cfg.Models[0].Shadow = []string{}
	if got := cfg.ModelShadow("llama"); got == nil || len(got) != 0 {
		t.Errorf("ModelShadow with an empty list = %#v, want it (none)", got)
	}
}

func TestDuration(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Duration
		text string // how it marshals
	}{
		{"250ms", ms(250), "250ms"},
		{"2s", sec(2), "2s"},
		{"60s", sec(60), "60s"},
		{"1m", sec(60), "60s"},
		{"1m30s", sec(90), "90s"},
		{"1.5s", ms(1500), "1500ms"},
		{"0s", 0, "0s"},
		{"-5s", sec(-5), "-5s"},
		{"1h", sec(3600), "3600s"},
		{"3us", Duration(3 * time.Microsecond), "3us"},
		{"3µs", Duration(3 * time.Microsecond), "3us"},
		{"7ns", 7, "7ns"},
		{`"5s"`, sec(5), "5s"},
		{"-9223372036854775808ns", Duration(-1 << 63), "-9223372036854775808ns"},
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(tt.in), &n); err != nil {
			t.Fatal(err)
		}
		got, msg := parseDuration(n.Content[0])
		if msg != "" || got != tt.want {
			t.Errorf("parseDuration(%s) = %v, %q; want %v", tt.in, time.Duration(got), msg, time.Duration(tt.want))
		}
		if s := tt.want.String(); s != tt.text {
			t.Errorf("Duration(%d).String() = %q, want %q", tt.want, s, tt.text)
		}
	}
	for _, tt := range []struct{ in, msg string }{
		{"5", "must have a unit, such as 250ms or 2s"},
		{"0", "must have a unit, such as 250ms or 2s"},
		{"1.5", "must have a unit, such as 250ms or 2s"},
		{`"5"`, "must have a unit, such as 250ms or 2s"},
		{"0x10", "must have a unit, such as 250ms or 2s"},
		{"1e3", "must have a unit, such as 250ms or 2s"},
		{"1h1", "must have a unit, such as 250ms or 2s"},
		{"5 s", "must be a duration such as 250ms or 2s"},
		{"soon", "must be a duration such as 250ms or 2s"},
		{"true", "must be a duration such as 250ms or 2s"},
		{"!!binary NXM=", "must be a duration such as 250ms or 2s"},
		{"[5s]", "must be a duration such as 250ms or 2s"},
		{"9999999999h", "must be a duration such as 250ms or 2s"},
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(tt.in), &n); err != nil {
			t.Fatal(err)
		}
		if got, msg := parseDuration(n.Content[0]); msg != tt.msg {
			t.Errorf("parseDuration(%s) = %v, %q; want %q", tt.in, time.Duration(got), msg, tt.msg)
		}
	}
}

// TestDurationWithYAML checks Duration through yaml's own Marshal and
// Unmarshal, which reach it through its methods.
func TestDurationWithYAML(t *testing.T) {
	type doc struct {
		D Duration `yaml:"d"`
	}
	out, err := yaml.Marshal(doc{D: ms(250)})
	if err != nil || string(out) != "d: 250ms\n" {
		t.Errorf("Marshal = %q, %v; want \"d: 250ms\\n\"", out, err)
	}
	var d doc
	if err := yaml.Unmarshal([]byte("d: 2s"), &d); err != nil || d.D != sec(2) {
		t.Errorf("Unmarshal(d: 2s) = %v, %v; want 2s", d.D, err)
	}
	err = yaml.Unmarshal([]byte("d: 5"), &d)
	var te *yaml.TypeError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "line 1: must have a unit") {
		t.Errorf("Unmarshal(d: 5) = %v; want a *yaml.TypeError asking for a unit", err)
	}
}

// bomb is a billion laughs: ten levels of lists of nine aliases to the level
// below, 9^9 "lol"s expanded.
func bomb(under string) string {
	var b strings.Builder
	b.WriteString("l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= 9; i++ {
		p := fmt.Sprintf("*l%d", i-1)
		fmt.Fprintf(&b, "l%d: &l%d [%s%s]\n", i, i, strings.Repeat(p+", ", 8), p)
	}
	b.WriteString(under)
	return b.String()
}

// schemaBomb expands only where the schema leads: replicas that are aliases
// of one whose model list is long, and merge keys that merge the level below
// nine times.
func schemaBomb() string {
	var b strings.Builder
	b.WriteString("models: [{name: m}]\nreplicas:\n  - &r {id: r, url: 'http://h', models: &ms [m")
	b.WriteString(strings.Repeat(", m", 300))
	b.WriteString("]}\n")
	b.WriteString(strings.Repeat("  - *r\n", 300))
	b.WriteString("  - &m0 {id: x, url: 'http://h', models: *ms}\n")
	for i := 1; i <= 9; i++ {
		p := fmt.Sprintf("*m%d", i-1)
		fmt.Fprintf(&b, "  - &m%d {<<: [%s%s]}\n", i, strings.Repeat(p+", ", 8), p)
	}
	return b.String()
}

// TestAliasBombs checks that aliases cannot blow a small file up. yaml's own
// decoder refuses a billion laughs decoded into an interface ("excessive
// aliasing"); into our struct it never expands one, as its keys are unknown.
// Ours refuses anything that aliases make more than aliasFactor times larger.
func TestAliasBombs(t *testing.T) {
	var v any
	if err := yaml.Unmarshal([]byte(bomb("")), &v); err == nil || !strings.Contains(err.Error(), "excessive aliasing") {
		t.Errorf("yaml.Unmarshal(billion laughs) = %v, want excessive aliasing", err)
	}
	const expands = "aliases expand the document beyond "
	for _, tt := range []struct {
		name, doc string
		want      string // the start of the one message expected, if any
	}{
		{"laughs", bomb(""), ""},
		{"laughs-models", bomb("models: *l9\n"), ""},
		{"laughs-aliases", bomb("models: [{name: m, aliases: *l9}]\n"), ""},
		{"schema", schemaBomb(), expands},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Without its guard Parse would run for hours: wait for it
			// only so long, and fail instead of hanging the test binary.
			type result struct {
				cfg *Config
				err error
			}
			done := make(chan result, 1)
			go func() {
				cfg, err := Parse([]byte(tt.doc))
				done <- result{cfg, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(slow):
				t.Fatalf("Parse did not return within %v", slow)
			}
			if r.cfg != nil || r.err == nil {
				t.Fatalf("Parse accepted an alias bomb")
			}
			errs := unjoin(r.err)
			if len(errs) > 20 {
				t.Errorf("Parse reported %d problems, want few", len(errs))
			}
			var e *Error
			if tt.want != "" && (len(errs) != 1 || !errors.As(errs[0], &e) || !strings.HasPrefix(e.Msg, tt.want)) {
				t.Errorf("Parse = %v, want only %q", r.err, tt.want)
			}
		})
	}
}

func TestModelCostModel(t *testing.T) {
	cfg, err := Parse([]byte(`
models:
  - name: a
    aliases: [alias-a]
    cost_model: {prefill_fixed_secs: 0.002}
  - name: b
replicas:
  - {id: r, url: "http://127.0.0.1:8001", models: [a, b]}
routing:
  cost_model: {prefill_token_secs: 0.0002}
`))
	if err != nil {
		t.Fatal(err)
	}
	base := Default().Routing.CostModel
	wantB := base
	wantB.PrefillTokenSecs = 0.0002
	wantA := wantB
	wantA.PrefillFixedSecs = 0.002
	for _, tc := range []struct {
		name string
		want CostModel
	}{{"a", wantA}, {"alias-a", wantA}, {"b", wantB}, {"unknown", wantB}} {
		if got := cfg.ModelCostModel(tc.name); got != tc.want {
			t.Errorf("ModelCostModel(%q) = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestReadFileIsBounded(t *testing.T) {
	dir := t.TempDir()
	at := filepath.Join(dir, "at.yaml")
	over := filepath.Join(dir, "over.yaml")
	if err := os.WriteFile(at, bytes.Repeat([]byte("#"), MaxFileBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(over, bytes.Repeat([]byte("#"), MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(at); err != nil || len(data) != MaxFileBytes {
		t.Errorf("ReadFile(at the bound) = %d bytes, %v; want all of it", len(data), err)
	}
	_, err := Load(over)
	if err == nil || !strings.Contains(err.Error(), "larger than 16 MiB") {
		t.Errorf("Load(over the bound) = %v, want a size error", err)
	}
	// A device that never ends is refused before it is read, not read until memory runs out.
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := Load("/dev/zero"); !errors.Is(err, filewatch.ErrNotRegular) {
			t.Errorf("Load(/dev/zero) = %v, want filewatch.ErrNotRegular", err)
		}
	}
}

// A period shorter than MinPeriod would spin a timer loop; 0 stays "off"
// where the key has an off.
func TestPeriodsHaveAFloor(t *testing.T) {
	const base = "models: [{name: m}]\nreplicas: [{id: r, url: \"http://127.0.0.1:1\", models: [m]}]\n"
	for _, tc := range []struct{ yaml, want string }{
		{"server: {reload_interval: 1ns}", "server.reload_interval: must be 0 (off) or >= 10ms"},
		{"server: {reload_interval: 9ms}", "server.reload_interval: must be 0 (off) or >= 10ms"},
		{"auth: {reload_interval: 1us}", "auth.reload_interval: must be >= 10ms"},
		{"health: {interval: 1ms, timeout: 1ms}", "health.interval: must be >= 10ms"},
		{"health: {unhealthy_interval: 1ms}", "health.unhealthy_interval: must be 0 or between 10ms and health.interval (1s)"},
		{"load: {scrape_interval: 5ms}", "load.scrape_interval: must be >= 10ms"},
		{"server: {reload_interval: 0s}", ""},
		{"server: {reload_interval: 10ms}\nauth: {reload_interval: 10ms}\nload: {scrape_interval: 10ms}\nhealth: {interval: 10ms, timeout: 10ms, unhealthy_interval: 10ms}", ""},
	} {
		_, err := Parse([]byte(base + tc.yaml))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", tc.yaml, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestCORSAllowedOrigins(t *testing.T) {
	for o, want := range map[string]bool{
		"https://app.example.com": true, "http://localhost:3000": true, "http://[::1]:8000": true, "http://10.0.0.1": true,
		"https://app.example.com/": false, "https://app.example.com/x": false, "app.example.com": false, "ftp://h": false,
		"https://u@h": false, "https://h?q": false, "https://h#f": false, "https://": false, "null": false, "*.example.com": false,
		"HTTPS://h": false, "https://h:": false, "https://h:0": false, "https://h:65536": false, "https://h:443": true,
	} {
		if got := isWebOrigin(o); got != want {
			t.Errorf("isWebOrigin(%q) = %v, want %v", o, got, want)
		}
	}
	c := Default()
	c.Models = []Model{{Name: "m"}}
	c.Replicas = []Replica{{ID: "r", URL: "http://h:1", Models: []string{"m"}, MaxConcurrency: 1, MaxPending: 1}}
	c.Server.CORSAllowedOrigins = []string{"*", "https://ok.example", "https://bad.example/"}
	want := []string{`server.cors_allowed_origins[2]: must be "*" or an origin such as https://app.example.com (scheme, host and port only), got "https://bad.example/"`}
	if diff := cmp.Diff(want, messages(c.Validate())); diff != "" {
		t.Errorf("Validate() (-want +got):\n%s", diff)
	}
}

// TestCostModelBounded: each cost model coefficient, routing's or a
// model's, is at most MaxCoefficientSecs. Huge finite ones (1e305) passed,
// and estimates then overflowed to +Inf, which JSON answers cannot carry.
func TestCostModelBounded(t *testing.T) {
	for _, tc := range []struct {
		name, set, want string
	}{
		{"routing_at_bound", "routing: {cost_model: {prefill_pair_secs: 3600}}", ""},
		{"routing_huge", "routing: {cost_model: {prefill_pair_secs: 1e305}}", "routing.cost_model.prefill_pair_secs: must be at most 3600"},
		{"routing_nan", "routing: {cost_model: {prefill_token_secs: .nan}}", "routing.cost_model.prefill_token_secs: must be a number"},
		{"routing_negative", "routing: {cost_model: {decode_interference_secs: -1}}", "routing.cost_model.decode_interference_secs: must be >= 0"},
		{"model_huge", "models: [{name: m, cost_model: {prefill_fixed_secs: 3601}}]", "models[0].cost_model.prefill_fixed_secs: must be at most 3600"},
		{"model_infinite", "models: [{name: m, cost_model: {prefill_token_secs: .inf}}]", "models[0].cost_model.prefill_token_secs: must be a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := "replicas: [{id: r, url: \"http://127.0.0.1:8001\", models: [m]}]\n" + tc.set + "\n"
			if !strings.HasPrefix(tc.set, "models") {
				doc = "models: [{name: m}]\n" + doc
			}
			_, err := Parse([]byte(doc))
			var got []string
			for _, m := range messages(err) {
				got = append(got, m[strings.Index(m, ": ")+2:]) // without the line
			}
			want := []string(nil)
			if tc.want != "" {
				want = []string{tc.want}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Parse messages (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTokenizerWorkersBounded: tokenizer.workers has an upper bound. Any
// count >= 1 was valid, and one whose queue (64 per worker) make refuses
// passed --check, then panicked the gateway at start.
func TestTokenizerWorkersBounded(t *testing.T) {
	for _, tc := range []struct {
		workers int
		ok      bool
	}{{1, true}, {1024, true}, {1025, false}, {144115188075855872, false}, {0, false}} {
		cfg := Default()
		cfg.Models = []Model{{Name: "m"}}
		cfg.Replicas = []Replica{{ID: "r", URL: "http://127.0.0.1:8001", Models: []string{"m"}, MaxConcurrency: 4, MaxPending: 4}}
		cfg.Tokenizer.Workers = tc.workers
		err := cfg.Validate()
		if got := err == nil; got != tc.ok {
			t.Errorf("Validate with tokenizer.workers %d = %v, want valid %v", tc.workers, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "tokenizer.workers: must be between 1 and 1024") {
			t.Errorf("Validate with tokenizer.workers %d = %v, want the bound named", tc.workers, err)
		}
	}
}

// TestMaxPendingDefault: max_pending left out is 64, or max_concurrency
// when that is less, so an engine of 32 sequences is described by
// max_concurrency alone (the default of 64 made that a refused config); one
// written out is checked as before.
func TestMaxPendingDefault(t *testing.T) {
	const head = "models: [{name: m}]\n"
	for _, tt := range []struct {
		body        string
		replica, gr int // the max_pending of replicas[0] and discovery.dns[0]; 0 when refused
	}{
		{"replicas: [{id: a, url: 'http://127.0.0.1:1', models: [m], max_concurrency: 32}]\n" +
			"discovery: {dns: [{name: g, url: 'http://e.internal:1', models: [m], max_concurrency: 16}]}\n", 32, 16},
		{"replicas: [{id: a, url: 'http://127.0.0.1:1', models: [m], max_concurrency: 100}]\n" +
			"discovery: {dns: [{name: g, url: 'http://e.internal:1', models: [m]}]}\n", 64, 64},
		{"replicas: [{id: a, url: 'http://127.0.0.1:1', models: [m], max_concurrency: 8, max_pending: 2}]\n", 2, -1},
		{"replicas: [{id: a, url: 'http://127.0.0.1:1', models: [m], max_concurrency: 8, max_pending: 9}]\n", 0, -1},
		{"replicas: [{id: a, url: 'http://127.0.0.1:1', models: [m], max_pending: 0}]\n", 0, -1},
		{"replicas: [{id: a, url: 'http://127.0.0.1:1', models: [m], max_pending: -1}]\n", 0, -1},
	} {
		cfg, err := Parse([]byte(head + tt.body))
		switch {
		case tt.replica == 0:
			if err == nil || !strings.Contains(err.Error(), "replicas[0].max_pending") {
				t.Errorf("%s: %v, want max_pending refused", tt.body, err)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.body, err)
		case cfg.Replicas[0].MaxPending != tt.replica:
			t.Errorf("%s: max_pending %d, want %d", tt.body, cfg.Replicas[0].MaxPending, tt.replica)
		case tt.gr > 0 && cfg.Discovery.DNS[0].MaxPending != tt.gr:
			t.Errorf("%s: the group's max_pending %d, want %d", tt.body, cfg.Discovery.DNS[0].MaxPending, tt.gr)
		}
	}
}

// TestSharedEngines: static replicas that reach one engine (the same URL,
// or one written another way) are named, so the gateway can warn that
// their caps add up; different engines are not.
func TestSharedEngines(t *testing.T) {
	c := Default()
	for i, u := range []string{
		"http://127.0.0.1:8000", "http://127.0.0.1:8000/", "HTTP://[::ffff:127.0.0.1]:8000",
		"http://127.0.0.1:8001", "http://127.0.0.1:8000/v2", "https://engine.internal", "https://ENGINE.internal:443/",
	} {
		c.Replicas = append(c.Replicas, Replica{ID: fmt.Sprint("r", i), URL: u})
	}
	got := c.SharedEngines()
	if len(got) != 3 || !strings.Contains(got[0], "r0 and r1") || !strings.Contains(got[1], "r0 and r2") || !strings.Contains(got[2], "r5 and r6") {
		t.Errorf("SharedEngines() = %q, want r1 and r2 as r0, r6 as r5", got)
	}
}

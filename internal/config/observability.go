package config

import (
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Observability configures the gateway's OpenTelemetry traces, its
// decision log, its traffic capture and its shadow log. All are off by
// default; traces, the decision log and the capture cost the request path
// nothing while off. All are read at start only.
type Observability struct {
	// OTLPEndpoint is the OTLP collector traces are exported to, an http or
	// https URL (https verifies the collector's certificate). With
	// OTLPProtocol http/protobuf it is the URL spans are posted to, and a
	// URL without a path, such as http://collector:4318, gets the standard
	// /v1/traces; with grpc it is the collector's address and has no path.
	// Empty, the default, turns tracing off: no span is ever created.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// OTLPProtocol is how spans are exported: http/protobuf (the default)
	// or grpc, named as OTEL_EXPORTER_OTLP_PROTOCOL names them.
	OTLPProtocol string `yaml:"otlp_protocol"`
	// TraceSampleRatio is the share of traces the gateway starts that are
	// sampled, from 0 to 1. A request that carries a client's W3C
	// traceparent follows the client's sampling decision instead. Default 1.
	TraceSampleRatio float64 `yaml:"trace_sample_ratio"`
	// DecisionLog writes sampled routing decisions as JSON lines.
	DecisionLog DecisionLog `yaml:"decision_log"`
	// Capture records the traffic, without its text, as a Mooncake-format
	// trace inferrail-bench replays.
	Capture Capture `yaml:"capture"`
	// ShadowLog is a file that every config generation and every shadow
	// decision, with what the shadows saw, is appended to as JSON lines
	// (no prompts), for inferrail-gateway --replay-shadow. Empty means none.
	ShadowLog string `yaml:"shadow_log,omitempty"`
}

// DecisionLog configures the decision log: one JSON line per routing
// decision of the sampled requests, never their prompts.
type DecisionLog struct {
	// Path is the file the log is written to; rotated files are kept
	// beside it with a timestamp in their names. Required when SampleRate
	// is above 0.
	Path string `yaml:"path"`
	// SampleRate is the share of requests whose decisions are logged, from
	// 0 to 1, sampled by request ID so that every attempt of a request is
	// logged or none. Default 0: the log is off.
	SampleRate float64 `yaml:"sample_rate"`
	// MaxSizeMB is the size in megabytes at which the file is rotated. At
	// least 1; default 100.
	MaxSizeMB int `yaml:"max_size_mb"`
	// MaxFiles is how many rotated files are kept besides the current one;
	// older ones are deleted. 0 keeps them all. Default 10.
	MaxFiles int `yaml:"max_files"`
}

// Capture configures the traffic capture: one JSON line per request an
// engine answered, in the Mooncake trace format (arrival in milliseconds
// from the capture's start, input and output lengths in tokens, the
// prompt's KV blocks as small integer ids per model), never any text.
type Capture struct {
	// Path is the file the capture is written to; rotated files are kept
	// beside it with a timestamp in their names. A file already there at
	// start (an earlier capture) is rotated aside, not appended to. Empty,
	// the default, turns the capture off.
	Path string `yaml:"path"`
	// SampleRate is the share of requests captured, from 0 to 1, sampled
	// by request ID. A sampled capture keeps fewer of the prompts that
	// share a prefix, so its replay shows fewer cache hits. Default 1.
	SampleRate float64 `yaml:"sample_rate"`
	// MaxSizeMB is the size in megabytes at which the file is rotated. At
	// least 1; default 100.
	MaxSizeMB int `yaml:"max_size_mb"`
	// MaxFiles is how many rotated files are kept besides the current one;
	// older ones are deleted. 0 keeps them all. Default 10.
	MaxFiles int `yaml:"max_files"`
	// MaxBlockIDs bounds the block hashes each model's id map remembers,
	// at about 56 bytes each when full. Past it, the blocks seen least
	// recently are forgotten: seen again, such a block gets a new id, so
	// the replay misses that prefix once. Ids are never reused. At least
	// 1,000; default 1,000,000.
	MaxBlockIDs int `yaml:"max_block_ids"`
}

// Protocols of Observability.OTLPProtocol.
const (
	OTLPHTTP = "http/protobuf"
	OTLPGRPC = "grpc"
)

// defaultObservability is Default's observability section: everything off.
func defaultObservability() Observability {
	return Observability{
		OTLPProtocol:     OTLPHTTP,
		TraceSampleRatio: 1,
		DecisionLog:      DecisionLog{MaxSizeMB: 100, MaxFiles: 10},
		Capture:          Capture{SampleRate: 1, MaxSizeMB: 100, MaxFiles: 10, MaxBlockIDs: 1_000_000},
	}
}

func (v *validator) observability(o *Observability) {
	switch o.OTLPProtocol {
	case OTLPHTTP, OTLPGRPC:
	default:
		v.fail("observability.otlp_protocol", "must be %s or %s, not %q", OTLPHTTP, OTLPGRPC, o.OTLPProtocol)
	}
	if o.OTLPEndpoint != "" {
		n := len(v.errs)
		v.url("observability.otlp_endpoint", o.OTLPEndpoint)
		if u, err := url.Parse(o.OTLPEndpoint); len(v.errs) == n && err == nil && o.OTLPProtocol == OTLPGRPC && strings.Trim(u.Path, "/") != "" {
			v.fail("observability.otlp_endpoint", "must have no path with otlp_protocol grpc: a gRPC collector is named by its address")
		}
	}
	v.share("observability.trace_sample_ratio", o.TraceSampleRatio)
	dl := &o.DecisionLog
	v.share("observability.decision_log.sample_rate", dl.SampleRate)
	switch {
	case dl.SampleRate > 0 && strings.TrimSpace(dl.Path) == "":
		v.fail("observability.decision_log.path", "required when decision_log.sample_rate is above 0")
	case strings.HasSuffix(dl.Path, "/"):
		v.fail("observability.decision_log.path", "must name a file, not a directory")
	}
	v.atLeast("observability.decision_log.max_size_mb", dl.MaxSizeMB, 1)
	v.atLeast("observability.decision_log.max_files", dl.MaxFiles, 0)
	c := &o.Capture
	switch {
	case c.Path != "" && strings.TrimSpace(c.Path) == "":
		v.fail("observability.capture.path", "must not be blank")
	case strings.HasSuffix(c.Path, "/"):
		v.fail("observability.capture.path", "must name a file, not a directory")
	case c.Path != "" && samePath(c.Path, dl.Path) && dl.SampleRate > 0:
		v.fail("observability.capture.path", "must differ from decision_log.path")
	}
	sl := o.ShadowLog
	switch {
	case sl != "" && strings.TrimSpace(sl) == "":
		v.fail("observability.shadow_log", "must not be blank")
	case strings.HasSuffix(sl, "/"):
		v.fail("observability.shadow_log", "must name a file, not a directory")
	case sl != "" && samePath(sl, dl.Path) && dl.SampleRate > 0:
		v.fail("observability.shadow_log", "must differ from decision_log.path")
	case sl != "" && samePath(sl, c.Path):
		v.fail("observability.shadow_log", "must differ from capture.path")
	}
	v.share("observability.capture.sample_rate", c.SampleRate)
	v.atLeast("observability.capture.max_size_mb", c.MaxSizeMB, 1)
	v.atLeast("observability.capture.max_files", c.MaxFiles, 0)
	v.atLeast("observability.capture.max_block_ids", c.MaxBlockIDs, 1000)
}

// share checks a sampling share: a number from 0 to 1.
func (v *validator) share(path string, x float64) {
	if math.IsNaN(x) || x < 0 || x > 1 {
		v.fail(path, "must be between 0 and 1")
	}
}

// samePath reports whether two configured paths name one file: the same
// path once made absolute and cleaned, or one file reached through a link.
func samePath(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	if aa, err := filepath.Abs(a); err == nil {
		a = aa
	}
	if bb, err := filepath.Abs(b); err == nil {
		b = bb
	}
	if a == b {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

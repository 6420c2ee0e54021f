package sim

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Options are the command-line settings of inferrail-sim: the engine's
// Config plus where to listen.
type Options struct {
	Config
	Host string
	Port int
}

// ParseFlags reads inferrail-sim's flags, named as vLLM names them. Like
// vLLM, --served-model-name takes one or more names after it.
func ParseFlags(args []string, output io.Writer) (Options, error) {
	return ParseCommand(args, output, func(string) (string, bool) { return "", false })
}

// ParseCommand is ParseFlags with the environment vLLM reads (ApplyEnv)
// taken through getenv before the options are checked: an OTLP protocol
// set there decides how --otlp-traces-endpoint is read.
func ParseCommand(args []string, output io.Writer, getenv func(string) (string, bool)) (Options, error) {
	o := Options{Config: DefaultConfig(), Host: "0.0.0.0", Port: 8000}
	fs := flag.NewFlagSet("inferrail-sim", flag.ContinueOnError)
	fs.SetOutput(output)
	var names stringList
	lat := o.Latency
	prefillTokenUS := durationAsFloat(lat.PrefillToken, time.Microsecond)
	prefillFixedMS := durationAsFloat(lat.PrefillFixed, time.Millisecond)
	decodeTokenMS := durationAsFloat(lat.DecodeToken, time.Millisecond)
	decodeSeqUS := durationAsFloat(lat.DecodeSeq, time.Microsecond)
	noPrefix := false
	speedup := 1.0
	kvEvents := ""

	fs.StringVar(&o.Host, "host", o.Host, "address to listen on")
	fs.IntVar(&o.Port, "port", o.Port, "port to listen on")
	fs.StringVar(&o.Model, "model", o.Model, "model path, reported as the model card's root")
	fs.Var(&names, "served-model-name", "names clients may request (one or more; default: --model)")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "tokens per KV block")
	fs.IntVar(&o.NumGPUBlocks, "num-gpu-blocks-override", o.NumGPUBlocks, "KV cache capacity in blocks")
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", o.MaxNumSeqs, "running sequence cap")
	fs.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", o.MaxNumBatchedTokens, "tokens one step may compute; longer prompts prefill in chunks")
	fs.IntVar(&o.MaxModelLen, "max-model-len", o.MaxModelLen, "context length")
	fs.IntVar(&o.SlidingWindow, "sliding-window", 0, "play a hybrid model: sliding-window layers attending to this many tokens, in a KV-cache group of their own beside the full-attention one (0: none)")
	fs.BoolVar(&noPrefix, "no-enable-prefix-caching", false, "keep no finished blocks")
	fs.BoolVar(&o.EnablePromptTokensDetails, "enable-prompt-tokens-details", false, "report cached tokens in usage")
	fs.Float64Var(&prefillTokenUS, "prefill-token-us", prefillTokenUS, "a: microseconds per computed prompt token")
	fs.Float64Var(&o.Latency.PrefillPair, "prefill-pair-ns", lat.PrefillPair, "b: nanoseconds per (computed, attended) token pair")
	fs.Float64Var(&prefillFixedMS, "prefill-fixed-ms", prefillFixedMS, "d: milliseconds per prefill")
	fs.Float64Var(&decodeTokenMS, "decode-token-ms", decodeTokenMS, "decode step time for one sequence, in milliseconds")
	fs.Float64Var(&decodeSeqUS, "decode-seq-us", decodeSeqUS, "microseconds each further sequence adds to a decode step")
	fs.BoolVar(&o.ZeroLatency, "zero-latency", false, "answer as fast as possible, for overhead benchmarks")
	fs.Float64Var(&speedup, "speedup", speedup, "run this many times faster than the latency flags say (every step's time divided by it), 1 to 1000")
	fs.StringVar(&kvEvents, "kv-events-config", "", `publish KV events, as vLLM's flag of the same name: JSON such as {"enable_kv_cache_events": true}`)
	fs.StringVar(&o.KVEventsEncoding, "kv-events-encoding", "map", "how KV event batches are encoded: map (vLLM today), array (vLLM before June 2026) or sglang")
	fs.StringVar(&o.PrefixCachingHashAlgo, "prefix-caching-hash-algo", "sha256", "the engine's block hash for KV events: sha256, sha256_cbor, xxhash or xxhash_cbor")
	fs.IntVar(&o.DataParallelRank, "data-parallel-rank", 0, "stamped on KV event batches and added to their endpoints' ports; the metrics' engine label")
	fs.BoolVar(&o.EnableAutoToolChoice, "enable-auto-tool-choice", false, `answer chats whose tool_choice is "auto" (sent, or implied by tools), "required" or a named tool; needs --tool-call-parser`)
	fs.StringVar(&o.ToolCallParser, "tool-call-parser", "", "vLLM's tool call parser for the model, such as hermes, llama3_json, mistral, qwen3_coder (any name is taken)")
	fs.StringVar(&o.OTLPTracesEndpoint, "otlp-traces-endpoint", "", "OTLP collector for a span per request, continuing its traceparent "+
		"(grpc by default; OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf for HTTP)")

	if err := fs.Parse(joinMultiValued(args, "served-model-name")); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.ServedModelNames = names
	o.EnablePrefixCaching = !noPrefix
	var errs []string
	if kvEvents != "" {
		c, err := ParseKVEventsConfig(kvEvents)
		if err != nil {
			errs = append(errs, err.Error())
		}
		o.KVEvents = c
	}
	// check says what is wrong with a latency of v units, "" when nothing.
	check := func(v float64, unit time.Duration) string {
		switch {
		case v < 0 || math.IsNaN(v) || math.IsInf(v, 0):
			return fmt.Sprintf("must be a non-negative number, got %v", v)
		case v*float64(unit) >= float64(math.MaxInt64): // 2^63 as a float: equal is past it
			return fmt.Sprintf("must be at most %d (what a duration of nanoseconds holds), got %v", int64(math.MaxInt64)/int64(unit), v)
		}
		return ""
	}
	conv := func(name string, v float64, unit time.Duration) time.Duration {
		if msg := check(v, unit); msg != "" {
			errs = append(errs, "--"+name+": "+msg)
			return 0
		}
		return time.Duration(v * float64(unit))
	}
	o.Latency.PrefillToken = conv("prefill-token-us", prefillTokenUS, time.Microsecond)
	o.Latency.PrefillFixed = conv("prefill-fixed-ms", prefillFixedMS, time.Millisecond)
	o.Latency.DecodeToken = conv("decode-token-ms", decodeTokenMS, time.Millisecond)
	o.Latency.DecodeSeq = conv("decode-seq-us", decodeSeqUS, time.Microsecond)
	// Bounded as the other latency flags are, by what a Duration of
	// nanoseconds holds.
	if msg := check(o.Latency.PrefillPair, time.Nanosecond); msg != "" {
		errs = append(errs, "--prefill-pair-ns: "+msg)
	}
	if !(speedup >= 1 && speedup <= 1000) {
		errs = append(errs, fmt.Sprintf("--speedup: must be within 1-1000, got %v", speedup))
	} else {
		o.Latency = o.Latency.Faster(speedup)
	}
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Sprintf("--port: must be within 0-65535, got %d", o.Port))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	o.ApplyEnv(getenv)
	return o, o.Config.Validate()
}

// ApplyEnv reads the environment variables vLLM reads for KV events:
// PYTHONHASHSEED (seeds the first block's parent hash; unset, a random seed
// per start) and VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES ("0" sends whole
// digests); and for traces OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL. getenv is os.LookupEnv in the binary.
func (c *Config) ApplyEnv(getenv func(string) (string, bool)) {
	c.HashSeed, c.HashSeedSet = getenv("PYTHONHASHSEED")
	if v, ok := getenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"); ok {
		c.BytesBlockHashes = v == "0" || strings.EqualFold(v, "false")
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v, ok := getenv(k); ok && c.OTLPTracesProtocol == "" {
			c.OTLPTracesProtocol = v
		}
	}
}

func durationAsFloat(d, unit time.Duration) float64 { return float64(d) / float64(unit) }

// stringList is a flag that may repeat and may hold several names.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, " ") }

func (l *stringList) Set(v string) error {
	for _, f := range strings.Fields(v) {
		*l = append(*l, f)
	}
	return nil
}

// joinMultiValued rewrites "--name a b --next" into "--name=a b --next" so
// the flag package sees vLLM's nargs='+' form as one value.
func joinMultiValued(args []string, name string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a != "--"+name && a != "-"+name {
			out = append(out, a)
			continue
		}
		var vals []string
		for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			vals = append(vals, args[i])
		}
		out = append(out, a+"="+strings.Join(vals, " "))
	}
	return out
}

package sim

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/inferrail/inferrail/internal/telemetry"
)

// Config describes one simulated engine. Field names follow the vLLM flags
// they stand for.
type Config struct {
	// ServedModelNames are the names clients may ask for; the first names the
	// engine in metrics. Empty means Model.
	ServedModelNames []string
	// Model is the model path reported as the model card's root.
	Model string

	BlockSize           int // tokens per KV block (--block-size, 16)
	NumGPUBlocks        int // KV cache capacity in blocks, null block included (--num-gpu-blocks-override, 4096)
	MaxNumSeqs          int // running sequence cap (--max-num-seqs, 256)
	MaxNumBatchedTokens int // token budget of one step (--max-num-batched-tokens, 2048)
	MaxModelLen         int // context length (--max-model-len, 32768)

	// SlidingWindow, when positive, makes the engine a hybrid model's:
	// beside its full-attention layers it has sliding-window layers that
	// attend to the last SlidingWindow tokens, with a KV-cache group of
	// their own (group 1), as vLLM keeps Gemma 3's or gpt-oss's
	// (--sliding-window; 0: none).
	SlidingWindow int

	EnablePrefixCaching       bool // keep finished blocks for later hits (default true)
	EnablePromptTokensDetails bool // report cached tokens in usage (default false)

	Latency LatencyModel
	// ZeroLatency makes every step free: the engine answers as fast as it can.
	ZeroLatency bool

	// KVEvents is --kv-events-config; the zero value publishes nothing.
	KVEvents KVEventsConfig
	// KVEventsEncoding is how batches are encoded: "map" (vLLM's current
	// msgspec form; empty means it), "array" (vLLM before June 2026) or
	// "sglang" (SGLang's shape).
	KVEventsEncoding string
	// PrefixCachingHashAlgo is --prefix-caching-hash-algo: sha256 (empty
	// means it), sha256_cbor, xxhash or xxhash_cbor. It decides the hashes
	// KV events carry; the engine's own cache is keyed the same either way.
	PrefixCachingHashAlgo string
	// HashSeed is PYTHONHASHSEED, which seeds the first block's parent hash
	// when HashSeedSet; unset, every engine start draws a random one, as
	// vLLM does, so hashes differ between engines and restarts.
	HashSeed    string
	HashSeedSet bool
	// BytesBlockHashes sends whole digests in events instead of their low 64
	// bits (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	BytesBlockHashes bool
	// DataParallelRank is --data-parallel-rank: stamped on every batch, and
	// added to the event endpoints' ports.
	DataParallelRank int

	// OTLPTracesEndpoint is --otlp-traces-endpoint: the OTLP collector a
	// span of every generation request goes to, as vLLM sends one,
	// continuing the trace of the request's traceparent. Empty: none.
	OTLPTracesEndpoint string
	// OTLPTracesProtocol is how spans are exported: grpc (vLLM's default;
	// empty means it) or http/protobuf, as OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
	// sets it.
	OTLPTracesProtocol string

	// EnableAutoToolChoice is --enable-auto-tool-choice: without it, as in
	// vLLM, a chat whose tool_choice is "auto" (sent, or implied by tools
	// sent without one), "required" or a named tool is refused. It needs
	// ToolCallParser.
	EnableAutoToolChoice bool
	// ToolCallParser is --tool-call-parser, the name of vLLM's parser for
	// the model's tool calls. The stand-in model makes no tool calls, so
	// any name is taken.
	ToolCallParser string
}

// DefaultConfig returns vLLM's serving defaults for an 8B model on one 24 GB
// GPU, the simulator's reference engine.
func DefaultConfig() Config {
	return Config{
		Model:               "inferrail/sim-8b",
		BlockSize:           16,
		NumGPUBlocks:        4096,
		MaxNumSeqs:          256,
		MaxNumBatchedTokens: 2048,
		MaxModelLen:         32768,
		EnablePrefixCaching: true,
		Latency:             DefaultLatency(),
	}
}

// kvGroups is how many KV-cache groups the engine keeps: every request
// holds blocks in each.
func (c *Config) kvGroups() int {
	if c.SlidingWindow > 0 {
		return 2
	}
	return 1
}

// ModelName is the name the engine reports in metrics and responses when the
// client did not name one.
func (c *Config) ModelName() string {
	if len(c.ServedModelNames) > 0 {
		return c.ServedModelNames[0]
	}
	return c.Model
}

// Serves reports whether name is one of the served model names.
func (c *Config) Serves(name string) bool {
	if len(c.ServedModelNames) == 0 {
		return name == c.Model
	}
	for _, n := range c.ServedModelNames {
		if n == name {
			return true
		}
	}
	return false
}

// MaxNumGPUBlocks bounds --num-gpu-blocks-override. The pool takes about 60
// bytes a block at start and a few times that once blocks are cached, so
// 2^22 blocks (64Mi tokens at the default block size) stay well under a
// gigabyte, while larger pools exhaust the machine's memory.
const MaxNumGPUBlocks = 1 << 22

// MaxBlockSize bounds --block-size.
const MaxBlockSize = 4096

// Validate reports every setting vLLM would refuse, all at once.
func (c *Config) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %d", name, v))
		}
	}
	positive("--block-size", c.BlockSize)
	positive("--num-gpu-blocks-override", c.NumGPUBlocks)
	positive("--max-num-seqs", c.MaxNumSeqs)
	positive("--max-num-batched-tokens", c.MaxNumBatchedTokens)
	positive("--max-model-len", c.MaxModelLen)
	if c.BlockSize > MaxBlockSize {
		// vLLM's attention backends take blocks of a few hundred tokens at
		// most; a block of millions is a typo that no request would fill.
		// A block longer than --max-model-len is vLLM's too: it is allowed.
		errs = append(errs, fmt.Errorf("--block-size: must be at most %d, got %d", MaxBlockSize, c.BlockSize))
	}
	if c.SlidingWindow < 0 {
		errs = append(errs, fmt.Errorf("--sliding-window: must not be negative, got %d", c.SlidingWindow))
	}
	if c.NumGPUBlocks > MaxNumGPUBlocks {
		errs = append(errs, fmt.Errorf("--num-gpu-blocks-override: must be at most %d, got %d", MaxNumGPUBlocks, c.NumGPUBlocks))
	}
	if c.Model == "" && len(c.ServedModelNames) == 0 {
		errs = append(errs, errors.New("--model: a model name is required"))
	}
	for i, n := range c.ServedModelNames {
		if n == "" {
			errs = append(errs, fmt.Errorf("--served-model-name[%d]: must not be empty", i))
		}
	}
	if c.MaxNumSeqs > 0 && c.MaxNumBatchedTokens > 0 && c.MaxNumBatchedTokens < c.MaxNumSeqs {
		errs = append(errs, fmt.Errorf("--max-num-batched-tokens (%d) must be greater than or equal to --max-num-seqs (%d)",
			c.MaxNumBatchedTokens, c.MaxNumSeqs))
	}
	if c.BlockSize > 0 && c.NumGPUBlocks > 0 && c.MaxModelLen > 0 {
		need := blocksFor(c.MaxModelLen, c.BlockSize) + c.windowReserve(c.MaxModelLen)
		if usable := c.NumGPUBlocks - 1; usable < need {
			errs = append(errs, fmt.Errorf("the KV cache holds %d tokens (%d usable blocks of %d), less than one request of --max-model-len %d needs (%d blocks); raise --num-gpu-blocks-override or lower --max-model-len",
				usable*c.BlockSize, usable, c.BlockSize, c.MaxModelLen, need))
		}
	}
	if err := c.Latency.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateKVEvents()...)
	if c.EnableAutoToolChoice && c.ToolCallParser == "" {
		errs = append(errs, errors.New("--enable-auto-tool-choice requires --tool-call-parser"))
	}
	if c.OTLPTracesEndpoint != "" {
		if _, err := telemetry.Endpoint(traceEndpoint(c.OTLPTracesEndpoint), c.traceProtocol()); err != nil {
			errs = append(errs, fmt.Errorf("--otlp-traces-endpoint: %w", err))
		} else if err := checkPort(traceEndpoint(c.OTLPTracesEndpoint)); err != nil {
			errs = append(errs, fmt.Errorf("--otlp-traces-endpoint: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkPort refuses a URL whose port no socket can have; url.Parse takes
// any digits, and the exporter would only fail later, span after span.
func checkPort(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Port() == "" {
		return nil
	}
	if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %s: must be within 1-65535", u.Port())
	}
	return nil
}

// blocksFor is how many blocks of bs tokens hold tokens (> 0) tokens,
// written so that it cannot overflow for any int: tokens + bs - 1 did for
// --max-model-len 2^63-1, which then passed the startup check.
func blocksFor(tokens, bs int) int {
	return (tokens-1)/bs + 1
}

// LatencyModel prices engine steps. Prefill of u tokens over c cached ones
// costs P(u, c) = a·u + b·u·(c + u/2) + d; a decode step of n sequences costs
// DecodeToken + DecodeSeq·(n−1). A step that holds both pays both.
type LatencyModel struct {
	PrefillToken time.Duration // a: per computed prompt token (--prefill-token-us, 100 µs)
	PrefillPair  float64       // b: nanoseconds per (token, attended token) pair (--prefill-pair-ns, 3.3)
	PrefillFixed time.Duration // d: once per prefill (--prefill-fixed-ms, 5 ms)
	DecodeToken  time.Duration // one sequence's decode step (--decode-token-ms, 20 ms)
	DecodeSeq    time.Duration // each further sequence in a decode step (--decode-seq-us, 100 µs)
}

// DefaultLatency approximates an 8B model on one 24 GB GPU.
func DefaultLatency() LatencyModel {
	return LatencyModel{
		PrefillToken: 100 * time.Microsecond,
		PrefillPair:  3.3,
		PrefillFixed: 5 * time.Millisecond,
		DecodeToken:  20 * time.Millisecond,
		DecodeSeq:    100 * time.Microsecond,
	}
}

// Faster divides every price of m by f, so the engine behaves exactly as m
// says on a clock that runs f times faster: what takes a second in m takes
// 1/f s. Benchmarks use it to fit long runs into less time.
func (m LatencyModel) Faster(f float64) LatencyModel {
	div := func(d time.Duration) time.Duration { return time.Duration(float64(d) / f) }
	return LatencyModel{
		PrefillToken: div(m.PrefillToken),
		PrefillPair:  m.PrefillPair / f,
		PrefillFixed: div(m.PrefillFixed),
		DecodeToken:  div(m.DecodeToken),
		DecodeSeq:    div(m.DecodeSeq),
	}
}

func (m LatencyModel) validate() error {
	if m.PrefillToken < 0 || m.PrefillPair < 0 || m.PrefillFixed < 0 || m.DecodeToken < 0 || m.DecodeSeq < 0 {
		return errors.New("latency flags: must not be negative")
	}
	return nil
}

// Prefill is P(u, c) in seconds.
func (m LatencyModel) Prefill(u, c int) float64 {
	if u <= 0 {
		return 0
	}
	return m.chunk(u, c, true)
}

// chunk is the cost in seconds of computing k prompt tokens whose first sits
// at position start (every token before it already computed or cached). The
// chunks of one prefill add up to exactly P(u, c): Σ b·k·(s + k/2) telescopes
// to b·u·(c + u/2).
func (m LatencyModel) chunk(k, start int, first bool) float64 {
	kf := float64(k)
	cost := m.PrefillToken.Seconds()*kf + m.PrefillPair*1e-9*kf*(float64(start)+kf/2)
	if first {
		cost += m.PrefillFixed.Seconds()
	}
	return cost
}

// Decode is the cost in seconds of one decode step of n sequences.
func (m LatencyModel) Decode(n int) float64 {
	if n <= 0 {
		return 0
	}
	return m.DecodeToken.Seconds() + m.DecodeSeq.Seconds()*float64(n-1)
}

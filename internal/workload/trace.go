package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
)

// TraceBlockTokens is how many prompt tokens one hash id of a Mooncake
// trace stands for, unless its line says otherwise (block_size).
const TraceBlockTokens = 512

// TraceRecord is one request of a Mooncake-format trace.
type TraceRecord struct {
	Timestamp    float64 // arrival, in milliseconds from the trace's start
	InputLength  int     // prompt tokens
	OutputLength int     // output tokens
	// HashIDs name the prompt's blocks of BlockTokens tokens, in order;
	// two requests whose lists start alike share that prompt prefix.
	HashIDs []int
	// BlockTokens is how many tokens one hash id stands for: the line's
	// block_size, 0 when it has none (then TraceBlockTokens, Mooncake's;
	// see Block).
	BlockTokens int
	// Model is the line's model, "" when it names none. Hash ids are
	// numbered per model: the same id of two models is two blocks.
	Model string
}

// Block is how many tokens one of r's hash ids stands for.
func (r *TraceRecord) Block() int {
	if r.BlockTokens > 0 {
		return r.BlockTokens
	}
	return TraceBlockTokens
}

// TraceShape reads the trace at path and returns the model its lines all
// name ("" when none does, or they name several) and the block size they
// all state (0 when none does, or they state several), for a replay to
// serve that model with engines of that block size.
func TraceShape(path string) (model string, blockSize int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	recs, err := ParseTrace(f)
	if err != nil {
		return "", 0, fmt.Errorf("trace %s: %w", path, err)
	}
	models, sizes := map[string]bool{}, map[int]bool{}
	for i := range recs {
		models[recs[i].Model], sizes[recs[i].BlockTokens] = true, true
	}
	if len(models) == 1 {
		model = recs[0].Model
	}
	if len(sizes) == 1 {
		blockSize = recs[0].BlockTokens
	}
	return model, blockSize, nil
}

// Bounds of a trace: the length of a line, of a prompt or an output, and
// of a block.
const (
	maxTraceLine   = 64 << 20
	maxTraceTokens = 1 << 24
	maxTraceBlock  = 1 << 16
)

// ParseTrace reads a Mooncake-format trace: JSON Lines, one object per
// request with timestamp (milliseconds, >= 0), input_length and
// output_length (1 to 2^24) and hash_ids (ints >= 0), and optionally
// block_size (the tokens of one hash id, 1 to 65,536; default
// TraceBlockTokens) and model, which inferrail-gateway's traffic capture
// writes. Counts may be written as floats with no fraction (10.0); other
// keys are ignored, blank lines skipped, and a byte order mark before the
// first line too. Errors name the line, counting from 1.
func ParseTrace(r io.Reader) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxTraceLine)
	var recs []TraceRecord
	line := 1
	for ; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if line == 1 {
			b = bytes.TrimPrefix(b, []byte("\uFEFF")) // a byte order mark, as editors on Windows write
		}
		if len(b) == 0 {
			continue
		}
		rec, err := parseTraceLine(b)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", line, err) // the line it could not read
	}
	return recs, nil
}

// traceLength checks a record's input or output length, a token count in
// [1, maxTraceTokens]; 0 with the error when it is missing or outside.
func traceLength(name string, num *traceCount) (int, error) {
	if num == nil {
		return 0, errors.New(name + ": required")
	}
	n, err := wholeNumber(name, *num)
	switch {
	case err != nil:
		return 0, err
	case n < 1:
		return 0, errors.New(name + ": must be >= 1")
	case n > maxTraceTokens:
		return 0, fmt.Errorf("%s: must be <= %d", name, maxTraceTokens)
	}
	return n, nil
}

// traceCount is a count's JSON number as written. Unlike json.Number it
// is never a string.
type traceCount string

func (c *traceCount) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '-' && (b[0] < '0' || b[0] > '9') {
		return fmt.Errorf("want a number, not %.40s", b)
	}
	*c = traceCount(b)
	return nil
}

// wholeNumber reads a count written as an integer or as a float with no
// fraction (10.0, 1e3), as traces written from Python or pandas may have
// them.
func wholeNumber(name string, num traceCount) (int, error) {
	if n, err := strconv.ParseInt(string(num), 10, 0); err == nil {
		return int(n), nil
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("%s: must be a whole number, not %s", name, num)
	}
	return int(f), nil
}

// maxTraceMillis bounds a timestamp: far enough for any trace, and a time
// in nanoseconds that fits an int64 with room for the replay's arithmetic.
const maxTraceMillis = 1e12

func parseTraceLine(b []byte) (TraceRecord, error) {
	var raw struct {
		Timestamp    *float64     `json:"timestamp"`
		InputLength  *traceCount  `json:"input_length"`
		OutputLength *traceCount  `json:"output_length"`
		HashIDs      []traceCount `json:"hash_ids"`
		BlockSize    *traceCount  `json:"block_size"`
		Model        string       `json:"model"`
	}
	var rec TraceRecord
	if err := json.Unmarshal(b, &raw); err != nil {
		return rec, err
	}
	var errs []error
	switch {
	case raw.Timestamp == nil:
		errs = append(errs, errors.New("timestamp: required"))
	case *raw.Timestamp < 0 || math.IsInf(*raw.Timestamp, 0):
		errs = append(errs, errors.New("timestamp: must be >= 0"))
	case *raw.Timestamp > maxTraceMillis:
		errs = append(errs, fmt.Errorf("timestamp: must be at most %.0e (milliseconds: about 31 years)", float64(maxTraceMillis)))
	default:
		rec.Timestamp = *raw.Timestamp
	}
	var err error
	if rec.InputLength, err = traceLength("input_length", raw.InputLength); err != nil {
		errs = append(errs, err)
	}
	if rec.OutputLength, err = traceLength("output_length", raw.OutputLength); err != nil {
		errs = append(errs, err)
	}
	if raw.HashIDs != nil {
		rec.HashIDs = make([]int, len(raw.HashIDs))
	}
	for i, num := range raw.HashIDs {
		name := fmt.Sprintf("hash_ids[%d]", i)
		id, err := wholeNumber(name, num)
		if err == nil && id < 0 {
			err = errors.New(name + ": must be >= 0")
		}
		if err != nil {
			errs = append(errs, err)
			break
		}
		rec.HashIDs[i] = id
	}
	rec.Model = raw.Model
	if raw.BlockSize != nil {
		bs, err := wholeNumber("block_size", *raw.BlockSize)
		switch {
		case err != nil:
			errs = append(errs, err)
		case bs < 1 || bs > maxTraceBlock:
			errs = append(errs, fmt.Errorf("block_size: must be between 1 and %d", maxTraceBlock))
		default:
			rec.BlockTokens = bs
		}
	}
	return rec, errors.Join(errs...)
}

// generateTrace replays spec.TracePath. Block i of a request's prompt is
// the text of its i-th hash id (of the record's model), the same wherever
// that id appears; blocks past the hash ids are unique to the request, and
// the last block is cut to input_length. A block is the record's
// BlockTokens long. The prompt is one user message, so the sim's count is
// input_length plus the chat template's tokens. Arrivals are the trace's
// timestamps less the first, times TimeScale, divided by RateMultiplier.
func generateTrace(spec Spec) ([]Request, error) {
	f, err := os.Open(spec.TracePath)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	recs, err := ParseTrace(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", spec.TracePath, err)
	}
	return traceRequests(spec, recs), nil
}

func traceRequests(spec Spec, recs []TraceRecord) []Request {
	order := make([]int, len(recs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch ta, tb := recs[a].Timestamp, recs[b].Timestamp; {
		case ta < tb:
			return -1
		case ta > tb:
			return 1
		}
		return 0
	})
	g := newGen(spec)
	scale := spec.TimeScale / spec.RateMultiplier
	var reqs []Request
	var block []byte
	for n, i := range order {
		rec := recs[i]
		at := seconds((rec.Timestamp - recs[order[0]].Timestamp) * scale / 1000)
		if spec.Duration > 0 && at >= spec.Duration || spec.Requests > 0 && n >= spec.Requests {
			break
		}
		input := rec.InputLength
		if spec.MaxPromptTokens > 0 {
			input = min(input, spec.MaxPromptTokens)
		}
		content := make([]byte, 0, input*3)
		bs, blockSeed := rec.Block(), spec.Seed
		if rec.Model != "" {
			h := fnv.New64a()
			h.Write([]byte(rec.Model))
			blockSeed ^= h.Sum64()
		}
		for k := 0; k*bs < input; k++ {
			var seed uint64
			if k < len(rec.HashIDs) {
				seed = textSeed(blockSeed, textTraceBlock, uint64(rec.HashIDs[k]))
			} else {
				seed = textSeed(spec.Seed, textTraceTail, uint64(i)<<24+uint64(k))
			}
			want := min(bs, input-k*bs)
			if want == bs {
				content = appendWords(content, seed, want)
				continue
			}
			// A cut block is a prefix of the whole one: its first tokens.
			block = appendWords(block[:0], seed, bs)
			ids := simTok.Encode(nil, string(block))
			content = simTok.AppendDecoded(content, ids[:want], false)
		}
		c := &chat{model: spec.Model, messages: []message{newMessage("user", text{string(content), input, true})}}
		out := rec.OutputLength
		if spec.OutputTokens > 0 {
			out = spec.OutputTokens
		}
		reqs = append(reqs, g.request(at, Trace, c, out))
	}
	return reqs
}

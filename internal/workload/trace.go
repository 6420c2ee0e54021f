package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
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
	// Line is the record's line in its file, counting from 1.
	Line int
}

// Block is how many tokens one of r's hash ids stands for.
func (r *TraceRecord) Block() int {
	if r.BlockTokens > 0 {
		return r.BlockTokens
	}
	return TraceBlockTokens
}

// ReadTrace reads the trace at path once (see ParseTrace), so that a pipe
// or a FIFO replays as well as a file; a trace with no records is an
// error, and so is ctx done before the reading ends.
func ReadTrace(ctx context.Context, path string) ([]TraceRecord, error) {
	recs, _, err := ReadTraceDigest(ctx, path)
	return recs, err
}

// ReadTraceDigest is ReadTrace, also returning the SHA-256 of the bytes
// read, in hex (Spec.TraceDigest): what tells two traces at one path
// apart, such as two /dev/fd/63 or a file edited in place.
func ReadTraceDigest(ctx context.Context, path string) (recs []TraceRecord, digest string, err error) {
	recs, digest, err = readDigested(ctx, path, "trace", ParseTrace)
	if err == nil && len(recs) == 0 {
		return nil, "", fmt.Errorf("trace %s: no requests (the file has no records)", path)
	}
	return recs, digest, err
}

// TraceShape returns the model recs all name ("" when none does, or they
// name several) and the block size they all state (0 when none does, or
// they state several), for a replay to serve that model with engines of
// that block size.
func TraceShape(recs []TraceRecord) (model string, blockSize int) {
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
	return model, blockSize
}

// Bounds of a trace: the length of a line, of a prompt or an output (past
// any engine's context, yet a prompt's text of a few MB), and of a block.
const (
	maxTraceLine   = 64 << 20
	maxTraceTokens = 1 << 20
	maxTraceBlock  = 1 << 16
)

// ParseTrace reads a Mooncake-format trace: JSON Lines, one object per
// request with timestamp (milliseconds, >= 0, Unix epoch ones too),
// input_length and output_length (1 to 2^20) and hash_ids (ints >= 0;
// those past the prompt's last block are checked but not kept), and
// optionally block_size (the tokens of one hash id, 1 to 65,536; default
// TraceBlockTokens) and model, which inferrail-gateway's traffic capture
// writes. Counts may be written as floats with no fraction (10.0); other
// keys are ignored, blank lines skipped, and a byte order mark before the
// first line too. A line is at most 64 MiB, and a trace at most
// MaxRequests records: every line is kept before the replay (to sort
// them), so an endless pipe must not take every byte of memory. Errors
// name the line, counting from 1, and the field.
func ParseTrace(r io.Reader) ([]TraceRecord, error) {
	return parseTrace(r, MaxRequests)
}

// parseTrace is ParseTrace, refusing a trace of more than most records.
func parseTrace(r io.Reader, most int) ([]TraceRecord, error) {
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
		if len(recs) == most {
			return nil, fmt.Errorf("line %d: more than the %d requests a run may make (a trace is read whole before its run); cut it first, as with head -n %d", line, most, most)
		}
		rec, err := parseTraceLine(b)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		rec.Line = line
		recs = append(recs, rec)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("line %d: longer than a trace line may be (%d MiB)", line, maxTraceLine>>20)
	} else if err != nil {
		return nil, fmt.Errorf("line %d: %w", line, err) // the line it could not read
	}
	return recs, nil
}

// traceLength checks a record's input or output length, a token count in
// [1, maxTraceTokens]; 0 with the error when it is missing or outside.
func traceLength(name string, raw json.RawMessage) (int, error) {
	num, err := traceNumber(name, raw)
	if err != nil {
		return 0, err
	}
	if num == "" {
		return 0, errors.New(name + ": required")
	}
	n, err := wholeNumber(name, num)
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

// traceNumber is the number field name holds as written, "" when the line
// has none (or null).
func traceNumber(name string, raw json.RawMessage) (traceCount, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return "", fmt.Errorf("%s: want a number, not %s", name, shown(raw))
	}
	return traceCount(raw), nil
}

// wholeNumber reads a count written as an integer or as a float with no
// fraction (10.0, 1e3), as traces written from Python or pandas may have
// them.
func wholeNumber(name string, num traceCount) (int, error) {
	n, err := strconv.ParseInt(string(num), 10, 0)
	switch {
	case err == nil:
		return int(n), nil
	case errors.Is(err, strconv.ErrRange):
		// Whole, just past what a count or an id may be (2^64 read as
		// "not a whole number" misled).
		return 0, fmt.Errorf("%s: %s is out of range (at most 2^63-1 either way)", name, num)
	}
	f, err := strconv.ParseFloat(string(num), 64)
	switch {
	case err != nil || f != math.Trunc(f):
		return 0, fmt.Errorf("%s: must be a whole number, not %s", name, num)
	case math.Abs(f) > 1<<53:
		return 0, fmt.Errorf("%s: %s is out of range written as a decimal (at most 2^53 so; 2^63-1 as an integer)", name, num)
	}
	return int(f), nil
}

// maxTraceMillis bounds a timestamp: Unix epoch milliseconds, as real
// traces have them, with room to spare. Replay only uses differences from
// the first, which traceRequests bounds in turn.
const maxTraceMillis = 1e15

// traceLineFields are the keys of a trace line, each decoded as written so
// that an error names its field.
type traceLineFields struct {
	Timestamp    json.RawMessage `json:"timestamp"`
	InputLength  json.RawMessage `json:"input_length"`
	OutputLength json.RawMessage `json:"output_length"`
	HashIDs      json.RawMessage `json:"hash_ids"`
	BlockSize    json.RawMessage `json:"block_size"`
	Model        json.RawMessage `json:"model"`
}

func parseTraceLine(b []byte) (TraceRecord, error) {
	var rec TraceRecord
	if b[0] != '{' {
		return rec, fmt.Errorf("want a JSON object, not %s", shown(b))
	}
	var raw traceLineFields
	if err := json.Unmarshal(b, &raw); err != nil {
		return rec, err
	}
	var errs []error
	var err error
	if rec.Timestamp, err = traceTimestamp(raw.Timestamp); err != nil {
		errs = append(errs, err)
	}
	if rec.InputLength, err = traceLength("input_length", raw.InputLength); err != nil {
		errs = append(errs, err)
	}
	if rec.OutputLength, err = traceLength("output_length", raw.OutputLength); err != nil {
		errs = append(errs, err)
	}
	if len(raw.Model) > 0 && string(raw.Model) != "null" {
		if err := json.Unmarshal(raw.Model, &rec.Model); err != nil {
			errs = append(errs, fmt.Errorf("model: want a string, not %s", shown(raw.Model)))
		}
	}
	if bs, err := traceNumber("block_size", raw.BlockSize); err != nil {
		errs = append(errs, err)
	} else if bs != "" {
		n, err := wholeNumber("block_size", bs)
		switch {
		case err != nil:
			errs = append(errs, err)
		case n < 1 || n > maxTraceBlock:
			errs = append(errs, fmt.Errorf("block_size: must be between 1 and %d", maxTraceBlock))
		default:
			rec.BlockTokens = n
		}
	}
	// Ids past the prompt's last block name no text: keep none of them.
	keep := max(rec.InputLength, 1)/rec.Block() + 1
	if rec.HashIDs, err = traceHashIDs(raw.HashIDs, keep); err != nil {
		errs = append(errs, err)
	}
	return rec, errors.Join(errs...)
}

// traceTimestamp reads a line's timestamp, in [0, maxTraceMillis].
func traceTimestamp(raw json.RawMessage) (float64, error) {
	num, err := traceNumber("timestamp", raw)
	if err != nil {
		return 0, err
	}
	if num == "" {
		return 0, errors.New("timestamp: required")
	}
	ts, err := strconv.ParseFloat(string(num), 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange):
		return 0, fmt.Errorf("timestamp: want a number, not %s", shown(num))
	case ts < 0:
		return 0, errors.New("timestamp: must be >= 0")
	case ts > maxTraceMillis:
		return 0, fmt.Errorf("timestamp: must be at most %.0e (milliseconds)", float64(maxTraceMillis))
	}
	return ts, nil
}

// traceHashIDs reads a hash_ids array token by token, keeping its first
// keep ids: a line of millions of ids costs the ids kept, not a string
// each.
func traceHashIDs(raw json.RawMessage, keep int) ([]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '[' {
		return nil, fmt.Errorf("hash_ids: want an array of numbers, not %s", shown(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // the '['
		return nil, fmt.Errorf("hash_ids: %w", err)
	}
	ids := []int{}
	for i := 0; dec.More(); i++ {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("hash_ids[%d]: %w", i, err)
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("hash_ids[%d]: want a number, not %s", i, jsonTokenText(tok))
		}
		id, err := wholeNumber("hash_ids", traceCount(num))
		switch {
		case err != nil:
			return nil, fmt.Errorf("hash_ids[%d]%s", i, strings.TrimPrefix(err.Error(), "hash_ids"))
		case id < 0:
			return nil, fmt.Errorf("hash_ids[%d]: must be >= 0", i)
		}
		if i < keep {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// jsonTokenText is how a JSON token that is not a number was written.
func jsonTokenText(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("%.40q", v)
	case json.Delim:
		return "an array or object"
	}
	return fmt.Sprint(tok)
}

// maxTraceSchedule bounds a replay's schedule: far past any run, and
// well inside a time.Duration.
const maxTraceSchedule = 100 * 365 * 24 * time.Hour

// GenerateTrace is GenerateRequests for a trace workload whose records
// are already read (ReadTrace): spec.TracePath is not opened again. It
// stops with ctx's error when ctx is done.
func GenerateTrace(ctx context.Context, spec Spec, recs []TraceRecord) (*Requests, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("workload spec: %w", err)
	}
	if spec.Workload != Trace {
		return nil, fmt.Errorf("workload spec: workload %q is not a trace", spec.Workload)
	}
	return traceRequests(ctx, spec.WithDefaults(), recs)
}

// traceRequests replays recs, read from spec.TracePath. Block i of a
// request's prompt is the text of its i-th hash id (of the record's
// model), the same wherever that id appears; blocks past the hash ids are
// unique to the request, and the last block is cut to input_length. A
// block is the record's BlockTokens long. The prompt is one user message,
// so the sim's count is input_length plus the chat template's tokens.
// Arrivals are the trace's timestamps less the first, times TimeScale,
// divided by RateMultiplier; one past maxTraceSchedule, and not cut by
// spec.Duration, is an error naming its line. Every error is found here;
// the prompts are made one by one as they are asked for (tracePrompt),
// each from its record alone.
func traceRequests(ctx context.Context, spec Spec, recs []TraceRecord) (*Requests, error) {
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
	scale := spec.TimeScale / spec.RateMultiplier
	var heads []Request
	for n, i := range order {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec := &recs[i]
		if spec.Requests > 0 && n >= spec.Requests {
			break
		}
		var after float64 // seconds after the first arrival
		if d := rec.Timestamp - recs[order[0]].Timestamp; d > 0 {
			after = d * scale / 1000
		}
		if spec.Duration > 0 && after >= spec.Duration.Seconds() {
			break
		}
		if !(after < maxTraceSchedule.Seconds()) {
			return nil, fmt.Errorf("trace %s: line %d: timestamp %.0f is %.3g s after the first, scaled: past the longest schedule (%v)",
				spec.TracePath, rec.Line, rec.Timestamp, after, maxTraceSchedule)
		}
		at := seconds(after)
		if spec.Duration > 0 && at >= spec.Duration {
			break
		}
		// The prompt's length is known without its text.
		c := traceChat(spec, rec, nil)
		heads = append(heads, Request{At: at, Path: ChatPath, Kind: Trace, MaxTokens: traceOutput(spec, rec), PromptTokens: c.promptTokens()})
	}
	body := func(n int) []byte {
		i := order[n]
		rec := &recs[i]
		return traceChat(spec, rec, tracePrompt(spec, rec, i)).body(traceOutput(spec, rec))
	}
	return &Requests{heads: heads, body: body}, nil
}

// traceInput is the prompt length of rec, cut to spec.MaxPromptTokens.
func traceInput(spec Spec, rec *TraceRecord) int {
	if spec.MaxPromptTokens > 0 {
		return min(rec.InputLength, spec.MaxPromptTokens)
	}
	return rec.InputLength
}

// traceOutput is the output length of rec, or spec.OutputTokens.
func traceOutput(spec Spec, rec *TraceRecord) int {
	if spec.OutputTokens > 0 {
		return spec.OutputTokens
	}
	return rec.OutputLength
}

// traceChat is rec's chat, its one message the prompt (tracePrompt).
// Its token count is right whatever prompt is given, nil too.
func traceChat(spec Spec, rec *TraceRecord, prompt []byte) *chat {
	return &chat{model: spec.Model, messages: []message{newMessage("user", text{string(prompt), traceInput(spec, rec), true})}}
}

// tracePrompt is the prompt of rec, record i of the trace (see
// traceRequests): it depends on nothing else, so prompts can be made in
// any order.
func tracePrompt(spec Spec, rec *TraceRecord, i int) []byte {
	input := traceInput(spec, rec)
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
		block := appendWords(nil, seed, bs)
		ids := simTok.Encode(nil, string(block))
		content = simTok.AppendDecoded(content, ids[:want], false)
	}
	return content
}

// shown is a line's bytes as an error shows them: their first 40 runes,
// quoted where they are not printable UTF-8, so that a binary or UTF-16
// file writes no raw bytes to the terminal.
func shown[T ~string | ~[]byte](b T) string {
	s := string(b)
	if n := 0; len(s) > 40 {
		for i := range s {
			if n == 40 {
				s = s[:i]
				break
			}
			n++
		}
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
		return strconv.Quote(s)
	}
	return s
}

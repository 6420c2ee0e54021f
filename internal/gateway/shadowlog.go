package gateway

// The shadow log: every config generation and every shadow decision, with
// what the shadows saw, as JSON lines, so that anyone can rebuild the
// shadows and check every pick (ReplayShadow). Prompts are never in it:
// a request is its length, its block hashes and its conversation key.
//
// Each line ends with a sum chained over the lines before it (since the
// last first generation, where a gateway process starts), so an edited,
// removed or reordered line is caught at the line where it happened.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/linelog"
	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/policy"
)

// Kinds of shadow log records.
const (
	recordGeneration = "generation"
	recordDecision   = "decision"
)

// shadowRecord is one line of the shadow log.
type shadowRecord struct {
	Kind       string `json:"kind"`
	Generation uint64 `json:"generation"`
	// A generation: its config and every shadow policy it runs.
	Config  json.RawMessage `json:"config,omitempty"`
	Shadows []loggedPolicy  `json:"shadows,omitempty"`
	// A decision: the request, the candidates, the routing policy's pick
	// and each shadow's.
	Model      string            `json:"model,omitempty"`
	Request    *loggedRequest    `json:"request,omitempty"`
	Candidates []loggedCandidate `json:"candidates,omitempty"`
	Routed     *shadowPick       `json:"routed,omitempty"`
	Picks      []shadowPick      `json:"picks,omitempty"`
}

// loggedPolicy is a shadow policy as built: with the config's settings for
// its model, this seed and this start, a replay builds it again.
type loggedPolicy struct {
	Model   string `json:"model"`
	Policy  string `json:"policy"`
	Seed    uint64 `json:"seed"`
	Started int64  `json:"started_unix_nano"`
}

// loggedRequest is what a policy knows of a request (policy.Request).
type loggedRequest struct {
	ID           string   `json:"id"`
	PromptTokens int      `json:"prompt_tokens"`
	Blocks       []string `json:"blocks,omitempty"` // block hashes, 32 hex digits each
	BlockSize    int      `json:"block_size,omitempty"`
	Session      string   `json:"session,omitempty"`
	At           int64    `json:"at_unix_nano"`
}

// loggedCandidate is a candidate as the policies saw it (policy.Candidate).
type loggedCandidate struct {
	ID               string  `json:"replica"`
	InFlight         int64   `json:"in_flight"`
	Cached           int     `json:"cached_tokens"`
	QueuedPrefill    float64 `json:"queued_prefill_secs"`
	Running          int64   `json:"running"`
	Waiting          float64 `json:"waiting,omitempty"`
	KVUsage          float64 `json:"kv_usage"`
	KVCapacityBlocks int     `json:"kv_capacity_blocks"`
	Pace             float64 `json:"pace,omitempty"`
}

// shadowPick is a policy's choice among a decision's candidates, with the
// cost model's estimate of its TTFT.
type shadowPick struct {
	Policy   string  `json:"policy"`
	Index    int     `json:"index"`
	Replica  string  `json:"replica"`
	Estimate float64 `json:"estimated_ttft_secs"`
}

// sumField ends every line: `,"sum":"<32 hex digits>"}`.
const sumField = `,"sum":"`

// chainSum is the sum of a line's record (its JSON without the sum) after
// the line whose sum is prev.
func chainSum(prev string, record []byte) string {
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write(record)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// shadowLog appends records to the shadow log file. It is used by the
// shadow worker alone, and by the reload that publishes a generation
// (serialized with it by mu).
type shadowLog struct {
	log  *slog.Logger
	file *os.File
	mu   sync.Mutex
	w    *bufio.Writer
	buf  []byte // a decision line being written
	prev string // the last line's sum
	err  error  // the first write error, after which nothing is written
	// cut is set when the file ended inside a line at open (a gateway
	// stopped while writing it): the first line written ends it first.
	cut bool
}

// openShadowLog opens the log for appending and writes nothing: a start
// that fails after it leaves the file as it was (made, empty, if it was
// not there).
func openShadowLog(path string, log *slog.Logger) (*shadowLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("observability.shadow_log: %w", err)
	}
	l := &shadowLog{log: log, file: f, mu: sync.Mutex{}, w: bufio.NewWriterSize(f, 256<<10)}
	// A gateway that stopped while writing left its last line cut short:
	// this start's first line begins on a line of its own.
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			l.cut = true
		}
	}
	return l, nil
}

// generation records a generation and the shadows it runs. The first
// generation starts a new chain: a gateway process starts there.
func (l *shadowLog) generation(gen *generation) {
	cfg, err := gen.document()
	if err != nil {
		l.fail(err)
		return
	}
	rec := shadowRecord{Kind: recordGeneration, Generation: gen.n, Config: cfg}
	for _, m := range gen.cfg.Models {
		for _, p := range gen.routing[m.Name].shadows {
			b := gen.built[policyKey{model: m.Name, shadow: true, name: p.Name()}]
			rec.Shadows = append(rec.Shadows, loggedPolicy{Model: m.Name, Policy: p.Name(), Seed: b.seed, Started: b.started.UnixNano()})
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen.n == 1 {
		l.prev = ""
	}
	l.write(&rec)
	l.flushLocked()
}

// decision records a shadowed request and its picks. The line is written
// by hand: encoding/json's reflection cost the worker seven times its
// picks, and it writes a line for every routed request.
func (l *shadowLog) decision(job *shadowJob, picks []shadowPick) {
	routed := shadowPick{Policy: job.policy, Index: job.routed.Index, Replica: job.cands[job.routed.Index].ID, Estimate: job.routed.EstimatedTTFT}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = l.writeLine(appendDecision(l.buf[:0], job, &routed, picks))
}

// appendDecision appends a decision record as JSON, with the keys of
// shadowRecord's tags, which ReplayShadow decodes.
func appendDecision(b []byte, job *shadowJob, routed *shadowPick, picks []shadowPick) []byte {
	r := &job.req
	b = append(b, `{"kind":"decision","generation":`...)
	b = strconv.AppendUint(b, job.gen.n, 10)
	b = append(b, `,"model":`...)
	b = openai.AppendString(b, job.model)
	b = append(b, `,"request":{"id":`...)
	b = openai.AppendString(b, r.ID)
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(r.PromptTokens), 10)
	if r.Blocks != nil {
		b = append(b, `,"blocks":[`...)
		for i, h := range r.Blocks {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = appendHex64(appendHex64(b, h.Hi), h.Lo)
			b = append(b, '"')
		}
		b = append(b, ']')
	}
	if r.BlockSize != 0 {
		b = append(b, `,"block_size":`...)
		b = strconv.AppendInt(b, int64(r.BlockSize), 10)
	}
	if r.Session != "" {
		b = append(b, `,"session":`...)
		b = openai.AppendString(b, r.Session)
	}
	b = append(b, `,"at_unix_nano":`...)
	b = strconv.AppendInt(b, r.At.UnixNano(), 10)
	b = append(b, `},"candidates":[`...)
	for i := range job.cands {
		c := &job.cands[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"replica":`...)
		b = openai.AppendString(b, c.ID)
		b = append(b, `,"in_flight":`...)
		b = strconv.AppendInt(b, c.InFlight, 10)
		b = append(b, `,"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(c.Cached), 10)
		b = append(b, `,"queued_prefill_secs":`...)
		b = strconv.AppendFloat(b, c.QueuedPrefill, 'g', -1, 64)
		b = append(b, `,"running":`...)
		b = strconv.AppendInt(b, c.Running, 10)
		b = append(b, `,"kv_usage":`...)
		b = strconv.AppendFloat(b, c.KVUsage, 'g', -1, 64)
		b = append(b, `,"kv_capacity_blocks":`...)
		b = strconv.AppendInt(b, int64(c.KVCapacityBlocks), 10)
		if c.Pace != 0 {
			// A replay prices by it as the decision did.
			b = append(b, `,"pace":`...)
			b = strconv.AppendFloat(b, c.Pace, 'g', -1, 64)
		}
		if c.Waiting != 0 {
			// backlog_cost prices by it.
			b = append(b, `,"waiting":`...)
			b = strconv.AppendFloat(b, c.Waiting, 'g', -1, 64)
		}
		b = append(b, '}')
	}
	b = append(b, `],"routed":`...)
	b = appendPick(b, routed)
	b = append(b, `,"picks":[`...)
	for i := range picks {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendPick(b, &picks[i])
	}
	return append(b, "]}"...)
}

func appendPick(b []byte, p *shadowPick) []byte {
	b = append(b, `{"policy":`...)
	b = openai.AppendString(b, p.Policy)
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(p.Index), 10)
	b = append(b, `,"replica":`...)
	b = openai.AppendString(b, p.Replica)
	b = append(b, `,"estimated_ttft_secs":`...)
	b = strconv.AppendFloat(b, p.Estimate, 'g', -1, 64)
	return append(b, '}')
}

// appendHex64 appends v as 16 lower-case hex digits, as blockhash.Hash's
// String writes each half.
func appendHex64(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[v>>uint(shift)&0xf])
	}
	return b
}

// write appends one record with its chained sum; l.mu is held.
func (l *shadowLog) write(rec *shadowRecord) {
	if l.err != nil {
		return
	}
	b, err := json.Marshal(rec)
	if err != nil {
		l.fail(err)
		return
	}
	l.writeLine(b)
}

// writeLine appends a record's JSON (an object) with its sum, chained to
// the line before, and returns the line, built over record's array; l.mu
// is held.
func (l *shadowLog) writeLine(record []byte) []byte {
	if l.err != nil {
		return record
	}
	if l.cut {
		l.cut = false
		if err := l.w.WriteByte('\n'); err != nil {
			l.fail(err)
			return record
		}
	}
	l.prev = chainSum(l.prev, record)
	line := append(record[:len(record)-1], sumField...)
	line = append(append(line, l.prev...), "\"}\n"...)
	if _, err := l.w.Write(line); err != nil {
		l.fail(err)
	}
	return line
}

func (l *shadowLog) fail(err error) {
	if l.err == nil {
		l.err = err
		l.log.Warn("shadow log: writing stopped", "error", err)
	}
}

func (l *shadowLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked()
}

func (l *shadowLog) flushLocked() {
	if err := l.w.Flush(); err != nil {
		l.fail(err)
	}
}

func (l *shadowLog) close() {
	l.flush()
	_ = l.file.Close()
}

// ReplayReport is what ReplayShadow found.
type ReplayReport struct {
	Generations int // generation records read
	Decisions   int // decision records replayed
	Picks       int // shadow picks checked, every one equal to the log's
	// CutShort are the lines, counted from 1, that a gateway stopped
	// while writing, each the last of its start, before the next start's
	// first line.
	CutShort []int
}

// ReplayShadow reads a shadow log, checks every line's sum, rebuilds each
// shadow policy from the logged configs and replays the requests in order,
// checking every pick against the log's. It stops at the first line that
// was tampered with or whose pick differs, naming the line.
func ReplayShadow(r io.Reader) (ReplayReport, error) {
	var rep ReplayReport
	rp := &replayer{gens: map[uint64]map[policyKey]replayPolicy{}}
	sc := linelog.NewScanner(r, maxShadowLine)
	prev := ""
	var torn error // the line before could not be read: cut short, if a new start follows
	line := 1
	for ; sc.Scan(); line++ {
		rec, err := readShadowLine(sc.Bytes(), &prev)
		if torn != nil {
			if err != nil || rec.Kind != recordGeneration || rec.Generation != 1 {
				return rep, torn
			}
			rep.CutShort = append(rep.CutShort, line-1)
			torn = nil
		}
		if err != nil {
			if !errors.Is(err, errNoSum) && !errors.Is(err, errNotRecord) {
				return rep, fmt.Errorf("line %d: %w", line, err)
			}
			// A gateway that stopped while writing a line leaves it cut
			// short; the next start (on the same file) begins a new chain.
			torn = fmt.Errorf("line %d: %w", line, err)
			continue
		}
		switch rec.Kind {
		case recordGeneration:
			if err := rp.generation(&rec); err != nil {
				return rep, fmt.Errorf("line %d: %w", line, err)
			}
			rep.Generations++
		case recordDecision:
			n, err := rp.decision(&rec)
			if err != nil {
				return rep, fmt.Errorf("line %d: %w", line, err)
			}
			rep.Decisions++
			rep.Picks += n
		default:
			return rep, fmt.Errorf("line %d: unknown record kind %q", line, rec.Kind)
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return rep, fmt.Errorf("line %d: longer than a shadow log line may be (%d MiB)", line, maxShadowLine>>20)
	case err != nil:
		return rep, fmt.Errorf("line %d: %w", line, err)
	case torn != nil:
		return rep, fmt.Errorf("%w (the last line: if the gateway stopped while writing it, remove it to replay the rest)", torn)
	case line == 1:
		return rep, errors.New("no records: an empty file is no shadow log")
	}
	return rep, nil
}

// maxShadowLine bounds a shadow log line: a decision of a prompt of 2^20
// tokens in blocks of 16 is about 2.4 MB.
const maxShadowLine = 64 << 20

// A line without a sum, or whose record does not decode, is not a whole
// line: one a gateway stopped while writing, if it is the last of its
// start. A line whose sum differs is a changed one.
var (
	errNoSum     = errors.New("no sum: not a shadow log line")
	errNotRecord = errors.New("not a shadow log record")
)

// readShadowLine checks a line's sum against the chain (prev, updated) and
// decodes it.
func readShadowLine(b []byte, prev *string) (shadowRecord, error) {
	var rec shadowRecord
	i := bytes.LastIndex(b, []byte(sumField))
	if i < 0 || !bytes.HasSuffix(b, []byte(`"}`)) || i+len(sumField) > len(b)-2 { // the last: the sum's quote is the suffix's
		return rec, errNoSum
	}
	sum := string(b[i+len(sumField) : len(b)-2])
	body := append(bytes.Clone(b[:i]), '}')
	if err := json.Unmarshal(body, &rec); err != nil {
		return rec, fmt.Errorf("%w: %w", errNotRecord, err)
	}
	if rec.Kind == recordGeneration && rec.Generation == 1 {
		*prev = ""
	}
	if want := chainSum(*prev, body); sum != want {
		return rec, fmt.Errorf("sum %s, want %s: this line, or one before it, was changed, removed or moved", sum, want)
	}
	*prev = sum
	return rec, nil
}

// replayer holds the shadows as the log rebuilds them, for every
// generation: decisions of a generation may still be logged after the
// next one (requests that arrived before it), and a policy the next one
// kept is the same policy in both.
type replayer struct {
	gens map[uint64]map[policyKey]replayPolicy
	last map[policyKey]replayPolicy // the latest generation's
}

type replayPolicy struct {
	p       policy.Policy
	seed    uint64
	started int64
}

// generation rebuilds the shadows of a generation: one the log shows
// unchanged (same seed and start) keeps its state, as in the gateway.
func (rp *replayer) generation(rec *shadowRecord) error {
	cfg, err := config.Parse(rec.Config)
	if err != nil {
		return fmt.Errorf("generation %d: its config does not load: %w", rec.Generation, err)
	}
	if rec.Generation == 1 {
		rp.gens, rp.last = map[uint64]map[policyKey]replayPolicy{}, nil // a new gateway process
	}
	next := map[policyKey]replayPolicy{}
	for _, lp := range rec.Shadows {
		key := policyKey{model: lp.Model, shadow: true, name: lp.Policy}
		if old, ok := rp.last[key]; ok && old.seed == lp.Seed && old.started == lp.Started {
			next[key] = old
			continue
		}
		s := policySettings(cfg, lp.Model, lp.Seed)
		s.Start = time.Unix(0, lp.Started)
		p, err := policy.NewWith(lp.Policy, s)
		if err != nil {
			return fmt.Errorf("generation %d: %w", rec.Generation, err)
		}
		next[key] = replayPolicy{p: p, seed: lp.Seed, started: lp.Started}
	}
	rp.gens[rec.Generation], rp.last = next, next
	return nil
}

// decision replays one shadowed request and returns how many picks it
// checked.
func (rp *replayer) decision(rec *shadowRecord) (int, error) {
	policies, ok := rp.gens[rec.Generation]
	if !ok {
		return 0, fmt.Errorf("a decision of generation %d, which the log has not started", rec.Generation)
	}
	if rec.Request == nil || len(rec.Candidates) == 0 {
		return 0, fmt.Errorf("a decision without its request or candidates")
	}
	lr := rec.Request
	req := policy.Request{Model: rec.Model, ID: lr.ID, PromptTokens: lr.PromptTokens, BlockSize: lr.BlockSize,
		Session: lr.Session, At: time.Unix(0, lr.At)}
	if lr.Blocks != nil {
		req.Blocks = make([]blockhash.Hash, len(lr.Blocks))
		for i, s := range lr.Blocks {
			h, err := blockhash.Parse(s)
			if err != nil {
				return 0, fmt.Errorf("request %s: block %d: %w", lr.ID, i, err)
			}
			req.Blocks[i] = h
		}
	}
	cands := make([]policy.Candidate, len(rec.Candidates))
	for i, c := range rec.Candidates {
		cands[i] = policy.Candidate(c)
	}
	for _, pick := range rec.Picks {
		rpol, ok := policies[policyKey{model: rec.Model, shadow: true, name: pick.Policy}]
		if !ok {
			return 0, fmt.Errorf("request %s: %s is not a shadow of %s in generation %d", lr.ID, pick.Policy, rec.Model, rec.Generation)
		}
		d := rpol.p.Pick(&req, cands)
		if d.Index != pick.Index || cands[d.Index].ID != pick.Replica {
			return 0, fmt.Errorf("request %s: %s picks candidate %d (%s), the log says %d (%s)", lr.ID, pick.Policy, d.Index, cands[d.Index].ID, pick.Index, pick.Replica)
		}
	}
	return len(rec.Picks), nil
}

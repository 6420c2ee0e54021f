package capture

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/blockhash"
	"github.com/inferrail/inferrail/internal/linelog"
	"github.com/inferrail/inferrail/internal/openai"
)

// Where a record's lengths came from (Record.InputSource and OutputSource).
const (
	SourceTokenizer = "tokenizer" // input: the edge tokenizer's count
	SourceEstimate  = "estimate"  // input: the body's bytes over four, or a prompt array's content
	SourceUsage     = "usage"     // output: the engine's usage
)

// Record is one captured request. It holds no text.
type Record struct {
	Arrived time.Time
	Model   string
	// InputTokens is the prompt's length and InputSource where it came
	// from: SourceTokenizer, or SourceEstimate.
	InputTokens int
	InputSource string
	// OutputTokens is the response's length and OutputSource where it came
	// from: SourceUsage, or an estimate's name.
	OutputTokens int
	OutputSource string
	// BlockSize is how many tokens each of Blocks covers; Blocks are the
	// chained hashes of the prompt's full blocks, nil without a tokenizer.
	BlockSize int
	Blocks    []blockhash.Hash
}

// Options configure a Writer.
type Options struct {
	// Lines says where and how the lines are written (Name defaults to
	// "traffic capture"). Fresh is always set: a capture's timestamps and
	// ids start again, so it never appends to another's file.
	Lines linelog.Options
	// MaxBlockIDs bounds the hashes each model's id map holds. Zero means
	// 1,000,000; at least 2.
	MaxBlockIDs int
	// Start is the time timestamps count from. Zero means when Open is
	// called.
	Start time.Time
}

// Writer writes records as Mooncake trace lines from a goroutine of its
// own (a linelog.Writer), mapping their block hashes to ids there. Safe
// for concurrent use.
type Writer struct {
	lines     *linelog.Writer[*Record]
	start     time.Time
	half      int               // a generation's most hashes
	models    map[string]*idMap // owned by the lines' goroutine
	forgotten atomic.Uint64
}

// Open starts a writer.
func Open(o Options) *Writer {
	if o.Lines.Name == "" {
		o.Lines.Name = "traffic capture"
	}
	o.Lines.Fresh = true
	if o.MaxBlockIDs <= 0 {
		o.MaxBlockIDs = 1_000_000
	}
	if o.Start.IsZero() {
		o.Start = time.Now()
	}
	w := &Writer{start: o.Start, half: max(1, o.MaxBlockIDs/2), models: map[string]*idMap{}}
	w.lines = linelog.Open(o.Lines, w.appendLine)
	return w
}

// Log queues r and reports whether it was queued; it never waits (see
// linelog.Writer.Log). r must not be changed afterwards.
func (w *Writer) Log(r *Record) bool { return w.lines.Log(r) }

// Close writes what is queued and closes the file.
func (w *Writer) Close() error { return w.lines.Close() }

// Stats counts what became of the records, and the hashes forgotten.
type Stats struct {
	linelog.Stats
	// Forgotten counts block hashes the id maps let go of.
	Forgotten uint64
}

// Stats returns the writer's counts.
func (w *Writer) Stats() Stats {
	return Stats{Stats: w.lines.Stats(), Forgotten: w.forgotten.Load()}
}

// appendLine appends r's line. The lines' goroutine alone calls it.
func (w *Writer) appendLine(r *Record, b []byte) []byte {
	ms := max(float64(r.Arrived.Sub(w.start).Microseconds())/1e3, 0)
	b = append(b, `{"timestamp":`...)
	b = strconv.AppendFloat(b, ms, 'f', 3, 64)
	b = append(b, `,"input_length":`...)
	b = strconv.AppendInt(b, int64(r.InputTokens), 10)
	b = append(b, `,"output_length":`...)
	b = strconv.AppendInt(b, int64(r.OutputTokens), 10)
	b = append(b, `,"hash_ids":[`...)
	if len(r.Blocks) > 0 {
		m := w.models[r.Model]
		if m == nil {
			m = &idMap{cur: map[blockhash.Hash]int{}}
			w.models[r.Model] = m
		}
		for i, h := range r.Blocks {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(m.id(h, w.half, &w.forgotten)), 10)
		}
	}
	b = append(b, `],"model":`...)
	b = openai.AppendString(b, r.Model)
	if r.BlockSize > 0 {
		b = append(b, `,"block_size":`...)
		b = strconv.AppendInt(b, int64(r.BlockSize), 10)
	}
	b = append(b, `,"input_source":`...)
	b = openai.AppendString(b, r.InputSource)
	b = append(b, `,"output_source":`...)
	b = openai.AppendString(b, r.OutputSource)
	return append(b, "}\n"...)
}

// idMap numbers one model's block hashes in the order they are met, in
// two generations of at most half hashes each: a hash found in the old
// one moves to the young one, and when the young one is full the old one
// is forgotten and the young one becomes old. What is held is therefore
// at most twice half hashes, and the hashes forgotten are those met least
// recently.
type idMap struct {
	cur, old map[blockhash.Hash]int
	next     int // the next id to give
}

func (m *idMap) id(h blockhash.Hash, half int, forgotten *atomic.Uint64) int {
	if id, ok := m.cur[h]; ok {
		return id
	}
	id, ok := m.old[h]
	if ok {
		delete(m.old, h)
	} else {
		id = m.next
		m.next++
	}
	if len(m.cur) >= half {
		forgotten.Add(uint64(len(m.old)))
		m.old, m.cur = m.cur, make(map[blockhash.Hash]int, half)
	}
	m.cur[h] = id
	return id
}

// held is how many hashes m holds.
func (m *idMap) held() int { return len(m.cur) + len(m.old) }

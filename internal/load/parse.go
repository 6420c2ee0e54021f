// Package load reads engines' own view of their load from their Prometheus
// pages (vLLM and SGLang natively) and keeps, per replica, the latest report
// and when it was asked for, so routing can use reports that are fresh and
// treat stale ones as missing.
package load

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Engine is the kind of engine a page came from, told by its metric prefix.
type Engine string

const (
	VLLM   Engine = "vllm"
	SGLang Engine = "sglang"
)

// Report is one engine's load as its metrics page showed it. Counts are
// summed over data-parallel ranks; KVUsage is their mean. An SGLang rank's
// schedulers count once (see perRank).
type Report struct {
	Engine         Engine
	Ranks          int     // data-parallel ranks seen
	Running        float64 // requests in execution batches
	Waiting        float64 // requests waiting to be scheduled
	KVUsage        float64 // share of the KV cache in use, 0..1
	PrefixQueries  float64 // cumulative prompt tokens looked up in the prefix cache
	PrefixHits     float64 // cumulative prompt tokens found there
	Preemptions    float64 // cumulative preemptions (SGLang: retractions)
	BlockSize      int     // tokens per KV block (SGLang: page size); 0 when not reported
	CapacityBlocks int     // KV cache capacity in blocks; 0 when not reported
	// CapacityTokens is SGLang's KV pool in tokens (max_total_num_tokens);
	// 0 when not reported, and for vLLM, which counts blocks.
	CapacityTokens int
}

// UsableBlocks is the engine's KV cache in blocks of blockSize tokens, the
// unit the gateway counts a replica's cache in (blockSize 0: the engine's
// own blocks), and 0 when the page does not say. vLLM's num_gpu_blocks
// counts a null block that holds nothing, and its blocks are taken as the
// gateway's whatever their size (cache_config_info's block_size need not
// be the size its events hash: vllm-spec.md §4.1). SGLang counts its pool
// in tokens, which are cut into the gateway's blocks.
func (r *Report) UsableBlocks(blockSize int) int {
	if r.Engine != SGLang {
		return max(r.CapacityBlocks-1, 0)
	}
	if blockSize <= 0 {
		return r.CapacityBlocks
	}
	return r.CapacityTokens / blockSize
}

// ErrUnreadable wraps every reason a page cannot be used: not the text
// format, no known engine prefix, or a required family missing (a renamed
// metric after an upgrade must show up, not read as an idle engine).
var ErrUnreadable = errors.New("unreadable metrics page")

// Parse reads one metrics page in the Prometheus text format. It reads
// only the few series routing needs, line by line, without building the
// page's families: a vLLM page has hundreds of series and is read ten times
// a second per replica. The lines it reads are checked strictly; the rest
// are skipped.
func Parse(r io.Reader) (*Report, error) {
	p := &page{series: map[string][]sample{}}
	if err := p.read(r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	switch {
	case p.vllm:
		return parseVLLM(p)
	case p.sglang:
		return parseSGLang(p)
	}
	return nil, fmt.Errorf("%w: no vllm: or sglang: metrics", ErrUnreadable)
}

// wanted are the families Parse reads; any other line is skipped.
var wanted = map[string]bool{
	"vllm:num_requests_running": true, "vllm:num_requests_waiting": true,
	"vllm:kv_cache_usage_perc": true, "vllm:gpu_cache_usage_perc": true,
	"vllm:prefix_cache_queries_total": true, "vllm:gpu_prefix_cache_queries_total": true, "vllm:gpu_prefix_cache_queries": true,
	"vllm:prefix_cache_hits_total": true, "vllm:gpu_prefix_cache_hits_total": true, "vllm:gpu_prefix_cache_hits": true,
	"vllm:num_preemptions_total": true, "vllm:num_preemptions": true, "vllm:cache_config_info": true,
	"sglang:num_running_reqs": true, "sglang:num_queue_reqs": true, "sglang:token_usage": true,
	"sglang:prompt_tokens_total": true, "sglang:cached_tokens_total": true, "sglang:num_retracted_requests_total": true,
	"sglang:page_size": true, "sglang:max_total_num_tokens": true,
}

// sample is one series of a wanted family.
type sample struct {
	labels map[string]string // only the labels Parse looks at
	// labelSet identifies the series among its family's: the sum of
	// labelHash over all its labels, whatever their order.
	labelSet uint64
	// group is labelSet without the rankLabels, and rank their values (0
	// when absent, past every number when not one): the series of one
	// group are the schedulers of one data-parallel rank (see perRank).
	group uint64
	rank  [len(rankLabels)]uint32
	value float64
}

// rankLabels tell apart SGLang's schedulers of one data-parallel rank:
// its tensor-parallel, pipeline and expert-parallel ranks.
var rankLabels = [...]string{"tp_rank", "pp_rank", "moe_ep_rank"}

// addLabel notes one of the series' labels.
func (s *sample) addLabel(key, val string) {
	h := labelHash(key, val)
	s.labelSet += h
	if i := slices.Index(rankLabels[:], key); i >= 0 {
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			n = math.MaxUint32
		}
		s.rank[i] = uint32(n)
	} else {
		s.group += h
	}
	switch key {
	case "priority", "block_size", "num_gpu_blocks":
		if s.labels == nil {
			s.labels = map[string]string{}
		}
		s.labels[key] = val
	}
}

// labelHash hashes one label: FNV-1a of its name, a byte no name holds,
// and its value, through a SplitMix64 finalizer. Series are told apart by
// the sum of their labels' hashes, and FNV-1a alone is nearly linear in
// its last byte: tp_rank="0",moe_ep_rank="0" summed the same as
// tp_rank="1",moe_ep_rank="1", two schedulers of one SGLang engine.
func labelHash(name, value string) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := range len(name) {
		h = (h ^ uint64(name[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := range len(value) {
		h = (h ^ uint64(value[i])) * prime
	}
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return h ^ h>>31
}

// page is what Parse kept of a metrics page.
type page struct {
	series       map[string][]sample
	vllm, sglang bool
}

// lineBuffers recycles the scanners' first buffers: a page is read ten
// times a second per replica, and a new 64 KiB buffer each time was nearly
// all the garbage an idle gateway made.
var lineBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func (p *page) read(r io.Reader) error {
	buf := lineBuffers.Get().(*[]byte)
	defer lineBuffers.Put(buf)
	sc := bufio.NewScanner(r)
	// A line longer than the buffer makes the scanner grow its own, up to
	// the limit; the pooled one keeps its size.
	sc.Buffer((*buf)[:0], 1<<20)
	n := 0
	for sc.Scan() {
		n++
		// Blanks and tabs may start any line, as the text format's
		// reference parser allows; a line of nothing else is empty.
		line := skipBlanks(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if line[0] == '{' {
			// The name is quoted among the labels: the text format's way
			// of writing names outside its character set.
			smp, name, err := parseSample(line, true)
			if err != nil {
				return fmt.Errorf("line %d: %w", n, err)
			}
			if p.saw(name) {
				p.series[string(name)] = append(p.series[string(name)], smp)
			}
			continue
		}
		end := nameEnd(line)
		if end == 0 || end == len(line) {
			return fmt.Errorf("line %d: no value", n)
		}
		name := line[:end]
		if !p.saw(name) {
			continue
		}
		smp, _, err := parseSample(line[end:], false)
		if err != nil {
			return fmt.Errorf("line %d: %s: %w", n, name, err)
		}
		p.series[string(name)] = append(p.series[string(name)], smp)
	}
	return sc.Err()
}

// saw notes the engine a series' name shows and reports whether Parse
// keeps the series.
func (p *page) saw(name []byte) bool {
	switch {
	case bytes.HasPrefix(name, []byte("vllm:")):
		p.vllm = true
	case bytes.HasPrefix(name, []byte("sglang:")):
		p.sglang = true
	}
	return wanted[string(name)]
}

// skipBlanks drops the blanks and tabs at the start of b.
func skipBlanks(b []byte) []byte { return bytes.TrimLeft(b, " \t") }

// nameEnd returns the length of the metric name at the start of line.
func nameEnd(line []byte) int {
	for i, c := range line {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':' || i > 0 && c >= '0' && c <= '9') {
			return i
		}
	}
	return len(line)
}

// parseSample reads `{labels} value [timestamp]` after a series name, or,
// with nameInside, a whole line whose series name is quoted among the
// labels, and returns that name. Blanks may surround the braces, the names
// and the equals signs, and a label's name may be quoted, as the text
// format's reference parser reads them.
func parseSample(rest []byte, nameInside bool) (smp sample, name []byte, err error) {
	rest = skipBlanks(rest)
	if len(rest) > 0 && rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = skipBlanks(rest)
			if len(rest) > 0 && rest[0] == '}' {
				rest = rest[1:]
				break
			}
			var key string
			quoted := len(rest) > 0 && rest[0] == '"'
			if quoted {
				k, after, err := labelValue(rest[1:])
				if err != nil {
					return smp, nil, err
				}
				key, rest = k, skipBlanks(after)
			} else {
				end := nameEnd(rest)
				key, rest = string(rest[:end]), skipBlanks(rest[end:])
			}
			if quoted && nameInside && name == nil && len(rest) > 0 && (rest[0] == ',' || rest[0] == '}') {
				name = []byte(key) // the series name, not a label
				if rest[0] == ',' {
					rest = rest[1:]
				}
				continue
			}
			if key == "" || len(rest) == 0 || rest[0] != '=' {
				return smp, nil, errors.New("malformed label")
			}
			rest = skipBlanks(rest[1:])
			if len(rest) == 0 || rest[0] != '"' {
				return smp, nil, errors.New("malformed label")
			}
			val, after, err := labelValue(rest[1:])
			if err != nil {
				return smp, nil, err
			}
			smp.addLabel(key, val)
			rest = skipBlanks(after)
			if len(rest) > 0 && rest[0] == ',' {
				rest = rest[1:]
			}
		}
	}
	if nameInside && len(name) == 0 {
		return smp, nil, errors.New("no series name")
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return smp, nil, errors.New("malformed value")
	}
	v, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil {
		return smp, nil, err
	}
	smp.value = v
	return smp, name, nil
}

// labelValue reads a quoted string (a label's value, or a quoted name)
// after its opening quote, with the text format's escapes, and returns the
// rest of the line after the closing quote.
func labelValue(b []byte) (string, []byte, error) {
	var out []byte
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			return string(out), b[i+1:], nil
		case '\\':
			i++
			if i == len(b) {
				return "", nil, errors.New("unterminated label value")
			}
			switch b[i] {
			case 'n':
				out = append(out, '\n')
			case '\\', '"':
				out = append(out, b[i])
			default:
				return "", nil, errors.New("bad escape in a label value")
			}
		default:
			out = append(out, c)
		}
	}
	return "", nil, errors.New("unterminated label value")
}

// series returns the samples of the first of names present, skipping
// SGLang's per-priority breakdowns.
func (p *page) get(names ...string) ([]sample, bool) {
	for _, n := range names {
		ss, ok := p.series[n]
		if !ok {
			continue
		}
		out := ss[:0:0]
		for _, s := range ss {
			if s.labels["priority"] != "" {
				continue
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// sum adds a family's samples over data-parallel ranks, one per rank (see
// perRank), and returns how many it added; ok is false when it is absent.
func (p *page) sum(names ...string) (float64, int, bool) {
	ss, ok := p.get(names...)
	if !ok {
		return 0, 0, false
	}
	ss = perRank(ss)
	var s float64
	for _, x := range ss {
		s += x.value
	}
	return s, len(ss), true
}

// perRank keeps one series of each group (sample.group): the one of the
// lowest tp_rank, then pp_rank, then moe_ep_rank. SGLang's schedulers of
// one data-parallel rank all describe its one batch and KV pool, and only
// the attention-TP-rank-0 one reports unless the engine runs with
// --enable-metrics-for-all-schedulers (vllm-spec.md §2.3): summed, a TP=2
// engine with that flag read twice its load and capacity. The lowest
// ranks' series is taken so that a page reads the same with the flag or
// without, and every family from one scheduler (the largest of each would
// mix them). Assumed, not in the spec: a rank's attention-TP-rank-0
// scheduler has its lowest tp_rank, and the stages of a pipeline (each
// has one) describe one batch too. Pages without these labels (vLLM's)
// keep every series. It keeps them in ss's memory, which get made. Past a
// few series a map finds each group: looked for one by one, a page of
// 100,000 series (under the 4 MiB bound) took 23 s a scrape.
func perRank(ss []sample) []sample {
	var at map[uint64]int
	if len(ss) > 16 {
		at = make(map[uint64]int, len(ss))
	}
	find := func(group uint64, n int) int {
		if at != nil {
			if i, ok := at[group]; ok {
				return i
			}
			return -1
		}
		for i := range ss[:n] {
			if ss[i].group == group {
				return i
			}
		}
		return -1
	}
	n := 0
	for _, s := range ss {
		if i := find(s.group, n); i >= 0 {
			if slices.Compare(s.rank[:], ss[i].rank[:]) < 0 {
				ss[i] = s
			}
			continue
		}
		if at != nil {
			at[s.group] = n
		}
		ss[n] = s
		n++
	}
	return ss[:n]
}

func (p *page) mean(names ...string) (float64, bool) {
	s, n, ok := p.sum(names...)
	if !ok || n == 0 {
		return 0, ok
	}
	return s / float64(n), true
}

func missing(names ...string) error {
	return fmt.Errorf("%w: no %s family", ErrUnreadable, strings.Join(names, " or "))
}

// families names the metric families an engine reports Report's common
// fields in; where servers renamed one, every name, the newest first.
// Running, waiting and KV usage are required.
type families struct {
	running, waiting, kvUsage              []string
	prefixQueries, prefixHits, preemptions []string
}

var (
	vllmFamilies = families{
		running: []string{"vllm:num_requests_running"},
		waiting: []string{"vllm:num_requests_waiting"},
		// Older servers named KV usage and the prefix counters differently.
		kvUsage:       []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		prefixQueries: []string{"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries"},
		prefixHits:    []string{"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"},
		preemptions:   []string{"vllm:num_preemptions_total", "vllm:num_preemptions"},
	}
	sglangFamilies = families{
		running:       []string{"sglang:num_running_reqs"},
		waiting:       []string{"sglang:num_queue_reqs"},
		kvUsage:       []string{"sglang:token_usage"},
		prefixQueries: []string{"sglang:prompt_tokens_total"},
		prefixHits:    []string{"sglang:cached_tokens_total"},
		preemptions:   []string{"sglang:num_retracted_requests_total"},
	}
)

// maxCount bounds every figure of an engine's page that counts requests,
// KV blocks or pool tokens: no engine comes near 2^31 of any, and past it
// a figure would overflow the integers the gateway counts in. Requests
// past it make the page unreadable, as a NaN does; a capacity past it is
// not taken, as one that is not a number is not.
const maxCount = 1 << 31

// report reads the fields every engine reports, from f's families.
func (p *page) report(e Engine, f families) (*Report, error) {
	if name := p.repeated(); name != "" {
		// Not a page an exporter writes: summed, it would double a load.
		return nil, fmt.Errorf("%w: %s has the same series twice", ErrUnreadable, name)
	}
	rep := &Report{Engine: e}
	var ok bool
	if rep.Running, rep.Ranks, ok = p.sum(f.running...); !ok {
		return nil, missing(f.running...)
	}
	if rep.Waiting, _, ok = p.sum(f.waiting...); !ok {
		return nil, missing(f.waiting...)
	}
	if rep.KVUsage, ok = p.mean(f.kvUsage...); !ok {
		return nil, missing(f.kvUsage...)
	}
	rep.PrefixQueries, _, _ = p.sum(f.prefixQueries...)
	rep.PrefixHits, _, _ = p.sum(f.prefixHits...)
	rep.Preemptions, _, _ = p.sum(f.preemptions...)
	// Every figure is a count or a share: a NaN, an infinity or a negative
	// one is an engine that cannot be trusted, not a load to price.
	for _, v := range [...]float64{rep.Running, rep.Waiting, rep.KVUsage, rep.PrefixQueries, rep.PrefixHits, rep.Preemptions} {
		if !(v >= 0) || math.IsInf(v, 1) {
			return nil, fmt.Errorf("%w: a load figure is %v", ErrUnreadable, v)
		}
	}
	// So is one that runs or queues more requests than any engine could
	// (maxCount): priced, 1e19 running requests overflowed to an idle
	// engine.
	if rep.Running > maxCount || rep.Waiting > maxCount {
		return nil, fmt.Errorf("%w: %v requests running, %v waiting", ErrUnreadable, rep.Running, rep.Waiting)
	}
	// So is a rank's share of its KV cache above one.
	kv, _ := p.get(f.kvUsage...)
	for _, s := range kv {
		if s.value > 1 {
			return nil, fmt.Errorf("%w: KV cache usage %v is above 1", ErrUnreadable, s.value)
		}
	}
	return rep, nil
}

// repeated names a family that has two series with the same labels, ""
// when none does. A set keeps it linear: comparing every pair took a
// 100,000-series page (3.9 MB, under the 4 MiB bound) five seconds a scrape.
func (p *page) repeated() string {
	for name, ss := range p.series {
		if len(ss) < 2 {
			continue
		}
		seen := make(map[uint64]struct{}, len(ss))
		for _, s := range ss {
			if _, dup := seen[s.labelSet]; dup {
				return name
			}
			seen[s.labelSet] = struct{}{}
		}
	}
	return ""
}

func parseVLLM(p *page) (*Report, error) {
	rep, err := p.report(VLLM, vllmFamilies)
	if err != nil {
		return nil, err
	}
	if infos, ok := p.get("vllm:cache_config_info"); ok {
		for _, m := range infos {
			if bs, err := strconv.Atoi(m.labels["block_size"]); err == nil && bs > 0 {
				rep.BlockSize = bs
			}
			if n, err := strconv.Atoi(m.labels["num_gpu_blocks"]); err == nil && n > 0 && n <= maxCount {
				rep.CapacityBlocks += n
			}
		}
	}
	return rep, nil
}

func parseSGLang(p *page) (*Report, error) {
	rep, err := p.report(SGLang, sglangFamilies)
	if err != nil {
		return nil, err
	}
	pageSize, _ := p.mean("sglang:page_size")
	tokens, _, _ := p.sum("sglang:max_total_num_tokens")
	if !(tokens >= 1 && tokens <= maxCount) {
		tokens = 0 // not reported, or not believed
	}
	rep.CapacityTokens = int(tokens)
	if pageSize >= 1 && pageSize <= maxCount {
		rep.BlockSize = int(pageSize)
		rep.CapacityBlocks = int(tokens / pageSize)
	}
	return rep, nil
}

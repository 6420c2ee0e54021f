package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
)

// Scrape results, as counted in inferrail_load_scrapes_total.
const (
	ResultOK         = "ok"
	ResultError      = "error"      // no answer: refused, timed out, not 200
	ResultUnreadable = "unreadable" // an answer that is not a usable page
	ResultTooLarge   = "too_large"  // a page over the size limit
)

// ScrapeConfig tunes a Scraper.
type ScrapeConfig struct {
	Interval time.Duration // between scrapes of one replica; must be > 0
	Timeout  time.Duration // bounds one scrape, from sending to the last byte
	// MaxAge is how long after its scrape was sent a report stays fresh;
	// older reports count as missing.
	MaxAge   time.Duration
	MaxBytes int64 // a page over this is refused; 0 means 4 MiB
}

// Target is a replica to scrape.
type Target struct {
	ID  string
	URL *url.URL // base URL; the page is at /metrics
	// Own, when set, reports the gateway's own requests to the replica.
	// Read before and after each page, it tells the engine's requests that
	// are not the gateway's (Sample.Foreign).
	Own func() Own
	// BlockSize is the tokens in the blocks the gateway counts the
	// replica's cache in (Sample.CapacityBlocks); 0 counts it in the
	// engine's own blocks.
	BlockSize int
}

// Own is what the gateway has sent a replica.
type Own struct {
	Unanswered int64 // requests it sent there still waiting for their first byte
	Sent       int64 // requests ever sent it: a count that only grows
}

// Sample is a report with the moment it was asked for.
type Sample struct {
	Report *Report
	// At is when the scrape that read Report was sent. The engine rendered
	// the page after that, so now.Sub(At) overstates the report's age, by
	// up to Timeout, and never understates it: a page that dribbles in
	// slowly does not make a stale report look fresh.
	At time.Time
	// Foreign is how many requests the gateway did not send wait at the
	// engine, not yet scheduled, as far as the page and the gateway's own
	// counts tell (another gateway's, a client's sent straight to the
	// engine, its own preempted after their first token): the engine's
	// waiting requests beyond the gateway's unanswered ones. 0 when the
	// target has no Own.
	Foreign float64
	// CapacityBlocks is the engine's usable KV cache in blocks of the
	// target's BlockSize (Report.UsableBlocks).
	CapacityBlocks int
}

// A Feed is where the scraper leaves a replica's latest sample. Routing
// reads every candidate's report on every decision, so it keeps each
// replica's Feed instead of looking the replica up by ID each time.
type Feed struct {
	last    atomic.Pointer[Sample]
	retired atomic.Bool // the replica stopped being a target: nothing more arrives
	// capacity is published with the fields below (seq); it sits here,
	// in the word retired leaves half empty, so that the feed stays one
	// line.
	capacity atomic.Int32
	maxAge   time.Duration

	// The latest report's Routing and when it goes stale, beside last so
	// that a decision reads them without following two pointers per
	// replica. The replica's scrapes, one at a time, publish them: the
	// writer makes seq odd while it changes them, and a reader retries
	// until it saw the same even seq before and after (a sequence lock).
	seq     atomic.Uint64
	staleAt atomic.Int64  // a clock.Instant
	running atomic.Uint64 // float64 bits
	kvUsage atomic.Uint64 // float64 bits
	// waiting holds two float32s, the engine's waiting requests in the
	// high half and Foreign in the low: counts that float32 keeps exact
	// far past any engine's, in one word, so that the feed stays one line.
	waiting atomic.Uint64
}

// Routing is what a routing decision reads of an engine's report.
type Routing struct {
	Running        float64
	KVUsage        float64
	CapacityBlocks int     // Sample.CapacityBlocks
	Foreign        float64 // Sample.Foreign
	Waiting        float64 // Report.Waiting: requests the engine has not scheduled yet, the gateway's own too
	// Age is how long before the instant of the read the report's scrape
	// was sent (see Sample.At): what the engine did since is not in it.
	Age time.Duration
}

// packCounts puts two counts in one word as float32s, each clamped to
// float32's finite range.
func packCounts(hi, lo float64) uint64 {
	f := func(x float64) uint64 { return uint64(math.Float32bits(float32(min(max(x, 0), math.MaxFloat32)))) }
	return f(hi)<<32 | f(lo)
}

// unpackCounts undoes packCounts.
func unpackCounts(w uint64) (hi, lo float64) {
	return float64(math.Float32frombits(uint32(w >> 32))), float64(math.Float32frombits(uint32(w)))
}

// publish makes smp the feed's latest sample. Scrapes of one replica call
// it one at a time.
func (f *Feed) publish(smp *Sample) {
	f.seq.Add(1)
	f.staleAt.Store(int64(clock.Of(smp.At).Add(f.maxAge)))
	f.running.Store(math.Float64bits(smp.Report.Running))
	f.kvUsage.Store(math.Float64bits(smp.Report.KVUsage))
	f.waiting.Store(packCounts(smp.Report.Waiting, smp.Foreign))
	f.capacity.Store(int32(min(smp.CapacityBlocks, math.MaxInt32)))
	f.seq.Add(1)
	f.last.Store(smp)
}

// FreshRouting is Fresh's report as routing reads it, at an instant.
func (f *Feed) FreshRouting(now clock.Instant) (Routing, bool) {
	for spins := 0; ; spins++ {
		s := f.seq.Load()
		r := Routing{Running: math.Float64frombits(f.running.Load()), KVUsage: math.Float64frombits(f.kvUsage.Load()),
			CapacityBlocks: int(f.capacity.Load())}
		r.Waiting, r.Foreign = unpackCounts(f.waiting.Load())
		staleAt := clock.Instant(f.staleAt.Load())
		if s&1 == 0 && f.seq.Load() == s {
			r.Age = max(time.Duration(now-staleAt)+f.maxAge, 0)
			return r, s > 0 && now <= staleAt
		}
		if spins >= 16 {
			runtime.Gosched() // the writer may have been descheduled mid-write
		}
	}
}

// Last returns the latest sample whatever its age, or nil.
func (f *Feed) Last() *Sample { return f.last.Load() }

// Fresh returns the latest report if its scrape was sent no more than
// MaxAge before now.
func (f *Feed) Fresh(now time.Time) (*Report, bool) {
	smp := f.last.Load()
	if smp == nil || now.Sub(smp.At) > f.maxAge {
		return nil, false
	}
	return smp.Report, true
}

// Retired reports whether the scraper has forgotten the feed's replica
// (it stopped being a target): the feed gets nothing more, and a replica
// of the same ID that returns gets a new one.
func (f *Feed) Retired() bool { return f.retired.Load() }

// replicaState is what the scraper keeps per replica. Routing reads
// every replica's feed on every decision, so the feed, one cache line, comes
// first and the state is padded to two lines: the heap's size class then
// starts each state, and so its feed, on a line of its own, and the
// scraping goroutine's own fields stay off it.
type replicaState struct {
	feed Feed
	busy atomic.Bool // a scrape is in flight
	// resumeAt is when the replica is next scraped after its pages were
	// refused (too large or unreadable), as Unix nanoseconds; 0 scrapes it
	// at every tick. Written by the scraping goroutine, read by Run.
	resumeAt atomic.Int64
	failing  bool    // last scrape failed; owned by the scraping goroutine
	refused  int     // pages refused in a row; owned by the scraping goroutine
	previous *Report // last good report; owned by the scraping goroutine
	// url is the engine's, nil until the first tick that scrapes it;
	// guarded by Scraper.mu.
	url *url.URL
	_   [128 - 64 - 48]byte
}

// maxRefusedBackoff caps how many intervals a replica whose pages keep
// being refused waits between scrapes.
const maxRefusedBackoff = 32

// backOff puts off the next scrape of a replica whose page was refused
// (too large, unreadable, or still flowing past a megabyte when the
// timeout cut it): one interval after the first refusal, doubling to
// maxRefusedBackoff intervals. Reading a page up to the size limit costs
// the gateway milliseconds of CPU each time, and an engine that sends huge,
// endless or garbage pages is unlikely to stop by the next tick; twenty of
// them read every 100 ms would take the CPU the healthy replicas' scrapes
// and the requests need. Its report is missing meanwhile, as it was.
func (st *replicaState) backOff(result string, err error, now time.Time, interval time.Duration) {
	if result != ResultTooLarge && result != ResultUnreadable && !errors.Is(err, errEndless) {
		st.refused = 0
		st.resumeAt.Store(0)
		return
	}
	st.refused++
	wait := interval << min(st.refused-1, 5)
	st.resumeAt.Store(now.Add(min(wait, maxRefusedBackoff*interval)).UnixNano())
}

// Scraper scrapes every target in parallel at an interval. A slow or dead
// engine delays only its own scrape. Safe for concurrent use.
type Scraper struct {
	cfg      ScrapeConfig
	client   *http.Client
	targets  func() []Target
	log      *slog.Logger
	onScrape func(id, result string)
	onReset  func(id string)
	now      func() time.Time

	mu     sync.Mutex
	states map[string]*replicaState // guarded by mu
	// retirements counts the feeds retired so far, each after its state
	// went (under mu).
	retirements atomic.Uint64
}

// NewScraper scrapes the targets targets returns (asked at every tick).
// onScrape (may be nil) learns every result; onReset (may be nil) learns of
// engines whose prefix-cache counters went backwards: they restarted with
// an empty cache.
func NewScraper(cfg ScrapeConfig, client *http.Client, targets func() []Target, logger *slog.Logger,
	onScrape func(id, result string), onReset func(id string)) *Scraper {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 4 << 20
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Scraper{cfg: cfg, client: client, targets: targets, log: logger.With("component", "load"),
		onScrape: onScrape, onReset: onReset, now: time.Now, states: map[string]*replicaState{}}
}

// Run scrapes until ctx ends and waits for scrapes in flight.
func (s *Scraper) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		live := map[string]bool{}
		for _, tg := range s.targets() {
			live[tg.ID] = true
			st := s.target(tg)
			if at := st.resumeAt.Load(); at != 0 && s.now().UnixNano() < at {
				continue // its pages were refused: see backOff
			}
			if !st.busy.CompareAndSwap(false, true) {
				continue // the previous scrape is still within its timeout
			}
			wg.Go(func() {
				defer st.busy.Store(false)
				s.scrape(ctx, tg, st)
			})
		}
		s.prune(live)
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil
		}
	}
}

func (s *Scraper) state(id string) *replicaState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stateLocked(id)
}

func (s *Scraper) stateLocked(id string) *replicaState {
	st, ok := s.states[id]
	if !ok {
		st = &replicaState{}
		st.feed.maxAge = s.cfg.MaxAge
		s.states[id] = st
	}
	return st
}

// target returns tg's state. A replica of tg's ID at another URL than
// the one scraped so far is another engine: its state starts afresh, the
// old feed retiring as a departed replica's does, so that the new engine
// is neither served the old one's report nor compared with it (its lower
// counters read as a restart).
func (s *Scraper) target(tg Target) *replicaState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(tg.ID)
	if st.url != nil && tg.URL != st.url && tg.URL.String() != st.url.String() {
		st.feed.retired.Store(true)
		delete(s.states, tg.ID)
		s.retirements.Add(1)
		st = s.stateLocked(tg.ID)
	}
	st.url = tg.URL
	return st
}

// prune forgets replicas that are no longer targets.
func (s *Scraper) prune(live map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, st := range s.states {
		if !live[id] {
			st.feed.retired.Store(true)
			delete(s.states, id)
			s.retirements.Add(1)
		}
	}
}

// Retirements counts the feeds the scraper has retired so far. Feeds
// taken (Feed) after reading it are live unless it has grown since: a
// table of feeds built then is current while it has not.
func (s *Scraper) Retirements() uint64 { return s.retirements.Load() }

func (s *Scraper) scrape(ctx context.Context, tg Target, st *replicaState) {
	var before Own
	if tg.Own != nil {
		before = tg.Own()
	}
	sent := s.now() // before the request goes out: see Sample.At
	rep, result, err := s.fetch(ctx, tg)
	if ctx.Err() != nil {
		return
	}
	if s.onScrape != nil {
		s.onScrape(tg.ID, result)
	}
	st.backOff(result, err, s.now(), s.cfg.Interval)
	if err != nil {
		if !st.failing {
			st.failing = true
			s.log.Warn(msgStopped, "replica", tg.ID, "result", result, "error", err)
		}
		return
	}
	if st.failing {
		st.failing = false
		s.log.Info(msgRecovered, "replica", tg.ID)
	}
	if prev := st.previous; prev != nil && (rep.PrefixQueries < prev.PrefixQueries || rep.PrefixHits < prev.PrefixHits) {
		s.log.Info("engine counters went backwards: treating it as restarted with an empty cache", "replica", tg.ID)
		if s.onReset != nil {
			s.onReset(tg.ID)
		}
	}
	st.previous = rep
	smp := &Sample{Report: rep, At: sent, CapacityBlocks: rep.UsableBlocks(tg.BlockSize)}
	if tg.Own != nil {
		smp.Foreign = foreign(rep, before, tg.Own())
	}
	st.feed.publish(smp)
}

// foreign is Sample.Foreign for a report read between the gateway's own
// counts before and after: the engine's waiting requests beyond those the
// gateway may have had waiting there, at most what waited for a first
// token before plus what it sent in between. The engine's running
// requests are not counted: most of another gateway's are decoding, and
// the page cannot tell which of them still prefill. Counting them in
// proportion to the gateway's own still unanswered there priced decodes
// as queued prefill, and moved requests off the replicas that held their
// prompts.
func foreign(rep *Report, before, after Own) float64 {
	sent := float64(after.Sent - before.Sent)
	return max(rep.Waiting-(float64(before.Unanswered)+sent), 0)
}

// What is logged, once per replica, when its scrapes start failing and when
// one succeeds again.
const (
	msgStopped   = "engine metrics unavailable; routing falls back to the gateway's own counts"
	msgRecovered = "engine metrics readable again"
)

// errTooLarge marks a page over the size limit.
var errTooLarge = errors.New("metrics page over the size limit")

// errEndless marks a page the timeout cut after more than endlessBytes: no
// engine's page is that long, so it was going to reach the size limit.
var errEndless = errors.New("metrics page still flowing at the timeout")

// endlessBytes is how much of a page the timeout must have cut for it to be
// errEndless; vLLM's pages are tens of kilobytes.
const endlessBytes = 1 << 20

func (s *Scraper) fetch(ctx context.Context, tg Target) (*Report, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tg.URL.JoinPath("/metrics").String(), nil)
	if err != nil {
		return nil, ResultError, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, ResultError, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, ResultError, fmt.Errorf("status %d", resp.StatusCode)
	}
	// Read at most one byte past the limit: a page that has it is refused
	// whole rather than cut short and misread.
	body := &countingReader{r: io.LimitReader(resp.Body, s.cfg.MaxBytes+1)}
	rep, err := Parse(body)
	switch {
	case body.n > s.cfg.MaxBytes:
		return nil, ResultTooLarge, errTooLarge
	case ctx.Err() != nil && body.n > endlessBytes:
		return nil, ResultError, fmt.Errorf("%w: %w", errEndless, ctx.Err())
	case ctx.Err() != nil:
		return nil, ResultError, ctx.Err()
	case err != nil:
		return nil, ResultUnreadable, err
	}
	return rep, ResultOK, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Fresh returns a replica's latest report if its scrape was sent no more
// than MaxAge before now.
func (s *Scraper) Fresh(id string, now time.Time) (*Report, bool) {
	s.mu.Lock()
	st, ok := s.states[id]
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	return st.feed.Fresh(now)
}

// Last returns a replica's latest report whatever its age, or nil.
func (s *Scraper) Last(id string) *Sample {
	s.mu.Lock()
	st, ok := s.states[id]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return st.feed.Last()
}

// Feed returns the feed of the replica named id, which the scraper fills
// while the replica is one of its targets. A replica it does not scrape yet
// gets a feed that its first scrape fills.
func (s *Scraper) Feed(id string) *Feed { return &s.state(id).feed }

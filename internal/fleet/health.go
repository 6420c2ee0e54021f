package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/inferrail/inferrail/internal/clock"
)

// HealthConfig tunes active probing and passive ejection.
type HealthConfig struct {
	Interval           time.Duration // between probes of one replica
	UnhealthyInterval  time.Duration // between probes of one out of rotation; 0 means Interval/4
	Timeout            time.Duration // per probe
	UnhealthyThreshold int           // failed probes (or failed requests in a row) before a replica is out
	HealthyThreshold   int           // passing probes before it is back
	EjectionBackoff    time.Duration // first ejection; doubles on every repeat
	MaxEjectionBackoff time.Duration
	MaxEjectionPercent int // of a model's replicas that pass probes, at most this share is ejected
}

// cardsEvery is how many probes pass between refreshes of a replica's model
// cards.
const cardsEvery = 10

// Health probes every replica's /health and ejects replicas whose requests
// keep failing. Safe for concurrent use.
type Health struct {
	cfg     HealthConfig
	fleet   *Fleet
	client  *http.Client
	log     *slog.Logger
	onEject func(*Replica)
	onProbe func(r *Replica, up bool)

	mu      sync.Mutex // serializes ejection decisions
	changed chan struct{}
}

// NewHealth returns a health checker for f. client makes the probes;
// onEject (may be nil) learns of every passive ejection and onProbe (may be
// nil) of every change of probe state.
func NewHealth(cfg HealthConfig, f *Fleet, client *http.Client, logger *slog.Logger, onEject func(*Replica), onProbe func(*Replica, bool)) *Health {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &Health{cfg: cfg, fleet: f, client: client, log: logger.With("component", "health"),
		onEject: onEject, onProbe: onProbe, changed: make(chan struct{}, 1)}
	f.Watch(func(_, removed []*Replica) {
		// Replicas that leave shrink what the cap is a share of, as
		// replicas that fail probes do.
		for _, r := range removed {
			h.keepCap(r.Models)
		}
		select {
		case h.changed <- struct{}{}:
		default:
		}
	})
	return h
}

// Run probes every member of the fleet until ctx ends, following joins and
// leaves. A member that left is probed on while it holds leases: failed
// probes still move the requests waiting on its engine's head, which
// nothing else would notice hang. It returns once every prober has
// stopped.
func (h *Health) Run(ctx context.Context) error {
	probers := map[*Replica]context.CancelFunc{}
	ended := make(chan *Replica)
	var wg sync.WaitGroup
	follow := func() {
		for _, r := range h.fleet.Snapshot().Replicas {
			if _, ok := probers[r]; !ok {
				pctx, cancel := context.WithCancel(ctx)
				probers[r] = cancel
				wg.Add(1)
				go func() {
					defer wg.Done()
					h.probeLoop(pctx, r)
					select {
					case ended <- r:
					case <-ctx.Done():
					}
				}()
			}
		}
	}
	follow()
	for {
		select {
		case <-h.changed:
			follow()
		case r := <-ended:
			probers[r]()
			delete(probers, r)
			follow() // in case it left and came back as the prober ended
		case <-ctx.Done():
			for _, cancel := range probers {
				cancel()
			}
			wg.Wait()
			return nil
		}
	}
}

// downInterval is the time between probes of a replica out of rotation.
func (c HealthConfig) downInterval() time.Duration {
	if c.UnhealthyInterval > 0 {
		return min(c.UnhealthyInterval, c.Interval)
	}
	return max(c.Interval/4, time.Millisecond)
}

// probeLoop probes one replica every interval (every downInterval while
// probes keep it out of rotation), the first time at once. Asked by
// Suspect, it probes at once, and while those probes fail and the replica
// is not yet down, back to back: a replica whose port refuses connections
// is down within the unhealthy threshold's probes, not as many intervals.
// It returns once r has left the fleet and holds no leases.
func (h *Health) probeLoop(ctx context.Context, r *Replica) {
	timer := time.NewTimer(h.cfg.Interval)
	defer timer.Stop()
	fails, passes, n := 0, 0, 0
	// failed: a probe failed since the cards were last fetched. The engine
	// may have restarted with other settings (a context length), so the
	// next passing probe fetches them again at once.
	burst, failed := false, false
	for {
		if r.Removed() && r.leases.Load() == 0 {
			return // left, and nothing waits on it
		}
		up := h.probe(ctx, r)
		if ctx.Err() != nil {
			return
		}
		if up {
			fails, passes = 0, passes+1
			if !r.probeUp.Load() && passes >= h.cfg.HealthyThreshold {
				r.probeUp.Store(true)
				r.markUp()
				// It may come back still ejected (requests failed while
				// probes had it out), now counted by the cap.
				h.keepCap(r.Models)
				h.log.Info("replica passes probes again", "replica", r.ID)
				if h.onProbe != nil {
					h.onProbe(r, true)
				}
			}
			if n%cardsEvery == 0 || r.Cards() == nil || failed {
				h.fetchCards(ctx, r)
				failed = false
			}
			n++
		} else {
			passes, fails, failed = 0, fails+1, true
			if r.probeUp.Load() && fails >= h.cfg.UnhealthyThreshold {
				r.probeUp.Store(false)
				r.markDown()
				h.log.Warn("replica fails probes", "replica", r.ID, "failures", fails)
				h.keepCap(r.Models)
				if h.onProbe != nil {
					h.onProbe(r, false)
				}
			}
			if burst && r.probeUp.Load() {
				continue // suspected and failing, not yet down: probe again now
			}
		}
		burst = false
		wait := h.cfg.Interval
		if !r.probeUp.Load() {
			wait = h.cfg.downInterval()
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-r.probeNow:
			burst = true
		case <-ctx.Done():
			return
		}
	}
}

// Suspect asks for r to be probed at once, and again at once while those
// probes fail, until it passes or is marked down: for a request that found
// nothing listening at r's address, which no overloaded engine would cause.
// It returns without waiting.
func (h *Health) Suspect(r *Replica) {
	select {
	case r.probeNow <- struct{}{}:
	default: // a request is already pending
	}
}

// probe reports whether r's /health answers a 200, its body read whole
// (up to 64 KiB), within the probe timeout.
func (h *Health) probe(ctx context.Context, r *Replica) bool {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL.JoinPath("/health").String(), nil)
	if err != nil {
		return false
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	// A probe passes with its whole answer (its first 64 KiB) within the
	// timeout: an engine behind a proxy that sends the head first may
	// hang after it, and a body cut short is no answer either.
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)); err != nil {
		return false
	}
	return resp.StatusCode == http.StatusOK
}

// fetchCards refreshes the model cards an engine publishes on /v1/models.
func (h *Health) fetchCards(ctx context.Context, r *Replica) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL.JoinPath("/v1/models").String(), nil)
	if err != nil {
		return
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&list); err != nil {
		return
	}
	cards := &ModelCards{Fetched: time.Now(), Cards: map[string][]byte{}}
	for _, c := range list.Data {
		var id struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(c, &id) == nil && id.ID != "" {
			cards.Cards[id.ID] = c
		}
	}
	prev := r.Cards()
	r.SetCards(cards)
	h.warnUnserved(r, prev, cards)
}

// warnUnserved warns of each model r is configured for that its engine's
// list lacks, once until the engine lists it again: requests for it there
// get the engine's 404, which neither ejects nor retries, and without a
// word an operator learned of a misconfigured replica from its clients.
func (h *Health) warnUnserved(r *Replica, prev, cards *ModelCards) {
	for _, m := range r.Models {
		if _, ok := cards.Cards[m]; ok {
			continue
		}
		if prev != nil {
			if _, had := prev.Cards[m]; !had {
				continue // said at the fetch that first lacked it
			}
		}
		h.log.Warn("replica's engine does not list a model the replica is configured to serve; requests for it there get the engine's 404",
			"replica", r.ID, "model", m, "engine_lists", slices.Sorted(maps.Keys(cards.Cards)))
	}
}

// MarkDown takes r out of rotation as failed probes do, until probes pass
// again. For tests and operators.
func MarkDown(r *Replica) {
	r.probeUp.Store(false)
	r.markDown()
}

// Report records the outcome of a request sent to r: ok when the engine
// answered, not ok when it failed (connection errors, 5xx). Enough failures
// in a row eject the replica for a backoff that doubles on every repeat,
// unless that would eject more than MaxEjectionPercent of the replicas of
// one of its models.
func (h *Health) Report(r *Replica, ok bool) {
	if ok {
		if r.failStreak.Load() != 0 {
			r.failStreak.Store(0)
		}
		if r.ejections.Load() != 0 && r.ejectedUntil.Load() != notEjected && !r.Ejected(time.Now()) {
			h.served(r)
		}
		return
	}
	if int(r.failStreak.Add(1)) < h.cfg.UnhealthyThreshold {
		return
	}
	h.eject(r)
}

// Refused records a request whose connection r refused: nothing listens
// there (the engine exited or has not started), which one attempt tells as
// surely as any number, so it counts as a full streak of failures and
// ejects r at once, within the same cap. Probes are asked to look at once
// as well (Suspect).
func (h *Health) Refused(r *Replica) {
	r.failStreak.Store(int32(min(h.cfg.UnhealthyThreshold, math.MaxInt32)))
	h.eject(r)
	h.Suspect(r)
}

// served resets the backoff of r, whose last ejection ended, as it served
// again. It checks again under h.mu: a failure racing with the success
// may have ejected r anew, and that ejection must stand.
func (h *Health) served(r *Replica) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.ejectedUntil.Load() != notEjected && !r.Ejected(time.Now()) {
		r.ejections.Store(0)
		r.ejectedUntil.Store(notEjected)
	}
}

// eject ejects r for its backoff if its streak still calls for it and the
// cap allows.
func (h *Health) eject(r *Replica) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if r.Ejected(now) || int(r.failStreak.Load()) < h.cfg.UnhealthyThreshold || !h.mayEject(r, now) {
		return
	}
	k := r.ejections.Add(1)
	d := h.cfg.EjectionBackoff
	for i := int32(1); i < k && d < h.cfg.MaxEjectionBackoff; i++ {
		d *= 2
	}
	d = min(d, h.cfg.MaxEjectionBackoff)
	r.ejectedUntil.Store(int64(clock.Of(now).Add(d)))
	r.failStreak.Store(0)
	r.ejectedTotal.Add(1)
	h.log.Warn("replica ejected after failed requests", "replica", r.ID, "for", d)
	if h.onEject != nil {
		h.onEject(r)
	}
}

// keepCap readmits ejected replicas of models, those whose ejection ends
// soonest first, while more than MaxEjectionPercent of the replicas
// passing probes are ejected: the cap is checked when a replica is
// ejected, but replicas that later fail probes or leave the fleet shrink
// what it is a share of, and requests that made every engine fail must not
// empty the pool however it shrinks. Fleet watchers call it with the
// fleet's lock held: it reads only the published snapshot.
func (h *Health) keepCap(models []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	snap := h.fleet.Snapshot()
	for _, m := range models {
		var healthy int
		var ejected []*Replica
		for _, o := range snap.ForModel(m) {
			if o.Removed() || !o.Healthy() {
				continue
			}
			healthy++
			if o.Ejected(now) {
				ejected = append(ejected, o)
			}
		}
		slices.SortFunc(ejected, func(a, b *Replica) int { return cmp.Compare(a.ejectedUntil.Load(), b.ejectedUntil.Load()) })
		for len(ejected) > 0 && len(ejected)*100 > h.cfg.MaxEjectionPercent*healthy {
			o := ejected[0]
			ejected = ejected[1:]
			o.ejectedUntil.Store(int64(clock.Of(now)))
			h.log.Warn("ejected replica readmitted early: others failed probes or left, and the ejection cap holds", "replica", o.ID, "model", m)
		}
	}
}

// mayEject checks the ejection cap for every model r serves; h.mu is held.
func (h *Health) mayEject(r *Replica, now time.Time) bool {
	snap := h.fleet.Snapshot()
	for _, m := range r.Models {
		healthy, ejected := 0, 0
		for _, o := range snap.ForModel(m) {
			if o.Removed() || !o.Healthy() {
				continue
			}
			healthy++
			if o.Ejected(now) {
				ejected++
			}
		}
		if (ejected+1)*100 > h.cfg.MaxEjectionPercent*healthy {
			return false
		}
	}
	return true
}

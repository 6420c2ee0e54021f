package gateway

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// drift checks the index against the engines: for every response whose
// usage reports the engine's cached tokens, it compares them with what
// routing predicted on that replica. Per replica it counts exact, over and
// under predictions and their error in tokens, and keeps the last
// driftWindow outcomes: when more than driftMaxOver of them over-predict
// (with at least driftMinSamples), the replica is drifting. It logs that
// once, /admin/index shows it, and in index mode auto the replica's
// predictions leave the events for driftCooldown.
//
// Over-prediction is what costs: the router sends a request where it
// believes the prompt cached and the engine computes it all. Under-
// prediction only forgoes a hit.
type drift struct {
	log *slog.Logger

	mu   sync.Mutex
	reps map[string]*driftState
}

const (
	driftWindow     = 200
	driftMinSamples = 50
	driftMaxOver    = 0.10
	driftCooldown   = time.Minute
)

type driftState struct {
	exact, over, under      uint64
	overTokens, underTokens uint64
	window                  [driftWindow]int8 // +1 over, -1 under, 0 exact
	next, n, overs          int
	alarmed                 bool
	since                   time.Time // when the alarm was raised
}

func newDrift(log *slog.Logger) *drift { return &drift{log: log, reps: map[string]*driftState{}} }

// observe records one response of replica: predicted cached tokens against
// the engine's.
func (d *drift) observe(replica string, predicted, actual int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.reps[replica]
	if s == nil {
		s = &driftState{}
		d.reps[replica] = s
	}
	var o int8
	switch {
	case predicted > actual:
		o = 1
		s.over++
		s.overTokens += uint64(predicted - actual)
	case predicted < actual:
		o = -1
		s.under++
		s.underTokens += uint64(actual - predicted)
	default:
		s.exact++
	}
	if s.n == driftWindow {
		if s.window[s.next] == 1 {
			s.overs--
		}
	} else {
		s.n++
	}
	s.window[s.next] = o
	s.next = (s.next + 1) % driftWindow
	if o == 1 {
		s.overs++
	}
	share := float64(s.overs) / float64(s.n)
	switch {
	case !s.alarmed && s.n >= driftMinSamples && share > driftMaxOver:
		s.alarmed, s.since = true, time.Now()
		d.log.Warn("kv index drift: predictions over-count the engine's cached tokens", "replica", replica,
			"over_share", share, "window", s.n)
	case s.alarmed && share <= driftMaxOver/2:
		s.alarmed = false
		d.log.Info("kv index drift over", "replica", replica, "over_share", share)
	}
}

// alarmed reports whether replica drifts now, and since when.
func (d *drift) alarmed(replica string) (bool, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.reps[replica]; s != nil {
		return s.alarmed, s.since
	}
	return false, time.Time{}
}

// restart forgets replica's window, for a fresh judgement of a new source.
func (d *drift) restart(replica string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.reps[replica]; s != nil {
		s.window, s.next, s.n, s.overs, s.alarmed = [driftWindow]int8{}, 0, 0, 0, false
	}
}

func (d *drift) forget(replica string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.reps, replica)
}

// driftStatus is one replica's checks for /admin/index.
type driftStatus struct {
	ID          string  `json:"id"`
	Exact       uint64  `json:"exact"`
	Over        uint64  `json:"over"`
	Under       uint64  `json:"under"`
	OverTokens  uint64  `json:"over_tokens"`
	UnderTokens uint64  `json:"under_tokens"`
	OverShare   float64 `json:"window_over_share"` // over-predictions among the last checks
	Window      int     `json:"window"`
	Drifting    bool    `json:"drifting"`
}

func (d *drift) status() []driftStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]driftStatus, 0, len(d.reps))
	for id, s := range d.reps {
		st := driftStatus{ID: id, Exact: s.exact, Over: s.over, Under: s.under, OverTokens: s.overTokens,
			UnderTokens: s.underTokens, Window: s.n, Drifting: s.alarmed}
		if s.n > 0 {
			st.OverShare = float64(s.overs) / float64(s.n)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b driftStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

var (
	descPredChecks = prometheus.NewDesc("inferrail_prediction_checks_total",
		"Responses whose engine-reported cached tokens were compared with the prediction, by result (exact, over, under).",
		[]string{"replica", "result"}, nil)
	descPredError = prometheus.NewDesc("inferrail_prediction_error_tokens_total",
		"Cached tokens predicted beyond (over) or short of (under) what the engine reported.", []string{"replica", "direction"}, nil)
	descDrift = prometheus.NewDesc("inferrail_index_drift",
		"1 while the replica's recent predictions over-count the engine's cached tokens past the alarm's threshold.", []string{"replica"}, nil)
)

// driftCollector exports the checks.
type driftCollector struct{ d *drift }

func (c *driftCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPredChecks
	ch <- descPredError
	ch <- descDrift
}

func (c *driftCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.d.status() {
		ch <- prometheus.MustNewConstMetric(descPredChecks, prometheus.CounterValue, float64(s.Exact), s.ID, "exact")
		ch <- prometheus.MustNewConstMetric(descPredChecks, prometheus.CounterValue, float64(s.Over), s.ID, "over")
		ch <- prometheus.MustNewConstMetric(descPredChecks, prometheus.CounterValue, float64(s.Under), s.ID, "under")
		ch <- prometheus.MustNewConstMetric(descPredError, prometheus.CounterValue, float64(s.OverTokens), s.ID, "over")
		ch <- prometheus.MustNewConstMetric(descPredError, prometheus.CounterValue, float64(s.UnderTokens), s.ID, "under")
		v := 0.0
		if s.Drifting {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descDrift, prometheus.GaugeValue, v, s.ID)
	}
}

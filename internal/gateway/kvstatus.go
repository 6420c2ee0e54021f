package gateway

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferrail/inferrail/internal/index"
	"github.com/inferrail/inferrail/internal/kvfeed"
)

// kvStatus is one replica's event stream as /admin/index and the metrics
// show it.
type kvStatus struct {
	ID             string            `json:"id"`
	Source         index.Source      `json:"source"`
	Reason         string            `json:"reason,omitempty"` // why not events
	Endpoint       string            `json:"endpoint"`
	ReplayEndpoint string            `json:"replay_endpoint,omitempty"`
	LastSeq        *uint64           `json:"last_seq"`
	LagSeconds     *float64          `json:"lag_seconds"` // since the last batch applied
	Received       uint64            `json:"received"`
	Applied        uint64            `json:"applied"`
	Duplicates     uint64            `json:"duplicates"`
	Gaps           uint64            `json:"gaps"`
	Replays        uint64            `json:"replays"`
	ReplayErrors   uint64            `json:"replay_errors"`
	Malformed      uint64            `json:"malformed"`
	UnknownEvents  uint64            `json:"unknown_events"` // events of kinds the decoder does not know, left out
	Connected      bool              `json:"connected"`      // the feed holds a connection to the publisher past its handshake now
	Disconnects    uint64            `json:"disconnects"`    // connections lost after the handshake
	Rejected       uint64            `json:"rejected"`       // connections whose handshake failed
	Purges         map[string]uint64 `json:"purges"`
	Mirrored       int               `json:"mirrored_blocks"`
	Speculative    int               `json:"speculative_blocks"`
	Orphans        int               `json:"orphan_blocks"`
	Mirror         index.MirrorStats `json:"mirror"`
	// Digest is the mirror's order-independent digest of the gateway
	// hashes it holds (index.Mirror.Digest), 16 hex digits: two gateways
	// following the same engine agree on its cache when their digests,
	// mirrored blocks and last sequence agree.
	Digest string `json:"digest"`
	// Confirmed and Unconfirmed count routed blocks the engine stored, and
	// those it did not within the speculative TTL; TokenizationSuspect is
	// set when nearly all go unconfirmed, UnseenPrefix instead when most
	// of what the engine stores meanwhile has no parent the mirror knows
	// (a prefix it cached before the stream's history reaches).
	Confirmed           uint64 `json:"speculation_confirmed"`
	Unconfirmed         uint64 `json:"speculation_unconfirmed"`
	TokenizationSuspect bool   `json:"tokenization_suspect"`
	UnseenPrefix        bool   `json:"unseen_prefix"`

	// ReplayUntrusted: the replay socket answered with batches the live
	// stream never sent (another engine's, or broken), so it is no longer
	// asked (kvfeed.Stats.ReplayUntrusted).
	ReplayUntrusted bool `json:"replay_untrusted"`
}

// status lists every followed replica's stream, sorted by ID.
func (k *kvEvents) status(now time.Time) []kvStatus {
	k.mu.Lock()
	feeds := make([]*replicaFeed, 0, len(k.feeds))
	for _, f := range k.feeds {
		feeds = append(feeds, f)
	}
	k.mu.Unlock()
	out := make([]kvStatus, 0, len(feeds))
	for _, f := range feeds {
		out = append(out, k.statusOf(f, now))
	}
	slices.SortFunc(out, func(a, b kvStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (k *kvEvents) statusOf(f *replicaFeed, now time.Time) kvStatus {
	// The purges first: the feed counts a malformed batch before the purge
	// it causes, so a status showing that purge shows its count too.
	f.mu.Lock()
	purges := maps.Clone(f.purges)
	f.mu.Unlock()
	st := f.feed.Stats()
	ev := k.index.Events(f.id)
	s := kvStatus{
		ID: f.id, Source: ev.Source, Endpoint: f.endpoint, ReplayEndpoint: f.replay,
		Received: st.Received, Applied: st.Applied, Duplicates: st.Duplicates, Gaps: st.Gaps,
		Replays: st.Replays, ReplayErrors: st.ReplayErrs, Malformed: st.Malformed, UnknownEvents: st.UnknownEvents,
		Connected: !st.Unconnected, Disconnects: st.Disconnects, Rejected: st.Rejected,
		Mirrored: ev.Mirrored, Speculative: ev.Speculative, Orphans: ev.Orphans, Mirror: ev.Mirror,
		Confirmed: ev.Confirmed, Unconfirmed: ev.Expired, Purges: purges,
		Digest: fmt.Sprintf("%016x", ev.Digest), ReplayUntrusted: st.ReplayUntrusted,
	}
	if st.HasSeq {
		seq := st.LastSeq
		s.LastSeq = &seq
	}
	if !st.LastBatch.IsZero() {
		lag := now.Sub(st.LastBatch).Seconds()
		s.LagSeconds = &lag
	}
	f.mu.Lock()
	if ev.Source != index.SourceEvents {
		s.Reason = f.reason
	}
	s.TokenizationSuspect, s.UnseenPrefix = f.suspect, f.unseenPrefix
	f.mu.Unlock()
	return s
}

// kvCollector exports every followed stream's counters.
type kvCollector struct{ kv *kvEvents }

var (
	descKVBatches = prometheus.NewDesc("inferrail_kv_events_batches_total",
		"KV event batches applied to the index, live or replayed.", []string{"replica"}, nil)
	descKVGaps = prometheus.NewDesc("inferrail_kv_events_gaps_total",
		"Times a replica's KV event stream skipped sequence numbers.", []string{"replica"}, nil)
	descKVReplays = prometheus.NewDesc("inferrail_kv_events_replays_total",
		"Replays asked of a replica's engine, by result.", []string{"replica", "result"}, nil)
	descKVPurges = prometheus.NewDesc("inferrail_kv_events_purges_total",
		"Times a replica's mirror was emptied, by reason (restart, lost, malformed).", []string{"replica", "reason"}, nil)
	descKVMalformed = prometheus.NewDesc("inferrail_kv_events_malformed_total",
		"KV event messages dropped as malformed.", []string{"replica"}, nil)
	descKVDisconnects = prometheus.NewDesc("inferrail_kv_events_disconnects_total",
		"Connections to a replica's KV event publisher lost after the handshake (closed, or a broken frame).", []string{"replica"}, nil)
	descKVRejected = prometheus.NewDesc("inferrail_kv_events_rejected_total",
		"Connections to a replica's KV event publisher whose ZMTP handshake failed.", []string{"replica"}, nil)
	descKVLastSeq = prometheus.NewDesc("inferrail_kv_events_last_sequence",
		"Sequence number of the last KV event batch applied, modulo 2^53 (what a float64 holds exactly); /admin/index's last_seq is the whole number.", []string{"replica"}, nil)
	descKVLag = prometheus.NewDesc("inferrail_kv_events_lag_seconds",
		"Time since the last KV event batch was applied.", []string{"replica"}, nil)
	descKVBlocks = prometheus.NewDesc("inferrail_kv_events_blocks",
		"Blocks of a replica's mirror: mirrored (the engine holds them), speculative (routed, not confirmed), orphan (parent unknown).",
		[]string{"replica", "state"}, nil)
	descKVDropped = prometheus.NewDesc("inferrail_kv_events_dropped_total",
		"What a replica's mirror could not apply, by kind (unknown_removal, skipped, orphan_dropped, overflow, unknown_event: an event of a kind the decoder does not know).",
		[]string{"replica", "kind"}, nil)
	descKVSpeculation = prometheus.NewDesc("inferrail_kv_events_speculation_total",
		"Routed blocks counted as cached before the engine's events: confirmed by a store, or expired unconfirmed.",
		[]string{"replica", "result"}, nil)
	descKVTokSuspect = prometheus.NewDesc("inferrail_kv_events_tokenization_suspect",
		"1 while nearly every block routed to the replica goes unconfirmed by its engine: its tokens likely differ from the gateway's.",
		[]string{"replica"}, nil)
	descKVReplayUntrusted = prometheus.NewDesc("inferrail_kv_events_replay_untrusted",
		"1 once a replica's replay socket answered with batches its live stream never sent (another engine's, or broken): it is no longer asked.",
		[]string{"replica"}, nil)
	descIndexSource = prometheus.NewDesc("inferrail_index_source",
		"1 for the source a replica's predictions come from now (events or approximate).", []string{"replica", "source"}, nil)
)

// seqGauge is a sequence number as inferrail_kv_events_last_sequence
// shows it: its low 53 bits. A float64 holds integers exactly only up to
// 2^53, and a publisher's sequence is a uint64 that starts wherever its
// engine counts: past 2^53, float64(seq) rounds consecutive numbers to one
// value and the gauge would stand still while batches arrive. The low
// bits move by one with every batch and wrap to 0 once in 2^53 (centuries
// at a million batches a second).
func seqGauge(seq uint64) float64 { return float64(seq & (1<<53 - 1)) }

func (c *kvCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descKVBatches, descKVGaps, descKVReplays, descKVPurges, descKVMalformed,
		descKVDisconnects, descKVRejected, descKVLastSeq, descKVLag, descKVBlocks, descKVDropped, descKVSpeculation,
		descKVTokSuspect, descKVReplayUntrusted} {
		ch <- d
	}
}

func (c *kvCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, s := range c.kv.status(time.Now()) {
		id := s.ID
		counter(descKVBatches, s.Applied, id)
		counter(descKVGaps, s.Gaps, id)
		counter(descKVReplays, s.Replays-s.ReplayErrors, id, "ok")
		counter(descKVReplays, s.ReplayErrors, id, "error")
		for _, r := range []string{kvfeed.PurgeRestart, kvfeed.PurgeLost, kvfeed.PurgeMalformed} {
			counter(descKVPurges, s.Purges[r], id, r)
		}
		counter(descKVMalformed, s.Malformed, id)
		counter(descKVDisconnects, s.Disconnects, id)
		counter(descKVRejected, s.Rejected, id)
		if s.LastSeq != nil {
			gauge(descKVLastSeq, seqGauge(*s.LastSeq), id)
		}
		if s.LagSeconds != nil {
			gauge(descKVLag, *s.LagSeconds, id)
		}
		gauge(descKVBlocks, float64(s.Mirrored), id, "mirrored")
		gauge(descKVBlocks, float64(s.Speculative), id, "speculative")
		gauge(descKVBlocks, float64(s.Orphans), id, "orphan")
		counter(descKVDropped, s.Mirror.UnknownRemovals, id, "unknown_removal")
		counter(descKVDropped, s.Mirror.Skipped, id, "skipped")
		counter(descKVDropped, s.Mirror.OrphansDropped, id, "orphan_dropped")
		counter(descKVDropped, s.Mirror.Overflow, id, "overflow")
		counter(descKVDropped, s.UnknownEvents, id, "unknown_event")
		counter(descKVSpeculation, s.Confirmed, id, "confirmed")
		counter(descKVSpeculation, s.Unconfirmed, id, "expired")
		suspect := 0.0
		if s.TokenizationSuspect {
			suspect = 1
		}
		gauge(descKVTokSuspect, suspect, id)
		untrusted := 0.0
		if s.ReplayUntrusted {
			untrusted = 1
		}
		gauge(descKVReplayUntrusted, untrusted, id)
	}
}

// indexSourceCollector reports where each replica's predictions come from,
// in every index mode: approximate ones follow no engine's events.
type indexSourceCollector struct{ g *Gateway }

func (c *indexSourceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descIndexSource }

func (c *indexSourceCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.g.fleet.Snapshot().Replicas {
		now := c.g.index.Events(r.ID).Source
		for _, src := range []index.Source{index.SourceEvents, index.SourceApproximate} {
			v := 0.0
			if now == src {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descIndexSource, prometheus.GaugeValue, v, r.ID, string(src))
		}
	}
}

package gateway

import (
	"encoding/json"
	"net/http"
	"time"
)

// replicaView is one replica as GET /admin/replicas shows it.
type replicaView struct {
	ID             string      `json:"id"`
	URL            string      `json:"url"`
	Group          string      `json:"group,omitempty"`
	Models         []string    `json:"models"`
	Healthy        bool        `json:"healthy"`
	Ejected        bool        `json:"ejected"`
	EjectedTotal   int64       `json:"ejections"`
	InFlight       int64       `json:"in_flight"`
	Pending        int64       `json:"pending"`
	MaxConcurrency int64       `json:"max_concurrency"`
	MaxPending     int64       `json:"max_pending"`
	Engine         *engineView `json:"engine"` // null until a report arrived
}

// engineView is the engine's last load report.
type engineView struct {
	Kind           string  `json:"kind"`
	AgeSeconds     float64 `json:"age_secs"`
	Fresh          bool    `json:"fresh"`
	Running        float64 `json:"running"`
	Waiting        float64 `json:"waiting"`
	KVUsage        float64 `json:"kv_usage"`
	PrefixQueries  float64 `json:"prefix_cache_queries"`
	PrefixHits     float64 `json:"prefix_cache_hits"`
	Preemptions    float64 `json:"preemptions"`
	BlockSize      int     `json:"block_size,omitempty"`
	CapacityBlocks int     `json:"capacity_blocks,omitempty"`
}

// serveReplicas answers GET /admin/replicas: every replica's health,
// ejection, load and its engine's last report with its age.
func (g *Gateway) serveReplicas(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	var out struct {
		Replicas []replicaView `json:"replicas"`
	}
	out.Replicas = []replicaView{}
	for _, rep := range g.fleet.Snapshot().Replicas {
		v := replicaView{ID: rep.ID, URL: rep.URL.String(), Group: rep.Group, Models: rep.Models,
			Healthy: rep.Healthy(), Ejected: rep.Ejected(now), EjectedTotal: rep.EjectedTotal(),
			InFlight: rep.InFlight(), Pending: rep.Pending(), MaxConcurrency: rep.MaxConcurrency, MaxPending: rep.MaxPending}
		if smp := g.scraper.Last(rep.ID); smp != nil {
			e := smp.Report
			age := now.Sub(smp.At)
			v.Engine = &engineView{Kind: string(e.Engine), AgeSeconds: age.Seconds(), Fresh: age <= time.Duration(g.cfg.Load.MaxAge),
				Running: e.Running, Waiting: e.Waiting, KVUsage: e.KVUsage, PrefixQueries: e.PrefixQueries,
				PrefixHits: e.PrefixHits, Preemptions: e.Preemptions, BlockSize: e.BlockSize, CapacityBlocks: e.CapacityBlocks}
		}
		out.Replicas = append(out.Replicas, v)
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

package procs

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// IndexStatus is what a gateway's GET /admin/index says of its KV index:
// the mode, each replica's predicted blocks and where its predictions come
// from, and each engine's KV event stream (modes exact and auto).
type IndexStatus struct {
	Mode     string         `json:"mode"`
	Entries  int            `json:"entries"`
	Replicas []IndexReplica `json:"replicas"`
	KVEvents []KVStream     `json:"kv_events,omitempty"`
}

// IndexReplica is one replica's line of IndexStatus.
type IndexReplica struct {
	ID       string `json:"id"`
	Blocks   int    `json:"blocks"`
	Capacity int    `json:"capacity_blocks"`
	// Source is "events" or "approximate".
	Source string `json:"source"`
}

// KVStream is one engine's KV event stream as the gateway follows it.
type KVStream struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	// Reason says why the replica's predictions do not follow the events;
	// empty when they do.
	Reason         string            `json:"reason,omitempty"`
	Endpoint       string            `json:"endpoint"`
	ReplayEndpoint string            `json:"replay_endpoint,omitempty"`
	LastSeq        *uint64           `json:"last_seq"`
	Received       uint64            `json:"received"`
	Applied        uint64            `json:"applied"`
	Duplicates     uint64            `json:"duplicates"`
	Gaps           uint64            `json:"gaps"`
	Replays        uint64            `json:"replays"`
	ReplayErrors   uint64            `json:"replay_errors"`
	Malformed      uint64            `json:"malformed"`
	Purges         map[string]uint64 `json:"purges,omitempty"`
	Mirrored       int               `json:"mirrored_blocks"`
	Speculative    int               `json:"speculative_blocks"`
	Orphans        int               `json:"orphan_blocks"`
	Mirror         MirrorCounters    `json:"mirror"`
	// Digest is the gateway's digest of the mirror's gateway hashes, the
	// same for two gateways whose mirrors of the engine hold the same
	// blocks; empty from a gateway too old to report it.
	Digest string `json:"digest,omitempty"`
}

// MirrorCounters are what a replica's mirror applied and could not apply
// since it was made, as the gateway reports them.
type MirrorCounters struct {
	Stored          uint64 `json:"Stored"`
	Removed         uint64 `json:"Removed"`
	Cleared         uint64 `json:"Cleared"`
	UnknownRemovals uint64 `json:"UnknownRemovals"`
	Skipped         uint64 `json:"Skipped"`
	OrphansDropped  uint64 `json:"OrphansDropped"`
	Overflow        uint64 `json:"Overflow"`
}

// Index reads the admin port's /admin/index.
func (p *Gateway) Index(ctx context.Context, client *http.Client) (*IndexStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.AdminURL+"/admin/index", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET /admin/index: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /admin/index: %s", resp.Status)
	}
	var s IndexStatus
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("GET /admin/index: %w", err)
	}
	return &s, nil
}

// Following reports whether every replica's predictions follow its
// engine's events.
func (s *IndexStatus) Following() bool {
	if len(s.Replicas) == 0 {
		return false
	}
	for _, r := range s.Replicas {
		if r.Source != "events" {
			return false
		}
	}
	return true
}

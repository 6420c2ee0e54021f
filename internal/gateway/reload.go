package gateway

// Live config: a new config is checked against the one in effect, built
// into a generation (policies whose settings did not change are taken
// over) and swapped in. Requests that arrived before keep theirs.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/fleet"
)

// Results of a reload attempt, as inferrail_config_reloads_total counts
// them.
const (
	reloadApplied   = "applied"
	reloadUnchanged = "unchanged"
	reloadRejected  = "rejected"
)

// ReloadError is a config the gateway refused: it did not parse or
// validate, or it changes what only a restart can. Problems lists every
// problem at once, each with the path it concerns; the config in effect
// stays.
type ReloadError struct {
	Problems []config.Error
}

func (e *ReloadError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i := range e.Problems {
		msgs[i] = e.Problems[i].Error()
	}
	return "config refused: " + strings.Join(msgs, "; ")
}

// refused turns a config's parse or validation error into a ReloadError.
func refused(err error) *ReloadError {
	return &ReloadError{Problems: config.Problems(err)}
}

// refusedFrom is refused for a change meant for the config cur: a config
// that decoded but did not validate also has what it changes that only a
// restart applies named, so that one answer lists every problem.
func refusedFrom(cur *config.Config, err error) *ReloadError {
	re := refused(err)
	if inv, ok := errors.AsType[*config.InvalidError](err); ok {
		re.addRestartOnly(cur, inv.Config)
	}
	return re
}

// addRestartOnly adds a problem for each path next changes from cur that
// only a restart applies, unless one names that path already.
func (e *ReloadError) addRestartOnly(cur, next *config.Config) {
	for _, p := range config.RestartOnly(cur, next) {
		if !slices.ContainsFunc(e.Problems, func(pr config.Error) bool { return pr.Path == p }) {
			e.Problems = append(e.Problems, config.Error{Path: p, Msg: "changed, but only a restart applies it"})
		}
	}
}

// current returns the generation in effect.
func (g *Gateway) current() *generation { return g.gen.Load() }

// apply makes next the config in effect, unless it equals it (unchanged) or
// cannot be applied while the gateway runs (rejected, with every reason).
// via names where it came from, for the log. Attempts are serialized.
func (g *Gateway) apply(next *config.Config, via string) (string, *generation, error) {
	return g.applyOnto(nil, next, via)
}

// errStale is applyOnto's answer when its base is no longer in effect.
var errStale = errors.New("the config in effect changed")

// applyOnto is apply for a config derived from the generation base: when
// base is set and another change came first, nothing is applied and the
// error is errStale, so that a change made from an old config cannot undo
// a newer one.
func (g *Gateway) applyOnto(base *generation, next *config.Config, via string) (string, *generation, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	start := time.Now()
	cur := g.current()
	if base != nil && base != cur {
		return "", cur, errStale
	}
	if config.Same(cur.cfg, next) {
		g.reloaded(reloadUnchanged)
		return reloadUnchanged, cur, nil
	}
	re := &ReloadError{}
	if re.addRestartOnly(cur.cfg, next); len(re.Problems) > 0 {
		return g.rejected(re, via)
	}
	static, err := staticReplicas(next)
	if err != nil {
		return g.rejected(refused(err), via)
	}
	gen, err := newGeneration(next, cur.n+1, cur)
	if err != nil {
		return g.rejected(refused(err), via)
	}
	// The replicas first: a request of the new generation may be routed
	// at once, and its policies expect the fleet the config names.
	added, removed := g.fleet.SetStatic(static, sameReplica)
	gen.applied = time.Since(start)
	// Logged before it is published, so that no decision of it can be
	// logged before it.
	g.onGeneration(gen)
	g.gen.Store(gen)
	g.warnLostGrants(cur, gen)
	if next.UpstreamTLSUnused() && !cur.cfg.UpstreamTLSUnused() {
		g.log.Warn(upstreamTLSUnused)
	}
	g.reloaded(reloadApplied)
	g.log.Info("config applied", "via", via, "generation", gen.n, "replicas_added", len(added), "replicas_removed", len(removed))
	return reloadApplied, gen, nil
}

func (g *Gateway) rejected(re *ReloadError, via string) (string, *generation, error) {
	g.reloaded(reloadRejected)
	g.log.Warn("config refused; the config in effect stays", "via", via, "error", re.Error())
	return reloadRejected, g.current(), re
}

func (g *Gateway) reloaded(result string) {
	if g.metrics != nil {
		g.metrics.reloads.WithLabelValues(result).Inc()
	}
}

// onGeneration is what follows a generation's publication: the shadow log
// records it. Set before the first generation is built.
func (g *Gateway) onGeneration(gen *generation) {
	if g.shadows != nil {
		g.shadows.generation(gen)
	}
	if g.flow != nil {
		g.flow.apply(gen)
	}
}

// staticReplicas builds the fleet's static replicas of cfg.
func staticReplicas(cfg *config.Config) ([]*fleet.Replica, error) {
	out := make([]*fleet.Replica, 0, len(cfg.Replicas))
	for i, rc := range cfg.Replicas {
		u, err := url.Parse(rc.URL)
		if err != nil {
			return nil, &config.Error{Path: fmt.Sprintf("replicas[%d].url", i), Msg: err.Error()}
		}
		r := fleet.NewReplica(rc.ID, u, rc.Models, int64(rc.MaxConcurrency), int64(rc.MaxPending))
		r.KVCapacityBlocks = rc.KVCapacityBlocks
		r.KVEvents = fleet.KVEvents(rc.KVEvents)
		out = append(out, r)
	}
	return out, nil
}

// sameReplica reports whether a reloaded static replica is the one in the
// fleet: the same engine, models, cache size and events. One that differs
// in any of them is replaced; the old one finishes its requests. Caps
// change on the replica kept (fleet.SetStatic), whose leases count
// against them.
func sameReplica(old, next *fleet.Replica) bool {
	return old.URL.String() == next.URL.String() && slices.Equal(old.Models, next.Models) &&
		old.KVCapacityBlocks == next.KVCapacityBlocks && old.KVEvents == next.KVEvents
}

// configFile is the file the gateway's config came from and what was last
// read of it, so that only an edit is applied.
type configFile struct {
	path string
	sum  [sha256.Size]byte // of the contents last applied or forced
	// readErr is why the last read failed, "" when it did not.
	readErr string
	// settle waits before the watcher reads an edit again; nil waits
	// settleTime. It reports false when ctx ended. Tests set it.
	settle func(ctx context.Context) bool
}

// settleTime is how long an edit must stay as it was read before the
// watcher applies it: a file rewritten in place (truncated, then written)
// can be read halfway, and a prefix of a config is often a valid one.
const settleTime = 100 * time.Millisecond

// settled waits, then reports whether the file still holds data.
func (f *configFile) settled(ctx context.Context, data []byte) bool {
	wait := f.settle
	if wait == nil {
		wait = func(ctx context.Context) bool {
			select { // an unfired time.After timer is collected since Go 1.23
			case <-ctx.Done():
				return false
			case <-time.After(settleTime):
				return true
			}
		}
	}
	if !wait(ctx) {
		return false
	}
	again, err := config.ReadFile(f.path)
	return err == nil && bytes.Equal(again, data)
}

// ReloadFile rereads the config file and applies it, whatever it holds:
// for SIGHUP and POST /admin/reload. It returns the result and, when the
// file was refused, why.
func (g *Gateway) ReloadFile(via string) (string, error) {
	result, _, err := g.reloadFile(context.Background(), via, true)
	return result, err
}

// reloadFile reads the file and applies it when force is set or it was
// edited since it was last applied; "" when it was not. An edit found
// without force is applied only once a second read, settleTime later,
// finds the same bytes; else it is left for the next look.
func (g *Gateway) reloadFile(ctx context.Context, via string, force bool) (string, *generation, error) {
	if g.file == nil {
		return "", g.current(), errors.New("the gateway was not started from a config file")
	}
	data, err := config.ReadFile(g.file.path)
	g.reloadMu.Lock()
	if err != nil {
		// The watcher reports a file it cannot read once, not at every
		// look; asking for a reload always reports it.
		again := err.Error() == g.file.readErr
		g.file.readErr = err.Error()
		g.reloadMu.Unlock()
		if again && !force {
			return "", g.current(), nil
		}
		return g.rejected(&ReloadError{Problems: []config.Error{{File: g.file.path, Msg: err.Error()}}}, via)
	}
	g.file.readErr = ""
	sum := sha256.Sum256(data)
	edited := sum != g.file.sum
	if force {
		g.file.sum = sum
	}
	g.reloadMu.Unlock()
	if !edited && !force {
		return "", g.current(), nil
	}
	if !force {
		if !g.file.settled(ctx, data) {
			return "", g.current(), nil
		}
		g.reloadMu.Lock()
		g.file.sum = sum
		g.reloadMu.Unlock()
	}
	next, err := config.ParseFile(bytes.Clone(data), g.file.path)
	if err != nil {
		return g.rejected(refusedFrom(g.current().cfg, err), via)
	}
	return g.apply(next, via)
}

// watchFile rereads the config file every server.reload_interval of the
// config in effect until ctx ends. It looks at the interval at least once
// a second, so that shortening a long one takes effect soon, not when the
// long one ends.
func (g *Gateway) watchFile(ctx context.Context) {
	last := time.Now()
	for {
		every := time.Duration(g.current().cfg.Server.ReloadInterval)
		wait := time.Second // off: look again later in case it is turned on
		if every > 0 {
			wait = min(wait, every-time.Since(last))
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if every := time.Duration(g.current().cfg.Server.ReloadInterval); every > 0 && time.Since(last) >= every {
			last = time.Now()
			_, _, _ = g.reloadFile(ctx, "file", false)
		}
	}
}

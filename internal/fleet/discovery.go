package fleet

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sync"
	"time"
)

// DNSGroup is a name that resolves to the addresses of a set of replicas,
// such as a Kubernetes headless service.
type DNSGroup struct {
	Name           string
	URL            *url.URL // its host is looked up; scheme, port and path apply to every member
	Models         []string
	Refresh        time.Duration
	MaxConcurrency int64
	MaxPending     int64
	// KVCapacityBlocks is every member's configured KV cache size in
	// blocks; 0 leaves it to what each engine reports.
	KVCapacityBlocks int
}

// Resolver looks host names up; *net.Resolver is one.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Discovery keeps the fleet's DNS groups in step with what their names
// resolve to.
type Discovery struct {
	fleet    *Fleet
	groups   []DNSGroup
	resolver Resolver
	log      *slog.Logger

	mu     sync.Mutex
	failed map[string]bool // groups whose last lookup failed; guarded by mu
}

// NewDiscovery returns discovery for groups over f. A nil resolver means
// net.DefaultResolver.
func NewDiscovery(f *Fleet, groups []DNSGroup, resolver Resolver, logger *slog.Logger) *Discovery {
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Discovery{fleet: f, groups: groups, resolver: resolver, log: logger.With("component", "discovery"), failed: map[string]bool{}}
}

// ResolveAll looks every group up once, so they have members before the
// first request. A failed lookup leaves its group as it was.
func (d *Discovery) ResolveAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, g := range d.groups {
		wg.Go(func() { d.resolve(ctx, g) })
	}
	wg.Wait()
}

// Run refreshes every group at its interval until ctx ends.
func (d *Discovery) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, g := range d.groups {
		wg.Go(func() {
			t := time.NewTicker(g.Refresh)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					d.resolve(ctx, g)
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// MemberID names the member of group at ip and port.
func MemberID(group, ip, port string) string { return group + "-" + ip + "-" + port }

func (d *Discovery) resolve(ctx context.Context, g DNSGroup) {
	ctx, cancel := context.WithTimeout(ctx, max(g.Refresh, time.Second))
	defer cancel()
	addrs, err := d.resolver.LookupHost(ctx, g.URL.Hostname())
	d.mu.Lock()
	wasFailing := d.failed[g.Name]
	d.failed[g.Name] = err != nil
	d.mu.Unlock()
	if err != nil {
		if !wasFailing && ctx.Err() == nil {
			d.log.Warn("dns lookup failed; keeping the last known members", "group", g.Name, "error", err)
		}
		return
	}
	if wasFailing {
		d.log.Info("dns lookup works again", "group", g.Name)
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	port := g.URL.Port()
	if port == "" {
		port = "80"
		if g.URL.Scheme == "https" {
			port = "443"
		}
	}
	members := make([]*Replica, 0, len(addrs))
	for _, ip := range addrs {
		u := *g.URL
		u.Host = net.JoinHostPort(ip, port)
		m := NewReplica(MemberID(g.Name, ip, port), &u, g.Models, g.MaxConcurrency, g.MaxPending)
		m.KVCapacityBlocks = g.KVCapacityBlocks
		members = append(members, m)
	}
	added, removed := d.fleet.SetGroup(g.Name, members)
	for _, r := range added {
		d.log.Info("replica joined", "group", g.Name, "replica", r.ID)
	}
	for _, r := range removed {
		d.log.Info("replica left", "group", g.Name, "replica", r.ID)
	}
}

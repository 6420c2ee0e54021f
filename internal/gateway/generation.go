package gateway

import (
	"fmt"
	"math/bits"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/inferrail/inferrail/internal/config"
	"github.com/inferrail/inferrail/internal/policy"
)

// generation is one config in effect with the policies built from it. A
// request reads one generation when it arrives and keeps it for its whole
// life, retries included, so a reload never changes a decision halfway.
// Immutable once published, save for the policies' own state and the
// route table it caches.
type generation struct {
	n   uint64 // 1 for the config the gateway started with
	cfg *config.Config
	// seed is what every policy's seed derives from: routing.seed, or the
	// clock's reading when the first generation with that seed was built.
	seed   uint64
	models map[string]string // name or alias → model name
	// routing holds each model's arms and shadows.
	routing map[string]*modelPolicies
	// limits are each model's own rate limits, by model name; absent: none.
	limits map[string]config.Limits
	// cost is each model's cost model, by model name: what SLO admission
	// prices replicas with.
	cost map[string]policy.CostParams
	// built are every policy of the generation by what it serves, with the
	// settings it was built with: the next generation keeps those whose
	// settings did not change, and their state with them.
	built map[policyKey]builtPolicy
	// applied is how long applying it took: checking it against the config
	// in effect, building its policies and replicas; 0 for the first.
	applied time.Duration
	// table is the fleet as this generation's decisions read it.
	table atomic.Pointer[routeTable]
	// doc is cfg's JSON, encoded once: every patch, admin read and shadow
	// log record of the generation starts from it.
	doc struct {
		once sync.Once
		json []byte
		err  error
	}
}

// document returns the generation's config as JSON. Callers must not
// change it.
func (gen *generation) document() ([]byte, error) {
	gen.doc.once.Do(func() { gen.doc.json, gen.doc.err = gen.cfg.JSON() })
	return gen.doc.json, gen.doc.err
}

// policyKey names a policy instance of a generation: a model's arm or
// shadow of a given policy. Each has its own state.
type policyKey struct {
	model  string
	shadow bool
	name   string
}

type builtPolicy struct {
	p        policy.Policy
	settings policy.Settings // as built, Start left out
	started  time.Time       // its Start: a replay rebuilds it from it
	seed     uint64
}

// modelPolicies are the policies of one model.
type modelPolicies struct {
	// arms are the split's policies sorted by name, so that the arm a key
	// draws does not depend on the order the split was written in; one arm
	// of 100% without a split.
	arms    []arm
	shadows []policy.Policy
}

// arm is one policy of a model's split.
type arm struct {
	policy  policy.Policy
	percent int
	upTo    uint64 // draws below it and at or above the previous arm's go to this arm
}

// armOf returns the place of the arm that routes a request with the given
// conversation key (its request ID when it names none). The draw is a hash
// of the key, the same in every gateway and every generation with the same
// split, so a conversation stays with one policy and a retry keeps its arm.
func (mp *modelPolicies) armOf(key string) int {
	if len(mp.arms) == 1 {
		return 0
	}
	d := splitDraw(key)
	for i := range mp.arms {
		if d < mp.arms[i].upTo {
			return i
		}
	}
	return len(mp.arms) - 1 // unreachable: the last arm's upTo is 100
}

// splitDraw maps a key uniformly onto [0, 100): the high half of the
// key's hash times 100, without a modulo's bias.
func splitDraw(key string) uint64 {
	hi, _ := bits.Mul64(xxh3.HashString(key), 100)
	return hi
}

// arm returns the arm policy named name, or nil.
func (mp *modelPolicies) arm(name string) policy.Policy {
	for _, a := range mp.arms {
		if a.policy.Name() == name {
			return a.policy
		}
	}
	return nil
}

// policyFor returns the arm or, failing that, the shadow policy named name.
func (mp *modelPolicies) policyFor(name string) policy.Policy {
	if p := mp.arm(name); p != nil {
		return p
	}
	for _, p := range mp.shadows {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// clockSeed seeds policies when routing.seed is 0: the clock at start.
var clockSeed = func() uint64 { return uint64(time.Now().UnixNano()) }

// newGeneration builds generation n from cfg. Policies of prev whose
// settings cfg leaves unchanged are taken over with their state; prev is
// nil for the first generation.
func newGeneration(cfg *config.Config, n uint64, prev *generation) (*generation, error) {
	gen := &generation{n: n, cfg: cfg, models: map[string]string{},
		routing: map[string]*modelPolicies{}, limits: map[string]config.Limits{}, cost: map[string]policy.CostParams{}, built: map[policyKey]builtPolicy{}}
	switch {
	case cfg.Routing.Seed != 0:
		gen.seed = uint64(cfg.Routing.Seed)
	case prev != nil && prev.cfg.Routing.Seed == 0:
		gen.seed = prev.seed
	default:
		gen.seed = clockSeed()
	}
	for i, m := range cfg.Models {
		gen.models[m.Name] = m.Name
		for _, a := range m.Aliases {
			gen.models[a] = m.Name
		}
		if !m.Limits.IsZero() {
			gen.limits[m.Name] = m.Limits
		}
		gen.cost[m.Name] = policySettings(cfg, m.Name, 0).Cost
		mp := &modelPolicies{}
		split := slices.Clone(cfg.ModelSplit(m.Name))
		slices.SortFunc(split, func(a, b config.SplitArm) int { return strings.Compare(a.Policy, b.Policy) })
		upTo := uint64(0)
		for _, a := range split {
			p, err := gen.policy(prev, policyKey{model: m.Name, name: a.Policy}, policySettings(cfg, m.Name, gen.seed+uint64(i)))
			if err != nil {
				return nil, fmt.Errorf("models[%d]: %w", i, err)
			}
			upTo += uint64(a.Percent)
			mp.arms = append(mp.arms, arm{policy: p, percent: a.Percent, upTo: upTo})
		}
		for _, name := range cfg.ModelShadow(m.Name) {
			// A shadow draws apart from an arm of the same policy, or a
			// randomized shadow would agree with it by construction.
			seed := gen.seed + uint64(i) + shadowSeed(name)
			p, err := gen.policy(prev, policyKey{model: m.Name, shadow: true, name: name}, policySettings(cfg, m.Name, seed))
			if err != nil {
				return nil, fmt.Errorf("models[%d] shadow: %w", i, err)
			}
			mp.shadows = append(mp.shadows, p)
		}
		gen.routing[m.Name] = mp
	}
	return gen, nil
}

// shadowSeed offsets a shadow policy's seed from its model's. It depends
// on the name alone, so a shadow's settings, and its state, survive reloads,
// and a replay of the shadow log rebuilds the same shadow.
func shadowSeed(name string) uint64 {
	return xxh3.HashString("shadow/"+name) | 1
}

// policy returns the policy for key with settings s: prev's when prev built
// it with the same settings, else a new one.
func (gen *generation) policy(prev *generation, key policyKey, s policy.Settings) (policy.Policy, error) {
	if prev != nil {
		if b, ok := prev.built[key]; ok && reflect.DeepEqual(b.settings.For(key.name), s.For(key.name)) {
			gen.built[key] = b
			return b.p, nil
		}
	}
	// The wall clock's reading, as a replay of the shadow log can give it.
	b := builtPolicy{settings: s, started: time.Now().Round(0), seed: s.Seed}
	s.Start = b.started
	p, err := policy.NewWith(key.name, s)
	if err != nil {
		return nil, err
	}
	b.p = p
	gen.built[key] = b
	return p, nil
}

// resolveModel maps a requested name or alias to a configured model. An
// empty name resolves when the gateway serves exactly one model.
func (gen *generation) resolveModel(name string) (string, bool) {
	if name == "" {
		if len(gen.cfg.Models) == 1 {
			return gen.cfg.Models[0].Name, true
		}
		return "", false
	}
	m, ok := gen.models[name]
	return m, ok
}

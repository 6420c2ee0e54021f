package auth

import (
	"context"
	"slices"
	"time"

	"github.com/inferrail/inferrail/internal/config"
)

// Priority is a key's priority class: which requests wait, and which are
// shed first, when the fleet is saturated. Lower values are more
// important. The zero value is Standard. A key's class is also the most
// important one its requests may ask for with x-inferrail-priority.
type Priority int8

// Priority classes.
const (
	Critical  Priority = -1
	Standard  Priority = 0
	Sheddable Priority = 1
)

// Classes are the priority classes, most important first.
var Classes = []Priority{Critical, Standard, Sheddable}

// Index is the class's place in Classes.
func (p Priority) Index() int { return int(p - Critical) }

func (p Priority) String() string {
	switch p {
	case Critical:
		return "critical"
	case Sheddable:
		return "sheddable"
	}
	return "standard"
}

// ParsePriority reads a priority class; empty is Standard.
func ParsePriority(s string) (Priority, bool) {
	switch s {
	case "", "standard":
		return Standard, true
	case "critical":
		return Critical, true
	case "sheddable":
		return Sheddable, true
	}
	return Standard, false
}

// Key is one API key, as its keys file describes it. A Key is never
// changed once read: a reload makes new ones.
type Key struct {
	// Name names the key in metrics and logs; unique in its file.
	Name string
	// Hash is the SHA-256 of the secret.
	Hash Hash
	// Models are the model names and aliases the key may use, as its file
	// writes them; nil means every model. They are resolved when a request
	// is checked, by the config generation that serves it, so that a live
	// alias change moves the grant with it; a name that no model or alias
	// of that generation has grants nothing.
	Models []string
	// Priority is the key's priority class.
	Priority Priority
	// TTFTTarget is the time to first token its requests ask for when
	// they name none (x-inferrail-ttft-target-ms); 0 means none.
	TTFTTarget time.Duration
	// Limits are the key's own rate limits, across models.
	Limits config.Limits
}

// Allows reports whether the key may use model, a canonical model name,
// when resolve maps names and aliases to the models they name (nil: each
// name is taken as it is written).
func (k *Key) Allows(model string, resolve func(name string) (string, bool)) bool {
	if k.Models == nil {
		return true
	}
	if resolve == nil {
		return slices.Contains(k.Models, model)
	}
	for _, name := range k.Models {
		if m, ok := resolve(name); ok && m == model {
			return true
		}
	}
	return false
}

// Unknown is a model name a key lists that no model or alias has.
type Unknown struct {
	Key, Name string
}

// Unknown returns, in file order, the names the keys list that resolve
// does not know.
func (s *Set) Unknown(resolve func(name string) (string, bool)) []Unknown {
	var out []Unknown
	for _, k := range s.Keys() {
		for _, name := range k.Models {
			if _, ok := resolve(name); !ok {
				out = append(out, Unknown{Key: k.Name, Name: name})
			}
		}
	}
	return out
}

// Set is the keys of one file. It is never changed once read, and is safe
// for concurrent use.
type Set struct {
	keys   []*Key // in file order
	byHash map[Hash]*Key
}

// Lookup returns the key whose secret is secret, or nil.
func (s *Set) Lookup(secret string) *Key {
	if s == nil {
		return nil
	}
	return s.byHash[HashOf(secret)]
}

// Len returns the number of keys.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.keys)
}

// Keys returns the keys in file order; the slice must not be changed.
func (s *Set) Keys() []*Key {
	if s == nil {
		return nil
	}
	return s.keys
}

type ctxKey struct{}

// NewContext returns ctx carrying the key a request authenticated with.
func NewContext(ctx context.Context, k *Key) context.Context {
	return context.WithValue(ctx, ctxKey{}, k)
}

// FromContext returns the key NewContext put in ctx, or nil.
func FromContext(ctx context.Context) *Key {
	k, _ := ctx.Value(ctxKey{}).(*Key)
	return k
}

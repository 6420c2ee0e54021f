package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Aliases may make a document aliasFactor times as many nodes as it is
// written with, plus aliasSlack.
const (
	aliasFactor = 4
	aliasSlack  = 10_000
)

// An AliasBudget bounds a walk over a YAML node tree, so that aliases
// cannot blow a small file up: the walk may visit aliasFactor times the
// nodes the tree is written with, plus aliasSlack, aliases expanded. Both
// the config decoder and the keys file parser (package auth) walk with one.
// Not safe for concurrent use.
type AliasBudget struct {
	limit int  // nodes the walk may visit
	left  int  // nodes it may still visit
	spent bool // the budget ran out
}

// NewAliasBudget is the budget of a walk over doc (nil: an empty document).
func NewAliasBudget(doc *yaml.Node) *AliasBudget {
	limit := aliasFactor*countNodes(doc) + aliasSlack
	return &AliasBudget{limit: limit, left: limit}
}

// Visit resolves an alias and counts the node against the budget. It
// returns nil once the budget is spent, with, the first time, the problem
// to report (at n's line, with no path).
func (b *AliasBudget) Visit(n *yaml.Node) (*yaml.Node, *Error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if b.spent {
		return nil, nil
	}
	if b.left--; b.left < 0 {
		b.spent = true
		return nil, &Error{Line: n.Line, Msg: fmt.Sprintf(
			"aliases expand the document beyond %d nodes, %d times what it is written with plus %d",
			b.limit, aliasFactor, aliasSlack)}
	}
	return n, nil
}

// Spent reports whether the walk ran out of budget, and so stopped short.
func (b *AliasBudget) Spent() bool { return b.spent }

// countNodes counts the nodes of a tree as written, aliases not expanded.
func countNodes(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	c := 1
	for _, k := range n.Content {
		c += countNodes(k)
	}
	return c
}

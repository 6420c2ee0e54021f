package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inferrail/inferrail/internal/config"
)

// MaxFileBytes is the largest keys file read: about 70,000 keys with
// limits.
const MaxFileBytes = 16 << 20

// Options say how a keys file is read.
type Options struct {
	// File names the file in errors; empty for none.
	File string
	// Admin reads an admin keys file, whose keys have names and hashes
	// only.
	Admin bool
	// Resolve maps a model name or alias to the model's name, or reports
	// that no model has it. Parse refuses a key that lists a name Resolve
	// does not know; nil takes every name. Keys keep the names as written
	// either way (Key.Models).
	Resolve func(name string) (string, bool)
}

// Parse reads a keys file (see the package documentation for its form).
// Every problem is reported at once, each a *config.Error with its line
// and path, such as "keys.yaml:12: keys[3].hash: must be sha256: and 64
// hex digits"; a hash's value is never quoted in an error, in case it is a
// secret pasted in the wrong place. An empty file is an error, not an
// empty set of keys ("keys: []" is that): a file caught half written must
// not lock everyone out.
func Parse(data []byte, opts Options) (*Set, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", opts.fileName(), MaxFileBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &config.Error{File: opts.File, Msg: "the file is empty: write keys: [] for no keys"}
		}
		return nil, fmt.Errorf("%s: %w", opts.fileName(), err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", opts.fileName(), err)
		}
		return nil, &config.Error{File: opts.File, Line: next.Line, Msg: "a keys file holds one YAML document, but another starts here"}
	}
	p := &parser{opts: opts, set: &Set{byHash: map[Hash]*Key{}}, names: map[string]int{}, hashes: map[Hash]int{}}
	p.budget = config.NewAliasBudget(&doc)
	p.document(&doc)
	if len(p.errs) >= maxProblems {
		p.errs = append(p.errs[:maxProblems], &config.Error{Msg: fmt.Sprintf("and maybe more problems: these are the first %d", maxProblems)})
	}
	if len(p.errs) > 0 {
		joined := make([]error, len(p.errs))
		for i, e := range p.errs {
			e.File = opts.File
			joined[i] = e
		}
		return nil, errors.Join(joined...)
	}
	return p.set, nil
}

func (o Options) fileName() string {
	if o.File == "" {
		return "keys file"
	}
	return o.File
}

// maxProblems is how many problems of a keys file are reported. A file of
// 16 MiB can hold millions of bad entries: reported one by one, a list of
// 8 million took 69 s and 5.9 GB and was logged as a 754 MB line (a
// review's finding).
const maxProblems = 100

// parser walks a keys file's node tree.
type parser struct {
	opts   Options
	set    *Set
	errs   []*config.Error
	names  map[string]int // key name → the line it is first used on
	hashes map[Hash]int   // hash → the line it is first used on
	budget *config.AliasBudget
}

func (p *parser) fail(n *yaml.Node, path, format string, args ...any) {
	p.errs = append(p.errs, &config.Error{Line: n.Line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// visit resolves an alias and counts the node against the budget, so
// aliases cannot blow a small file up; nil once the budget is spent.
func (p *parser) visit(n *yaml.Node) *yaml.Node {
	n, err := p.budget.Visit(n)
	if err != nil {
		p.errs = append(p.errs, err)
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// fields calls each for every key of the mapping n, after checking it is
// one of allowed and not repeated.
func (p *parser) fields(n *yaml.Node, path string, allowed []string, each func(key string, v *yaml.Node, kp string)) {
	if n = p.visit(n); n == nil {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, "must be a mapping of keys to values")
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := p.visit(n.Content[i]), n.Content[i+1]
		if k == nil {
			return
		}
		var name string
		if k.Kind != yaml.ScalarNode || k.Decode(&name) != nil {
			p.fail(k, path, "keys must be strings")
			continue
		}
		kp := name
		if path != "" {
			kp = path + "." + name
		}
		switch first, dup := seen[name]; {
		case strings.HasPrefix(name, SecretPrefix):
			// Paths go into every message: a key there is leaked.
			p.fail(k, path, "a field's name holds a key: never store keys in this file")
		case dup:
			p.fail(k, kp, "duplicate key; it is first set at line %d", first)
		case !contains(allowed, name):
			p.fail(k, kp, "unknown key")
		default:
			seen[name] = k.Line
			each(name, v, kp)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *parser) document(doc *yaml.Node) {
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	found := false
	p.fields(root, "", []string{"keys"}, func(_ string, v *yaml.Node, kp string) {
		found = true
		if v = p.visit(v); v == nil {
			return
		}
		if isNull(v) {
			// What a file cut after its first line holds: taken for no
			// keys it would lock every client out.
			p.fail(v, kp, "required: write keys: [] for no keys")
			return
		}
		if v.Kind != yaml.SequenceNode {
			p.fail(v, kp, "must be a list")
			return
		}
		for i, item := range v.Content {
			if len(p.errs) >= maxProblems {
				break
			}
			p.key(item, fmt.Sprintf("keys[%d]", i))
		}
	})
	if !found && len(p.errs) == 0 {
		p.fail(root, "keys", "required: write keys: [] for no keys")
	}
}

var (
	keyFields   = []string{"name", "hash", "models", "priority", "ttft_target", "limits"}
	adminFields = []string{"name", "hash"}
)

// key reads one entry of the keys list.
func (p *parser) key(n *yaml.Node, path string) {
	k := &Key{}
	allowed := keyFields
	if p.opts.Admin {
		allowed = adminFields
	}
	var hasName, hasHash bool
	p.fields(n, path, allowed, func(field string, v *yaml.Node, kp string) {
		switch field {
		case "name":
			hasName = p.name(v, kp, k)
		case "hash":
			hasHash = p.hash(v, kp, k)
		case "models":
			p.models(v, kp, k)
		case "priority":
			if s, ok := p.value(v, kp); ok {
				if k.Priority, ok = ParsePriority(s); !ok {
					p.fail(v, kp, "must be critical, standard or sheddable, not %q", s)
				}
			}
		case "ttft_target":
			p.ttftTarget(v, kp, k)
		case "limits":
			p.limits(v, kp, k)
		}
	})
	resolved := n
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		resolved = n.Alias
	}
	if p.budget.Spent() || resolved.Kind != yaml.MappingNode {
		return
	}
	if !hasName && !p.failedAt(path+".name") {
		p.fail(n, path+".name", "required")
	}
	if !hasHash && !p.failedAt(path+".hash") {
		p.fail(n, path+".hash", "required")
	}
	if hasName && hasHash {
		p.set.keys = append(p.set.keys, k)
		p.set.byHash[k.Hash] = k
	}
}

// MaxTTFTTarget is the longest TTFT target a key may default to.
const MaxTTFTTarget = time.Hour

// ttftTarget reads a key's default time-to-first-token target: a
// duration with a unit, above 0 and at most MaxTTFTTarget.
func (p *parser) ttftTarget(v *yaml.Node, path string, k *Key) {
	s, ok := p.value(v, path)
	if !ok {
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > MaxTTFTTarget {
		p.fail(v, path, "must be a duration above 0s and at most 1h, such as 2s or 500ms, not %q", s)
		return
	}
	k.TTFTTarget = d
}

// failedAt reports whether a problem at path is reported already.
func (p *parser) failedAt(path string) bool {
	for _, e := range p.errs {
		if e.Path == path {
			return true
		}
	}
	return false
}

// str decodes a scalar as a string.
func (p *parser) str(v *yaml.Node, path string) (string, bool) {
	if v = p.visit(v); v == nil {
		return "", false
	}
	var s string
	if v.Kind != yaml.ScalarNode || isNull(v) || v.Decode(&s) != nil {
		p.fail(v, path, "must be a string")
		return "", false
	}
	return s, true
}

// value decodes a scalar as a string that the messages about it may
// quote: one that holds a key is refused without it.
func (p *parser) value(v *yaml.Node, path string) (string, bool) {
	s, ok := p.str(v, path)
	if ok && strings.HasPrefix(s, SecretPrefix) {
		p.fail(v, path, "holds a key: never store keys in this file")
		return "", false
	}
	return s, ok
}

func (p *parser) name(v *yaml.Node, path string, k *Key) bool {
	s, ok := p.str(v, path)
	if !ok {
		return false
	}
	switch {
	case s == "":
		p.fail(v, path, "required")
	case strings.HasPrefix(s, SecretPrefix):
		// Names go into metrics, logs and answers: a key there is leaked.
		p.fail(v, path, "holds a key, not a name: never store keys in this file")
	case len(s) > 63 || strings.IndexFunc(s, func(r rune) bool { return !isNameChar(r) }) >= 0:
		p.fail(v, path, "must be 1 to 63 of A-Z a-z 0-9 . _ -")
	default:
		if first, dup := p.names[s]; dup {
			p.fail(v, path, "%q is already used at line %d", s, first)
			return false
		}
		p.names[s] = v.Line
		k.Name = s
		return true
	}
	return false
}

func isNameChar(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-'
}

func (p *parser) hash(v *yaml.Node, path string, k *Key) bool {
	s, ok := p.str(v, path)
	if !ok {
		return false
	}
	h, err := ParseHash(s)
	switch {
	case strings.HasPrefix(s, SecretPrefix):
		p.fail(v, path, "holds a key, not its hash: never store keys in this file; put the hash inferrail-gateway keygen printed with it")
	case err != nil:
		p.fail(v, path, "%v", err)
	default:
		if first, dup := p.hashes[h]; dup {
			p.fail(v, path, "the same hash is already used at line %d", first)
			return false
		}
		p.hashes[h] = v.Line
		k.Hash = h
		return true
	}
	return false
}

func (p *parser) models(v *yaml.Node, path string, k *Key) {
	if v = p.visit(v); v == nil || isNull(v) {
		return
	}
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, "must be a list")
		return
	}
	if len(v.Content) == 0 {
		// Read as "every model", it would grant what it seems to deny.
		p.fail(v, path, "must name at least one model; leave it out to allow every model")
		return
	}
	for i, item := range v.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		s, ok := p.value(item, ip)
		if !ok {
			continue
		}
		if s == "" {
			p.fail(item, ip, "must not be empty")
			continue
		}
		if p.opts.Resolve != nil {
			if _, ok = p.opts.Resolve(s); !ok {
				p.fail(item, ip, "%q is not a configured model or alias", s)
				continue
			}
		}
		if !contains(k.Models, s) {
			k.Models = append(k.Models, s)
		}
	}
}

func (p *parser) limits(v *yaml.Node, path string, k *Key) {
	if isNull(v) {
		return
	}
	lines := map[string]int{}
	p.fields(v, path, []string{"requests_per_minute", "prompt_tokens_per_minute", "output_tokens_per_minute"}, func(field string, n *yaml.Node, kp string) {
		if n = p.visit(n); n == nil {
			return
		}
		lines[kp] = n.Line
		var i int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
			p.fail(n, kp, "must be an integer")
			return
		}
		switch field {
		case "requests_per_minute":
			k.Limits.RequestsPerMinute = i
		case "prompt_tokens_per_minute":
			k.Limits.PromptTokensPerMinute = i
		case "output_tokens_per_minute":
			k.Limits.OutputTokensPerMinute = i
		}
	})
	var ce *config.Error
	for _, err := range unjoin(k.Limits.Validate(path)) {
		if errors.As(err, &ce) {
			ce.Line = lines[ce.Path]
			p.errs = append(p.errs, ce)
		}
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

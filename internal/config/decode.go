package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/inferrail/inferrail/internal/filewatch"
)

// Load reads the config file at path and parses it as Parse does. Problems
// found in the file name it and their line: "gateway.yaml:12: replicas[2].url: …".
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return parse(data, path)
}

// MaxFileBytes bounds a config file. Real ones are kilobytes; the bound
// keeps a runaway generator from taking the memory the gateway serves
// with, at start and at every reread.
const MaxFileBytes = 16 << 20

// ReadFile reads a config file of at most [MaxFileBytes]; a named pipe or
// a device at the path is refused rather than waited on or read without
// end (filewatch.ReadFile).
func ReadFile(path string) ([]byte, error) {
	data, err := filewatch.ReadFile(path, MaxFileBytes)
	if errors.Is(err, filewatch.ErrTooLarge) {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, MaxFileBytes>>20)
	}
	return data, err
}

// Parse decodes a config file onto [Default] and validates the result.
//
// Decoding is strict: unknown and duplicated keys, values of the wrong type
// (1.5 for a count, yes for a boolean, 5 for a duration) and null list items
// are errors. A key whose value is null or empty keeps its default. List
// items start from their own defaults (a replica's max_concurrency is 256
// unless set). Parse trims trailing slashes from replica and DNS group URLs.
//
// A YAML syntax error is returned as the YAML parser reports it, with its
// line. Otherwise every problem, in decoding and in [Config.Validate], is
// returned at once, joined with errors.Join, each an *Error with its line,
// in the order of the document.
func Parse(data []byte) (*Config, error) {
	return parse(data, "")
}

// ParseFile parses data read from the file at path, as Load does.
func ParseFile(data []byte, path string) (*Config, error) {
	return parse(data, path)
}

func parse(data []byte, file string) (*Config, error) {
	doc, err := parseYAML(data)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.File = file
			return nil, e
		}
		if file != "" {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return nil, err
	}
	if e := tooLarge(doc); e != nil {
		e.File = file
		return nil, e
	}
	return decodeDocument(doc, file, func() error { return strictDecode(data) })
}

// tooLarge returns a problem for a document of more than MaxNodes nodes or
// with a list of more than MaxListItems items, as written (aliases not
// expanded: the decoder's alias budget bounds those), or nil. Decoding
// costs far more than parsing, every item of such a list is usually a
// problem to report, and no real config comes near either bound: a file
// with a list of 500,000 numbers took 3.5 s of CPU and 560 MB to refuse,
// one of 500,000 replicas 7 s and 950 MB.
func tooLarge(doc *yaml.Node) *Error {
	if doc == nil {
		return nil
	}
	if e := longList(doc, nil); e != nil {
		return e // named by its path, which the count cannot be
	}
	if n := countNodes(doc); n > MaxNodes {
		return &Error{Msg: fmt.Sprintf("the document holds %d keys and values, more than the %d a config may hold", n, MaxNodes)}
	}
	return nil
}

// longList returns a problem for the first list under n, at path at, with
// more than MaxListItems items, or nil.
func longList(n *yaml.Node, at *step) *Error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if e := longList(c, at); e != nil {
				return e
			}
		}
	case yaml.SequenceNode:
		if len(n.Content) > MaxListItems {
			return &Error{Line: n.Line, Path: at.String(), Msg: fmt.Sprintf("a list may hold at most %d items, not %d", MaxListItems, len(n.Content))}
		}
		for i, c := range n.Content {
			if e := longList(c, &step{up: at, item: i}); e != nil {
				return e
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if e := longList(n.Content[i+1], &step{up: at, key: n.Content[i].Value, item: -1}); e != nil {
				return e
			}
		}
	}
	return nil
}

// decodeDocument decodes a document onto the defaults and validates it.
// When our decoder accepts it, second, when not nil, must accept it too:
// yaml's strict decoder as a second opinion on what a hand-written file
// can hold (anchors, merge keys, tags), which doubles the cost.
func decodeDocument(doc *yaml.Node, file string, second func() error) (*Config, error) {
	cfg := Default()
	d := newDecoder(doc)
	if doc != nil {
		d.value(doc, reflect.ValueOf(&cfg).Elem(), "", true)
	}
	errs := d.errs
	if !d.budget.Spent() {
		for i := range cfg.Replicas {
			r := &cfg.Replicas[i]
			r.URL = trimSlash(r.URL)
			defaultPending(&r.MaxPending, r.MaxConcurrency)
		}
		for i := range cfg.Discovery.DNS {
			g := &cfg.Discovery.DNS[i]
			g.URL = trimSlash(g.URL)
			defaultPending(&g.MaxPending, g.MaxConcurrency)
		}
		if len(errs) == 0 && second != nil {
			// Our decoder is the stricter of the two, and the one that names
			// paths; yaml's strict decoder is the reference it must agree with.
			if err := second(); err != nil {
				if file != "" {
					return nil, fmt.Errorf("%s: strict yaml decoding: %w", file, err)
				}
				return nil, fmt.Errorf("strict yaml decoding: %w", err)
			}
		}
		for _, e := range cfg.validate() {
			if d.covered(e.Path) {
				continue // its value did not decode, so it was never checked
			}
			e.Line = d.lineOf(e.Path)
			errs = append(errs, e)
		}
	}
	if len(errs) == 0 {
		return &cfg, nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	joined := make([]error, len(errs))
	for i, e := range errs {
		e.File = file
		joined[i] = e
	}
	if len(d.errs) == 0 && !d.budget.Spent() {
		return nil, &InvalidError{Config: &cfg, errs: joined}
	}
	return nil, errors.Join(joined...)
}

// InvalidError is a config that decoded but did not validate. Config is
// what it decoded to, so that a caller can tell which of its changes only
// a restart would apply besides what is wrong with it; its problems
// unwrap as a joined error's do.
type InvalidError struct {
	Config *Config
	errs   []error
}

func (e *InvalidError) Error() string   { return errors.Join(e.errs...).Error() }
func (e *InvalidError) Unwrap() []error { return e.errs }

// parseYAML parses the one YAML document of data into its node tree, or
// returns nil for a file without any (empty, or only comments).
func parseYAML(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if e := textError(data); e != nil {
			return nil, e // yaml says what, not where
		}
		return nil, err
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
		return &doc, nil
	case err != nil:
		return nil, err
	default:
		return nil, &Error{Line: next.Line, Msg: "a config file holds one YAML document, but another starts here"}
	}
}

// strictDecode decodes data with yaml's own strict decoder, which must
// accept whatever our decoder accepted.
func strictDecode(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// Problems lists the problems of an error Parse, Load or Validate
// returned, in order; an error that is not an *Error (a YAML syntax error,
// a file that cannot be read) is one problem with only its message.
func Problems(err error) []Error {
	var out []Error
	for _, e := range unjoin(err) {
		var ce *Error
		if errors.As(e, &ce) {
			out = append(out, *ce)
		} else {
			out = append(out, Error{Msg: e.Error()})
		}
	}
	return out
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// trimSlash removes trailing slashes from a base URL, unless nothing of the
// URL would be left after its scheme.
func trimSlash(u string) string {
	t := strings.TrimRight(u, "/")
	if t == "" || strings.HasSuffix(t, ":") {
		return u
	}
	return t
}

// A decoder decodes a YAML node tree onto a Config by reflection, following
// the struct tags as yaml's own decoder does, and reports every problem with
// the path of its key. It is stricter than yaml's decoder with KnownFields,
// and it never expands more than budget nodes, so aliases cannot blow a small
// file up. Since the schema has no recursive types it never descends into a
// node that contains itself, except through merge keys, which it checks.
type decoder struct {
	errs   []*Error
	lines  map[string]int      // path of every key and item decoded → its line
	bad    map[string]bool     // paths whose value did not decode
	budget *AliasBudget        // nodes it may still visit
	open   map[*yaml.Node]bool // mappings being decoded, to catch a merge of one into itself
}

func newDecoder(doc *yaml.Node) *decoder {
	return &decoder{
		lines:  map[string]int{},
		bad:    map[string]bool{},
		budget: NewAliasBudget(doc),
		open:   map[*yaml.Node]bool{},
	}
}

// fail reports a problem with the key at path.
func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) {
	d.errs = append(d.errs, &Error{Line: n.Line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// duplicate reports a key set a second time, first set at line first (0
// where the document has no lines: a patch's).
func (d *decoder) duplicate(path string, n *yaml.Node, first int) {
	if first > 0 {
		d.fail(path, n, "duplicate key; it is first set at line %d", first)
		return
	}
	d.fail(path, n, "duplicate key")
}

// reject reports a value at path that does not decode; Validate's findings
// at or under path are then left out.
func (d *decoder) reject(path string, n *yaml.Node, msg string) {
	d.fail(path, n, "%s", msg)
	d.bad[path] = true
}

// covered reports whether path, or a key or item containing it, was rejected.
func (d *decoder) covered(path string) bool {
	for {
		if d.bad[path] {
			return true
		}
		if path == "" {
			return false
		}
		path = parent(path)
	}
}

// lineOf returns the line of the key or item at path, or of the closest one
// containing it that is in the document; 0 if none is.
func (d *decoder) lineOf(path string) int {
	for path != "" {
		if l, ok := d.lines[path]; ok {
			return l
		}
		path = parent(path)
	}
	return 0
}

// parent strips the last key or index from a path: "a.b[2]" → "a.b" → "a" → "".
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// visit resolves an alias and counts the node against the budget. It returns
// nil once the budget is spent.
func (d *decoder) visit(n *yaml.Node) *yaml.Node {
	n, err := d.budget.Visit(n)
	if err != nil {
		d.errs = append(d.errs, err)
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

var (
	durationType   = reflect.TypeFor[Duration]()
	splitType      = reflect.TypeFor[Split]()
	jsonObjectType = reflect.TypeFor[JSONObject]()
	policyListType = reflect.TypeFor[PolicyList]()
)

// value decodes n onto v. A null value keeps what v holds, unless nullOK is
// false (list items).
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string, nullOK bool) {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		n = n.Content[0]
	}
	if n = d.visit(n); n == nil {
		return
	}
	if isNull(n) {
		if !nullOK {
			d.reject(path, n, "must not be null")
		}
		return
	}
	switch {
	case v.Type() == durationType:
		dur, msg := parseDuration(n)
		if msg != "" {
			d.reject(path, n, msg)
			return
		}
		v.SetInt(int64(dur))
	case v.Type() == splitType:
		v.Set(reflect.ValueOf(d.splitArms(n, path)))
	case v.Type() == jsonObjectType:
		s, msg := jsonObjectText(n)
		if msg != "" {
			d.reject(path, n, msg)
			return
		}
		v.SetString(s)
	case v.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.reject(path, n, "must be a mapping of keys to values")
			return
		}
		d.mapping(n, v, path, fields(v.Type()), map[string]bool{})
	case v.Kind() == reflect.Slice:
		d.sequence(n, v, path)
	case v.Kind() == reflect.Pointer:
		// An optional section or value: present means set, so allocate
		// it and decode onto the new value.
		p := reflect.New(v.Type().Elem())
		d.value(n, p.Elem(), path, nullOK)
		v.Set(p)
	default:
		d.scalar(n, v, path)
	}
}

// fields maps the YAML keys of a struct type to its field indexes.
func fields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		m[name] = i
	}
	return m
}

// mapping decodes the keys of n onto the struct v. Keys already in done were
// set by a mapping that merges this one, and take precedence.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string, fields map[string]int, done map[string]bool) {
	d.open[n] = true
	defer delete(d.open, n)
	seen := map[string]int{}          // key → line, within this mapping
	var mergeKey, mergeVal *yaml.Node // a second merge key is an error
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			if first, ok := seen["<<"]; ok {
				d.fail(path, k, "has a second merge key (<<); the first is at line %d", first)
				continue
			}
			seen["<<"] = k.Line
			mergeKey, mergeVal = k, val
			continue
		}
		name, ok := d.key(k, path)
		if !ok {
			continue
		}
		kp := name
		if path != "" {
			kp = path + "." + name
		}
		if first, ok := seen[name]; ok {
			d.duplicate(kp, k, first)
			continue
		}
		seen[name] = k.Line
		if done[name] {
			continue
		}
		done[name] = true
		fi, known := fields[name]
		if !known {
			d.fail(kp, k, "unknown key")
			continue
		}
		d.lines[kp] = k.Line
		d.value(val, v.Field(fi), kp, true)
	}
	if mergeKey != nil {
		d.merge(mergeKey, mergeVal, v, path, fields, done)
	}
}

// isMerge reports whether k is the merge key <<, as yaml decides it.
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" &&
		(k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}

// merge decodes the mappings that the merge key k names (m) onto v, under
// the keys set before them.
func (d *decoder) merge(k, m *yaml.Node, v reflect.Value, path string, fields map[string]int, done map[string]bool) {
	const want = "a merge key (<<) must name a mapping or a list of mappings"
	r := d.visit(m)
	if r == nil {
		return
	}
	sources := []*yaml.Node{r}
	if r.Kind == yaml.SequenceNode {
		sources = r.Content
	}
	for _, s := range sources {
		if r.Kind == yaml.SequenceNode {
			if s = d.visit(s); s == nil {
				return
			}
		}
		switch {
		case s.Kind != yaml.MappingNode:
			d.reject(path, k, want)
			return
		case d.open[s]:
			d.reject(path, k, "a merge key (<<) names a mapping that contains it")
			return
		}
		d.mapping(s, v, path, fields, done)
	}
}

// key decodes a mapping key as a string.
func (d *decoder) key(k *yaml.Node, path string) (string, bool) {
	if k = d.visit(k); k == nil {
		return "", false
	}
	var name string
	if k.Kind != yaml.ScalarNode || isNull(k) || k.Decode(&name) != nil {
		d.fail(path, k, "keys must be strings")
		return "", false
	}
	return name, true
}

// sequence decodes a list onto the slice v. Items start from their type's
// defaults and keep their indexes even when they do not decode, so Validate's
// paths match the document.
func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.reject(path, n, "must be a list")
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		d.lines[ip] = item.Line
		e := s.Index(i)
		switch p := e.Addr().Interface().(type) {
		case *Model:
			*p = defaultModel()
		case *Replica:
			*p = defaultReplica()
		case *DNSGroup:
			*p = defaultDNSGroup()
		}
		d.value(item, e, ip, false)
	}
	v.Set(s)
}

// scalar decodes a string, integer or boolean with yaml's rules, save that
// an integer must be written as one (not 1.5 or 1e3) and a boolean as true
// or false (not yes or on).
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string) {
	var (
		msg string
		ok  bool
	)
	tag := n.ShortTag()
	switch v.Kind() {
	case reflect.String:
		msg = "must be a string"
		var s string
		if ok = n.Kind == yaml.ScalarNode && n.Decode(&s) == nil; ok {
			v.SetString(s)
		}
	case reflect.Int, reflect.Int64:
		msg = "must be an integer"
		var i int64
		if ok = n.Kind == yaml.ScalarNode && tag == "!!int" && n.Decode(&i) == nil && !v.OverflowInt(i); ok {
			v.SetInt(i)
		}
	case reflect.Float64:
		msg = "must be a number"
		var f float64
		if ok = n.Kind == yaml.ScalarNode && (tag == "!!int" || tag == "!!float") && n.Decode(&f) == nil &&
			!math.IsNaN(f) && !math.IsInf(f, 0); ok {
			v.SetFloat(f)
		}
	case reflect.Bool:
		msg = "must be true or false"
		var b bool
		if ok = n.Kind == yaml.ScalarNode && tag == "!!bool" && n.Decode(&b) == nil; ok {
			v.SetBool(b)
		}
	default:
		panic("config: no decoder for " + v.Type().String())
	}
	if !ok {
		d.reject(path, n, msg)
	}
}

// textError finds, with its line, what yaml refuses in a file's text
// without naming a line: a byte that is not UTF-8, or a character YAML
// does not allow (C0 and C1 controls but tab, line ends and NEL, and
// U+FFFE and U+FFFF). A file in UTF-16, with its byte order mark, is
// yaml's to read. Nil when the text has neither.
func textError(data []byte) *Error {
	if bytes.HasPrefix(data, []byte{0xfe, 0xff}) || bytes.HasPrefix(data, []byte{0xff, 0xfe}) {
		return nil
	}
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return &Error{Line: line, Msg: fmt.Sprintf("the file is not UTF-8 here (a byte 0x%02x)", data[i])}
		case r == '\n':
			line++
		case r < 0x20 && r != '\t' && r != '\r', r >= 0x80 && r <= 0x9f && r != 0x85, r == 0xfffe, r == 0xffff:
			return &Error{Line: line, Msg: fmt.Sprintf("a control character (U+%04X) is not allowed in YAML", r)}
		}
		i += size
	}
	return nil
}

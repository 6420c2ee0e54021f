package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// jsonDocument reads a JSON document into the node tree yaml's parser
// would build from the same text (JSON is YAML), without the YAML scanner,
// which costs several times more: strings are double-quoted scalars, and
// numbers, booleans and null are plain ones tagged by yaml's own resolver.
// Lines are not kept. A patch's merged document is read this way.
//
// It stops at the first node past maxNodes, and at the first array longer
// than MaxListItems, and returns an *Error that says so (naming the
// array's path), so that such a document costs no more than reading that
// much of it.
func jsonDocument(data []byte, maxNodes int) (*yaml.Node, error) {
	r := &jsonReader{dec: json.NewDecoder(bytes.NewReader(data)), maxNodes: maxNodes}
	r.dec.UseNumber()
	root, err := r.node(nil, 1)
	if err != nil {
		return nil, err
	}
	if _, err := r.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("the JSON document is followed by more text")
	}
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}, nil
}

// MaxJSONDepth is how deeply a patch may nest objects and arrays. A config
// is about six levels deep; the merge costs the square of the depth, so a
// 60 KB patch nested 10,000 deep took seconds and a gigabyte.
const MaxJSONDepth = 32

// MaxJSONMembers is how many keys one object of a patch may hold: a
// config's widest mapping holds a few dozen, and merging n new keys into
// an object costs the square of n (evanphx/json-patch scans its key list
// at every insertion), so 250,000 keys in 3.4 MB held a core for minutes.
const MaxJSONMembers = 1024

// MaxListItems is how many items one list (a JSON array, a YAML
// sequence) of a patch or a config file may hold. The longest list of a
// real config is its replicas, at most 4,096 (maxReplicas), or a model's
// aliases or a replica's models, which are far fewer; the bound is 16
// times that. Reading, merging and checking a list costs a few
// microseconds an item, and more when every item is a problem to report:
// a patch of one list of 500,000 items held a core for 3-4 s and took
// 200 MB before it was refused, and slowed other requests.
const MaxListItems = 65536

// MaxNodes is how many nodes (objects, arrays, keys and values; YAML's
// mappings, sequences and scalars) a patch or a config file may hold,
// since lists within the bound of MaxListItems can still add up: 30 of
// 65,536 numbers each took 8 s and 1.4 GB. A config at the replica limit,
// 4,096 replicas serving two models each, is about 95,000 nodes as JSON,
// which spells out every default, and 45,000 as YAML.
const MaxNodes = 1 << 18

// errTooWide is an object with more than MaxJSONMembers keys.
var errTooWide = fmt.Errorf("an object holds more than %d keys", MaxJSONMembers)

// errTooDeep is a document nested past MaxJSONDepth.
var errTooDeep = fmt.Errorf("objects and arrays are nested more than %d deep", MaxJSONDepth)

// A jsonReader reads one JSON document into a node tree.
type jsonReader struct {
	dec      *json.Decoder
	nodes    int // nodes read so far
	maxNodes int // nodes it may read
}

// count counts one more node read, or says there are too many.
func (r *jsonReader) count() error {
	if r.nodes++; r.nodes > r.maxNodes {
		return &Error{Msg: fmt.Sprintf("the document holds more than %d keys and values", r.maxNodes)}
	}
	return nil
}

// node reads the value at path at, depth deep.
func (r *jsonReader) node(at *step, depth int) (*yaml.Node, error) {
	tok, err := r.dec.Token()
	if err != nil {
		return nil, err
	}
	if err := r.count(); err != nil {
		return nil, err
	}
	switch v := tok.(type) {
	case json.Delim:
		if depth > MaxJSONDepth {
			return nil, errTooDeep
		}
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle}
		end := json.Delim('}')
		if v == '[' {
			n.Kind, n.Tag, end = yaml.SequenceNode, "!!seq", ']'
		}
		for r.dec.More() {
			child := step{up: at, item: len(n.Content)}
			if n.Kind == yaml.MappingNode {
				k, err := r.dec.Token()
				if err != nil {
					return nil, err
				}
				if len(n.Content) >= 2*MaxJSONMembers {
					return nil, errTooWide
				}
				if err := r.count(); err != nil {
					return nil, err
				}
				child = step{up: at, key: k.(string), item: -1} // a key is a string, or Token failed
				n.Content = append(n.Content, quoted(child.key))
			} else if len(n.Content) >= MaxListItems {
				return nil, &Error{Path: at.String(), Msg: fmt.Sprintf("a list may hold at most %d items", MaxListItems)}
			}
			value, err := r.node(&child, depth+1)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, value)
		}
		if tok, err := r.dec.Token(); err != nil || tok != end {
			return nil, fmt.Errorf("unterminated JSON %s", v)
		}
		return n, nil
	case string:
		return quoted(v), nil
	case json.Number:
		return plain(v.String()), nil
	case bool:
		if v {
			return plain("true"), nil
		}
		return plain("false"), nil
	case nil:
		return plain("null"), nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

func quoted(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: s}
}

// plain is an unquoted scalar, tagged as yaml's parser tags one.
func plain(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: s}
	n.Tag = n.ShortTag()
	return n
}

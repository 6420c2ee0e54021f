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
func jsonDocument(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	root, err := jsonNode(dec, 1)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
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

// errTooWide is an object with more than MaxJSONMembers keys.
var errTooWide = fmt.Errorf("an object holds more than %d keys", MaxJSONMembers)

// errTooDeep is a document nested past MaxJSONDepth.
var errTooDeep = fmt.Errorf("objects and arrays are nested more than %d deep", MaxJSONDepth)

func jsonNode(dec *json.Decoder, depth int) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
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
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				if len(n.Content) >= 2*MaxJSONMembers {
					return nil, errTooWide
				}
				n.Content = append(n.Content, quoted(k.(string))) // a key is a string, or Token failed
			}
			item, err := jsonNode(dec, depth+1)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, item)
		}
		if tok, err := dec.Token(); err != nil || tok != end {
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

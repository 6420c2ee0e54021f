package tokenize

import (
	"bytes"
	"encoding/json"
	"encoding/json/jsontext"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
)

// The request parsers walk a body once with a jsontext.Decoder and keep
// the values they read as slices of it. What they accept and refuse, and
// the errors they give, are json.Unmarshal's into maps and raw messages,
// as in the parsers they replace (request_reference_test.go): the decoder
// takes json.Unmarshal's options, and where a value is refused, the error
// is the one json.Unmarshal gives for it.

// decodeOptions make a jsontext.Decoder accept what json.Unmarshal accepts:
// repeated names and invalid UTF-8.
var decodeOptions = json.DefaultOptionsV1()

var decoderPool = sync.Pool{New: func() any { return jsontext.NewDecoder(emptyReader{}, decodeOptions) }}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, io.EOF }

// errNotObject is a value read as an object that is not one.
var errNotObject = errors.New("not an object")

// jsonReader reads JSON values from src and hands them out as slices of
// src, capped so that appending to them copies.
type jsonReader struct {
	src   []byte
	dec   *jsontext.Decoder
	known decodedString // a string in src already decoded (jsonValueKnowing)
}

func newJSONReader(src []byte) jsonReader {
	dec := decoderPool.Get().(*jsontext.Decoder)
	dec.Reset(bytes.NewBuffer(src), decodeOptions) // parsed in place, not copied
	return jsonReader{src: src, dec: dec}
}

// release returns the decoder to the pool, without src.
func (r *jsonReader) release() {
	r.dec.Reset(emptyReader{}, decodeOptions)
	decoderPool.Put(r.dec)
	r.dec = nil
}

// value reads the next value.
func (r *jsonReader) value() ([]byte, error) {
	v, err := r.dec.ReadValue()
	if err != nil {
		return nil, err
	}
	end := int(r.dec.InputOffset())
	return r.src[end-len(v) : end : end], nil
}

// name reads the next object member's name, unquoted.
func (r *jsonReader) name() ([]byte, error) {
	raw, err := r.value()
	if err != nil {
		return nil, err
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		// Invalid UTF-8 is left as it is: it matches no name a caller
		// looks for, and json.Unmarshal's U+FFFD would not either.
		return raw[1 : len(raw)-1], nil
	}
	name, _ := jsontext.AppendUnquote(nil, raw)
	return name, nil
}

// members reads an object, calling visit with each member's name for it to
// read or skip the value.
func (r *jsonReader) members(visit func(r *jsonReader, name []byte) error) error {
	if r.dec.PeekKind() != '{' {
		return errNotObject
	}
	if _, err := r.dec.ReadToken(); err != nil {
		return err
	}
	for r.dec.PeekKind() != '}' {
		name, err := r.name()
		if err != nil {
			return err
		}
		if err := visit(r, name); err != nil {
			return err
		}
	}
	_, err := r.dec.ReadToken()
	return err
}

// readObject reads body, a request, calling visit for each member. Its
// error is json.Unmarshal's for body into a map: a syntax error anywhere in
// body, or a body that is not an object. A null body has no members.
func readObject(body []byte, visit func(r *jsonReader, name []byte) error) error {
	r := newJSONReader(body)
	err := r.members(visit)
	if err == nil {
		if _, err = r.dec.ReadToken(); err == io.EOF {
			err = nil
		} else if err == nil {
			err = errors.New("data after the top-level value")
		}
	}
	r.release()
	if err == nil {
		return nil
	}
	if _, uerr := object(body); uerr != nil {
		return uerr
	}
	if errors.Is(err, errNotObject) {
		return nil // null
	}
	return err // not reached: the decoder and json.Unmarshal disagree
}

// objectFields reads raw, an object member's value, for the last values of
// the keys ("" for none). ok is false when raw is not an object: absent,
// or another kind of value; null is an object without members, as for
// json.Unmarshal into a map.
func objectFields(raw []byte, keys [2]string) (vals [2][]byte, ok bool) {
	if string(raw) == "null" {
		return vals, true
	}
	if len(raw) == 0 || raw[0] != '{' {
		return vals, false
	}
	r := newJSONReader(raw)
	err := r.members(func(r *jsonReader, name []byte) error {
		for i, k := range keys {
			if k != "" && string(name) == k {
				var err error
				vals[i], err = r.value()
				return err
			}
		}
		return r.dec.SkipValue()
	})
	r.release()
	return vals, err == nil
}

// elements reads raw, a member's value, as a list. ok is false when raw is
// not a list.
func elements(raw []byte) (items [][]byte, ok bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	r := newJSONReader(raw)
	defer r.release()
	if _, err := r.dec.ReadToken(); err != nil {
		return nil, false
	}
	for r.dec.PeekKind() != ']' {
		v, err := r.value()
		if err != nil {
			return nil, false
		}
		items = append(items, v)
	}
	return items, true
}

// object decodes a JSON object into a map, as the parsers did before they
// read bodies in one pass; they now use it for its errors.
func object(raw []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// objectError is json.Unmarshal's error for raw, which is not an object,
// into a map.
func objectError(raw []byte) error {
	if _, err := object(raw); err != nil {
		return err
	}
	return errNotObject // not reached
}

// arrayError is json.Unmarshal's error for raw, which is not a list, into
// a slice.
func arrayError(raw []byte) error {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return err
	}
	return errors.New("not a list") // not reached
}

// present reports whether a member's value is other than null; absent is
// nil.
func present(raw []byte) bool {
	return len(raw) > 0 && string(raw) != "null"
}

// optString reads an optional string member; null and absent give "".
func optString(raw []byte) (string, error) {
	if !present(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		return stringValue(raw), nil
	}
	var s string
	err := json.Unmarshal(raw, &s) // for its error
	return s, err
}

var unquotePool = sync.Pool{New: func() any { return new([]byte) }}

// stringValue decodes a JSON string as json.Unmarshal does: invalid UTF-8
// and unpaired surrogates become U+FFFD.
func stringValue(raw []byte) string {
	buf := unquotePool.Get().(*[]byte)
	b, _ := jsontext.AppendUnquote((*buf)[:0], raw)
	s := string(b)
	if cap(b) <= 1<<20 {
		*buf = b
		unquotePool.Put(buf)
	}
	return s
}

// laxBool reads a boolean as vLLM's request models do (pydantic's lax
// mode): true and false, 0 and 1, and strings such as "yes" and "off".
// Absent or null gives def.
func laxBool(raw []byte, def bool) (bool, error) {
	if !present(raw) {
		return def, nil
	}
	switch strings.ToLower(strings.Trim(string(raw), `"`)) {
	case "true", "1", "1.0", "on", "t", "y", "yes":
		return true, nil
	case "false", "0", "0.0", "off", "f", "n", "no":
		return false, nil
	}
	return false, fmt.Errorf("not a boolean: %s", raw)
}

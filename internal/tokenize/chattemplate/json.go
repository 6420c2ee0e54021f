package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/rawjson"
)

// maxJSONDepth bounds the nesting of JSON values turned into template
// values, so that a hostile body cannot exhaust the stack.
const maxJSONDepth = 200

// jsonValue decodes one JSON value into a template value as Python's
// json.loads would build it: objects keep their keys in the order written
// (a repeated key keeps its first position and its last value), integers
// stay integers and numbers with a fraction or an exponent become floats,
// so that tojson and printing give back 1 and 1.0 as sent.
//
// Integers beyond 64 bits and floats beyond float64 are refused with an
// tokenize.UnsupportedError: Python keeps them exactly (or as inf) and the
// template engine cannot.
func jsonValue(raw []byte) (jinja.Value, error) {
	return jsonValueKnowing(raw, rawjson.Decoded{})
}

// valueReader reads template values, taking the value of the string known
// without decoding it.
type valueReader struct {
	rawjson.Reader
	known rawjson.Decoded
}

// jsonValueKnowing is jsonValue taking the value of a string in raw from
// known.
func jsonValueKnowing(raw []byte, known rawjson.Decoded) (jinja.Value, error) {
	r := valueReader{Reader: rawjson.NewReader(raw), known: known}
	v, err := r.jinjaValue(0)
	if err == nil {
		err = r.End()
	}
	r.Release()
	if err != nil {
		// The error as json.Decoder words it, and in its order.
		return streamJSONValue(raw)
	}
	return v, nil
}

// jinjaValue reads the next value as jsonValue does.
func (r *valueReader) jinjaValue(depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), unsupported(tokenize.ReasonDepth)
	}
	switch r.Dec.PeekKind() {
	case '[':
		if _, err := r.Dec.ReadToken(); err != nil {
			return jinja.Undefined(), err
		}
		items := []jinja.Value{}
		for r.Dec.PeekKind() != ']' {
			v, err := r.jinjaValue(depth + 1)
			if err != nil {
				return jinja.Undefined(), err
			}
			items = append(items, v)
		}
		if _, err := r.Dec.ReadToken(); err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewList(items), nil
	case '{':
		if _, err := r.Dec.ReadToken(); err != nil {
			return jinja.Undefined(), err
		}
		d := jinja.NewDict()
		for r.Dec.PeekKind() != '}' {
			key, err := r.Value()
			if err != nil {
				return jinja.Undefined(), err
			}
			v, err := r.jinjaValue(depth + 1)
			if err != nil {
				return jinja.Undefined(), err
			}
			d.AsDict().Set(rawjson.Unquote(key), v)
		}
		if _, err := r.Dec.ReadToken(); err != nil {
			return jinja.Undefined(), err
		}
		return d, nil
	}
	raw, err := r.Value()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch raw[0] {
	case 'n':
		return jinja.None(), nil
	case 't':
		return jinja.NewBool(true), nil
	case 'f':
		return jinja.NewBool(false), nil
	case '"':
		if s, ok := r.known.Of(raw); ok {
			return jinja.NewString(s), nil
		}
		return jinja.NewString(rawjson.Unquote(raw)), nil
	}
	return numberValue(string(raw))
}

// streamJSONValue is jsonValue with json.Decoder: slower, and kept for the
// errors it gives.
func streamJSONValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), unsupported(tokenize.ReasonDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return numberValue(string(t))
	case json.Delim:
		switch t {
		case '[':
			items := []jinja.Value{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key %v is not a string", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(key, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Undefined(), err
			}
			return d, nil
		}
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// numberValue converts a JSON number's text as Python's json.loads does:
// int when it has neither fraction nor exponent, else float.
func numberValue(s string) (jinja.Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return jinja.Undefined(), unsupported(tokenize.ReasonNumber)
		}
		return jinja.NewInt(n), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return jinja.Undefined(), unsupported(tokenize.ReasonNumber)
	}
	return jinja.NewFloat(f), nil
}

// pyJSONLoads is what vLLM does to a tool call's arguments string:
// json.loads, with anything that does not parse as JSON (empty and
// whitespace-only strings included) becoming an empty dict. Python's
// json.loads also accepts NaN, Infinity and -Infinity, which encoding/json
// does not; such arguments are refused as unsupported rather than guessed.
func pyJSONLoads(s string) (jinja.Value, error) {
	trimmed := strings.Trim(s, " \t\n\r")
	if !json.Valid([]byte(trimmed)) {
		if strings.Contains(s, "NaN") || strings.Contains(s, "Infinity") {
			return jinja.Undefined(), unsupported(tokenize.ReasonNumber)
		}
		return jinja.NewDict(), nil
	}
	return jsonValue([]byte(trimmed))
}

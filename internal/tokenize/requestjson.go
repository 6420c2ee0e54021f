package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/inferrail/inferrail/internal/tokenize/rawjson"
)

// The request parsers walk a body once with a rawjson.Reader and keep
// the values they read as slices of it. What they accept and refuse, and
// the errors they give, are json.Unmarshal's into maps and raw messages,
// as in the parsers they replace (request_reference_test.go): the decoder
// takes json.Unmarshal's options, and where a value is refused, the error
// is the one json.Unmarshal gives for it.

// readObject reads body, a request, calling visit for each member. Its
// error is json.Unmarshal's for body into a map: a syntax error anywhere in
// body, or a body that is not an object. A null body has no members.
func readObject(body []byte, visit func(r *rawjson.Reader, name []byte) error) error {
	r := rawjson.NewReader(body)
	err := r.Members(visit)
	if err == nil {
		err = r.End()
	}
	r.Release()
	if err == nil {
		return nil
	}
	if _, uerr := object(body); uerr != nil {
		return uerr
	}
	if errors.Is(err, rawjson.ErrNotObject) {
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
	r := rawjson.NewReader(raw)
	err := r.Members(func(r *rawjson.Reader, name []byte) error {
		for i, k := range keys {
			if k != "" && string(name) == k {
				var err error
				vals[i], err = r.Value()
				return err
			}
		}
		return r.Dec.SkipValue()
	})
	r.Release()
	return vals, err == nil
}

// elements reads raw, a member's value, as a list. ok is false when raw is
// not a list.
func elements(raw []byte) (items [][]byte, ok bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, false
	}
	r := rawjson.NewReader(raw)
	defer r.Release()
	if _, err := r.Dec.ReadToken(); err != nil {
		return nil, false
	}
	for r.Dec.PeekKind() != ']' {
		v, err := r.Value()
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
	return rawjson.ErrNotObject // not reached
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

// cacheKeySalt folds SGLang's extra_key and lora_path, as sent, into the
// salt: SGLang keys its radix cache by them (extra_key joined to
// cache_salt; the adapter lora_path names), so a prompt sent with either
// shares no cache with the same prompt without, and its blocks, which
// SGLang's events announce unsalted, must be mirrored apart. vLLM ignores
// both fields: there the salt can only hide a hit, never promise one.
// Null and "" are none.
func cacheKeySalt(salt string, extraKey, loraPath []byte) string {
	given := func(raw []byte) bool { return present(raw) && string(raw) != `""` }
	if !given(extraKey) && !given(loraPath) {
		return salt
	}
	if !given(extraKey) {
		extraKey = nil
	}
	if !given(loraPath) {
		loraPath = nil
	}
	return salt + "\x00sglang extra_key=" + string(extraKey) + "\x00lora_path=" + string(loraPath)
}

// optString reads an optional string member; null and absent give "".
func optString(raw []byte) (string, error) {
	if !present(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		return rawjson.Unquote(raw), nil
	}
	var s string
	err := json.Unmarshal(raw, &s) // for its error
	return s, err
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

package sim

import (
	"errors"
	"net/http"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/pyjson"
)

// vLLM's server reads a body with Starlette's request.json(), which is
// Python's json.loads: what it accepts (NaN, Infinity and -Infinity
// among numbers) and where and how it says a body is malformed decide
// vLLM's answer, so the simulator parses bodies as that module does
// (package pyjson).

// bodyUnparsable is the message of FastAPI's 400 for a body it could not
// parse for a reason other than its JSON syntax.
const bodyUnparsable = "There was an error parsing the body"

// decodeJSON parses one JSON value into nil, bool, json.Number, string,
// []any and *object, as json.loads does (pyjson.Decode); NaN and the
// infinities are the json.Numbers "NaN", "Infinity" and "-Infinity".
func decodeJSON(data []byte) (any, error) {
	v, _, err := decodeBody(data)
	return v, err
}

// decodeBody is decodeJSON, also returning where the body holds
// non-finite numbers.
func decodeBody(data []byte) (any, []pyjson.NonFinite, error) {
	return pyjson.Decode(data, newObject)
}

func newObject(keys []string, vals []any) any { return &object{keys: keys, vals: vals} }

// bodyError is vLLM's 400 for a body json.loads refuses: FastAPI's
// json_invalid error at the character where the parse failed, or its
// plain 400 for the other errors Python raises; for an empty body, the
// error of a missing request.
func bodyError(err error) *openai.Error {
	v := &validator{}
	var syntax *pyjson.SyntaxError
	switch {
	case errors.Is(err, pyjson.ErrEmpty):
		v.add("missing", nil, "Field required", nil)
		return v.err()
	case !errors.As(err, &syntax):
		return openai.HTTPError(http.StatusBadRequest, bodyUnparsable)
	}
	v.addCtx("json_invalid", []any{syntax.Pos}, "JSON decode error", &object{}, &object{keys: []string{"error"}, vals: []any{syntax.Msg}})
	return v.err()
}

// promptMembers are the members a chat template may render whole, where
// Python writes a non-finite number as NaN or Infinity and Go's JSON
// cannot.
var promptMembers = map[string]bool{"messages": true, "tools": true, "chat_template_kwargs": true, "documents": true, "prompt": true}

// finiteBody is body for the prompt parsers, which read JSON as Go does:
// its non-finite numbers, which the checks before refused wherever they
// mattered, become 0. One in a member a prompt renders from the simulator
// cannot render as vLLM would, and refuses.
func finiteBody(body []byte, lits []pyjson.NonFinite) ([]byte, *openai.Error) {
	if len(lits) == 0 {
		return body, nil
	}
	out := make([]byte, 0, len(body))
	last := 0
	for _, l := range lits {
		if promptMembers[l.Member] {
			return nil, openai.BadRequest("NaN and Infinity in "+l.Member+" are not supported by inferrail-sim.", l.Member)
		}
		out = append(out, body[last:l.Start]...)
		out = append(out, '0')
		last = l.End
	}
	return append(out, body[last:]...), nil
}

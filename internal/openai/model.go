package openai

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// ModelField is where a request body names its model.
type ModelField struct {
	Name    string // the decoded name; "" when absent or null
	Present bool   // a "model" key exists (its value may be null)
	Start   int    // byte span of the value of the last "model" key
	End     int

	// User is the body's top-level "user" string, which names the end user
	// and so can key session affinity; "" when absent or not a string.
	User string
	// Stream is whether the body's top-level "stream" is true as vLLM reads
	// it (LaxBool: "true", 1 and "yes" are too): the answer comes as
	// events, the first one once the prompt is prefilled.
	Stream bool
	// RequestID is the body's top-level "request_id" string, vLLM's
	// extension naming the request when no X-Request-Id header does; ""
	// when absent or not a string.
	RequestID string
	// MaxTokens, MaxCompletionTokens and N are the body's top-level
	// "max_tokens", "max_completion_tokens" and "n" when each is a whole
	// number of at least 1 (LaxWhole); 0 when absent, null or anything
	// else.
	MaxTokens, MaxCompletionTokens, N int64
	// PromptStart and PromptEnd are the byte span of the value of the
	// last top-level "prompt" key (a completion's); both 0 when absent.
	PromptStart, PromptEnd int
}

// The top-level keys FindModel reads, by their place in topKeys.
const (
	keyOther = iota
	keyModel
	keyUser
	keyStream
	keyRequestID
	keyMaxTokens
	keyMaxCompletionTokens
	keyN
	keyPrompt
)

var topKeys = [...]string{keyModel: "model", keyUser: "user", keyStream: "stream", keyRequestID: "request_id",
	keyMaxTokens: "max_tokens", keyMaxCompletionTokens: "max_completion_tokens", keyN: "n", keyPrompt: "prompt"}

// topKey is which of topKeys raw, a JSON string, names; keyOther for none.
func topKey(raw []byte) int {
	for k := keyModel; k < len(topKeys); k++ {
		if isKey(raw, topKeys[k]) {
			return k
		}
	}
	return keyOther
}

// ErrNotObject is returned by FindModel for a body whose top level is not a
// JSON object.
var ErrNotObject = errors.New("the request body must be a JSON object")

// ErrModelType is returned by FindModel when "model" is neither a string nor
// null.
var ErrModelType = errors.New("model must be a string")

// ErrModelNotUTF8 is returned by FindModel when the "model" string is not
// UTF-8: decoded, its bad bytes would become U+FFFD, a name the client
// never sent.
var ErrModelNotUTF8 = errors.New("the model name is not UTF-8")

// FindModel scans the top level of a JSON object for its "model" key (and
// its "user", "stream", "request_id", "max_tokens", "max_completion_tokens",
// "n" and where "prompt" is) without decoding anything else. The last occurrence wins, as in
// Python. body must be valid JSON (check with json.Valid first).
func FindModel(body []byte) (ModelField, error) {
	var f ModelField
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return f, ErrNotObject
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return f, nil
	}
	for i < len(body) {
		keyStart := i
		i = skipString(body, i)
		key := topKey(body[keyStart:i])
		i = skipSpace(body, i)
		i = skipSpace(body, i+1) // ':'
		valStart := i
		i = skipValue(body, i)
		switch key {
		case keyModel:
			f.Present, f.Start, f.End = true, valStart, i
		case keyUser:
			f.User = ""
			if body[valStart] == '"' {
				_ = json.Unmarshal(body[valStart:i], &f.User)
			}
		case keyStream:
			f.Stream = laxTrue(body[valStart:i])
		case keyRequestID:
			f.RequestID = ""
			if body[valStart] == '"' {
				_ = json.Unmarshal(body[valStart:i], &f.RequestID)
			}
		case keyMaxTokens:
			f.MaxTokens = LaxWhole(body[valStart:i])
		case keyMaxCompletionTokens:
			f.MaxCompletionTokens = LaxWhole(body[valStart:i])
		case keyN:
			f.N = LaxWhole(body[valStart:i])
		case keyPrompt:
			f.PromptStart, f.PromptEnd = valStart, i
		}
		i = skipSpace(body, i)
		if i >= len(body) || body[i] == '}' {
			break
		}
		i = skipSpace(body, i+1) // ','
	}
	if !f.Present {
		return f, nil
	}
	switch body[f.Start] {
	case '"':
		if !utf8.Valid(body[f.Start:f.End]) {
			return f, ErrModelNotUTF8
		}
		if err := json.Unmarshal(body[f.Start:f.End], &f.Name); err != nil {
			return f, err
		}
	case 'n':
	default:
		return f, ErrModelType
	}
	return f, nil
}

// SpliceModel returns body with its model set to name, changing no other
// byte: the value of the model key is replaced, or a model key inserted first
// when there is none.
func SpliceModel(body []byte, f ModelField, name string) []byte {
	quoted := AppendString(nil, name)
	if f.Present {
		out := make([]byte, 0, len(body)-(f.End-f.Start)+len(quoted))
		out = append(out, body[:f.Start]...)
		out = append(out, quoted...)
		return append(out, body[f.End:]...)
	}
	open := skipSpace(body, 0) + 1
	rest := skipSpace(body, open)
	out := make([]byte, 0, len(body)+len(quoted)+10)
	out = append(out, body[:open]...)
	out = append(out, `"model":`...)
	out = append(out, quoted...)
	if rest < len(body) && body[rest] != '}' {
		out = append(out, ',')
	}
	return append(out, body[open:]...)
}

func isKey(raw []byte, key string) bool {
	if len(raw) == len(key)+2 && string(raw[1:len(raw)-1]) == key {
		return true
	}
	if len(raw) < len(key)+2 || !containsByte(raw, '\\') {
		return false
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == key
}

func containsByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default:
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

// ValidRequestID reports whether a client's X-Request-Id may be passed on
// and reused as the response id: 1 to 128 printable ASCII characters from a
// conservative set.
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > 128 || !utf8.ValidString(id) {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':'
		if !ok {
			return false
		}
	}
	return true
}

// Quote is AppendString for a string result.
func Quote(s string) string { return string(AppendString(nil, s)) }

package gateway

import (
	"bytes"
	"strconv"
	"strings"
)

// sizeBody is one of gw-sizes' hostile request bodies: large or deep in
// one dimension a chat request has.
type sizeBody struct {
	Name string
	Body []byte
}

// SizeScale sets how large gw-sizes' bodies are; the zero value of a field
// leaves that body out.
type SizeScale struct {
	// MessageBytes is the size of the one user message of "huge-message".
	MessageBytes int
	// Messages is the number of short turns of "many-messages".
	Messages int
	// Tools is the number of function tools of "many-tools".
	Tools int
	// Depth is how deep the tool call arguments of "nested-arguments"
	// nest, in objects and lists; the JSON of the whole body nests two
	// levels more in "nested-arguments-object", where the arguments are an
	// object rather than the JSON text of one.
	Depth int
}

// sizeBodies builds the bodies of scale for model.
func sizeBodies(model string, s SizeScale) []sizeBody {
	var out []sizeBody
	if s.MessageBytes > 0 {
		out = append(out, sizeBody{"huge-message", hugeMessageBody(model, s.MessageBytes)})
	}
	if s.Messages > 0 {
		out = append(out, sizeBody{"many-messages", manyMessagesBody(model, s.Messages)})
	}
	if s.Tools > 0 {
		out = append(out, sizeBody{"many-tools", manyToolsBody(model, s.Tools)})
	}
	if s.Depth > 0 {
		out = append(out, sizeBody{"nested-arguments", nestedArgumentsBody(model, s.Depth, true)},
			sizeBody{"nested-arguments-object", nestedArgumentsBody(model, s.Depth, false)})
	}
	return out
}

// sizeWords are the words the large texts are made of.
var sizeWords = strings.Fields("the router reads every request once and sends it to the engine whose cache " +
	"already holds the longest part of its prompt while no engine runs far behind the others")

// appendWords appends words to b until it has grown by n bytes or just
// past; i varies the text.
func appendWords(b []byte, n, i int) []byte {
	end := len(b) + n
	for j := i; len(b) < end; j++ {
		b = append(b, sizeWords[j%len(sizeWords)]...)
		if j%97 == 0 {
			b = strconv.AppendInt(append(b, ' '), int64(j), 10)
		}
		b = append(b, ' ')
	}
	return b
}

func hugeMessageBody(model string, size int) []byte {
	b := make([]byte, 0, size+256)
	b = append(b, `{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"`...)
	b = appendWords(b, size, 0)
	return append(b, `"}]}`...)
}

func manyMessagesBody(model string, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"` + model + `","max_tokens":4,"messages":[{"role":"system","content":"You answer briefly."}`)
	for i := range n {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		if i == n-1 {
			role = "user"
		}
		b.WriteString(`,{"role":"` + role + `","content":"turn ` + strconv.Itoa(i) + ` `)
		b.Write(appendWords(nil, 40, i))
		b.WriteString(`"}`)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

func manyToolsBody(model string, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"Which tool fits?"}],"tools":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		id := strconv.Itoa(i)
		b.WriteString(`{"type":"function","function":{"name":"tool_` + id + `","description":"Tool ` + id + ` `)
		b.Write(appendWords(nil, 60, i))
		b.WriteString(`","parameters":{"type":"object","properties":{"query":{"type":"string","description":"what to look up"},` +
			`"limit":{"type":"integer","description":"at most this many"},"tags":{"type":"array","items":{"type":"string"}}},"required":["query"]}}}`)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// nestedArgumentsBody is an assistant turn calling a tool with arguments
// nested depth levels deep, alternating objects and lists, followed by the
// tool's answer and a user turn. As the JSON text of the arguments
// (quoted) when text, else as a JSON object in the body.
func nestedArgumentsBody(model string, depth int, text bool) []byte {
	var args bytes.Buffer
	for i := range depth {
		if i%2 == 0 {
			args.WriteString(`{"k":`)
		} else {
			args.WriteByte('[')
		}
	}
	args.WriteString(`1`)
	for i := depth - 1; i >= 0; i-- {
		if i%2 == 0 {
			args.WriteByte('}')
		} else {
			args.WriteByte(']')
		}
	}
	raw := args.Bytes()
	if text {
		raw = []byte(strconv.Quote(args.String()))
	}
	var b bytes.Buffer
	b.WriteString(`{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"Look it up."},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":`)
	b.Write(raw)
	b.WriteString(`}}]},{"role":"tool","tool_call_id":"call_1","content":"found"},{"role":"user","content":"And then?"}],` +
		`"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"k":{"type":"object"}}}}}]}`)
	return b.Bytes()
}

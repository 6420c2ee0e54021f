package workload

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/inferrail/inferrail/internal/openai"
	"github.com/inferrail/inferrail/internal/tokenize/simtok"
)

// simTok counts tokens the way the simulator does.
var simTok = simtok.New()

// words are what generated text is made of.
var words = [...]string{
	"a", "an", "as", "at", "be", "by", "do", "go", "if", "in", "is", "it", "me", "no", "of", "on", "or", "so", "to", "up", "we",
	"all", "and", "any", "are", "but", "can", "day", "few", "for", "has", "how", "its", "key", "may", "new", "not", "now", "one",
	"our", "out", "run", "see", "set", "the", "two", "use", "way", "who", "why", "yet",
	"also", "back", "base", "been", "both", "case", "data", "down", "each", "even", "fact", "file", "find", "form", "from",
	"full", "give", "good", "have", "here", "high", "into", "just", "keep", "kind", "last", "less", "line", "list", "long",
	"look", "make", "many", "more", "most", "much", "must", "name", "need", "next", "only", "open", "over", "part", "plan",
	"read", "rest", "same", "show", "side", "some", "such", "take", "than", "that", "them", "then", "they", "this", "time",
	"turn", "very", "want", "well", "what", "when", "will", "with", "word", "work", "year", "your",
	"about", "after", "again", "being", "block", "cache", "count", "early", "every", "first", "given", "group", "large",
	"later", "model", "might", "order", "other", "place", "point", "queue", "quite", "right", "small", "state", "still",
	"table", "their", "there", "these", "thing", "think", "those", "three", "token", "under", "value", "where", "which",
	"while", "world", "would",
	"answer", "before", "change", "number", "prefix", "reason", "record", "report", "result", "router", "second", "should",
	"simple", "source", "system", "though", "within",
	"account", "between", "careful", "company", "history", "measure", "natural", "problem", "process", "program", "request",
	"through", "another", "balance", "example", "general", "replica",
	"question", "document", "important", "different", "following", "everything", "understand", "throughput",
}

// piece is a word with its separator and its builtin:sim token count. Every
// separator ends a token, so pieces written one after another count to the
// sum of their counts.
type piece struct {
	s      string
	tokens int
}

// lexicon holds every piece generated text is drawn from.
var lexicon = newLexicon()

type lexiconT struct {
	plain, capital, stop, comma []piece
	// small[k] holds the plain pieces of at most k tokens, k = 1 … 3, to
	// finish a text on its exact count.
	small     [4][]piece
	maxTokens int // of any piece
}

func newLexicon() *lexiconT {
	l := &lexiconT{}
	add := func(dst *[]piece, s string) {
		p := piece{s, simTok.Count(s)}
		l.maxTokens = max(l.maxTokens, p.tokens)
		*dst = append(*dst, p)
	}
	for _, w := range words {
		add(&l.plain, w+" ")
		add(&l.capital, strings.ToUpper(w[:1])+w[1:]+" ")
		add(&l.stop, w+". ")
		add(&l.comma, w+", ")
	}
	for k := 1; k <= 3; k++ {
		for _, p := range l.plain {
			if p.tokens <= k {
				l.small[k] = append(l.small[k], p)
			}
		}
	}
	return l
}

// splitmix is a small, fast generator for text.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	return mix64(uint64(*s))
}

// pick returns x reduced to [0, n).
func pick(x uint64, n int) int { return int((x & 0xffffffff) * uint64(n) >> 32) }

// appendWords appends sentences of exactly n builtin:sim tokens, drawn from
// seed, to dst. The text ends with a space, so it ends a token, and holds
// only letters, spaces, commas and full stops.
func appendWords(dst []byte, seed uint64, n int) []byte {
	r := splitmix(seed)
	l := lexicon
	sentence := true
	for n > 0 {
		x := r.next()
		var p piece
		switch {
		case n <= l.maxTokens:
			small := l.small[min(n, 3)]
			p = small[pick(x, len(small))]
		case sentence:
			p = l.capital[pick(x, len(words))]
			sentence = false
		case x>>60 == 0:
			p = l.stop[pick(x, len(words))]
			sentence = true
		case x>>60 == 1:
			p = l.comma[pick(x, len(words))]
		default:
			p = l.plain[pick(x, len(words))]
		}
		dst = append(dst, p.s...)
		n -= p.tokens
	}
	return dst
}

// text is a part of a message's content with its token count.
type text struct {
	s      string
	tokens int
	plain  bool // s needs no JSON escaping
}

// words returns a text of exactly n tokens drawn from seed.
func wordsText(seed uint64, n int) text {
	return text{string(appendWords(make([]byte, 0, n*3), seed, n)), n, true}
}

// literal returns a text of fixed wording.
func literal(s string) text {
	return text{s, simTok.Count(s), !needsEscape(s)}
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// endsToken reports whether builtin:sim ends a token after byte b.
func endsToken(b byte) bool {
	switch {
	case b <= ' ', b == 0x7f:
		return true
	case b >= 0x80:
		return false
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return false
	}
	return true
}

// contentTokens counts the tokens of parts written one after another.
func contentTokens(parts []text) int {
	n := 0
	for i, p := range parts {
		if i < len(parts)-1 && (p.s == "" || !endsToken(p.s[len(p.s)-1]) || strings.IndexByte(p.s, '<') >= 0) {
			// A token or a special token may span the join: count the whole.
			var b strings.Builder
			for _, q := range parts {
				b.WriteString(q.s)
			}
			return simTok.Count(b.String())
		}
		n += p.tokens
	}
	return n
}

// message is one chat message as the generator builds it.
type message struct {
	role    string
	content []text
	calls   []toolCall // assistant: tool calls
	callID  string     // tool: the call answered
	tokens  int        // rendered, template included; see messageTokens
}

// toolCall is an assistant's call of a tool, with the tokens the sim
// template renders for it.
type toolCall struct {
	id, name, args string // args is compact JSON
	tokens         int
}

func newToolCall(id, name, args string) toolCall {
	nameJSON, _ := json.Marshal(name)
	rendered := simtok.ToolCall + `{"name":` + string(nameJSON) + `,"arguments":` + args + "}" + simtok.ToolCallEnd
	return toolCall{id, name, args, simTok.Count(rendered)}
}

// newMessage builds a message and counts its rendered tokens:
// "<|im_start|>" role "\n" content calls "<|im_end|>" "\n". Special tokens
// end the text before them, so the parts count separately.
func newMessage(role string, content ...text) message {
	m := message{role: role, content: content}
	m.tokens = 1 + simTok.Count(role+"\n") + contentTokens(content) + 2
	return m
}

func (m message) withCalls(calls ...toolCall) message {
	m.calls = calls
	for _, c := range calls {
		m.tokens += c.tokens
	}
	return m
}

// generationPromptTokens counts "<|im_start|>assistant\n".
var generationPromptTokens = 1 + simTok.Count("assistant\n")

// toolsTokens counts the rendered tools block of compact tool JSON.
func toolsTokens(tools []string) int {
	if len(tools) == 0 {
		return 0
	}
	var b strings.Builder
	b.WriteString(simtok.IMStart + "system\n# Tools\n")
	for _, t := range tools {
		b.WriteString(t)
		b.WriteByte('\n')
	}
	b.WriteString(simtok.IMEnd + "\n")
	return simTok.Count(b.String())
}

// chat is a chat request being built.
type chat struct {
	model      string
	tools      []string // compact JSON, rendered by the tools field
	toolTokens int
	messages   []message
}

// promptTokens counts the rendered prompt with the generation prompt.
func (c *chat) promptTokens() int {
	n := c.toolTokens + generationPromptTokens
	for _, m := range c.messages {
		n += m.tokens
	}
	return n
}

// body renders the request body.
func (c *chat) body(maxTokens int) []byte {
	size := 160 + len(c.model)
	for _, t := range c.tools {
		size += len(t) + 1
	}
	for _, m := range c.messages {
		size += 40
		for _, p := range m.content {
			size += len(p.s) + len(p.s)/8
		}
		for _, tc := range m.calls {
			size += 80 + 2*len(tc.args)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, `{"model":`...)
	b = openai.AppendString(b, c.model)
	b = append(b, `,"messages":[`...)
	for i, m := range c.messages {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"role":`...)
		b = openai.AppendString(b, m.role)
		b = append(b, `,"content":"`...)
		for _, p := range m.content {
			if p.plain {
				b = append(b, p.s...)
			} else {
				b = openai.AppendEscaped(b, p.s)
			}
		}
		b = append(b, '"')
		if len(m.calls) > 0 {
			b = append(b, `,"tool_calls":[`...)
			for j, tc := range m.calls {
				if j > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"id":`...)
				b = openai.AppendString(b, tc.id)
				b = append(b, `,"type":"function","function":{"name":`...)
				b = openai.AppendString(b, tc.name)
				b = append(b, `,"arguments":`...)
				b = openai.AppendString(b, tc.args)
				b = append(b, `}}`...)
			}
			b = append(b, ']')
		}
		if m.callID != "" {
			b = append(b, `,"tool_call_id":`...)
			b = openai.AppendString(b, m.callID)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if len(c.tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i, t := range c.tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, t...)
		}
		b = append(b, ']')
	}
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(maxTokens), 10)
	b = append(b, `,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`...)
	return b
}

// quote returns s as a JSON string.
func quote(s string) string { return string(openai.AppendString(nil, s)) }

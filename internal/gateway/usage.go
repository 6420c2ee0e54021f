package gateway

import (
	"bytes"

	"github.com/inferrail/inferrail/internal/openai"
)

// usageTail keeps what a response's usage is read from as its bytes are
// relayed: its last bytes, where most often the usage sits, and the usage
// object itself wherever it sits; and whether a stream ended with [DONE].
// vLLM puts prompt_token_ids, prompt_text and prompt_logprobs after the
// usage of a whole answer (return_token_ids, common in RL frameworks),
// often more than the tail holds.
type usageTail struct {
	buf   [usageTailBytes]byte
	n     int
	usage usageCapture
	// done follows the whole stream, not the tail: keep-alive comments
	// after [DONE] may run past any tail.
	done openai.DoneWatch
}

const usageTailBytes = 1024

func (u *usageTail) write(p []byte) {
	u.usage.write(p)
	u.done.Write(p)
	if len(p) >= usageTailBytes {
		u.n = copy(u.buf[:], p[len(p)-usageTailBytes:])
		return
	}
	if keep := usageTailBytes - len(p); u.n > keep {
		copy(u.buf[:], u.buf[u.n-keep:u.n])
		u.n = keep
	}
	u.n += copy(u.buf[u.n:], p)
}

// endsWithDone reports whether the event stream written ended with [DONE].
func (u *usageTail) endsWithDone() bool { return u.done.Done() }

// cachedTokens finds the engine's usage.prompt_tokens_details.cached_tokens.
// False when there is none (the engine does not report it, or reports
// null).
func (u *usageTail) cachedTokens() (int, bool) { return u.number(`"cached_tokens":`) }

// number finds the last key followed by a number of at most nine digits
// in the last whole usage object, or in the tail when none was captured.
func (u *usageTail) number(key string) (int, bool) {
	b := u.usage.object()
	if b == nil {
		b = u.buf[:u.n]
	}
	i := bytes.LastIndex(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	b = bytes.TrimLeft(b[i+len(key):], " ")
	n, digits := 0, 0
	for ; digits < len(b) && digits < 10 && b[digits] >= '0' && b[digits] <= '9'; digits++ {
		n = n*10 + int(b[digits]-'0')
	}
	if digits == 0 || digits == 10 {
		return 0, false
	}
	return n, true
}

// usageKey is the key a usage object follows. Raw, it is always a key: a
// quote inside a JSON string is escaped.
var usageKey = []byte(`"usage":`)

// usageObjectBytes bounds a captured usage object; vLLM's, with
// prompt_tokens_details, is under 200 bytes.
const usageObjectBytes = 512

// usageCapture keeps the last usage object of the bytes written to it,
// however they are split into writes. It finds the key with bytes.Index
// and reads only the object's own bytes one by one. A later object
// replaces an earlier one (continuous usage stats, a stream's final usage
// chunk); a null or other value does not. An object over
// usageObjectBytes, or cut off, leaves none.
type usageCapture struct {
	state   uint8
	carry   [len(`"usage":`) - 1]byte // the last bytes sought, where a key may begin
	carried int
	obj     [usageObjectBytes]byte // the object being read, or the last whole one
	n       int
	whole   bool // obj[:n] is a whole object
	depth   int  // of braces, while reading one
	inStr   bool // within a string, while reading one
	escaped bool // after a backslash within a string
}

// States of a usageCapture.
const (
	seekingKey   uint8 = iota
	seekingValue       // after the key, before its value
	readingObject
)

func (c *usageCapture) write(p []byte) {
	for len(p) > 0 {
		switch c.state {
		case seekingKey:
			p = c.seekKey(p)
		case seekingValue:
			p = c.seekValue(p)
		default:
			p = c.read(p)
		}
	}
}

// object returns the last whole usage object, or nil.
func (c *usageCapture) object() []byte {
	if !c.whole {
		return nil
	}
	return c.obj[:c.n]
}

// seekKey looks for the key in p and in what the last writes ended with,
// and returns what follows it; nil when p has none.
func (c *usageCapture) seekKey(p []byte) []byte {
	// A key that begins in the carry ends in p's first bytes: shorter than
	// the key each, neither holds one alone.
	var b [2 * len(c.carry)]byte
	k := copy(b[:], c.carry[:c.carried])
	n := k + copy(b[k:], p[:min(len(p), len(c.carry))])
	if i := bytes.Index(b[:n], usageKey); i >= 0 {
		c.state, c.carried = seekingValue, 0
		return p[i+len(usageKey)-k:]
	}
	if i := bytes.Index(p, usageKey); i >= 0 {
		c.state, c.carried = seekingValue, 0
		return p[i+len(usageKey):]
	}
	last := p
	if len(p) < len(c.carry) {
		last = b[:n]
	}
	c.carried = copy(c.carry[:], last[max(len(last)-len(c.carry), 0):])
	return nil
}

// seekValue skips the white space after the key and starts reading its
// value when it is an object.
func (c *usageCapture) seekValue(p []byte) []byte {
	i := 0
	for i < len(p) && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n') {
		i++
	}
	switch {
	case i == len(p):
		return nil
	case p[i] == '{':
		c.state, c.n, c.whole, c.depth, c.inStr, c.escaped = readingObject, 0, false, 0, false, false
	default: // null: the last object stands
		c.state = seekingKey
	}
	return p[i:]
}

// read copies the object's bytes up to its closing brace and returns what
// follows it.
func (c *usageCapture) read(p []byte) []byte {
	for i, ch := range p {
		if c.n == len(c.obj) { // too long to be usage as engines send it
			c.state, c.n = seekingKey, 0
			return p[i:]
		}
		c.obj[c.n] = ch
		c.n++
		switch {
		case c.escaped:
			c.escaped = false
		case c.inStr:
			c.escaped = ch == '\\'
			c.inStr = ch != '"'
		case ch == '"':
			c.inStr = true
		case ch == '{':
			c.depth++
		case ch == '}':
			if c.depth--; c.depth == 0 {
				c.state, c.whole = seekingKey, true
				return p[i+1:]
			}
		}
	}
	return nil
}

// answered learns from a served answer to a request with a prediction:
// the cached tokens its usage reports check the prediction, and the
// blocks the engine stored for the prompt, if their events came, may
// reveal a prefix the replica's mirror never saw stored (index.Reveal).
func (g *Gateway) answered(ex *exchange, a *attempt, tail *usageTail) {
	id := a.lease.Replica().ID
	if cached, ok := tail.cachedTokens(); ok {
		g.drift.observe(id, a.cached, cached)
	}
	g.reveal(id, ex.pred)
}

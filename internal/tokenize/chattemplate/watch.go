package chattemplate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/ardanlabs/jinja"

	"github.com/inferrail/inferrail/internal/tokenize"
	"github.com/inferrail/inferrail/internal/tokenize/hf"
)

// The template engine renders a template in one call that takes no stop
// signal and sets no bound on what it writes. So the renderer compiles an
// instrumented copy of each template (instrument): the body of every for
// loop starts by calling tickName, and every {{ expression }} passes its
// value through emitName. Both are callables of one rendering's watch,
// which keeps the count of what was written and fails the rendering once
// it is told to stop or the output outgrows its bound. The body of every
// macro also starts by calling enterName and ends by calling leaveName,
// so that a macro calling itself without end fails the rendering at
// maxMacroDepth: the engine sets no bound, and its stack would grow until
// the Go runtime ends the process. The instrumented template renders the
// same text: the calls print nothing, and they are written as tags whose
// whitespace control trims nothing.

// ErrStopped is a rendering, or the encoding after it, that gave up because
// its caller stopped waiting (the stop of ChatIDsUntil or RenderUntil). It
// matches hf.ErrStopped: the gateway counts both as a prompt it could not
// tokenize in time.
var ErrStopped = fmt.Errorf("chat template: rendering stopped: %w", hf.ErrStopped)

// DefaultMaxOutput is the bound on a rendered prompt when Options.MaxOutput
// is 0: twice the gateway's default body limit. Text that long would take
// seconds to tokenize, far past any tokenizer.max_wait.
const DefaultMaxOutput = 64 << 20

// The names of the watch's callables in an instrumented template.
const (
	tickName  = "__inferrail_tick"
	emitName  = "__inferrail_emit"
	enterName = "__inferrail_enter"
	leaveName = "__inferrail_leave"
)

// maxMacroDepth is how deeply macro calls may nest. Jinja2 under
// transformers raises RecursionError near 200 levels of the simplest
// recursive macro (Python's limit is 1,000 frames, and a macro call takes
// several), so no template Python renders comes near it.
const maxMacroDepth = 256

// errWatch is what the watch's callables fail a rendering with; the
// renderer reads why from the watch, whatever the engine wraps it in.
var errWatch = errors.New("rendering cut short")

// stopEvery is how many messages the conversation is built between looks
// at the stop signal.
const stopEvery = 256

// watch is one rendering's stop signal and output bound. Not safe for
// concurrent use: one rendering calls it.
type watch struct {
	stop   func() bool // reports whether the caller stopped waiting; nil never stops
	budget int         // bytes the output may still grow by
	checks int         // looks at stop so far, for tests

	depth int // macro calls now running

	stopped  bool // a look at stop found it set
	tooLarge bool // the output outgrew the bound
	tooDeep  bool // macro calls nested past maxMacroDepth
}

func newWatch(stop *atomic.Bool, maxOutput int) *watch {
	w := &watch{budget: maxOutput}
	if stop != nil {
		w.stop = stop.Load
	}
	return w
}

// stopping looks at the stop signal.
func (w *watch) stopping() bool {
	w.checks++
	if w.stop != nil && w.stop() {
		w.stopped = true
	}
	return w.stopped
}

// spend counts n more bytes of output and looks at the stop signal.
func (w *watch) spend(n int) error {
	w.budget -= n
	switch {
	case w.stopping():
		return errWatch
	case w.budget < 0:
		w.tooLarge = true
		return errWatch
	}
	return nil
}

// err is why the rendering was cut short, or nil if the watch did not cut
// it.
func (w *watch) err() error {
	switch {
	case w.stopped:
		return ErrStopped
	case w.tooLarge:
		return unsupported(tokenize.ReasonSize)
	case w.tooDeep:
		return &Error{Err: fmt.Errorf("macro calls or recursive loops nested deeper than %d levels (Jinja2 raises RecursionError sooner)", maxMacroDepth)}
	}
	return nil
}

// enter is enterName(): a macro's body starts. A macro that calls itself
// without end writes nothing the output bound would see, so the stop
// signal is looked at here too.
func (w *watch) enter([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	w.depth++
	if w.depth > maxMacroDepth {
		w.tooDeep = true
		return jinja.Undefined(), errWatch
	}
	if w.stopping() {
		return jinja.Undefined(), errWatch
	}
	return jinja.NewBool(false), nil
}

// leave is leaveName(): a macro's body ends.
func (w *watch) leave([]jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	w.depth--
	return jinja.NewBool(false), nil
}

// tick is tickName(n, depth): a for loop's body starts, adding up to n
// bytes of the template's own text to the output, at depth (loop.depth,
// above 1 in a recursive loop's loop() calls).
func (w *watch) tick(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	n := 0
	if len(args) >= 1 && args[0].IsInt() {
		n = int(args[0].AsInt())
	}
	// A recursive loop calling loop() without end, as a macro calling
	// itself, would grow the engine's stack until the process ends.
	if len(args) == 2 && args[1].IsInt() && args[1].AsInt() > maxMacroDepth {
		w.tooDeep = true
		return jinja.Undefined(), errWatch
	}
	if err := w.spend(n); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewBool(false), nil
}

// emit is emitName(v): v is about to be printed, and emit gives what to
// print.
func (w *watch) emit(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) != 1 {
		return jinja.Undefined(), fmt.Errorf("%s takes one value, got %d", emitName, len(args))
	}
	v := args[0]
	if v.IsList() || v.IsDict() {
		// Printed as Python prints it: the engine's repr leaves
		// non-printable characters such as U+200B unescaped.
		v = jinja.NewString(pyStr(v))
	}
	if err := w.spend(printedSize(v)); err != nil {
		return jinja.Undefined(), err
	}
	return v, nil
}

// printedSize is the length of v as the engine prints it.
func printedSize(v jinja.Value) int {
	switch {
	case v.IsString():
		return len(v.AsString())
	case v.IsUndefined(), v.IsCallable():
		return 0
	}
	return len(v.String())
}

// vars adds the watch's callables to a rendering's variables.
func (w *watch) vars(vars map[string]jinja.Value) {
	vars[tickName] = jinja.NewCallable(tickName, w.tick)
	vars[emitName] = jinja.NewCallable(emitName, w.emit)
	vars[enterName] = jinja.NewCallable(enterName, w.enter)
	vars[leaveName] = jinja.NewCallable(leaveName, w.leave)
}

// tagSpan is one tag of a template: src[start:end] in all, its content
// src[in:out] (inside the delimiters and their whitespace flags).
type tagSpan struct {
	kind       byte // '{' an expression, '%' a statement, '#' a comment
	start, end int
	in, out    int
}

// word is the first word of a statement tag's content.
func (t tagSpan) word(src string) string {
	s := strings.TrimLeft(src[t.in:t.out], " \t\r\n")
	n := 0
	for n < len(s) && isNameByte(s[n]) {
		n++
	}
	return s[:n]
}

func isNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// templateTags splits a template into its tags as the template engine's
// scanner does: a tag runs to the first closer outside quotes and brackets,
// and between {% raw %} and {% endraw %} nothing is a tag. It reports false
// for a tag without its closer.
func templateTags(src string) ([]tagSpan, bool) {
	var tags []tagSpan
	raw := false
	for i := 0; i+1 < len(src); {
		if src[i] != '{' || (src[i+1] != '{' && src[i+1] != '%' && src[i+1] != '#') {
			i++
			continue
		}
		if raw {
			// Only an endraw tag ends a raw block, found by the first
			// closer whatever the quotes.
			end := -1
			if src[i+1] == '%' {
				end = strings.Index(src[i+2:], "%}")
			}
			if end < 0 || strings.TrimSpace(strings.Trim(strings.TrimSpace(src[i+2:i+2+end]), "-+")) != "endraw" {
				i++
				continue
			}
			raw = false
		}
		t, ok := scanTag(src, i)
		if !ok {
			return nil, false
		}
		tags = append(tags, t)
		if t.kind == '%' && strings.TrimSpace(src[t.in:t.out]) == "raw" {
			raw = true
		}
		i = t.end
	}
	return tags, true
}

// scanTag reads the tag opening at src[i].
func scanTag(src string, i int) (tagSpan, bool) {
	t := tagSpan{kind: src[i+1], start: i}
	closer := "}}"
	switch t.kind {
	case '%':
		closer = "%}"
	case '#':
		closer = "#}"
	}
	p := i + 2
	if p < len(src) && (src[p] == '-' || src[p] == '+') {
		p++
	}
	t.in = p
	depth := 0
	for p < len(src) {
		c := src[p]
		if t.kind != '#' && (c == '\'' || c == '"') {
			p++
			for p < len(src) && src[p] != c {
				if src[p] == '\\' && p+1 < len(src) {
					p++
				}
				p++
			}
			if p < len(src) {
				p++
			}
			continue
		}
		if depth == 0 && (c == '-' || c == '+') && p+2 < len(src) && src[p+1] == closer[0] && src[p+2] == closer[1] {
			t.out, t.end = p, p+3
			return t, true
		}
		if depth == 0 && p+1 < len(src) && c == closer[0] && src[p+1] == closer[1] {
			t.out, t.end = p, p+2
			return t, true
		}
		if t.kind != '#' {
			switch c {
			case '(', '[', '{':
				depth++
			case ')', ']', '}':
				depth--
			}
		}
		p++
	}
	return t, false
}

// instrument returns src with a tick at the start of each for loop's body
// and each expression's value passed through emit (see watch), or false
// when its tags cannot be found. An expression that is empty, or has a
// comma at its top level (a tuple), is left as it is.
//
// A tick is the tags {%+ if tick(n) +%}{%+ endif %}, the last closed as the
// for tag is: whitespace control, like Jinja2's, reaches only the text
// right next to a tag, so the text the for tag trimmed now follows the
// endif, which must trim it the same way (all of its leading whitespace
// with -%}, one newline by trim_blocks with %}, none with +%}). The other
// sides trim nothing. n is the length of the template text directly in
// the loop's body (nested loops count their own), an upper bound of what
// an iteration writes besides its expressions. A macro's body starts with
// enter, written as a tick is, and ends with {%L if leave() +%}{%+ endif
// +%}, which takes the left marker L of the endmacro that follows it.
func instrument(src string) (string, bool) {
	tags, ok := templateTags(src)
	if !ok {
		return "", false
	}
	bodyText := make(map[int]int) // index of a for tag → its body's text
	var open []int                // for tags not yet closed, innermost last
	prev := 0
	for k, t := range tags {
		if len(open) > 0 {
			bodyText[open[len(open)-1]] += t.start - prev
		}
		prev = t.end
		if t.kind != '%' {
			continue
		}
		switch t.word(src) {
		case "for":
			open = append(open, k)
		case "endfor":
			if len(open) > 0 { // the engine has the last word on a stray one
				open = open[:len(open)-1]
			}
		}
	}
	var b strings.Builder
	b.Grow(len(src) + 64*len(tags))
	prev = 0
	for k, t := range tags {
		switch {
		case t.kind == '%' && t.word(src) == "for":
			b.WriteString(src[prev:t.end])
			b.WriteString("{%+ if " + tickName + "(" + strconv.Itoa(bodyText[k]) + ", loop.depth) +%}{%+ endif " + src[t.out:t.end])
		case t.kind == '%' && (t.word(src) == "macro" || t.word(src) == "call"):
			// A call block's body is a macro too: caller() runs it.
			b.WriteString(src[prev:t.end])
			b.WriteString("{%+ if " + enterName + "() +%}{%+ endif " + src[t.out:t.end])
		case t.kind == '%' && (t.word(src) == "endmacro" || t.word(src) == "endcall"):
			// The leave trims the text before it as the endmacro did;
			// the endmacro, now right after a tag, keeps its right
			// marker for the text after it.
			b.WriteString(src[prev:t.start])
			b.WriteString("{%" + src[t.start+2:t.in] + " if " + leaveName + "() +%}{%+ endif +%}{%+" + src[t.in:t.end])
		case t.kind == '{' && wrappable(src[t.in:t.out]):
			b.WriteString(src[prev:t.in])
			b.WriteString(" " + emitName + "(")
			b.WriteString(src[t.in:t.out])
			b.WriteString(") ")
			b.WriteString(src[t.out:t.end])
		default:
			b.WriteString(src[prev:t.end])
		}
		prev = t.end
	}
	b.WriteString(src[prev:])
	return b.String(), true
}

// wrappable reports whether an expression can be passed to emit as it is
// written: it lexes, is not empty (the engine prints an empty one as None)
// and has no comma outside brackets and strings.
func wrappable(expr string) bool {
	toks, _, err := lexTag(expr+"}}", false)
	return err == nil && len(toks) > 0 && !hasTopLevel(toks, ",")
}

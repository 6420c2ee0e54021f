package chattemplate

import (
	"errors"
	"regexp"
	"slices"
	"strings"
)

// Content formats of chat messages, as vLLM's --chat-template-content-format
// names them.
const (
	// FormatAuto detects the format from the template (DetectContentFormat).
	FormatAuto = "auto"
	// FormatString gives each message's content as one string, text parts
	// joined with "\n".
	FormatString = "string"
	// FormatOpenAI gives content as a list of {"type": "text", "text": …}
	// parts, a plain string content becoming one part.
	FormatOpenAI = "openai"
)

// DetectContentFormat is vLLM's auto-detection of a chat template's content
// format: FormatOpenAI when the template loops over a message's content
// ({% for part in message['content'] %}, where message is a loop variable
// over messages or over a variable assigned from it, or a loop over a
// variable named content), else FormatString. Like vLLM, it returns
// FormatString for templates it cannot parse and for shapes its analysis
// refuses (a tuple or attribute target assigned from messages).
func DetectContentFormat(template string) string {
	stmts, err := templateStatements(template)
	if err != nil {
		return FormatString
	}
	if found, err := loopsOverContent(stmts); err == nil && found {
		return FormatOpenAI
	}
	return FormatString
}

// errShape is the analysis giving up, as vLLM's assertions do.
var errShape = errors.New("unsupported template shape")

// loopsOverContent follows vLLM's _iter_nodes_assign_content_item.
func loopsOverContent(stmts []stmt) (bool, error) {
	// Names assigned, transitively, from messages (slices and filters of
	// it included), breadth first as vLLM does. Each name is followed
	// once: Llama 3.x templates reassign messages from itself, and a
	// cycle of names would otherwise grow the list forever.
	msgs := []string{"messages"}
	for i := 0; i < len(msgs); i++ {
		for _, s := range stmts {
			if s.kind != stmtSet || !elemsAccess(s.expr, msgs[i], "") {
				continue
			}
			if s.target == "" {
				return false, errShape
			}
			if !slices.Contains(msgs, s.target) {
				msgs = append(msgs, s.target)
			}
		}
	}
	// Loop variables over those.
	var items []string
	for _, s := range stmts {
		if s.kind != stmtFor {
			continue
		}
		for _, m := range msgs {
			if elemsAccess(s.expr, m, "") {
				if s.target == "" {
					return false, errShape
				}
				items = append(items, s.target)
				break
			}
		}
	}
	// A loop over an item's content, or over a variable named content.
	for _, s := range stmts {
		if s.kind != stmtFor {
			continue
		}
		for _, m := range items {
			if elemsAccess(s.expr, m, "content") {
				if s.target == "" {
					return false, errShape
				}
				return true, nil
			}
		}
		if len(s.expr) == 1 && s.expr[0].kind == tokName && s.expr[0].text == "content" {
			if s.target == "" {
				return false, errShape
			}
			return true, nil
		}
	}
	return false, nil
}

// elemsAccess reports whether expr is the variable name (or, with key, its
// attribute or item key), then any mix of slices, filters and tests: vLLM's
// _is_var_or_elems_access.
func elemsAccess(expr []jtok, name, key string) bool {
	if len(expr) == 0 || expr[0].kind != tokName || expr[0].text != name {
		return false
	}
	rest := expr[1:]
	if key != "" {
		switch {
		case len(rest) >= 2 && rest[0].is(".") && rest[1].kind == tokName && rest[1].text == key:
			rest = rest[2:]
		case len(rest) >= 3 && rest[0].is("[") && rest[1].kind == tokString && rest[1].text == key && rest[2].is("]"):
			rest = rest[3:]
		default:
			return false
		}
	}
	// Slices bind first (postfix), then filters and tests.
	for len(rest) > 0 && rest[0].is("[") {
		end := closing(rest, 0)
		if end < 0 || !hasTopLevel(rest[1:end], ":") {
			return false
		}
		rest = rest[end+1:]
	}
	for len(rest) > 0 {
		switch {
		case rest[0].is("|"):
			n := dottedName(rest, 1)
			if n < 0 {
				return false
			}
			rest = rest[n:]
			if len(rest) > 0 && rest[0].is("(") {
				end := closing(rest, 0)
				if end < 0 {
					return false
				}
				rest = rest[end+1:]
			}
		case rest[0].kind == tokName && rest[0].text == "is":
			if len(rest) > 1 && rest[1].kind == tokName && rest[1].text == "not" {
				return false // the test is wrapped in a Not node
			}
			n := dottedName(rest, 1)
			if n < 0 {
				return false
			}
			rest = rest[n:]
			if len(rest) == 0 {
				break
			}
			if rest[0].is("(") {
				end := closing(rest, 0)
				if end < 0 {
					return false
				}
				rest = rest[end+1:]
			} else if m := testArgument(rest); m > 0 {
				rest = rest[m:]
			}
		default:
			return false
		}
	}
	return true
}

// dottedName returns the index after a (dotted) name starting at toks[i],
// or -1.
func dottedName(toks []jtok, i int) int {
	if i >= len(toks) || toks[i].kind != tokName {
		return -1
	}
	i++
	for i+1 < len(toks) && toks[i].is(".") && toks[i+1].kind == tokName {
		i += 2
	}
	return i
}

// testArgument is the length of a test's single argument written without
// parentheses (x is divisibleby 3): a primary and its postfix operators.
func testArgument(toks []jtok) int {
	t := toks[0]
	switch {
	case t.kind == tokName && (t.text == "else" || t.text == "or" || t.text == "and" || t.text == "is"):
		return 0
	case t.kind == tokName || t.kind == tokString || t.kind == tokNumber:
	case t.is("(") || t.is("[") || t.is("{"):
		end := closing(toks, 0)
		if end < 0 {
			return 0
		}
		return postfixEnd(toks, end+1)
	default:
		return 0
	}
	return postfixEnd(toks, 1)
}

func postfixEnd(toks []jtok, i int) int {
	for i < len(toks) {
		switch {
		case toks[i].is(".") && i+1 < len(toks) && (toks[i+1].kind == tokName || toks[i+1].kind == tokNumber):
			i += 2
		case toks[i].is("[") || toks[i].is("("):
			end := closing(toks, i)
			if end < 0 {
				return i
			}
			i = end + 1
		default:
			return i
		}
	}
	return i
}

// closing returns the index of the bracket closing toks[open], or -1.
func closing(toks []jtok, open int) int {
	depth := 0
	for i := open; i < len(toks); i++ {
		if toks[i].kind != tokOp {
			continue
		}
		switch toks[i].text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func hasTopLevel(toks []jtok, op string) bool {
	depth := 0
	for _, t := range toks {
		if t.kind != tokOp {
			continue
		}
		switch t.text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
		case op:
			if depth == 0 {
				return true
			}
		}
	}
	return false
}

// stmt is a {% for %} or {% set x = … %} statement of a template: all the
// content-format analysis looks at.
type stmt struct {
	kind   int
	target string // the single name assigned or looped over; "" for other targets
	expr   []jtok // the loop's iterable, or the assigned expression
}

const (
	stmtFor = iota + 1
	stmtSet
)

type jtok struct {
	kind int
	text string // a string token's decoded value
}

const (
	tokName = iota + 1
	tokString
	tokNumber
	tokOp
)

func (t jtok) is(op string) bool { return t.kind == tokOp && t.text == op }

var (
	reName   = regexp.MustCompile(`^[\pL_][\pL\pN_]*`)
	reNumber = regexp.MustCompile(`^(?:\d+(?:_\d+)*(?:\.\d+(?:_\d+)*)?(?:[eE][+-]?\d+(?:_\d+)*)?)`)
	reRaw    = regexp.MustCompile(`^\{%[-+]?\s*raw\s*[-+]?%\}`)
	reEndRaw = regexp.MustCompile(`\{%[-+]?\s*endraw\s*[-+]?%\}`)
)

// jinjaOps are Jinja's operators, longest first.
var jinjaOps = []string{"**", "//", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

var errSyntax = errors.New("template syntax")

// templateStatements lexes a template with Jinja's default delimiters and
// returns its for and set statements in document order.
func templateStatements(src string) ([]stmt, error) {
	var out []stmt
	err := lexTemplate(src, func(toks []jtok, block bool) {
		if block {
			if s, ok := parseStmt(toks); ok {
				out = append(out, s)
			}
		}
	})
	return out, err
}

// lexTemplate calls tag with the tokens of each {{ }} and {% %} tag, in
// order, skipping comments and raw blocks.
func lexTemplate(src string, tag func(toks []jtok, block bool)) error {
	for {
		i := strings.IndexByte(src, '{')
		if i < 0 {
			return nil
		}
		src = src[i:]
		switch {
		case strings.HasPrefix(src, "{#"):
			end := strings.Index(src[2:], "#}")
			if end < 0 {
				return errSyntax
			}
			src = src[2+end+2:]
		case reRaw.MatchString(src):
			loc := reEndRaw.FindStringIndex(src)
			if loc == nil {
				return errSyntax
			}
			src = src[loc[1]:]
		case strings.HasPrefix(src, "{{"), strings.HasPrefix(src, "{%"):
			block := src[1] == '%'
			toks, rest, err := lexTag(src[2:], block)
			if err != nil {
				return err
			}
			src = rest
			tag(toks, block)
		default:
			src = src[1:]
		}
	}
}

// lexTag tokenizes the inside of a tag up to its closing delimiter and
// returns the tokens and the text after the tag.
func lexTag(src string, block bool) ([]jtok, string, error) {
	closer := "}}"
	if block {
		closer = "%}"
	}
	var toks []jtok
	if len(src) > 0 && (src[0] == '-' || src[0] == '+') {
		src = src[1:]
	}
	for {
		src = strings.TrimLeft(src, " \t\n\r\f\v")
		if src == "" {
			return nil, "", errSyntax
		}
		if strings.HasPrefix(src, closer) {
			return toks, src[2:], nil
		}
		if (src[0] == '-' || src[0] == '+') && strings.HasPrefix(src[1:], closer) {
			return toks, src[3:], nil
		}
		switch c := src[0]; {
		case c == '\'' || c == '"':
			s, n, ok := lexString(src)
			if !ok {
				return nil, "", errSyntax
			}
			toks = append(toks, jtok{kind: tokString, text: s})
			src = src[n:]
		case c >= '0' && c <= '9':
			m := reNumber.FindString(src)
			toks = append(toks, jtok{kind: tokNumber, text: m})
			src = src[len(m):]
		default:
			if m := reName.FindString(src); m != "" {
				toks = append(toks, jtok{kind: tokName, text: m})
				src = src[len(m):]
				continue
			}
			matched := false
			for _, op := range jinjaOps {
				if strings.HasPrefix(src, op) {
					toks = append(toks, jtok{kind: tokOp, text: op})
					src = src[len(op):]
					matched = true
					break
				}
			}
			if !matched {
				return nil, "", errSyntax
			}
		}
	}
}

// lexString reads a quoted string literal, decoding the escapes that matter
// for comparing keys.
func lexString(src string) (string, int, bool) {
	q := src[0]
	var b strings.Builder
	for i := 1; i < len(src); i++ {
		switch c := src[i]; c {
		case q:
			return b.String(), i + 1, true
		case '\\':
			if i+1 >= len(src) {
				return "", 0, false
			}
			i++
			switch e := src[i]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '\\', '\'', '"':
				b.WriteByte(e)
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, false
}

// parseStmt recognizes {% for target in iter [if …] [recursive] %} and
// {% set target = expr %}.
func parseStmt(toks []jtok) (stmt, bool) {
	if len(toks) == 0 || toks[0].kind != tokName {
		return stmt{}, false
	}
	switch toks[0].text {
	case "for":
		in := -1
		depth := 0
		for i := 1; i < len(toks); i++ {
			if toks[i].is("(") || toks[i].is("[") {
				depth++
			} else if toks[i].is(")") || toks[i].is("]") {
				depth--
			}
			if depth == 0 && toks[i].kind == tokName && toks[i].text == "in" {
				in = i
				break
			}
		}
		if in < 2 {
			return stmt{}, false
		}
		s := stmt{kind: stmtFor}
		if in == 2 && toks[1].kind == tokName {
			s.target = toks[1].text
		}
		expr := toks[in+1:]
		depth = 0
		for i, t := range expr {
			if t.is("(") || t.is("[") || t.is("{") {
				depth++
			} else if t.is(")") || t.is("]") || t.is("}") {
				depth--
			}
			if depth == 0 && t.kind == tokName && (t.text == "if" || t.text == "recursive") {
				expr = expr[:i]
				break
			}
		}
		s.expr = expr
		return s, true
	case "set":
		eq := -1
		for i := 1; i < len(toks); i++ {
			if toks[i].is("=") {
				eq = i
				break
			}
		}
		if eq < 2 {
			return stmt{}, false // a block set: {% set x %}…{% endset %}
		}
		s := stmt{kind: stmtSet, expr: toks[eq+1:]}
		if eq == 2 && toks[1].kind == tokName {
			s.target = toks[1].text
		}
		return s, true
	}
	return stmt{}, false
}

package chattemplate

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// formatCallable is formatFilter as a template value, made once: it holds
// no state of a rendering.
var formatCallable = jinja.NewCallable("format", formatFilter)

// formatFilter is Jinja2's format filter, which the template engine lacks:
// value % args, or value % kwargs, with Python's printf-style formatting
// (vLLM's pythonic tool templates print arguments with "%s" | format(v)).
func formatFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("format: no string to format")
	}
	if len(args) > 1 && len(kwargs) > 0 {
		return jinja.Undefined(), errors.New("format: can't handle positional and keyword arguments at the same time")
	}
	named := jinja.Undefined()
	if len(kwargs) > 0 {
		named = jinja.NewDict()
		for _, k := range slices.Sorted(maps.Keys(kwargs)) { // the engine does not keep their order
			named.AsDict().Set(k, kwargs[k])
		}
	}
	s, err := pyPercent(pyStr(args[0]), args[1:], named)
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(s), nil
}

// pyPercent is Python's format % args (format % named when named is a
// dict): conversions s r a d i u f F e E g G x X o c and %%, each with a
// mapping key, flags, width and precision ("*" taking them from args).
// Its errors are Python's TypeError and ValueError messages.
func pyPercent(format string, args []jinja.Value, named jinja.Value) (string, error) {
	var b strings.Builder
	next := 0
	take := func() (jinja.Value, error) {
		if next >= len(args) {
			return jinja.Value{}, errors.New("not enough arguments for format string")
		}
		next++
		return args[next-1], nil
	}
	for i := 0; i < len(format); {
		if format[i] != '%' {
			j := strings.IndexByte(format[i:], '%')
			if j < 0 {
				j = len(format) - i
			}
			b.WriteString(format[i : i+j])
			i += j
			continue
		}
		i++
		open := i // just past the "%"
		var arg jinja.Value
		keyed := false
		if i < len(format) && format[i] == '(' {
			depth, j := 1, i+1
			for ; j < len(format) && depth > 0; j++ {
				switch format[j] {
				case '(':
					depth++
				case ')':
					depth--
				}
			}
			if depth > 0 {
				return "", errors.New("incomplete format key")
			}
			if !named.IsDict() {
				return "", errors.New("format requires a mapping")
			}
			key := format[i+1 : j-1]
			v, ok := named.AsDict().Get(key)
			if !ok {
				return "", fmt.Errorf("KeyError: %q", key)
			}
			arg, keyed, i = v, true, j
		}
		var spec pySpec
		var err error
		if spec, i, err = pySpecAt(format, i, take); err != nil {
			return "", err
		}
		if i >= len(format) {
			return "", errors.New("incomplete format")
		}
		verb := format[i]
		i++
		if verb == '%' && i-1 == open {
			b.WriteByte('%')
			continue
		}
		if verb == '%' {
			// With anything between, Python takes "%" for a conversion:
			// it wants an argument, then refuses the character.
			if _, err := take(); !keyed && !named.IsDict() && err != nil {
				return "", err
			}
			return "", fmt.Errorf("unsupported format character '%%' (0x25) at index %d", i-1)
		}
		switch {
		case keyed:
		case named.IsDict():
			arg = named // the mapping itself, as Python formats it
		default:
			if arg, err = take(); err != nil {
				return "", err
			}
		}
		s, err := spec.convert(verb, arg, i-1)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
	}
	if !named.IsDict() && next < len(args) {
		return "", errors.New("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// pySpecAt reads a conversion's flags, width, precision and length
// modifier (ignored, as Python ignores it) at format[i], up to its verb.
func pySpecAt(format string, i int, take func() (jinja.Value, error)) (pySpec, int, error) {
	var spec pySpec
	for ; i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0; i++ {
		spec.flags += format[i : i+1]
	}
	var err error
	if spec.width, i, err = pyCount(format, i, take); err != nil {
		return spec, i, err
	}
	if spec.width < 0 && spec.width != noCount {
		// A negative * width left-justifies to its size, as in C.
		spec.flags, spec.width = spec.flags+"-", -spec.width
	}
	spec.prec = -1
	if i < len(format) && format[i] == '.' {
		if spec.prec, i, err = pyCount(format, i+1, take); err != nil {
			return spec, i, err
		}
		spec.prec = max(spec.prec, 0)
	}
	for i < len(format) && strings.IndexByte("hlL", format[i]) >= 0 {
		i++
	}
	return spec, i, nil
}

// noCount is pyCount's width or precision when the format gives none.
const noCount = math.MinInt32

// pyCount reads a width or precision at format[i]: digits, "*" (taking
// an integer argument, negative ones too), or nothing (noCount).
func pyCount(format string, i int, take func() (jinja.Value, error)) (int, int, error) {
	if i < len(format) && format[i] == '*' {
		v, err := take()
		if err != nil {
			return 0, i, err
		}
		if !v.IsInt() {
			return 0, i, errors.New("* wants int")
		}
		if n := v.AsInt(); n > 1<<20 || n < -1<<20 {
			return 0, i, errors.New("width too big") // a rendering bounded as digits are
		}
		return int(v.AsInt()), i + 1, nil
	}
	j := i
	for j < len(format) && format[j] >= '0' && format[j] <= '9' {
		j++
	}
	if j == i {
		return noCount, i, nil
	}
	n, err := strconv.Atoi(format[i:j])
	if err != nil || n > 1<<20 {
		return 0, j, errors.New("width too big")
	}
	return n, j, nil
}

// pySpec is one conversion's flags, width and precision (-1: none).
type pySpec struct {
	flags       string
	width, prec int
}

// goFormat is the fmt verb of the spec with the given flags and verb.
func (sp pySpec) goFormat(flags string, verb byte) string {
	f := "%" + flags
	if sp.width >= 0 {
		f += strconv.Itoa(sp.width)
	}
	if sp.prec >= 0 {
		f += "." + strconv.Itoa(sp.prec)
	}
	return f + string(verb)
}

// convert formats arg by verb, found at index at of the format (for
// Python's message about an unknown one).
func (sp pySpec) convert(verb byte, arg jinja.Value, at int) (string, error) {
	switch verb {
	case 's', 'r', 'a':
		s := pyStr(arg)
		if verb != 's' {
			s = pyRepr(arg, verb == 'a')
		}
		// Strings ignore "0", "+", " " and "#".
		return fmt.Sprintf(sp.goFormat(keep(sp.flags, "-"), 's'), s), nil
	case 'd', 'i', 'u':
		i, ok := pyInt(arg)
		n := big.NewInt(i)
		if !ok && arg.IsFloat() && !math.IsNaN(arg.AsFloat()) && !math.IsInf(arg.AsFloat(), 0) {
			n, _ = big.NewFloat(arg.AsFloat()).Int(nil) // int() truncates, past int64 too
			ok = true
		}
		if !ok {
			return "", fmt.Errorf("%%%c format: a real number is required, not %s", verb, pyType(arg))
		}
		return sp.based(n, verb), nil
	case 'x', 'X', 'o':
		n, ok := pyInt(arg)
		if !ok {
			return "", fmt.Errorf("%%%c format: an integer is required, not %s", verb, pyType(arg))
		}
		return sp.based(big.NewInt(n), verb), nil
	case 'f', 'F', 'e', 'E', 'g', 'G':
		n, ok := pyInt(arg)
		f := float64(n)
		switch {
		case arg.IsFloat():
			f = arg.AsFloat()
		case !ok:
			return "", fmt.Errorf("must be real number, not %s", pyType(arg))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			s := "inf"
			switch {
			case math.IsNaN(f):
				s = "nan"
			case f < 0:
				s = "-inf"
			}
			if f >= 0 || math.IsNaN(f) {
				switch {
				case strings.Contains(sp.flags, "+"):
					s = "+" + s
				case strings.Contains(sp.flags, " "):
					s = " " + s
				}
			}
			if verb == 'F' || verb == 'E' || verb == 'G' {
				s = strings.ToUpper(s)
			}
			return sp.pad(s), nil
		}
		if sp.prec < 0 {
			sp.prec = 6
		}
		return fmt.Sprintf(sp.goFormat(keep(sp.flags, "-+ 0#"), verb), f), nil
	case 'c':
		var s string
		switch {
		case arg.IsBool(): // a Python bool is an int
			s = "\x00"
			if arg.AsBool() {
				s = "\x01"
			}
		case arg.IsInt() && arg.AsInt() >= 0 && arg.AsInt() <= utf8.MaxRune:
			s = string(rune(arg.AsInt()))
		case arg.IsInt():
			return "", errors.New("%c arg not in range(0x110000)")
		case arg.IsString() && utf8.RuneCountInString(arg.AsString()) == 1:
			s = arg.AsString()
		default:
			return "", errors.New("%c requires an int or a unicode character")
		}
		return sp.pad(s), nil
	}
	return "", fmt.Errorf("unsupported format character '%c' (0x%x) at index %d", verb, verb, at)
}

// based formats n in decimal (d, i, u), hexadecimal (x, X) or octal (o)
// as Python does: the precision is the least number of digits (zero for
// zero is one digit, unlike C's), the "#" prefix (0x, 0X, 0o) counts in the
// width, and the "0" flag's zeros go after it, a precision or not.
func (sp pySpec) based(n *big.Int, verb byte) string {
	base, prefix := 10, ""
	switch verb {
	case 'x':
		base, prefix = 16, "0x"
	case 'X':
		base, prefix = 16, "0X"
	case 'o':
		base, prefix = 8, "0o"
	}
	if !strings.Contains(sp.flags, "#") {
		prefix = ""
	}
	digits := new(big.Int).Abs(n).Text(base)
	sign := ""
	switch {
	case n.Sign() < 0:
		sign = "-"
	case strings.Contains(sp.flags, "+"):
		sign = "+"
	case strings.Contains(sp.flags, " "):
		sign = " "
	}
	if verb == 'X' {
		digits = strings.ToUpper(digits)
	}
	if sp.prec > len(digits) {
		digits = strings.Repeat("0", sp.prec-len(digits)) + digits
	}
	pad := sp.width - len(sign) - len(prefix) - len(digits)
	switch {
	case pad <= 0:
		return sign + prefix + digits
	case strings.Contains(sp.flags, "-"):
		return sign + prefix + digits + strings.Repeat(" ", pad)
	case strings.Contains(sp.flags, "0"):
		return sign + prefix + strings.Repeat("0", pad) + digits
	}
	return strings.Repeat(" ", pad) + sign + prefix + digits
}

// pyInt is arg as a Python int, bools included, and whether it is one.
func pyInt(arg jinja.Value) (int64, bool) {
	switch {
	case arg.IsBool() && arg.AsBool():
		return 1, true
	case arg.IsBool():
		return 0, true
	case arg.IsInt():
		return arg.AsInt(), true
	}
	return 0, false
}

// pad is s in the spec's width (left-justified with "-"), its precision
// ignored.
func (sp pySpec) pad(s string) string {
	return fmt.Sprintf(pySpec{width: sp.width, prec: -1}.goFormat(keep(sp.flags, "-"), 's'), s)
}

// keep is the flags among allowed.
func keep(flags, allowed string) string {
	var b strings.Builder
	for i := range len(flags) {
		if strings.IndexByte(allowed, flags[i]) >= 0 {
			b.WriteByte(flags[i])
		}
	}
	return b.String()
}

// pyRepr is Python's repr() of a value (ascii() with ascii): the
// engine's own repr, which it prints list items with.
func pyRepr(v jinja.Value, ascii bool) string {
	s := jinja.NewList([]jinja.Value{v}).String()
	s = s[1 : len(s)-1] // "[item]"
	if !ascii {
		return pyPrintable(s)
	}
	var b strings.Builder
	for _, r := range s {
		if r < utf8.RuneSelf {
			b.WriteRune(r)
		} else {
			writePyEscape(&b, r)
		}
	}
	return b.String()
}

// pyPrintable escapes, in the engine's repr of a value, the characters
// Python's repr escapes beyond the ASCII controls the engine already does:
// those str.isprintable calls not printable (separators but the space,
// format characters such as U+200B, private use, unassigned). Only strings
// in the repr can hold them.
func pyPrintable(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r >= utf8.RuneSelf && !unicode.IsPrint(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for _, r := range s[i:] {
		if r >= utf8.RuneSelf && !unicode.IsPrint(r) {
			writePyEscape(&b, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// writePyEscape writes r as Python's repr escapes a character.
func writePyEscape(b *strings.Builder, r rune) {
	switch {
	case r <= 0xff:
		fmt.Fprintf(b, `\x%02x`, r)
	case r <= 0xffff:
		fmt.Fprintf(b, `\u%04x`, r)
	default:
		fmt.Fprintf(b, `\U%08x`, r)
	}
}

// pyType is the Python type name of a value, for error messages.
func pyType(v jinja.Value) string {
	switch {
	case v.IsString():
		return "str"
	case v.IsFloat():
		return "float"
	case v.IsInt():
		return "int"
	case v.IsBool():
		return "bool"
	case v.IsList():
		return "list"
	case isNamespace(v):
		return "Namespace"
	case v.IsDict():
		return "dict"
	case v.IsNone():
		return "NoneType"
	}
	return "Undefined"
}

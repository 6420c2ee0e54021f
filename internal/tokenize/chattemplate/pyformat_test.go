package chattemplate

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// TestPyPercent checks the format filter's printf-style formatting against
// what CPython 3.11 gives for the same format and arguments (the wants were
// printed by the goldens venv's Python: fmt % tuple(args), or % kwargs).
func TestPyPercent(t *testing.T) {
	tests := []struct {
		format, args, kwargs, want, err string
	}{
		{"%s", `["Paris"]`, ``, "Paris", ""},
		{"%sr", `["Paris"]`, ``, "Parisr", ""},
		{"%s", `[1.0]`, ``, "1.0", ""},
		{"%s", `[null]`, ``, "None", ""},
		{"%s", `[true]`, ``, "True", ""},
		{"%s", `[[1, "a", null]]`, ``, "[1, 'a', None]", ""},
		{"%s", `[{"k": "v", "n": 1.5}]`, ``, "{'k': 'v', 'n': 1.5}", ""},
		{"%r", `["it's \"q\"\n"]`, ``, "'it\\'s \"q\"\\n'", ""},
		{"%r", `["tab\there"]`, ``, "'tab\\there'", ""},
		{"%r", `[1.5]`, ``, "1.5", ""},
		{"%a", `["café ☕ 😀"]`, ``, "'caf\\xe9 \\u2615 \\U0001f600'", ""},
		{"%5s|%-5s|%.2s", `["ab", "cd", "xyz"]`, ``, "   ab|cd   |xy", ""},
		{"%05s", `["ab"]`, ``, "   ab", ""},
		{"%d %i %u", `[3, -4, true]`, ``, "3 -4 1", ""},
		{"%d", `[3.9]`, ``, "3", ""},
		{"%5d|%-5d|%05d|%+d|% d", `[42, 42, 42, 42, 42]`, ``, "   42|42   |00042|+42| 42", ""},
		{"%.3d", `[5]`, ``, "005", ""},
		{"%x %X %o", `[255, 255, 8]`, ``, "ff FF 10", ""},
		{"%#x %#X %#o", `[255, 255, 8]`, ``, "0xff 0XFF 0o10", ""},
		{"%#08x", `[255]`, ``, "0x0000ff", ""},
		{"%x", `[-255]`, ``, "-ff", ""},
		{"%f %F %e %E", `[3.14159, 2.5, 12345.678, 0.000123]`, ``, "3.141590 2.500000 1.234568e+04 1.230000E-04", ""},
		{"%.2f|%10.3f|%-10.1f|%+.1f|%010.2f", `[1.005, 2.0, 3.25, 4.0, -5.5]`, ``, "1.00|     2.000|3.2       |+4.0|-000005.50", ""},
		{"%g %g %g %g %G", `[100000.0, 1000000.0, 0.0001, 1e-05, 1e-10]`, ``, "100000 1e+06 0.0001 1e-05 1E-10", ""},
		{"%.3g %.0g %#g", `[3.14159, 123.0, 1.5]`, ``, "3.14 1e+02 1.50000", ""},
		{"%d", `[1000]`, ``, "1000", ""},
		{"%c%c", `[65, "z"]`, ``, "Az", ""},
		{"100%% %s", `["done"]`, ``, "100% done", ""},
		{"%(a)s-%(b)05d", `[]`, `{"a": "x", "b": 7}`, "x-00007", ""},
		{"%s", `[]`, `{"a": 1}`, "{'a': 1}", ""},
		{"%*d|%-*s|%.*f", `[5, 42, 4, "ab", 2, 3.14159]`, ``, "   42|ab  |3.14", ""},
		{"%f", `[3]`, ``, "3.000000", ""},
		{"%s and %s", `["one"]`, ``, "", "not enough arguments for format string"},
		{"%s", `["a", "b"]`, ``, "", "not all arguments converted during string formatting"},
		{"%d", `["x"]`, ``, "", "%d format: a real number is required, not str"},
		{"%x", `[1.5]`, ``, "", "%x format: an integer is required, not float"},
		{"%", `["x"]`, ``, "", "incomplete format"},
		{"%z", `[1]`, ``, "", "unsupported format character 'z' (0x7a) at index 1"},
		{"%(a)s", `["x"]`, ``, "", "format requires a mapping"},
		{"no conversions", `[]`, ``, "no conversions", ""},
		{"%s", `[""]`, ``, "", ""},
		{"%e", `[0.0]`, ``, "0.000000e+00", ""},
		{"%g", `[0.0]`, ``, "0", ""},
		{"%.10g", `[0.3333333333333333]`, ``, "0.3333333333", ""},
		{"%s", `[-0.0]`, ``, "-0.0", ""},
		{"%c", `[128512]`, ``, "😀", ""},
		{"%5.1f|%-8.3e|%+g", `[-2.25, 1234.5, 7.0]`, ``, " -2.2|1.234e+03|+7", ""},
		{"%s", `[[{"a": [1, 2.5, "x'y"]}, true]]`, ``, "[{'a': [1, 2.5, \"x'y\"]}, True]", ""},
		{"%r", `[{"q": "a\"b'c"}]`, ``, "{'q': 'a\"b\\'c'}", ""},
		{"%10r|%-6s|", `["hi", null]`, ``, "      'hi'|None  |", ""},
		{"%-#8x|%+x|% o|%#5o|%.4x|%#X", `[255, 255, 8, 8, 10, -10]`, ``, "0xff    |+ff| 10| 0o10|000a|-0XA", ""},
		{"%+#06x|%-6o|", `[-255, 8]`, ``, "-0x0ff|10    |", ""},
	}
	for _, tt := range tests {
		argv, err := jsonValue([]byte(tt.args))
		if err != nil {
			t.Fatal(err)
		}
		named := jinja.Undefined()
		if tt.kwargs != "" {
			if named, err = jsonValue([]byte(tt.kwargs)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := pyPercent(tt.format, argv.AsList().Items, named)
		switch {
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("%q %% %s: %q, %v; want error %q", tt.format, tt.args, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%q %% %s%s = %q, %v; want %q", tt.format, tt.args, tt.kwargs, got, err, tt.want)
		}
	}
	// Not numbers in JSON: Python's "%f %f %F %+f %5.1f" % (nan, inf, -inf, inf, inf).
	nan, inf := jinja.NewFloat(math.NaN()), jinja.NewFloat(math.Inf(1))
	if got, err := pyPercent("%f %f %F %+f %5.1f", []jinja.Value{nan, inf, jinja.NewFloat(math.Inf(-1)), inf, inf}, jinja.Undefined()); err != nil || got != "nan inf -INF +inf   inf" {
		t.Errorf("nan and inf: %q, %v", got, err)
	}
}

// TestFormatFilter: the filter in a template, as vLLM's pythonic tool
// templates use it, with keyword arguments, and refusing both kinds at once.
func TestFormatFilter(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"x\u200by"}]}`
	for _, tt := range []struct{ tmpl, want, err string }{
		// Python's str and repr of a list escape U+200B; %s of the string
		// itself does not.
		{`{{ "%s|%r|%s" | format([messages[0].content], messages[0].content, messages[0].content) }}`, "['x\\u200by']|'x\\u200by'|x\u200by", ""},
		{`{{ "%s" | format(1.5) }}|{{ "%sr" | format("Paris") }}|{{ "%05.1f%%" | format(12.345) }}`, "1.5|Parisr|012.3%", ""},
		{`{{ "%(a)s=%(b)d" | format(a="x", b=2) }}`, "x=2", ""},
		{`{{ "%s" | format(1, b=2) }}`, "", "positional and keyword"},
		{`{{ "%s %s" | format(1) }}`, "", "not enough arguments"},
		{`{{ "[%s]" | format(nothing) }}{{ "[%sr]" | format(messages[0].missing) }}`, "[][r]", ""},
	} {
		got, err := renderWith(t, tt.tmpl, Options{}, body)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: %q, %v; want an error with %q", tt.tmpl, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%s: %q, %v; want %q", tt.tmpl, got, err, tt.want)
		}
	}
}

// FuzzPyPercent: any format string (a template's) with any arguments (a
// request's) formats or fails with an error, never a panic, and a format
// without % comes back as it is. Python consumes positional arguments left
// to right and refuses a format that leaves one over, so a format that
// formats its arguments formats itself twice over them twice as its text
// twice.
func FuzzPyPercent(f *testing.F) {
	f.Add("%s|%-5d|%#08x|%.3g|%(a)s|%*.*f|%c|%%", `["x", 42, 255, 3.14159, 5, 2, 1.5, 65]`)
	f.Add("%s|%-5d|%#08x|%.3g|%*.*f|%c|%%", `["x", 42, 255, 3.14159, 5, 2, 1.5, 65]`)
	f.Add("%s %%", `["a", "b"]`)
	f.Add("%+e %G %o %X %i %u %a %5.2s|%-*s|", `[1e-7, 2.5, 8, 255, -3, 4, "é", "abc", 4, "z"]`)
	f.Add("[%s(%s=%r)]", `[{"a": [1, null]}, "k", "it's"]`)
	f.Fuzz(func(t *testing.T, format, args string) {
		if len(format) > 1<<10 || len(args) > 1<<12 {
			return
		}
		argv, err := jsonValue([]byte(args))
		if err != nil || !argv.IsList() {
			return
		}
		for _, named := range []jinja.Value{jinja.Undefined(), jinja.NewDict()} {
			got, err := pyPercent(format, argv.AsList().Items, named)
			if !strings.Contains(format, "%") && named.IsDict() && (err != nil || got != format) {
				t.Fatalf("%q %% {} = %q, %v; want it unchanged", format, got, err)
			}
			if err == nil && !named.IsDict() {
				twice, err := pyPercent(format+format, slices.Concat(argv.AsList().Items, argv.AsList().Items), named)
				if err != nil || twice != got+got {
					t.Fatalf("%q %% %s = %q, but the format twice over the arguments twice = %q, %v", format, args, got, twice, err)
				}
			}
		}
	})
}

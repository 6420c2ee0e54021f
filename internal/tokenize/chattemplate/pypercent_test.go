package chattemplate

import (
	"testing"

	"github.com/ardanlabs/jinja"
)

// TestPyPercentAsPython: cases where pyPercent differed from Python 3's
// "%" formatting (found by a review comparing them on random cases): a
// negative * width, a precision on an integer (zero is one digit; the "0"
// flag pads past the precision), %d of a float past int64, %c of a bool.
// The wants are Python's.
func TestPyPercentAsPython(t *testing.T) {
	for _, c := range []struct{ format, args, want string }{
		{"%*d", `[-5, 3]`, "3    "},
		{"%*s|", `[-3, "a"]`, "a  |"},
		{"%.0d", `[0]`, "0"},
		{"%05.2d", `[3]`, "00003"},
		{"%-6.3d|", `[-7]`, "-007  |"},
		{"%+.3i", `[42]`, "+042"},
		{"%d", `[1e20]`, "100000000000000000000"},
		{"%d", `[-2.9]`, "-2"},
		{"%c", `[true]`, "\x01"},
		{"%5.3x", `[255]`, "  0ff"},
	} {
		argv, err := jsonValue([]byte(c.args))
		if err != nil {
			t.Fatal(err)
		}
		got, err := pyPercent(c.format, argv.AsList().Items, jinja.Undefined())
		if err != nil || got != c.want {
			t.Errorf("%q %% %s = %q, %v; Python gives %q", c.format, c.args, got, err, c.want)
		}
	}
}

package sim

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestPyFloat(t *testing.T) {
	pointOne, pointTwo := 0.1, 0.2 // variables: constant arithmetic would be exact
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{-1, "-1.0"},
		{16, "16.0"},
		{0.5, "0.5"},
		{0.1, "0.1"},
		{pointOne + pointTwo, "0.30000000000000004"},
		{1e-05, "1e-05"},
		{1.5e-05, "1.5e-05"},
		{0.0001, "0.0001"},
		{0.00012345, "0.00012345"},
		{123456789.0, "123456789.0"},
		{2560.0, "2560.0"},
		{1755000000.5, "1755000000.5"},
		{9999999999999998.0, "9999999999999998.0"},
		{1e16, "1e+16"},
		{1.5e16, "1.5e+16"},
		{-1.5e16, "-1.5e+16"},
		{1e22, "1e+22"},
		{1e100, "1e+100"},
		{1e-100, "1e-100"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.NaN(), "nan"},
		{math.Inf(1), "inf"},
		{math.Inf(-1), "-inf"},
	}
	for _, tt := range tests {
		if got := pyFloat(tt.in); got != tt.want {
			t.Errorf("pyFloat(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestPyFloatProperties checks, for arbitrary finite floats, that the repr
// round-trips and uses exponent notation exactly outside 1e-4 <= |v| < 1e16.
func TestPyFloatProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := math.Float64frombits(rapid.Uint64().Draw(t, "bits"))
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		s := pyFloat(v)
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || math.Float64bits(back) != math.Float64bits(v) {
			t.Fatalf("pyFloat(%v) = %q does not round-trip (%v, %v)", v, s, back, err)
		}
		a := math.Abs(v)
		wantExp := a != 0 && (a < 1e-4 || a >= 1e16)
		if strings.Contains(s, "e") != wantExp {
			t.Fatalf("pyFloat(%v) = %q: exponent form should be %v", v, s, wantExp)
		}
		if !wantExp && !strings.Contains(s, ".") {
			t.Fatalf("pyFloat(%v) = %q: positional form without a dot", v, s)
		}
		if g := goFloat(v); g != s {
			back, err := strconv.ParseFloat(g, 64)
			if err != nil || back != v {
				t.Fatalf("goFloat(%v) = %q does not round-trip", v, g)
			}
		}
	})
}

func TestPromGoFloat(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{1, "1.0"},
		{3, "3.0"},
		{0.001, "0.001"},
		{2560, "2560.0"},
		{16384, "16384.0"},
		{20000, "20000.0"},
		{999999, "999999.0"},
		{1e6, "1e+06"},
		{1234567, "1.234567e+06"},
		{10000005, "1.0000005e+07"},
		{1755000000.5, "1.7550000005e+09"},
		{1755000000.1234567, "1.7550000001234567e+09"},
		{-1755000000.5, "-1755000000.5"}, // only positive values are rewritten
		// Released prometheus_client (<= 0.25.0) writes "e+0" + exponent.
		{1e10, "1e+010"},
		{1234567890123, "1.234567890123e+012"},
		{1e15, "1e+015"},
		{1e16, "1e+16"},
		{1e-05, "1e-05"},
		{math.Inf(1), "+Inf"},
		{math.Inf(-1), "-Inf"},
		{math.NaN(), "NaN"},
	}
	for _, tt := range tests {
		if got := goFloat(tt.in); got != tt.want {
			t.Errorf("goFloat(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestPromEscaping(t *testing.T) {
	if got, want := escapeLabelValue("a\\b\"c\nd"), `a\\b\"c\nd`; got != want {
		t.Errorf("escapeLabelValue = %q, want %q", got, want)
	}
	if got, want := escapeHelp("a\\b\"c\nd"), `a\\b"c\nd`; got != want {
		t.Errorf("escapeHelp = %q, want %q", got, want)
	}
	for in, want := range map[string]string{
		"block_size":           "block_size",
		"_block_size_resolved": "_block_size_resolved",
		"9lives":               "_lives",
		"a.b-c":                "a_b_c",
		"ünï":                  "_n_",
	} {
		if got := escapeLabelName(in); got != want {
			t.Errorf("escapeLabelName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPromRegistryLayout checks the prometheus_client layout rules on a
// small registry: counter "_total" munging, label sorting with "le",
// children in creation order, and the separate _created gauge families.
func TestPromRegistryLayout(t *testing.T) {
	r := &promRegistry{created: 1755000000.5}
	c := r.register(promCounter, "x:reqs_total", "Reqs.\nSecond \\ line", []string{"zeta", "alpha"}, nil)
	r.child(c, "z2", "a2").inc(2)
	r.child(c, "z1", "a1").inc(1)
	r.child(c, "z2", "a2").inc(0.5) // same child again
	h := r.register(promHistogram, "x:lat", "Lat.", []string{"model"}, []float64{0.5, 1e6})
	hc := r.child(h, `q"m`)
	hc.observe(h.bounds, 0.25)
	hc.observe(h.bounds, 2e6)
	hc.observe(h.bounds, math.NaN())
	g := r.register(promGauge, "x:g", "G.", nil, nil)
	r.child(g).set(-1.5)
	r.register(promGauge, "x:empty", "No children.", []string{"a"}, nil)

	got := string(r.appendTo(nil))
	want := `# HELP x:reqs_total Reqs.\nSecond \\ line
# TYPE x:reqs_total counter
x:reqs_total{alpha="a2",zeta="z2"} 2.5
x:reqs_total{alpha="a1",zeta="z1"} 1.0
# HELP x:reqs_created Reqs.\nSecond \\ line
# TYPE x:reqs_created gauge
x:reqs_created{alpha="a2",zeta="z2"} 1.7550000005e+09
x:reqs_created{alpha="a1",zeta="z1"} 1.7550000005e+09
# HELP x:lat Lat.
# TYPE x:lat histogram
x:lat_bucket{le="0.5",model="q\"m"} 1.0
x:lat_bucket{le="1e+06",model="q\"m"} 1.0
x:lat_bucket{le="+Inf",model="q\"m"} 2.0
x:lat_count{model="q\"m"} 2.0
x:lat_sum{model="q\"m"} NaN
# HELP x:lat_created Lat.
# TYPE x:lat_created gauge
x:lat_created{model="q\"m"} 1.7550000005e+09
# HELP x:g G.
# TYPE x:g gauge
x:g -1.5
# HELP x:empty No children.
# TYPE x:empty gauge
`
	if got != want {
		t.Errorf("layout mismatch\n--- got\n%s\n--- want\n%s", got, want)
	}
}

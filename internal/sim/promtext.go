package sim

// A minimal Prometheus text-format (version 0.0.4) writer whose output is
// byte-for-byte what the Python prometheus_client library (0.25.x,
// generate_latest, single-process registry) prints for Gauge, Counter and
// Histogram metrics. vLLM serves its /metrics page through that library, so
// the simulator reproduces its formatting rules here:
//
//   - families are printed in registration order, children of a family in
//     the order they were first created;
//   - every family starts with "# HELP <name> <help>" and "# TYPE <name> <type>";
//     HELP escapes backslash and newline;
//   - a counter is registered under its name without a trailing "_total"
//     and exposed with "_total" appended;
//   - labels are printed sorted by label name (a histogram's "le" included),
//     label values escape backslash, newline and double quote;
//   - values use Python's float repr with Go-style exponents for large
//     positive numbers (see goFloat);
//   - the "_created" samples of counters and histograms are moved out of the
//     family into a separate gauge family "<name>_created" printed right
//     after it, with the same HELP text.

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// promKind is the type of a metric family.
type promKind uint8

const (
	promGauge promKind = iota
	promCounter
	promHistogram
)

func (k promKind) String() string {
	switch k {
	case promCounter:
		return "counter"
	case promHistogram:
		return "histogram"
	default:
		return "gauge"
	}
}

// promRegistry is an ordered set of metric families. It does no locking:
// the owner serialises access.
type promRegistry struct {
	families []*promFamily
	// created is the value of every _created sample (unix seconds).
	created float64
}

// promFamily is one registered metric (a prometheus_client parent metric).
type promFamily struct {
	kind promKind
	// name is the registered (OpenMetrics) name: for counters without "_total".
	name       string
	help       string
	labelNames []string
	// bounds are the histogram upper bounds, +Inf last.
	bounds   []float64
	children []*promChild

	// Pre-rendered header lines.
	header        string // # HELP and # TYPE of the family
	createdHeader string // # HELP and # TYPE of the <name>_created family
}

// promChild is one labelled series set of a family.
type promChild struct {
	labelValues []string
	value       float64   // gauge or counter value
	buckets     []float64 // histogram: non-cumulative count per bound
	sum         float64   // histogram: sum of observations

	// Pre-rendered sample prefixes ("name{labels} ") and the complete
	// _created line (its value never changes).
	prefix       string   // gauge, counter (_total)
	bucketPrefix []string // histogram _bucket, one per bound
	countPrefix  string
	sumPrefix    string
	createdLine  string
}

func (r *promRegistry) register(kind promKind, name, help string, labelNames []string, buckets []float64) *promFamily {
	if kind == promCounter {
		name = strings.TrimSuffix(name, "_total")
	}
	if !isLegacyMetricName(name) {
		panic("sim: invalid metric name " + strconv.Quote(name))
	}
	for _, f := range r.families {
		if f.name == name {
			panic("sim: duplicate metric family " + name)
		}
	}
	f := &promFamily{
		kind:       kind,
		name:       name,
		help:       help,
		labelNames: slices.Clone(labelNames),
	}
	if kind == promHistogram {
		if !slices.IsSorted(buckets) {
			panic("sim: histogram buckets not sorted for " + name)
		}
		f.bounds = slices.Clone(buckets)
		if len(f.bounds) == 0 || f.bounds[len(f.bounds)-1] != math.Inf(1) {
			f.bounds = append(f.bounds, math.Inf(1))
		}
		if len(f.bounds) < 2 {
			panic("sim: histogram needs at least one finite bucket: " + name)
		}
	}
	exposed := name
	if kind == promCounter {
		exposed += "_total"
	}
	help = escapeHelp(help)
	f.header = "# HELP " + exposed + " " + help + "\n# TYPE " + exposed + " " + kind.String() + "\n"
	if kind != promGauge {
		f.createdHeader = "# HELP " + name + "_created " + help + "\n# TYPE " + name + "_created gauge\n"
	}
	r.families = append(r.families, f)
	return f
}

// child returns the series for the given label values (in labelNames order),
// creating it on first use like prometheus_client's labels().
func (r *promRegistry) child(f *promFamily, labelValues ...string) *promChild {
	if len(labelValues) != len(f.labelNames) {
		panic("sim: wrong label count for " + f.name)
	}
	for _, c := range f.children {
		if slices.Equal(c.labelValues, labelValues) {
			return c
		}
	}
	c := &promChild{labelValues: slices.Clone(labelValues)}
	names := f.labelNames
	values := c.labelValues
	created := goFloat(r.created)
	switch f.kind {
	case promGauge:
		c.prefix = f.name + renderLabels(names, values, "", "") + " "
	case promCounter:
		c.prefix = f.name + "_total" + renderLabels(names, values, "", "") + " "
		c.createdLine = f.name + "_created" + renderLabels(names, values, "", "") + " " + created + "\n"
	case promHistogram:
		c.buckets = make([]float64, len(f.bounds))
		c.bucketPrefix = make([]string, len(f.bounds))
		for i, b := range f.bounds {
			c.bucketPrefix[i] = f.name + "_bucket" + renderLabels(names, values, "le", goFloat(b)) + " "
		}
		c.countPrefix = f.name + "_count" + renderLabels(names, values, "", "") + " "
		c.sumPrefix = f.name + "_sum" + renderLabels(names, values, "", "") + " "
		c.createdLine = f.name + "_created" + renderLabels(names, values, "", "") + " " + created + "\n"
	}
	f.children = append(f.children, c)
	return c
}

// set sets a gauge.
func (c *promChild) set(v float64) { c.value = v }

// inc adds to a counter. Negative amounts are ignored (prometheus_client
// raises on them).
func (c *promChild) inc(v float64) {
	if v < 0 {
		return
	}
	c.value += v
}

// observe records one histogram observation: the first bucket whose upper
// bound is >= v is incremented (none for NaN), the sum always grows by v.
func (c *promChild) observe(bounds []float64, v float64) {
	c.sum += v
	for i, b := range bounds {
		if v <= b {
			c.buckets[i]++
			return
		}
	}
}

// appendTo renders the whole registry in text format 0.0.4.
func (r *promRegistry) appendTo(dst []byte) []byte {
	for _, f := range r.families {
		dst = append(dst, f.header...)
		for _, c := range f.children {
			switch f.kind {
			case promGauge, promCounter:
				dst = append(dst, c.prefix...)
				dst = appendGoFloat(dst, c.value)
				dst = append(dst, '\n')
			case promHistogram:
				acc := 0.0
				for i := range f.bounds {
					acc += c.buckets[i]
					dst = append(dst, c.bucketPrefix[i]...)
					dst = appendGoFloat(dst, acc)
					dst = append(dst, '\n')
				}
				dst = append(dst, c.countPrefix...)
				dst = appendGoFloat(dst, acc)
				dst = append(dst, '\n')
				// prometheus_client omits _sum when the first bound is negative.
				if f.bounds[0] >= 0 {
					dst = append(dst, c.sumPrefix...)
					dst = appendGoFloat(dst, c.sum)
					dst = append(dst, '\n')
				}
			}
		}
		if f.kind != promGauge && len(f.children) > 0 {
			dst = append(dst, f.createdHeader...)
			for _, c := range f.children {
				dst = append(dst, c.createdLine...)
			}
		}
	}
	return dst
}

// renderLabels renders {k="v",...} sorted by label name; extraName/extraValue
// (the histogram "le") joins the sort when extraName is not empty. It returns
// "" when there are no labels at all.
func renderLabels(names, values []string, extraName, extraValue string) string {
	type pair struct{ k, v string }
	pairs := make([]pair, 0, len(names)+1)
	for i, n := range names {
		pairs = append(pairs, pair{n, values[i]})
	}
	if extraName != "" {
		pairs = append(pairs, pair{extraName, extraValue})
	}
	if len(pairs) == 0 {
		return ""
	}
	// Python sorts (name, value) tuples; names are unique so the name decides.
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := strings.Compare(a.k, b.k); c != 0 {
			return c
		}
		return strings.Compare(a.v, b.v)
	})
	var sb strings.Builder
	sb.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(escapeLabelName(p.k))
		sb.WriteString(`="`)
		sb.WriteString(escapeLabelValue(p.v))
		sb.WriteByte('"')
	}
	sb.WriteByte('}')
	return sb.String()
}

// escapeHelp escapes a HELP text: backslash and newline.
func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// escapeLabelValue escapes a label value: backslash, newline, double quote.
func escapeLabelValue(s string) string { return labelValueEscaper.Replace(s) }

// The escapers are built once: a Replacer builds its tables on first use,
// and building them for every label value took nine tenths of a
// simulator's start (21 ms of it; 2 ms without).
var (
	helpEscaper       = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelValueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// escapeLabelName returns a legacy-valid label name unchanged; otherwise
// every character that is not allowed at its position becomes '_' (the
// "underscores" escaping generate_latest uses by default).
func escapeLabelName(s string) string {
	if isLegacyLabelName(s) {
		return s
	}
	var sb strings.Builder
	i := 0
	for _, r := range s {
		if isLegacyLabelRune(r, i) {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('_')
		}
		i++
	}
	return sb.String()
}

func isLegacyLabelRune(r rune, i int) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '_' || r >= '0' && r <= '9' && i > 0
}

func isLegacyLabelName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !isLegacyLabelRune(r, i) {
			return false
		}
	}
	return true
}

func isLegacyMetricName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !isLegacyLabelRune(r, i) && r != ':' {
			return false
		}
	}
	return true
}

// pyFloat returns Python's repr() of v: the shortest decimal that round-trips,
// in positional notation with at least one fractional digit ("1.0") when the
// decimal exponent is in [-4, 16), otherwise in exponent notation with a
// sign and at least two exponent digits ("1e-05", "1.5e+16"). Non-finite
// values print as "nan", "inf" and "-inf".
func pyFloat(v float64) string {
	var buf [32]byte
	return string(appendPyFloat(buf[:0], v))
}

func appendPyFloat(dst []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(dst, "nan"...)
	case math.IsInf(v, 1):
		return append(dst, "inf"...)
	case math.IsInf(v, -1):
		return append(dst, "-inf"...)
	case v == 0:
		if math.Signbit(v) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	// Shortest round-trip digits in exponent form, e.g. "-1.2345e+06".
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], v, 'e', -1, 64)
	ePos := len(e) - 1
	for e[ePos] != 'e' {
		ePos--
	}
	exp := 0
	for _, ch := range e[ePos+2:] {
		exp = exp*10 + int(ch-'0')
	}
	if e[ePos+1] == '-' {
		exp = -exp
	}
	if exp < -4 || exp >= 16 {
		// Go's 'e' formatting already matches Python's exponent style.
		return append(dst, e...)
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, v, 'f', -1, 64)
	for _, ch := range dst[start:] {
		if ch == '.' {
			return dst
		}
	}
	return append(dst, ".0"...)
}

// goFloat is prometheus_client's floatToGoString: "+Inf", "-Inf", "NaN", and
// otherwise Python's repr, except that a positive value with more than six
// digits before the decimal point is rewritten with an exponent the way Go
// prints it: 1755000000.5 -> "1.7550000005e+09", 1e6 -> "1e+06".
//
// The exponent is written as "e+0" followed by the exponent, which is what
// every released prometheus_client (up to 0.25.0) does; for exponents of 10
// and more (values >= 1e10) that yields "e+010". prometheus_client's main
// branch changed this to two-digit padding ("e+10") after 0.25.0.
func goFloat(v float64) string {
	var buf [40]byte
	return string(appendGoFloat(buf[:0], v))
}

func appendGoFloat(dst []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(dst, "+Inf"...)
	case math.IsInf(v, -1):
		return append(dst, "-Inf"...)
	case math.IsNaN(v):
		return append(dst, "NaN"...)
	}
	var tmp [32]byte
	s := appendPyFloat(tmp[:0], v)
	dot := -1
	for i, ch := range s {
		if ch == '.' {
			dot = i
			break
		}
	}
	if !(v > 0 && dot > 6) {
		return append(dst, s...)
	}
	// Mantissa: first digit, '.', the remaining digits (integer then
	// fractional part), with trailing '0' and '.' characters stripped.
	var mant [40]byte
	m := append(mant[:0], s[0], '.')
	m = append(m, s[1:dot]...)
	m = append(m, s[dot+1:]...)
	end := len(m)
	for end > 0 && (m[end-1] == '0' || m[end-1] == '.') {
		end--
	}
	dst = append(dst, m[:end]...)
	dst = append(dst, "e+0"...)
	return strconv.AppendInt(dst, int64(dot-1), 10)
}

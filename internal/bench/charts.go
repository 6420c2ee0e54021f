package bench

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// A report's charts are PNG files drawn by gonum.org/v1/plot with its
// embedded Liberation fonts and written by image/png, which records no
// time: the same results give the same bytes.

// chartSeries is one policy's line on a chart: a value per x, X
// ascending. X is the offered rate, or on a sizing point's charts the
// fleet size. Label names the line in the legend when it is not Policy
// alone (a sizing point of several loads has a line per policy and load).
type chartSeries struct {
	Policy string
	X      []float64
	Values []float64
	Label  string
}

// pointChart holds the data of one point's two charts, p99 TTFT (seconds)
// and goodput (req/s) against offered rate, one series per policy:
// medians over repetitions, as in the report's tables. A sizing point's
// charts (Sizing) are against the fleet size instead, each of its Loads
// (offered rates) a line per policy: every run of such a point has the
// same rate, and against the rate its fleet sizes stood in one column.
type pointChart struct {
	Point, Workload string
	TTFTP99         []chartSeries
	Goodput         []chartSeries
	Sizing          bool
	Loads           []float64
}

// chartData gathers the charts' data from results: a pointChart per point,
// in the report's order.
func chartData(results []*RunResult) []pointChart {
	keys, groups := groupResults(results)
	sizing := sizingPoints(keys)
	loads := map[string][]float64{} // of each sizing point, ascending as keys are
	for _, k := range keys {
		if sizing[k.Point] && !slices.Contains(loads[k.Point], k.Rate) {
			loads[k.Point] = append(loads[k.Point], k.Rate)
		}
	}
	var charts []pointChart
	for _, k := range keys {
		if len(charts) == 0 || charts[len(charts)-1].Point != k.Point || charts[len(charts)-1].Workload != k.Workload {
			charts = append(charts, pointChart{Point: k.Point, Workload: k.Workload, Sizing: sizing[k.Point], Loads: loads[k.Point]})
		}
		c := &charts[len(charts)-1]
		x, label := k.Rate, ""
		if c.Sizing {
			x = float64(k.Replicas)
		}
		for _, r := range pointRows(groups[k]) {
			if len(c.Loads) > 1 {
				label = r.Policy + " at " + pointKey{Workload: k.Workload, Rate: k.Rate}.rateText()
			}
			c.TTFTP99 = addToSeries(c.TTFTP99, r.Policy, label, x, r.TTFTP99)
			c.Goodput = addToSeries(c.Goodput, r.Policy, label, x, r.Goodput)
		}
	}
	for i := range charts {
		for _, ss := range [][]chartSeries{charts[i].TTFTP99, charts[i].Goodput} {
			slices.SortStableFunc(ss, func(a, b chartSeries) int { return comparePolicies(a.Policy, b.Policy) })
		}
	}
	return charts
}

// addToSeries appends (x, v) to the series of policy and label, starting
// it if need be. x arrives in ascending order.
func addToSeries(ss []chartSeries, policy, label string, x, v float64) []chartSeries {
	i := slices.IndexFunc(ss, func(s chartSeries) bool { return s.Policy == policy && s.Label == label })
	if i < 0 {
		ss = append(ss, chartSeries{Policy: policy, Label: label})
		i = len(ss) - 1
	}
	ss[i].X = append(ss[i].X, x)
	ss[i].Values = append(ss[i].Values, v)
	return ss
}

func comparePolicies(a, b string) int {
	return cmp.Or(cmp.Compare(policyRank(a), policyRank(b)), cmp.Compare(a, b))
}

// chartFileNames are the PNG files of a point's charts, named after the
// point.
func chartFileNames(point string) (ttft, goodput string) {
	var b strings.Builder
	for _, r := range point {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := b.String()
	return name + "-ttft-p99.png", name + "-goodput.png"
}

// rateLabel is the x axis of a point's charts.
func rateLabel(workload string) string {
	if workload == "trace" {
		return "rate multiplier (× the trace's rate)"
	}
	return "offered rate (req/s)"
}

// lineChart is how renderLineChart draws a chart.
type lineChart struct {
	title, xLabel, yLabel string
	// logY makes the y axis logarithmic.
	logY bool
	// offered returns the dashed lines that mark goodput equal to the
	// offered rate over x from lo to hi; nil draws none.
	offered func(lo, hi float64) []plotter.XYs
	// xTicks, when set, are the x axis's only ticks (fleet sizes).
	xTicks []float64
}

// diagonal marks goodput equal to the offered rate against the rate.
func diagonal(_, hi float64) []plotter.XYs { return []plotter.XYs{{{X: 0, Y: 0}, {X: hi, Y: hi}}} }

// chartsOf are the two charts of a point: against the offered rate, or a
// sizing point's against the fleet size, the offered rates level lines.
func chartsOf(c *pointChart) (ttft, goodput lineChart) {
	ttft = lineChart{title: c.Point + ": p99 TTFT against load", xLabel: rateLabel(c.Workload), yLabel: "p99 TTFT (s, log scale)", logY: true}
	goodput = lineChart{title: c.Point + ": goodput against load", xLabel: rateLabel(c.Workload), yLabel: "goodput (req/s)"}
	if c.Workload != "trace" {
		goodput.offered = diagonal
	}
	if !c.Sizing {
		return ttft, goodput
	}
	var sizes []float64
	for _, s := range c.TTFTP99 {
		for _, x := range s.X {
			if !slices.Contains(sizes, x) {
				sizes = append(sizes, x)
			}
		}
	}
	slices.Sort(sizes)
	ttft.title, goodput.title = c.Point+": p99 TTFT against fleet size", c.Point+": goodput against fleet size"
	ttft.xLabel, goodput.xLabel = "fleet size (replicas)", "fleet size (replicas)"
	ttft.xTicks, goodput.xTicks = sizes, sizes
	if goodput.offered != nil {
		goodput.offered = func(lo, hi float64) []plotter.XYs {
			var lines []plotter.XYs
			for _, rate := range c.Loads {
				lines = append(lines, plotter.XYs{{X: lo, Y: rate}, {X: hi, Y: rate}})
			}
			return lines
		}
	}
	return ttft, goodput
}

// RenderRunCharts draws the report's charts from results: for each point,
// p99 TTFT and goodput against offered rate (a sizing point's against the
// fleet size) with a line per policy. It returns PNG bytes by file name.
func RenderRunCharts(results []*RunResult) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, c := range chartData(results) {
		ttftName, goodputName := chartFileNames(c.Point)
		ttftChart, goodputChart := chartsOf(&c)
		ttft, err := renderLineChart(ttftChart, c.TTFTP99)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", ttftName, err)
		}
		goodput, err := renderLineChart(goodputChart, c.Goodput)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", goodputName, err)
		}
		files[ttftName], files[goodputName] = ttft, goodput
	}
	return files, nil
}

// policyColors are the Okabe–Ito colours, told apart also by readers with
// colour blindness, in policyOrder: a policy keeps its colour in every
// chart. otherColors go to other policies (peer routers), in chart order.
var (
	policyColors = []color.Color{
		color.NRGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}, // round_robin: grey
		color.NRGBA{R: 0xf0, G: 0xe4, B: 0x42, A: 0xff}, // random: yellow
		color.NRGBA{R: 0xe6, G: 0x9f, B: 0x00, A: 0xff}, // least_request: orange
		color.NRGBA{R: 0xcc, G: 0x79, B: 0xa7, A: 0xff}, // p2c: reddish purple
		color.NRGBA{R: 0x56, G: 0xb4, B: 0xe9, A: 0xff}, // prefix_hash: sky blue
		color.NRGBA{R: 0x00, G: 0x9e, B: 0x73, A: 0xff}, // kv_aware: green
		color.NRGBA{R: 0x00, G: 0x72, B: 0xb2, A: 0xff}, // cost_model: blue
	}
	otherColors = []color.Color{
		color.NRGBA{R: 0xd5, G: 0x5e, B: 0x00, A: 0xff}, // vermilion
		color.NRGBA{R: 0x00, G: 0x00, B: 0x00, A: 0xff}, // black
		color.NRGBA{R: 0x88, G: 0x22, B: 0x55, A: 0xff}, // wine
		color.NRGBA{R: 0x44, G: 0xaa, B: 0x99, A: 0xff}, // teal
	}
	policyGlyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{},
		draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}}
	otherGlyphs = []draw.GlyphDrawer{draw.PyramidGlyph{}, draw.RingGlyph{}, draw.PlusGlyph{}, draw.CrossGlyph{}}
)

// policyStyle is the colour and glyph of a policy, and whether its line is
// dashed: other policies (peer routers) get dashed lines, the k-th of them
// in a chart the k-th of otherColors, as do the gateway's policies with
// another index mode than approximate ("cost_model (exact)").
func policyStyle(policy string, k int) (c color.Color, g draw.GlyphDrawer, dashed bool) {
	if r := slices.Index(policyOrder, policy); r >= 0 {
		return policyColors[r], policyGlyphs[r], false
	}
	return otherColors[k%len(otherColors)], otherGlyphs[k%len(otherGlyphs)], true
}

const (
	chartWidth  = 18 * vg.Centimeter
	chartHeight = 10 * vg.Centimeter
	chartDPI    = 120
)

// newChart starts a chart with a title, axis labels, a grid and a y axis
// from 0, and the legend drawn beside it (pngBytes).
func newChart(title, xLabel, yLabel string) (*plot.Plot, *plot.Legend) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.Padding = vg.Points(2)
	return p, &l
}

// renderLineChart draws series as lines with a marker per value; values
// that are NaN or infinite are left out. With c.offered, dashed lines mark
// goodput equal to the offered rate. With c.logY the y axis is
// logarithmic (so tails from 0.1 s to minutes all read) and values <= 0 are
// left out too; without any value left it falls back to a linear axis.
func renderLineChart(c lineChart, series []chartSeries) ([]byte, error) {
	logY := c.logY && slices.ContainsFunc(series, func(s chartSeries) bool {
		return slices.ContainsFunc(s.Values, func(v float64) bool { return v > 0 && !math.IsInf(v, 0) })
	})
	p, legend := newChart(c.title, c.xLabel, c.yLabel)
	var lo, hi float64 = math.Inf(1), math.Inf(-1)
	var ylo, yhi float64 = math.Inf(1), math.Inf(-1)
	others := 0
	for _, s := range series {
		var xys plotter.XYs
		for j, x := range s.X {
			y := s.Values[j]
			if math.IsNaN(y) || math.IsInf(y, 0) || logY && y <= 0 {
				continue
			}
			xys = append(xys, plotter.XY{X: x, Y: y})
			lo, hi = min(lo, x), max(hi, x)
			ylo, yhi = min(ylo, y), max(yhi, y)
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		col, g, dashed := policyStyle(s.Policy, others)
		if dashed {
			others++
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(2)}
		}
		line.Color, line.Width = col, vg.Points(1.5)
		points.Color, points.Shape, points.Radius = col, g, vg.Points(3)
		p.Add(line, points)
		legend.Add(cmp.Or(s.Label, s.Policy), line, points)
	}
	if c.offered != nil && lo <= hi {
		for i, xys := range c.offered(lo, hi) {
			ref, err := plotter.NewLine(xys)
			if err != nil {
				return nil, err
			}
			ref.Color, ref.Dashes = color.Gray{Y: 0x60}, []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(ref)
			if i == 0 {
				legend.Add("offered rate", ref)
			}
		}
	}
	if logY {
		// Whole decades around the values, so the axis has labels.
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		// (A hair below the decade: plot.LogTicks truncates the log of
		// its minimum, and log10(0.1) comes out just above −1.)
		p.Y.Min = math.Pow10(int(math.Floor(math.Log10(ylo)))) * 0.999
		p.Y.Max = math.Pow10(int(math.Ceil(math.Log10(yhi))))
		if p.Y.Max <= p.Y.Min {
			p.Y.Max = p.Y.Min * 10
		}
	}
	if lo <= hi {
		// The x values with a little room on both sides.
		pad := max((hi-lo)*0.08, hi*0.04)
		if c.xTicks != nil {
			pad = max(pad, 0.25) // room for a marker at a whole fleet size
		}
		p.X.Min, p.X.Max = max(0, lo-pad), hi+pad
	}
	if c.xTicks != nil {
		ticks := make([]plot.Tick, len(c.xTicks))
		for i, x := range c.xTicks {
			ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)}
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
	}
	return pngBytes(p, legend)
}

// pngBytes draws p on a white canvas of the charts' size, with legend in
// a column to its right, and encodes it.
func pngBytes(p *plot.Plot, legend *plot.Legend) ([]byte, error) {
	c := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(chartWidth, chartHeight), vgimg.UseDPI(chartDPI))}
	dc := draw.New(c)
	r := legend.Rectangle(dc)
	column := r.Max.X - r.Min.X + 0.5*vg.Centimeter
	p.Draw(draw.Crop(dc, 0, -column, 0, 0))
	legend.Draw(draw.Crop(dc, chartWidth-column+0.2*vg.Centimeter, 0, 0, -1.2*vg.Centimeter))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Package plot draws simple line charts as standalone SVG documents: one or
// more panels stacked vertically, each with axes, "nice" ticks, a legend,
// one polyline per series and optional vertical markers (events such as
// migrations). It writes SVG by hand with the standard library only, so a
// benchmark can leave a picture next to its numbers without a plotting
// toolchain.
package plot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Point is one sample of a series.
type Point struct{ X, Y float64 }

// Series is one line of a chart. Points are drawn in order; NaN or infinite
// coordinates break the line.
type Series struct {
	Name   string
	Points []Point
	// Color is an SVG color; "" picks the next one of the palette.
	Color string
	// Dashed draws the line dashed.
	Dashed bool
}

// Marker is a vertical line at X, for an event.
type Marker struct {
	X     float64
	Label string // drawn rotated along the line; "" for none
	// Color is an SVG color; "" means grey.
	Color string
}

// Span is a shaded stretch of the x axis, for a phase such as a warm-up.
type Span struct {
	X0, X1 float64
	Label  string // drawn at the bottom left of the span; "" for none
	// Color is an SVG color; "" means light grey.
	Color string
}

// Chart is one panel: axes, series and markers.
type Chart struct {
	Title          string
	XLabel, YLabel string
	Series         []Series
	Markers        []Marker
	// YMin and YMax fix the y axis when YMax > YMin; otherwise it spans the
	// data (and 0, when ZeroY is set).
	YMin, YMax float64
	// ZeroY includes 0 in an automatic y axis.
	ZeroY bool
	// XMin and XMax fix the x axis when XMax > XMin; otherwise it spans the
	// data and the markers.
	XMin, XMax float64
	// MarkerName labels the markers in the legend (default "events"); the
	// legend adds their count.
	MarkerName string
	// Spans are shaded behind the series.
	Spans []Span
	// Headroom is the fraction of an automatic y axis's data span left
	// free above the data, so that the highest line is not on the edge.
	Headroom float64
}

// Figure is a stack of charts sharing a width.
type Figure struct {
	Title string
	// Headline is the result in one line, drawn bold under the title.
	Headline string
	// Notes are short lines printed under the title (for example what was
	// emulated).
	Notes []string
	// Width is the SVG width in pixels (default 900); PanelHeight is each
	// chart's height including its title and axis labels (default 320).
	Width, PanelHeight int
	Charts             []Chart
}

// Palette is the default series colors, in order.
var Palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// layout constants, in pixels.
const (
	marginLeft      = 70
	legendWidth     = 240
	marginRight     = 20
	panelTop        = 34 // chart title above the plot area
	panelBottom     = 46 // tick labels and x label under it
	titleHeight     = 34
	noteHeight      = 16
	headlineHeight  = 24
	markerLabelRows = 3 // rows of marker labels at the top of a chart
	tickLen         = 5
	fontFamily      = "DejaVu Sans, Helvetica, Arial, sans-serif"
	maxLabelMark    = 40 // markers beyond this many are drawn without labels
)

// WriteFile writes the figure's SVG to path.
func (f *Figure) WriteFile(path string) error {
	var b bytes.Buffer
	if err := f.Write(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// PNG renders the SVG file svgPath as a PNG beside it (same name, .png)
// with rsvg-convert or ImageMagick's convert, whichever is installed, and
// returns the PNG's path.
func PNG(svgPath string) (string, error) {
	png := strings.TrimSuffix(svgPath, filepath.Ext(svgPath)) + ".png"
	var cmd *exec.Cmd
	if p, err := exec.LookPath("rsvg-convert"); err == nil {
		cmd = exec.Command(p, "-b", "white", "-o", png, svgPath)
	} else if p, err := exec.LookPath("convert"); err == nil {
		cmd = exec.Command(p, "-background", "white", "-density", "110", svgPath, png)
	} else {
		return "", errors.New("plot: no PNG: install librsvg2-bin (rsvg-convert) or imagemagick (convert)")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("plot: %s: %v: %s", cmd.Path, err, bytes.TrimSpace(out))
	}
	return png, nil
}

// Write writes the figure as a standalone SVG document.
func (f *Figure) Write(w io.Writer) error {
	width := f.Width
	if width <= 0 {
		width = 900
	}
	ph := f.PanelHeight
	if ph <= 0 {
		ph = 320
	}
	top := 10
	if f.Title != "" {
		top += titleHeight
	}
	top += noteHeight * len(f.Notes)
	if f.Headline != "" {
		top += headlineHeight
	}
	height := top + ph*len(f.Charts) + 10

	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n",
		width, height, width, height, fontFamily)
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", width, height)
	y := 10
	if f.Title != "" {
		fmt.Fprintf(&b, `<text class="title" x="%d" y="%d" font-size="16" font-weight="bold">%s</text>`+"\n", marginLeft-50, y+20, esc(f.Title))
		y += titleHeight
	}
	if f.Headline != "" {
		fmt.Fprintf(&b, `<text class="headline" x="%d" y="%d" font-size="15" font-weight="bold" fill="#1f4e79">%s</text>`+"\n", marginLeft-50, y+16, esc(f.Headline))
		y += headlineHeight
	}
	for _, n := range f.Notes {
		fmt.Fprintf(&b, `<text class="note" x="%d" y="%d" font-size="11" fill="#444">%s</text>`+"\n", marginLeft-50, y+11, esc(n))
		y += noteHeight
	}
	for i := range f.Charts {
		f.Charts[i].draw(&b, 0, top+i*ph, width, ph)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// draw renders the chart in the box (x0, y0, w, h).
func (c *Chart) draw(b *strings.Builder, x0, y0, w, h int) {
	px0 := float64(x0 + marginLeft)
	px1 := float64(x0 + w - legendWidth - marginRight)
	py0 := float64(y0 + panelTop)
	py1 := float64(y0 + h - panelBottom)
	fmt.Fprintf(b, `<g class="chart">`+"\n")
	if c.Title != "" {
		fmt.Fprintf(b, `<text class="chart-title" x="%s" y="%s" font-size="13" font-weight="bold">%s</text>`+"\n",
			num(px0), num(py0-12), esc(c.Title))
	}
	xmin, xmax, ymin, ymax := c.bounds()
	xt := niceTicks(xmin, xmax, 8)
	yt := niceTicks(ymin, ymax, 6)
	if c.YMax <= c.YMin && len(yt) > 0 {
		ymin, ymax = min(ymin, yt[0]), max(ymax, yt[len(yt)-1])
	}
	sx := func(x float64) float64 { return px0 + (x-xmin)/(xmax-xmin)*(px1-px0) }
	sy := func(y float64) float64 { return py1 - (y-ymin)/(ymax-ymin)*(py1-py0) }

	// grid and ticks
	fmt.Fprintf(b, `<g class="grid" stroke="#e5e5e5" stroke-width="1">`+"\n")
	for _, t := range yt {
		if t < ymin || t > ymax {
			continue
		}
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(px0), num(sy(t)), num(px1), num(sy(t)))
	}
	for _, t := range xt {
		if t < xmin || t > xmax {
			continue
		}
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(sx(t)), num(py0), num(sx(t)), num(py1))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<g class="axes" stroke="black" stroke-width="1">`+"\n")
	fmt.Fprintf(b, `<line class="axis x-axis" x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(px0), num(py1), num(px1), num(py1))
	fmt.Fprintf(b, `<line class="axis y-axis" x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(px0), num(py0), num(px0), num(py1))
	b.WriteString("</g>\n")
	for _, t := range xt {
		if t < xmin || t > xmax {
			continue
		}
		fmt.Fprintf(b, `<line class="tick x-tick" x1="%s" y1="%s" x2="%s" y2="%s" stroke="black"/>`+"\n", num(sx(t)), num(py1), num(sx(t)), num(py1+tickLen))
		fmt.Fprintf(b, `<text class="tick-label" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(sx(t)), num(py1+tickLen+13), esc(tickLabel(t, xt)))
	}
	for _, t := range yt {
		if t < ymin || t > ymax {
			continue
		}
		fmt.Fprintf(b, `<line class="tick y-tick" x1="%s" y1="%s" x2="%s" y2="%s" stroke="black"/>`+"\n", num(px0-tickLen), num(sy(t)), num(px0), num(sy(t)))
		fmt.Fprintf(b, `<text class="tick-label" x="%s" y="%s" text-anchor="end">%s</text>`+"\n", num(px0-tickLen-3), num(sy(t)+4), esc(tickLabel(t, yt)))
	}
	if c.XLabel != "" {
		fmt.Fprintf(b, `<text class="axis-label" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num((px0+px1)/2), num(py1+38), esc(c.XLabel))
	}
	if c.YLabel != "" {
		cx, cy := px0-52, (py0+py1)/2
		fmt.Fprintf(b, `<text class="axis-label" x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text>`+"\n",
			num(cx), num(cy), num(cx), num(cy), esc(c.YLabel))
	}

	// spans, behind everything else of the plot area
	for _, sp := range c.Spans {
		a, z := max(sp.X0, xmin), min(sp.X1, xmax)
		if !finite(a) || !finite(z) || z <= a {
			continue
		}
		color := sp.Color
		if color == "" {
			color = "#eeeeee"
		}
		fmt.Fprintf(b, `<rect class="span" x="%s" y="%s" width="%s" height="%s" fill="%s"/>`+"\n",
			num(sx(a)), num(py0), num(sx(z)-sx(a)), num(py1-py0), esc(color))
		if sp.Label != "" {
			fmt.Fprintf(b, `<text class="span-label" x="%s" y="%s" font-size="10" fill="#555">%s</text>`+"\n", num(sx(a)+4), num(py1-6), esc(sp.Label))
		}
	}

	// markers, clipped to the plot area; their labels run horizontally
	// along the top, each in the first of a few rows where it does not
	// overlap the label before it (a label with no room is left out)
	var rowEnd [markerLabelRows]float64
	for i := range rowEnd {
		rowEnd[i] = math.Inf(-1)
	}
	for i, m := range c.Markers {
		if !finite(m.X) || m.X < xmin || m.X > xmax {
			continue
		}
		color := m.Color
		if color == "" {
			color = "#888888"
		}
		x := sx(m.X)
		fmt.Fprintf(b, `<line class="marker" x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1" stroke-dasharray="4 3"/>`+"\n",
			num(x), num(py0), num(x), num(py1), esc(color))
		if m.Label == "" || i >= maxLabelMark {
			continue
		}
		wl := labelWidth(m.Label)
		for row := range rowEnd {
			if x+3 < rowEnd[row]+4 || x+3+wl > px1 {
				continue
			}
			rowEnd[row] = x + 3 + wl
			ly := py0 + 4 + float64(row)*14
			fmt.Fprintf(b, `<rect class="marker-label-bg" x="%s" y="%s" width="%s" height="13" fill="white" fill-opacity="0.85"/>`+"\n",
				num(x+2), num(ly), num(wl+2))
			fmt.Fprintf(b, `<text class="marker-label" x="%s" y="%s" font-size="10" fill="#333">%s</text>`+"\n",
				num(x+3), num(ly+10), esc(m.Label))
			break
		}
	}

	// series
	for i, s := range c.Series {
		color := s.Color
		if color == "" {
			color = Palette[i%len(Palette)]
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="7 4"`
		}
		for _, run := range runs(inX(s.Points, xmin, xmax)) {
			var pts strings.Builder
			for j, p := range run {
				if j > 0 {
					pts.WriteByte(' ')
				}
				pts.WriteString(num(sx(p.X)))
				pts.WriteByte(',')
				pts.WriteString(num(sy(clamp(p.Y, ymin, ymax))))
			}
			fmt.Fprintf(b, `<polyline class="series" data-series="%s" fill="none" stroke="%s" stroke-width="1.8"%s points="%s"/>`+"\n",
				esc(s.Name), esc(color), dash, pts.String())
		}
	}

	// legend, right of the plot area
	lx := px1 + 16
	ly := py0 + 6
	fmt.Fprintf(b, `<g class="legend">`+"\n")
	for i, s := range c.Series {
		color := s.Color
		if color == "" {
			color = Palette[i%len(Palette)]
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="7 4"`
		}
		yy := ly + float64(i)*18
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2.5"%s/>`+"\n", num(lx), num(yy), num(lx+22), num(yy), esc(color), dash)
		fmt.Fprintf(b, `<text class="legend-label" x="%s" y="%s">%s</text>`+"\n", num(lx+28), num(yy+4), esc(s.Name))
	}
	if len(c.Markers) > 0 {
		yy := ly + float64(len(c.Series))*18
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#888888" stroke-dasharray="4 3"/>`+"\n", num(lx+11), num(yy-7), num(lx+11), num(yy+7))
		name := c.MarkerName
		if name == "" {
			name = "events"
		}
		fmt.Fprintf(b, `<text class="legend-label" x="%s" y="%s">%s</text>`+"\n", num(lx+28), num(yy+4), esc(fmt.Sprintf("%s (%d)", name, len(c.Markers))))
	}
	b.WriteString("</g>\n</g>\n")
}

// bounds returns the axis ranges: fixed ones as given, automatic ones from
// the data, never empty.
func (c *Chart) bounds() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			if !finite(p.X) || !finite(p.Y) {
				continue
			}
			xmin, xmax = min(xmin, p.X), max(xmax, p.X)
			ymin, ymax = min(ymin, p.Y), max(ymax, p.Y)
		}
	}
	for _, m := range c.Markers {
		if finite(m.X) {
			xmin, xmax = min(xmin, m.X), max(xmax, m.X)
		}
	}
	if c.XMax > c.XMin {
		xmin, xmax = c.XMin, c.XMax
	}
	if c.YMax > c.YMin {
		ymin, ymax = c.YMin, c.YMax
	} else {
		if c.ZeroY {
			ymin, ymax = min(ymin, 0), max(ymax, 0)
		}
		if c.Headroom > 0 && finite(ymin) && finite(ymax) {
			ymax += (ymax - ymin) * c.Headroom
		}
	}
	xmin, xmax = widen(xmin, xmax)
	ymin, ymax = widen(ymin, ymax)
	return xmin, xmax, ymin, ymax
}

// widen turns an empty or degenerate range into a usable one.
func widen(lo, hi float64) (float64, float64) {
	switch {
	case !finite(lo) || !finite(hi):
		return 0, 1
	case hi > lo:
		return lo, hi
	case lo == 0:
		return 0, 1
	}
	d := math.Abs(lo) * 0.1
	return lo - d, hi + d
}

// niceTicks returns about n round tick values (steps of 1, 2 or 5 times a
// power of ten) covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if !(hi > lo) || n < 2 {
		return []float64{lo}
	}
	step := niceStep((hi - lo) / float64(n-1))
	start := math.Floor(lo/step) * step
	end := math.Ceil(hi/step) * step
	var ticks []float64
	for i := 0; ; i++ {
		t := start + float64(i)*step
		if t > end+step*1e-9 || i > 1000 {
			break
		}
		if math.Abs(t) < step*1e-9 {
			t = 0
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// niceStep rounds raw up to 1, 2, 5 or 10 times a power of ten.
func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	f := raw / p
	switch {
	case f <= 1:
		return p
	case f <= 2:
		return 2 * p
	case f <= 5:
		return 5 * p
	}
	return 10 * p
}

// tickLabel formats t with as many decimals as the tick step needs.
func tickLabel(t float64, ticks []float64) string {
	dec := 0
	if len(ticks) > 1 {
		step := math.Abs(ticks[1] - ticks[0])
		if step > 0 && step < 1 {
			dec = int(math.Ceil(-math.Log10(step) - 1e-9))
		}
	}
	a := math.Abs(t)
	if a >= 1e6 && dec == 0 {
		return strconv.FormatFloat(t, 'g', 4, 64)
	}
	return strconv.FormatFloat(t, 'f', dec, 64)
}

// inX replaces the points outside [lo, hi] on the x axis by gaps (y values
// outside the axis are clamped instead, so that a spike stays visible).
func inX(ps []Point, lo, hi float64) []Point {
	out := make([]Point, len(ps))
	for i, p := range ps {
		if p.X < lo || p.X > hi {
			p.X = math.NaN()
		}
		out[i] = p
	}
	return out
}

// runs splits points at non-finite coordinates.
func runs(ps []Point) [][]Point {
	var out [][]Point
	var cur []Point
	for _, p := range ps {
		if !finite(p.X) || !finite(p.Y) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, p)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// labelWidth estimates the width in pixels of s at font size 10.
func labelWidth(s string) float64 { return 5.8 * float64(len([]rune(s))) }

func clamp(v, lo, hi float64) float64 { return max(lo, min(hi, v)) }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// num formats a pixel coordinate compactly.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// esc escapes text for an XML attribute or element.
func esc(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		case '\'':
			b.WriteString("&apos;")
		default:
			if r < 0x20 && r != '\t' && r != '\n' && r != '\r' {
				continue // not allowed in XML 1.0
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

package train

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// modeColors keeps a mode's color the same in every plot.
var modeColors = map[string]color.RGBA{
	"bsp":    {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"asp":    {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"ssp":    {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"fluent": {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
}

// plot draws test accuracy against wall time, one line per mode (its
// median run by time to target), in two panels: the whole run, and the
// last points up close with the target; as PNG and as SVG.
func (rep *Report) plot(pngPath, svgPath string) error {
	full, err := rep.panel(false)
	if err != nil {
		return err
	}
	zoom, err := rep.panel(true)
	if err != nil {
		return err
	}
	const w, h = 11 * vg.Inch, 4.5 * vg.Inch
	draw2 := func(c draw.Canvas) {
		tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		cs := plot.Align([][]*plot.Plot{{full, zoom}}, tiles, c)
		full.Draw(cs[0][0])
		zoom.Draw(cs[0][1])
	}
	png := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))}
	draw2(draw.New(png))
	if err := writeTo(pngPath, png.WriteTo); err != nil {
		return err
	}
	svg := vgsvg.New(w, h)
	draw2(draw.New(svg))
	return writeTo(svgPath, svg.WriteTo)
}

func writeTo(path string, write func(io.Writer) (int64, error)) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := write(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func (rep *Report) panel(zoom bool) (*plot.Plot, error) {
	c := rep.Config
	p := plot.New()
	p.Title.Text = fmt.Sprintf("MNIST MLP, %d workers x %d servers", c.Workers, c.Servers)
	if note := c.stragglerNote(); note != "" && !zoom {
		p.Title.Text += "\n" + note
	}
	if zoom {
		p.Title.Text = "the end, up close"
	}
	p.X.Label.Text = "wall time since the start of training (s)"
	p.Y.Label.Text = "test accuracy (%)"
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	lo, hi, x0 := 100.0, 0.0, math.Inf(1)
	for _, row := range rep.Rows {
		run := rep.plotted(row)
		if run == nil {
			continue
		}
		var xys plotter.XYs
		for _, pt := range run.Curve {
			xys = append(xys, plotter.XY{X: pt.Seconds, Y: 100 * pt.Accuracy})
		}
		// Up close: the last half of the points.
		if zoom {
			xys = xys[len(xys)/2:]
		}
		for _, xy := range xys {
			lo, hi, x0 = min(lo, xy.Y), max(hi, xy.Y), min(x0, xy.X)
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		col, ok := modeColors[row.Mode]
		if !ok {
			col = color.RGBA{A: 0xff}
		}
		line.Color, points.Color = col, col
		line.Width = vg.Points(1.5)
		points.Radius = vg.Points(1.8)
		p.Add(line, points)
		p.Legend.Add(row.Mode, line, points)
	}
	if t := float64(rep.Target); !math.IsNaN(t) {
		xmax := 0.0
		for _, r := range rep.Runs {
			xmax = max(xmax, r.TotalS)
		}
		tl, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 100 * t}, {X: xmax, Y: 100 * t}})
		if err != nil {
			return nil, err
		}
		tl.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		tl.Color = color.Gray{Y: 0x70}
		p.Add(tl)
		p.Legend.Add(fmt.Sprintf("target %.2f%%", 100*t), tl)
		lo, hi = min(lo, 100*t), max(hi, 100*t)
	}
	if zoom && hi > lo {
		pad := max(0.2, (hi-lo)*0.08)
		p.Y.Min, p.Y.Max = lo-pad, min(100, hi+pad)
		p.X.Min = x0
	} else {
		p.Y.Min, p.Y.Max = 0, 100
	}
	return p, nil
}

// plotted is the run a row draws.
func (rep *Report) plotted(row *Row) *RunResult {
	for _, r := range rep.Runs {
		if r.Mode == row.Mode && r.Repeat == row.Plotted {
			return r
		}
	}
	return nil
}

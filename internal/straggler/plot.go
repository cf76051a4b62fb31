package straggler

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/plot"
	"github.com/elasticps/elasticps/message"
)

// writePlot draws the benchmark's figure: every run's iterations/s
// over time, and the elastic run's per-server load from the balancer's
// trace (busy fraction and bytes/s) with a marker for every plan and every
// move.
func writePlot(path string, o Config, rep *report) error {
	f := plot.Figure{
		Title: fmt.Sprintf("ResNet-50 (1/%s scale, %s placement), %d servers x %d workers", cli.FormatNum(o.Scale), o.Placement, o.Servers, o.Workers),
		Notes: []string{rep.Emulation},
		Width: 1000,
	}
	if len(f.Notes[0]) > 150 {
		// keep notes inside the picture
		f.Notes = splitNote(f.Notes[0], 150)
	}
	f.Headline = headline(rep.Rows)
	// One run per configuration: the median one.
	var elastic *jobResult
	var tput plot.Chart
	tput.Title = "training throughput (2 s sliding window; markers: the elastic run's plans)"
	tput.MarkerName = "elastic plans"
	tput.XLabel = "time since training started (s)"
	tput.YLabel = "iterations/s per worker"
	tput.ZeroY = true
	tput.Headroom = 0.12 // the best line (the oracle's) clear of the top edge
	if o.Iters == 0 && o.Warmup > 0 {
		tput.Spans = []plot.Span{{X0: 0, X1: o.Warmup.Seconds(), Label: "warm-up (not measured)"}}
	}
	for _, row := range rep.Rows {
		r := row.MedianRun
		s := plot.Series{Name: row.Config, Color: placementColors[row.Placement], Dashed: row.Straggler == "none"}
		for _, p := range r.throughput {
			s.Points = append(s.Points, plot.Point{X: p.T, Y: p.V})
		}
		tput.Series = append(tput.Series, s)
		if row.Placement == "elastic" && row.Straggler != "none" || elastic == nil && row.Placement == "elastic" {
			elastic = r
		}
	}
	f.Charts = append(f.Charts, tput)
	xmax := 0.0
	for _, s := range tput.Series {
		for _, p := range s.Points {
			xmax = max(xmax, p.X)
		}
	}

	if elastic != nil && elastic.trace != nil {
		tr := elastic.trace
		off := float64(tr.Start-elastic.t0) / 1e9 // balancer clock -> seconds since training started
		busy := plot.Chart{Title: fmt.Sprintf("%s: per-server busy fraction (balancer trace; markers: plans that moved blocks)", variant{"elastic", elastic.Straggler}.name()),
			XLabel: "time since training started (s)", YLabel: "busy fraction", ZeroY: true, MarkerName: "plans", Headroom: 0.3}
		rate := plot.Chart{Title: "per-server request payload handled, MB/s (balancer trace; markers: moves, by burst)",
			XLabel: "time since training started (s)", YLabel: "MB/s", ZeroY: true, MarkerName: "move bursts", Headroom: 0.3}
		var ids []int32
		for _, tp := range tr.Points {
			for id := range tp.Busy {
				if !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			rank := message.IDToRank(int(id))
			name := fmt.Sprintf("server %d", rank)
			if elastic.Straggler != "none" && rank == o.SlowRank {
				name += " (slow)"
			}
			// a server has one colour in both panels, none of the placements'
			c := serverColors[rank%len(serverColors)]
			if elastic.Straggler != "none" && rank == o.SlowRank {
				c = slowColor
			}
			bs := plot.Series{Name: name, Color: c}
			rs := plot.Series{Name: name, Color: c}
			for _, tp := range tr.Points {
				x := off + tp.At.Seconds()
				if x < -1 {
					continue
				}
				b, ok := tp.Busy[id]
				if !ok {
					b = math.NaN()
				}
				bs.Points = append(bs.Points, plot.Point{X: x, Y: b})
				rt, ok := tp.Rate[id]
				if !ok {
					rt = math.NaN()
				}
				rs.Points = append(rs.Points, plot.Point{X: x, Y: rt / 1e6})
			}
			busy.Series = append(busy.Series, bs)
			rate.Series = append(rate.Series, rs)
		}
		for _, tp := range tr.Points {
			if len(tp.Moves) == 0 {
				continue
			}
			x := off + tp.At.Seconds()
			label := fmt.Sprintf("%d moves", len(tp.Moves))
			if len(tp.Moves) == 1 {
				label = "1 move"
			}
			if tp.Plan != "" {
				if i := strings.IndexByte(tp.Plan, ':'); i > 0 {
					label = tp.Plan[:i] + ": " + label
				}
			}
			busy.Markers = append(busy.Markers, plot.Marker{X: x, Label: label, Color: "#555555"})
			tput.Markers = append(tput.Markers, plot.Marker{X: x})
		}
		// moves of one plan start within a fraction of a second of each
		// other: one marker for each such burst, labelled with its count
		// (red if one of them failed)
		var burst []float64
		failed := false
		flush := func() {
			if len(burst) == 0 {
				return
			}
			c, label := "#777777", fmt.Sprintf("%d moves", len(burst))
			if len(burst) == 1 {
				label = "1 move"
			}
			if failed {
				c, label = "#ff0000", label+" (failed)"
			}
			rate.Markers = append(rate.Markers, plot.Marker{X: burst[0], Label: label, Color: c})
			burst, failed = nil, false
		}
		for _, m := range tr.Moves {
			x := float64(m.Started-elastic.t0) / 1e9
			if len(burst) > 0 && x-burst[len(burst)-1] > 0.3 {
				flush()
			}
			burst = append(burst, x)
			failed = failed || m.Err != ""
		}
		flush()
		busy.Spans, rate.Spans = tput.Spans, tput.Spans
		f.Charts[0] = tput
		f.Charts = append(f.Charts, busy, rate)
	}
	// one time axis for all panels: from the start of training (or the
	// balancer's first record, at most a second earlier) to the end
	xmin := 0.0
	for _, c := range f.Charts {
		for _, s := range c.Series {
			for _, p := range s.Points {
				xmin = min(xmin, p.X)
			}
		}
	}
	for i := range f.Charts {
		f.Charts[i].XMin, f.Charts[i].XMax = xmin, math.Ceil(xmax)
	}
	return f.WriteFile(path)
}

// Colours by meaning, the same in every panel: a placement's throughput,
// the slow server, the other servers.
var (
	placementColors = map[string]string{"static": "#d62728", "elastic": "#1f77b4", "oracle": "#2ca02c"}
	slowColor       = "#ff7f0e"
	serverColors    = []string{"#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f", "#bcbd22"}
)

// headline is the result in one line: elastic against static and the
// oracle with the straggler ("" when there is no elastic row with a
// straggler).
func headline(rows []*tableRow) string {
	for _, r := range rows {
		if r.Placement != "elastic" || r.Straggler == "none" || r.SpeedUp <= 0 {
			continue
		}
		h := fmt.Sprintf("elastic %.1fx static", r.SpeedUp)
		if r.VsOracle > 0 {
			h += fmt.Sprintf(", %.0f%% of the oracle", 100*r.VsOracle)
		}
		return h + fmt.Sprintf(" (%s straggler, %.2f it/s per worker)", r.Straggler, r.ItPerSec)
	}
	return ""
}

// splitNote breaks a long note at "; " so lines stay under about n
// characters.
func splitNote(s string, n int) []string {
	var out []string
	cur := ""
	for len(s) > 0 {
		part := s
		rest := ""
		for i := 0; i+1 < len(s); i++ {
			if s[i] == ';' && s[i+1] == ' ' {
				part, rest = s[:i+1], s[i+2:]
				break
			}
		}
		switch {
		case cur == "":
			cur = part
		case len(cur)+1+len(part) <= n:
			cur += " " + part
		default:
			out = append(out, cur)
			cur = part
		}
		s = rest
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}

package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

// element is what the test remembers of one SVG element.
type element struct {
	name  string
	attrs map[string]string
	text  string
}

// parse decodes the document with encoding/xml (so it must be well formed)
// and returns its elements in document order.
func parse(t *testing.T, doc []byte) []element {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	var out []element
	var stack []int
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tk := tok.(type) {
		case xml.StartElement:
			e := element{name: tk.Name.Local, attrs: map[string]string{}}
			for _, a := range tk.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1]].text += string(tk)
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements")
	}
	return out
}

func count(es []element, name, class string) int {
	n := 0
	for _, e := range es {
		if e.name == name && (class == "" || strings.Contains(" "+e.attrs["class"]+" ", " "+class+" ")) {
			n++
		}
	}
	return n
}

func texts(es []element, class string) []string {
	var out []string
	for _, e := range es {
		if e.name == "text" && e.attrs["class"] == class {
			out = append(out, e.text)
		}
	}
	return out
}

func TestFigureIsValidSVGWithExpectedElements(t *testing.T) {
	f := Figure{
		Title: `Load <per> server & "plan" markers`,
		Notes: []string{"emulated: bandwidth"},
		Charts: []Chart{
			{
				Title: "busy fraction", XLabel: "time (s)", YLabel: "busy",
				Series: []Series{
					{Name: "server 0 (slow)", Points: []Point{{0, 0.9}, {1, 0.95}, {2, 0.5}, {3, 0.4}}},
					{Name: "server 1", Points: []Point{{0, 0.2}, {1, 0.25}, {2, math.NaN()}, {3, 0.4}}},
					{Name: "server 2", Points: []Point{{0, 0.2}, {3, 0.41}}, Dashed: true},
				},
				Markers:    []Marker{{X: 1.5, Label: "plan: 12 moves"}, {X: 2.5, Label: "explore"}},
				MarkerName: "plans",
				ZeroY:      true,
			},
			{
				Title: "iterations/s", XLabel: "time (s)", YLabel: "it/s",
				Series: []Series{{Name: "static", Points: []Point{{0, 2}, {10, 2.1}}}, {Name: "elastic", Points: []Point{{0, 2}, {10, 6}}}},
			},
		},
	}
	var b bytes.Buffer
	if err := f.Write(&b); err != nil {
		t.Fatal(err)
	}
	es := parse(t, b.Bytes())
	if es[0].name != "svg" || es[0].attrs["width"] == "" || es[0].attrs["viewBox"] == "" {
		t.Fatalf("root element %+v, want <svg> with width and viewBox", es[0])
	}
	if got := count(es, "g", "chart"); got != 2 {
		t.Errorf("%d charts, want 2", got)
	}
	// server 1 has a NaN gap: two polylines.
	if got := count(es, "polyline", "series"); got != 6 {
		t.Errorf("%d series polylines, want 6", got)
	}
	if got := count(es, "line", "marker"); got != 2 {
		t.Errorf("%d marker lines, want 2", got)
	}
	if got := count(es, "line", "x-axis"); got != 2 {
		t.Errorf("%d x axes, want 2", got)
	}
	if got := count(es, "line", "y-axis"); got != 2 {
		t.Errorf("%d y axes, want 2", got)
	}
	if count(es, "line", "x-tick") < 4 || count(es, "line", "y-tick") < 6 {
		t.Errorf("too few ticks: %d x, %d y", count(es, "line", "x-tick"), count(es, "line", "y-tick"))
	}
	legend := strings.Join(texts(es, "legend-label"), "|")
	for _, want := range []string{"server 0 (slow)", "server 1", "server 2", "static", "elastic", "plans (2)"} {
		if !strings.Contains(legend, want) {
			t.Errorf("legend %q lacks %q", legend, want)
		}
	}
	if got := texts(es, "title"); len(got) != 1 || got[0] != `Load <per> server & "plan" markers` {
		t.Errorf("title %q not escaped and decoded back", got)
	}
	marks := strings.Join(texts(es, "marker-label"), "|")
	if marks != "plan: 12 moves|explore" {
		t.Errorf("marker labels %q", marks)
	}
	for _, e := range es {
		if e.name == "polyline" {
			for _, f := range strings.Fields(e.attrs["points"]) {
				if strings.Contains(f, "NaN") || strings.Contains(f, "Inf") {
					t.Errorf("polyline point %q", f)
				}
			}
		}
	}
}

func TestEmptyChartStillRenders(t *testing.T) {
	f := Figure{Charts: []Chart{{Title: "nothing"}}}
	var b bytes.Buffer
	if err := f.Write(&b); err != nil {
		t.Fatal(err)
	}
	es := parse(t, b.Bytes())
	if count(es, "polyline", "") != 0 || count(es, "line", "x-axis") != 1 {
		t.Errorf("empty chart: unexpected elements")
	}
}

func TestNiceTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 1, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}},
		{0, 21, []float64{0, 5, 10, 15, 20, 25}},
		{-3, 3, []float64{-4, -2, 0, 2, 4}},
	}
	for _, c := range cases {
		got := niceTicks(c.lo, c.hi, 6)
		if len(got) != len(c.want) {
			t.Errorf("niceTicks(%v, %v) = %v, want %v", c.lo, c.hi, got, c.want)
			continue
		}
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-9 {
				t.Errorf("niceTicks(%v, %v) = %v, want %v", c.lo, c.hi, got, c.want)
				break
			}
		}
	}
	if l := tickLabel(0.2, []float64{0, 0.2}); l != "0.2" {
		t.Errorf("tickLabel = %q", l)
	}
	if l := tickLabel(15, []float64{10, 15}); l != "15" {
		t.Errorf("tickLabel = %q", l)
	}
}

// The headline, a shaded span, the headroom above the data and marker
// labels that never overlap: close markers go to the next row, and one
// with no row left has no label.
func TestHeadlineSpanHeadroomAndMarkerLabels(t *testing.T) {
	f := Figure{Title: "t", Headline: "elastic 2.0x static, 90% of the oracle", Charts: []Chart{{
		Series:   []Series{{Name: "a", Points: []Point{{0, 0}, {10, 10}}}},
		Spans:    []Span{{X0: 0, X1: 4, Label: "warm-up"}},
		Headroom: 0.3,
		Markers: []Marker{{X: 5, Label: "plan one"}, {X: 5.1, Label: "plan two"}, {X: 5.2, Label: "plan three"},
			{X: 5.3, Label: "no room"}, {X: 9, Label: "later"}},
	}}}
	var b bytes.Buffer
	if err := f.Write(&b); err != nil {
		t.Fatal(err)
	}
	es := parse(t, b.Bytes())
	if got := texts(es, "headline"); len(got) != 1 || got[0] != f.Headline {
		t.Errorf("headline: %q", got)
	}
	if n := count(es, "rect", "span"); n != 1 {
		t.Errorf("%d spans drawn, want 1", n)
	}
	if got := texts(es, "span-label"); len(got) != 1 || got[0] != "warm-up" {
		t.Errorf("span labels: %q", got)
	}
	if got := strings.Join(texts(es, "marker-label"), ","); got != "plan one,plan two,plan three,later" {
		t.Errorf("marker labels: %s", got)
	}
	// data up to 10 plus 30% headroom: the axis reaches past 13 (without
	// headroom the top tick is 10, on the line)
	labels := texts(es, "tick-label")
	if last := labels[len(labels)-1]; last != "15" {
		t.Errorf("top y tick %s, want 15 (ticks %q)", last, labels)
	}
}

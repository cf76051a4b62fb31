package metrics

import (
	"bufio"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ContentType is the media type of the text exposition format 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// WriteText writes every family in the Prometheus text exposition format
// 0.0.4: families sorted by name, each with its HELP and TYPE lines, series
// sorted by their labels (label names in alphabetical order), histograms as
// cumulative _bucket{le=...} lines ending in +Inf, then _sum and _count.
// Families without series are left out, as client_golang does. It returns
// the first write error.
func (r *Registry) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	var line []byte // reused for every line: scrapes allocate little
	for _, f := range r.families() {
		ss := f.sortedSeries()
		if len(ss) == 0 {
			continue
		}
		line = append(line[:0], "# HELP "...)
		line = append(line, f.name...)
		line = append(line, ' ')
		line = appendEscaped(line, f.help, false)
		line = append(line, "\n# TYPE "...)
		line = append(line, f.name...)
		line = append(line, ' ')
		line = append(line, f.kind.String()...)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
		order := labelOrder(f.labelNames)
		for _, s := range ss {
			line = f.appendSeries(line[:0], s, order)
			if _, err := bw.Write(line); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// Handler returns an http.Handler that serves WriteText.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		// An error here is the scraper hanging up; there is no one left to
		// tell.
		_ = r.WriteText(w)
	})
}

// labelOrder returns the indices of names in alphabetical order of names.
func labelOrder(names []string) []int {
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	return idx
}

func (f *family) sortedSeries() []*series {
	m := f.loadSeries()
	ss := make([]*series, 0, len(m))
	for _, s := range m {
		ss = append(ss, s)
	}
	order := labelOrder(f.labelNames)
	slices.SortFunc(ss, func(a, b *series) int {
		for _, i := range order {
			if c := strings.Compare(a.values[i], b.values[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	return ss
}

// appendSeries appends the sample lines of one series.
func (f *family) appendSeries(b []byte, s *series, order []int) []byte {
	switch {
	case s.fn != nil:
		return appendSample(b, f.name, "", f.labelNames, s.values, order, "", s.fn())
	case s.c != nil:
		return appendSample(b, f.name, "", f.labelNames, s.values, order, "", s.c.Value())
	case s.g != nil:
		return appendSample(b, f.name, "", f.labelNames, s.values, order, "", s.g.Value())
	}
	cum, sum := s.h.snapshot()
	for i, n := range cum {
		le := "+Inf"
		if i < len(f.upper) {
			le = formatFloat(f.upper[i])
		}
		b = appendSample(b, f.name, "_bucket", f.labelNames, s.values, order, le, float64(n))
	}
	b = appendSample(b, f.name, "_sum", f.labelNames, s.values, order, "", sum)
	return appendSample(b, f.name, "_count", f.labelNames, s.values, order, "", float64(cum[len(cum)-1]))
}

// appendSample appends `name+suffix{labels[,le="le"]} value\n`.
func appendSample(b []byte, name, suffix string, names, values []string, order []int, le string, v float64) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	if len(names) > 0 || le != "" {
		b = append(b, '{')
		for n, i := range order {
			if n > 0 {
				b = append(b, ',')
			}
			b = append(b, names[i]...)
			b = append(b, `="`...)
			b = appendEscaped(b, values[i], true)
			b = append(b, '"')
		}
		if le != "" {
			if len(order) > 0 {
				b = append(b, ',')
			}
			b = append(b, `le="`...)
			b = append(b, le...)
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = append(b, formatFloat(v)...)
	return append(b, '\n')
}

// appendEscaped escapes what the format requires: backslash and newline
// everywhere, and the double quote inside label values. Invalid UTF-8 (the
// format is UTF-8) becomes U+FFFD instead of corrupting the output.
func appendEscaped(b []byte, s string, quote bool) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// formatFloat writes whole numbers (counts, bytes, epochs) in plain digits
// rather than Go's exponent form, which Prometheus also accepts but people
// read worse; everything else in the shortest exact form.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, +1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	case v == math.Trunc(v) && math.Abs(v) < 1<<53:
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

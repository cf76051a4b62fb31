package metrics

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file is a deliberately small, strict parser of the text exposition
// format 0.0.4, written from the format description rather than from
// text.go, so that the tests check the output against the format and not
// against the writer's own idea of it.

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type parsedFamily struct {
	name, help, typ string
	samples         []sample
}

// parseExposition parses and checks the whole text: every line is a HELP,
// a TYPE or a sample; each family's HELP and TYPE come once, before its
// samples; samples belong to the family just declared (with _bucket, _sum
// and _count for histograms); label names are valid and unique; no series
// repeats; histograms have cumulative buckets ending in le="+Inf" equal to
// _count; the text ends with a newline.
func parseExposition(text string) ([]parsedFamily, error) {
	if text == "" {
		return nil, nil
	}
	if !strings.HasSuffix(text, "\n") {
		return nil, fmt.Errorf("output does not end with a newline")
	}
	var fams []parsedFamily
	seenFam := map[string]bool{}
	var cur *parsedFamily
	seenSeries := map[string]bool{}
	for n, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		fail := func(format string, a ...any) error {
			return fmt.Errorf("line %d %q: %s", n+1, line, fmt.Sprintf(format, a...))
		}
		switch {
		case strings.HasPrefix(line, "# HELP "):
			rest := strings.TrimPrefix(line, "# HELP ")
			name, help, ok := strings.Cut(rest, " ")
			if !ok {
				return nil, fail("HELP without text")
			}
			if seenFam[name] {
				return nil, fail("family %s declared twice", name)
			}
			if err := validMetricName(name); err != nil {
				return nil, fail("%v", err)
			}
			h, err := unescape(help, false)
			if err != nil {
				return nil, fail("%v", err)
			}
			seenFam[name] = true
			fams = append(fams, parsedFamily{name: name, help: h})
			cur = &fams[len(fams)-1]
		case strings.HasPrefix(line, "# TYPE "):
			name, typ, ok := strings.Cut(strings.TrimPrefix(line, "# TYPE "), " ")
			if !ok || cur == nil || name != cur.name || cur.typ != "" || len(cur.samples) > 0 {
				return nil, fail("TYPE must follow the family's HELP, once, before its samples")
			}
			switch typ {
			case "counter", "gauge", "histogram":
			default:
				return nil, fail("unexpected type %q", typ)
			}
			cur.typ = typ
		case strings.HasPrefix(line, "#"):
			return nil, fail("unexpected comment")
		default:
			if cur == nil || cur.typ == "" {
				return nil, fail("sample before HELP and TYPE")
			}
			s, err := parseSample(line)
			if err != nil {
				return nil, fail("%v", err)
			}
			want := []string{cur.name}
			if cur.typ == "histogram" {
				want = []string{cur.name + "_bucket", cur.name + "_sum", cur.name + "_count"}
			}
			if !contains(want, s.name) {
				return nil, fail("sample %s does not belong to family %s (%s)", s.name, cur.name, cur.typ)
			}
			_, hasLE := s.labels["le"]
			if hasLE != (s.name == cur.name+"_bucket" && cur.typ == "histogram") {
				return nil, fail("le label only and always on histogram buckets")
			}
			key := s.name + "{" + canonical(s.labels) + "}"
			if seenSeries[key] {
				return nil, fail("duplicate series %s", key)
			}
			seenSeries[key] = true
			cur.samples = append(cur.samples, s)
		}
	}
	for _, f := range fams {
		if f.typ == "" {
			return nil, fmt.Errorf("family %s has no TYPE", f.name)
		}
		if f.typ == "histogram" {
			if err := checkHistogram(f); err != nil {
				return nil, err
			}
		}
	}
	return fams, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// canonical renders labels sorted, to compare label sets.
func canonical(labels map[string]string) string {
	var keys []string
	for k := range labels {
		keys = append(keys, k)
	}
	sortStrings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q,", k, labels[k])
	}
	return b.String()
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func checkHistogram(f parsedFamily) error {
	type group struct {
		les    []float64
		counts []float64
		sum    *float64
		count  *float64
	}
	groups := map[string]*group{}
	get := func(labels map[string]string) *group {
		l := map[string]string{}
		for k, v := range labels {
			if k != "le" {
				l[k] = v
			}
		}
		k := canonical(l)
		if groups[k] == nil {
			groups[k] = &group{}
		}
		return groups[k]
	}
	for _, s := range f.samples {
		g := get(s.labels)
		switch s.name {
		case f.name + "_bucket":
			if g.sum != nil || g.count != nil {
				return fmt.Errorf("%s: bucket after _sum/_count", f.name)
			}
			le, err := parseValue(s.labels["le"])
			if err != nil {
				return fmt.Errorf("%s: le %q: %v", f.name, s.labels["le"], err)
			}
			g.les = append(g.les, le)
			g.counts = append(g.counts, s.value)
		case f.name + "_sum":
			v := s.value
			g.sum = &v
		case f.name + "_count":
			v := s.value
			g.count = &v
		}
	}
	for k, g := range groups {
		n := len(g.les)
		if n == 0 || !math.IsInf(g.les[n-1], +1) {
			return fmt.Errorf("%s{%s}: last bucket is not +Inf", f.name, k)
		}
		for i := 1; i < n; i++ {
			if !(g.les[i] > g.les[i-1]) {
				return fmt.Errorf("%s{%s}: le not increasing", f.name, k)
			}
			if g.counts[i] < g.counts[i-1] {
				return fmt.Errorf("%s{%s}: buckets not cumulative", f.name, k)
			}
		}
		if g.sum == nil || g.count == nil {
			return fmt.Errorf("%s{%s}: missing _sum or _count", f.name, k)
		}
		if *g.count != g.counts[n-1] {
			return fmt.Errorf("%s{%s}: _count %v != +Inf bucket %v", f.name, k, *g.count, g.counts[n-1])
		}
	}
	return nil
}

// parseSample parses `name[{l="v",...}] value`.
func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' {
		i++
	}
	s.name = line[:i]
	if err := validMetricName(s.name); err != nil {
		return s, err
	}
	if i < len(line) && line[i] == '{' {
		i++
		for {
			if i < len(line) && line[i] == '}' {
				i++
				break
			}
			j := i
			for j < len(line) && line[j] != '=' {
				j++
			}
			name := line[i:j]
			if err := validLabelName(name); err != nil && name != "le" {
				return s, err
			}
			if _, dup := s.labels[name]; dup {
				return s, fmt.Errorf("label %s repeated", name)
			}
			if j+1 >= len(line) || line[j+1] != '"' {
				return s, fmt.Errorf("label %s: value not quoted", name)
			}
			// Find the closing quote, skipping escaped characters.
			k := j + 2
			for k < len(line) && line[k] != '"' {
				if line[k] == '\\' {
					k++
				}
				k++
			}
			if k >= len(line) {
				return s, fmt.Errorf("label %s: unterminated value", name)
			}
			v, err := unescape(line[j+2:k], true)
			if err != nil {
				return s, err
			}
			s.labels[name] = v
			i = k + 1
			if i < len(line) && line[i] == ',' {
				i++
				continue
			}
			if i < len(line) && line[i] == '}' {
				i++
				break
			}
			return s, fmt.Errorf("expected , or } after label %s", name)
		}
	}
	if i >= len(line) || line[i] != ' ' {
		return s, fmt.Errorf("expected one space before the value")
	}
	val := line[i+1:]
	if strings.Contains(val, " ") {
		return s, fmt.Errorf("unexpected timestamp or trailing text %q", val)
	}
	v, err := parseValue(val)
	if err != nil {
		return s, err
	}
	s.value = v
	return s, nil
}

func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(+1), nil
	case "-Inf":
		return math.Inf(-1), nil
	case "NaN":
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}

// unescape reverses the format's escapes: \\ and \n, and \" in label values.
func unescape(s string, label bool) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if label && c == '"' {
			return "", fmt.Errorf("unescaped quote in %q", s)
		}
		if c == '\n' {
			return "", fmt.Errorf("raw newline in %q", s)
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i == len(s) {
			return "", fmt.Errorf("dangling backslash in %q", s)
		}
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case '"':
			if !label {
				return "", fmt.Errorf(`\" is not an escape in HELP: %q`, s)
			}
			b.WriteByte('"')
		default:
			return "", fmt.Errorf("unknown escape \\%c in %q", s[i], s)
		}
	}
	return b.String(), nil
}

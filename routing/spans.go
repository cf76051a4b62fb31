package routing

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Spans is a set of keys: a sorted list of disjoint, non-adjacent ranges.
// The coordinator and the servers keep in it the keys a server holds a
// seeded copy of.
type Spans []Range

// Add returns s with [b, e) added.
func (s Spans) Add(b, e uint64) Spans {
	if b >= e {
		return s
	}
	out := make(Spans, 0, len(s)+1)
	for _, x := range s {
		if x.End < b || x.Begin > e {
			out = append(out, x)
			continue
		}
		b, e = min(b, x.Begin), max(e, x.End)
	}
	out = append(out, Range{b, e})
	slices.SortFunc(out, func(x, y Range) int { return cmp.Compare(x.Begin, y.Begin) })
	return out
}

// Covers reports whether s holds every key of [b, e).
func (s Spans) Covers(b, e uint64) bool {
	for _, x := range s {
		if x.Begin <= b && b < x.End {
			b = x.End
		}
		if b >= e {
			return true
		}
	}
	return b >= e
}

// Within returns the parts of s inside keep.
func (s Spans) Within(keep Spans) Spans {
	var out Spans
	for _, x := range s {
		for _, k := range keep {
			if b, e := max(x.Begin, k.Begin), min(x.End, k.End); b < e {
				out = out.Add(b, e)
			}
		}
	}
	return out
}

// String is s as "[b,e) [b,e)", or "none", for logs.
func (s Spans) String() string {
	if len(s) == 0 {
		return "none"
	}
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = fmt.Sprintf("[%d,%d)", x.Begin, x.End)
	}
	return strings.Join(parts, " ")
}

// Held returns, per server, the keys r names it the primary or a backup
// of.
func Held(r *Routes) map[int32]Spans {
	h := map[int32]Spans{}
	for _, iv := range r.Intervals {
		h[iv.Node] = h[iv.Node].Add(iv.Begin, iv.End)
		for _, id := range iv.Backups {
			h[id] = h[id].Add(iv.Begin, iv.End)
		}
	}
	return h
}

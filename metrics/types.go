package metrics

import (
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// addFloat adds v to the float64 stored as bits in u. A CAS loop is the
// only lock-free way to add floats; integer adds take the cheaper path.
func addFloat(u *atomic.Uint64, v float64) {
	for {
		old := u.Load()
		if u.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Counter is a monotonically increasing value. Its methods are safe for
// concurrent use and do not allocate.
type Counter struct {
	// Whole increments (the common case: messages, bytes) go to n with one
	// atomic add; fractional ones to frac with a CAS loop. The exposed value
	// is their sum, as in client_golang.
	n    atomic.Uint64
	frac atomic.Uint64 // float64 bits
}

// Inc adds 1.
func (c *Counter) Inc() { c.n.Add(1) }

// AddInt adds n; negative n is ignored because a counter never goes down.
func (c *Counter) AddInt(n int64) {
	if n > 0 {
		c.n.Add(uint64(n))
	}
}

// Add adds v; negative and NaN values are ignored because a counter never
// goes down (a panic on the hot path would be worse than a lost sample).
func (c *Counter) Add(v float64) {
	if !(v > 0) {
		return
	}
	if v < 1<<63 {
		if u := uint64(v); float64(u) == v {
			c.n.Add(u)
			return
		}
	}
	addFloat(&c.frac, v)
}

// Value returns the current count.
func (c *Counter) Value() float64 {
	return float64(c.n.Load()) + math.Float64frombits(c.frac.Load())
}

// Gauge is a value that goes up and down. Its methods are safe for
// concurrent use and do not allocate.
type Gauge struct {
	bits atomic.Uint64 // float64 bits
}

// Set sets the gauge to v.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Add adds v (which may be negative).
func (g *Gauge) Add(v float64) { addFloat(&g.bits, v) }

// Inc adds 1.
func (g *Gauge) Inc() { g.Add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.Add(-1) }

// Value returns the current value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

// Histogram counts observations in fixed buckets. Observe is safe for
// concurrent use, takes no lock and does not allocate.
type Histogram struct {
	upper []float64 // shared with the family; read only
	// counts[i] is the number of observations in (upper[i-1], upper[i]];
	// the last element is the +Inf bucket. They are not cumulative, so an
	// observation touches one counter; the exposition sums them, and takes
	// _count from that sum so that it always equals the +Inf bucket.
	counts []atomic.Uint64
	sum    atomic.Uint64 // float64 bits
}

func newHistogram(upper []float64) *Histogram {
	return &Histogram{upper: upper, counts: make([]atomic.Uint64, len(upper)+1)}
}

// Observe records v. A value equal to a bucket's upper bound counts in that
// bucket (the "le" in the exposition means less than or equal); NaN counts
// only in +Inf.
func (h *Histogram) Observe(v float64) {
	// SearchFloat64s finds the first bound >= v, which is exactly the le
	// bucket; with ~20 bounds the binary search is a handful of compares.
	i := sort.SearchFloat64s(h.upper, v)
	h.counts[i].Add(1)
	addFloat(&h.sum, v)
}

// ObserveDuration records d in seconds, the unit Prometheus expects.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(d.Seconds()) }

// Count returns the number of observations.
func (h *Histogram) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// Sum returns the sum of the observations.
func (h *Histogram) Sum() float64 { return math.Float64frombits(h.sum.Load()) }

// snapshot returns cumulative bucket counts (last = +Inf = count) and sum.
func (h *Histogram) snapshot() ([]uint64, float64) {
	cum := make([]uint64, len(h.counts))
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
		cum[i] = n
	}
	return cum, h.Sum()
}

// CounterVec is a counter family with labels.
type CounterVec struct{ f *family }

// Get returns the counter for the label values (in the order the label
// names were registered), creating it on first use. It fails only when the
// number of values is wrong.
func (v *CounterVec) Get(values ...string) (*Counter, error) {
	s, err := v.f.get(values, func(s *series) { s.c = new(Counter) })
	if err != nil {
		return nil, err
	}
	return s.c, nil
}

// With is Get for label values fixed in the code; a wrong number of values
// is a programming error, like an index out of range, and panics. Keep the
// result on hot paths rather than calling With per event.
func (v *CounterVec) With(values ...string) *Counter {
	c, err := v.Get(values...)
	if err != nil {
		panic(err)
	}
	return c
}

// Delete removes the series with the label values and reports whether it
// existed. A *Counter obtained before keeps counting but is not exposed.
func (v *CounterVec) Delete(values ...string) bool { return v.f.delete(values) }

// GaugeVec is a gauge family with labels.
type GaugeVec struct{ f *family }

// Get returns the gauge for the label values, creating it on first use.
func (v *GaugeVec) Get(values ...string) (*Gauge, error) {
	s, err := v.f.get(values, func(s *series) { s.g = new(Gauge) })
	if err != nil {
		return nil, err
	}
	return s.g, nil
}

// With is Get that panics on a wrong number of values (see CounterVec.With).
func (v *GaugeVec) With(values ...string) *Gauge {
	g, err := v.Get(values...)
	if err != nil {
		panic(err)
	}
	return g
}

// Delete removes the series with the label values (e.g. the load gauge of a
// server that was scaled in) and reports whether it existed.
func (v *GaugeVec) Delete(values ...string) bool { return v.f.delete(values) }

// HistogramVec is a histogram family with labels.
type HistogramVec struct{ f *family }

// Get returns the histogram for the label values, creating it on first use.
func (v *HistogramVec) Get(values ...string) (*Histogram, error) {
	s, err := v.f.get(values, func(s *series) { s.h = newHistogram(v.f.upper) })
	if err != nil {
		return nil, err
	}
	return s.h, nil
}

// With is Get that panics on a wrong number of values (see CounterVec.With).
func (v *HistogramVec) With(values ...string) *Histogram {
	h, err := v.Get(values...)
	if err != nil {
		panic(err)
	}
	return h
}

// Delete removes the series with the label values and reports whether it
// existed.
func (v *HistogramVec) Delete(values ...string) bool { return v.f.delete(values) }

// DefBuckets are client_golang's default buckets (seconds), for latencies
// from 5 ms to 10 s.
var DefBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// ExponentialBuckets returns count bounds starting at start, each factor
// times the previous. It returns nil for start <= 0, factor <= 1 or
// count < 1, which registration then rejects.
func ExponentialBuckets(start, factor float64, count int) []float64 {
	if start <= 0 || factor <= 1 || count < 1 {
		return nil
	}
	b := make([]float64, count)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

// LinearBuckets returns count bounds starting at start, width apart. It
// returns nil for width <= 0 or count < 1, which registration then rejects.
func LinearBuckets(start, width float64, count int) []float64 {
	if width <= 0 || count < 1 {
		return nil
	}
	b := make([]float64, count)
	for i := range b {
		b[i] = start + float64(i)*width
	}
	return b
}

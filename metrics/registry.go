// Package metrics is a small metrics registry (counters, gauges and
// histograms with labels) and an HTTP endpoint that exposes it in the
// Prometheus text exposition format 0.0.4.
//
// It exists instead of prometheus/client_golang to keep the dependency list
// to what the project chose; the format is simple enough to write by hand.
//
// The hot path is cheap: Counter.Inc/Add, Gauge.Set/Add and
// Histogram.Observe are a few atomic operations with no lock and no
// allocation. Looking a labelled series up (CounterVec.With and friends) is
// a sync.Map load, so callers on a hot path look the series up once and keep
// the returned *Counter, *Gauge or *Histogram.
//
// Values that already live elsewhere (the postoffice's atomic Stats) are
// exposed with CounterFunc and GaugeFunc, which read them at scrape time
// rather than counting twice.
package metrics

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrDuplicate is returned when a metric family is registered again with a
// different definition, or a function series is registered twice with the
// same label values.
var ErrDuplicate = errors.New("metrics: duplicate registration")

// Label is one label name and value of a function series.
type Label struct {
	Name, Value string
}

type kind uint8

const (
	kindCounter kind = iota
	kindGauge
	kindHistogram
)

func (k kind) String() string {
	switch k {
	case kindCounter:
		return "counter"
	case kindGauge:
		return "gauge"
	default:
		return "histogram"
	}
}

// Registry holds metric families by name. It is safe for concurrent use;
// the zero value is not usable, use NewRegistry.
type Registry struct {
	mu   sync.RWMutex
	fams map[string]*family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{fams: map[string]*family{}}
}

// family is one metric name with its fixed label names. Its series map is
// copy-on-write: series are created rarely and looked up often (With), so a
// lookup is an atomic load and a map read, with no lock and no allocation
// (a sync.Map would box the string key on every Load).
type family struct {
	name, help string
	kind       kind
	isFunc     bool      // series are read from functions at scrape time
	labelNames []string  // the order With takes values in
	upper      []float64 // histogram bucket upper bounds, ascending, no +Inf

	mu     sync.Mutex                         // serializes writers of series
	series atomic.Pointer[map[string]*series] // seriesKey(values) -> series; never modified once stored
}

type series struct {
	values []string // in labelNames order
	c      *Counter
	g      *Gauge
	h      *Histogram
	fn     func() float64
}

func (f *family) sameDefinition(o *family) bool {
	return f.name == o.name && f.help == o.help && f.kind == o.kind &&
		f.isFunc == o.isFunc && slices.Equal(f.labelNames, o.labelNames) &&
		slices.Equal(f.upper, o.upper)
}

func (f *family) describe() string {
	s := f.kind.String()
	if f.isFunc {
		s += " func"
	}
	return fmt.Sprintf("%s %s{%s}", s, f.name, strings.Join(f.labelNames, ","))
}

// register returns the family named def.name, creating it from def if it
// does not exist. Registering an identical definition again returns the
// existing family, so two nodes in one process (tests run whole jobs that
// way) can both set up their metrics and share them.
func (r *Registry) register(def *family) (*family, error) {
	if err := validMetricName(def.name); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, l := range def.labelNames {
		if err := validLabelName(l); err != nil {
			return nil, fmt.Errorf("metrics: %s: %w", def.name, err)
		}
		if def.kind == kindHistogram && l == "le" {
			return nil, fmt.Errorf("metrics: %s: label name \"le\" is reserved for histogram buckets", def.name)
		}
		if seen[l] {
			return nil, fmt.Errorf("metrics: %s: label name %q given twice", def.name, l)
		}
		seen[l] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.fams[def.name]; ok {
		if !f.sameDefinition(def) {
			return nil, fmt.Errorf("%w: %s is already registered as %s, not %s", ErrDuplicate, def.name, f.describe(), def.describe())
		}
		return f, nil
	}
	r.fams[def.name] = def
	return def, nil
}

// Unregister removes the family called name and reports whether it existed.
// Series handed out before keep working but are no longer exposed. It lets a
// process that stops a node and starts another register the new node's
// function metrics.
func (r *Registry) Unregister(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.fams[name]
	delete(r.fams, name)
	return ok
}

// families returns the registered families sorted by name.
func (r *Registry) families() []*family {
	r.mu.RLock()
	fs := make([]*family, 0, len(r.fams))
	for _, f := range r.fams {
		fs = append(fs, f)
	}
	r.mu.RUnlock()
	slices.SortFunc(fs, func(a, b *family) int { return strings.Compare(a.name, b.name) })
	return fs
}

// seriesKey identifies a tuple of label values. One label (the common case)
// uses the value itself; several are length prefixed so that no two tuples
// share a key whatever bytes they contain.
func seriesKey(values []string) string {
	var buf [128]byte
	return string(appendSeriesKey(buf[:0], values))
}

// appendSeriesKey appends seriesKey(values) to b. get looks the bytes up in
// the map directly (a map index by string(b) does not allocate), so that
// With allocates nothing once its series exists.
func appendSeriesKey(b []byte, values []string) []byte {
	if len(values) == 1 {
		return append(b, values[0]...)
	}
	for _, v := range values {
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
	}
	return b
}

// get returns the series for values, creating it with mk on first use.
func (f *family) get(values []string, mk func(*series)) (*series, error) {
	if len(values) != len(f.labelNames) {
		// Format a copy: passing values itself to fmt would make every
		// With call allocate its variadic slice on the heap.
		return nil, fmt.Errorf("metrics: %s takes %d label values (%s), got %d: %q",
			f.name, len(f.labelNames), strings.Join(f.labelNames, ", "), len(values), slices.Clone(values))
	}
	var buf [128]byte
	kb := appendSeriesKey(buf[:0], values)
	if m := f.series.Load(); m != nil {
		if s, ok := (*m)[string(kb)]; ok {
			return s, nil
		}
	}
	key := string(kb)
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.loadSeries()
	if s, ok := old[key]; ok {
		return s, nil
	}
	s := &series{values: slices.Clone(values)}
	mk(s)
	m := make(map[string]*series, len(old)+1)
	maps.Copy(m, old)
	m[key] = s
	f.series.Store(&m)
	return s, nil
}

func (f *family) loadSeries() map[string]*series {
	if m := f.series.Load(); m != nil {
		return *m
	}
	return nil
}

func (f *family) delete(values []string) bool {
	if len(values) != len(f.labelNames) {
		return false
	}
	key := seriesKey(values)
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.loadSeries()
	if _, ok := old[key]; !ok {
		return false
	}
	m := maps.Clone(old)
	delete(m, key)
	f.series.Store(&m)
	return true
}

// Counter registers (or returns the already registered) counter without
// labels.
func (r *Registry) Counter(name, help string) (*Counter, error) {
	v, err := r.CounterVec(name, help)
	if err != nil {
		return nil, err
	}
	return v.Get()
}

// CounterVec registers (or returns the already registered) counter family
// with the given label names.
func (r *Registry) CounterVec(name, help string, labelNames ...string) (*CounterVec, error) {
	f, err := r.register(&family{name: name, help: help, kind: kindCounter, labelNames: slices.Clone(labelNames)})
	if err != nil {
		return nil, err
	}
	return &CounterVec{f: f}, nil
}

// Gauge registers (or returns the already registered) gauge without labels.
func (r *Registry) Gauge(name, help string) (*Gauge, error) {
	v, err := r.GaugeVec(name, help)
	if err != nil {
		return nil, err
	}
	return v.Get()
}

// GaugeVec registers (or returns the already registered) gauge family with
// the given label names.
func (r *Registry) GaugeVec(name, help string, labelNames ...string) (*GaugeVec, error) {
	f, err := r.register(&family{name: name, help: help, kind: kindGauge, labelNames: slices.Clone(labelNames)})
	if err != nil {
		return nil, err
	}
	return &GaugeVec{f: f}, nil
}

// Histogram registers (or returns the already registered) histogram without
// labels. buckets are the upper bounds, strictly increasing; a trailing
// +Inf may be given or left out (it is always exposed).
func (r *Registry) Histogram(name, help string, buckets []float64) (*Histogram, error) {
	v, err := r.HistogramVec(name, help, buckets)
	if err != nil {
		return nil, err
	}
	return v.Get()
}

// HistogramVec registers (or returns the already registered) histogram
// family with the given bucket upper bounds and label names.
func (r *Registry) HistogramVec(name, help string, buckets []float64, labelNames ...string) (*HistogramVec, error) {
	upper, err := checkBuckets(buckets)
	if err != nil {
		return nil, fmt.Errorf("metrics: %s: %w", name, err)
	}
	f, err := r.register(&family{name: name, help: help, kind: kindHistogram, labelNames: slices.Clone(labelNames), upper: upper})
	if err != nil {
		return nil, err
	}
	return &HistogramVec{f: f}, nil
}

// CounterFunc registers a counter series whose value fn returns at scrape
// time. fn must be safe to call from any goroutine, must be monotonic and
// should be fast: it runs on every scrape. All series of one family must use
// the same label names (in any order); registering the same label values
// twice is an ErrDuplicate.
func (r *Registry) CounterFunc(name, help string, fn func() float64, labels ...Label) error {
	return r.registerFunc(kindCounter, name, help, fn, labels)
}

// GaugeFunc is CounterFunc for a value that may go up and down.
func (r *Registry) GaugeFunc(name, help string, fn func() float64, labels ...Label) error {
	return r.registerFunc(kindGauge, name, help, fn, labels)
}

func (r *Registry) registerFunc(k kind, name, help string, fn func() float64, labels []Label) error {
	if fn == nil {
		return fmt.Errorf("metrics: %s: nil function", name)
	}
	// Function series arrive one at a time with their labels as pairs, so
	// the family's label names are kept sorted to make the order of the
	// pairs irrelevant.
	ls := slices.Clone(labels)
	slices.SortFunc(ls, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
	names := make([]string, len(ls))
	values := make([]string, len(ls))
	for i, l := range ls {
		names[i], values[i] = l.Name, l.Value
	}
	f, err := r.register(&family{name: name, help: help, kind: k, isFunc: true, labelNames: names})
	if err != nil {
		return err
	}
	created := false
	if _, err := f.get(values, func(s *series) { s.fn = fn; created = true }); err != nil {
		return err
	}
	if !created {
		return fmt.Errorf("%w: %s{%s} already has a function", ErrDuplicate, name, formatLabelPairs(names, values))
	}
	return nil
}

func formatLabelPairs(names, values []string) string {
	parts := make([]string, len(names))
	for i := range names {
		parts[i] = names[i] + "=" + strconv.Quote(values[i])
	}
	return strings.Join(parts, ",")
}

func checkBuckets(b []float64) ([]float64, error) {
	if n := len(b); n > 0 && math.IsInf(b[n-1], +1) {
		b = b[:n-1] // +Inf is implicit
	}
	if len(b) == 0 {
		return nil, errors.New("histogram needs at least one finite bucket bound")
	}
	for i, v := range b {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("bucket bound %d is %v; bounds must be finite (+Inf is implicit)", i, v)
		}
		if i > 0 && v <= b[i-1] {
			return nil, fmt.Errorf("bucket bounds must be strictly increasing: %v after %v", v, b[i-1])
		}
	}
	return slices.Clone(b), nil
}

// validMetricName checks [a-zA-Z_:][a-zA-Z0-9_:]*, the format's rule.
func validMetricName(s string) error {
	if s == "" {
		return errors.New("metrics: empty metric name")
	}
	for i, c := range []byte(s) {
		ok := c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("metrics: invalid metric name %q: want [a-zA-Z_:][a-zA-Z0-9_:]*", s)
		}
	}
	return nil
}

// validLabelName checks [a-zA-Z_][a-zA-Z0-9_]*; names starting with "__"
// are reserved for Prometheus itself.
func validLabelName(s string) error {
	if s == "" {
		return errors.New("empty label name")
	}
	if strings.HasPrefix(s, "__") {
		return fmt.Errorf("label name %q: names starting with __ are reserved", s)
	}
	for i, c := range []byte(s) {
		ok := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("invalid label name %q: want [a-zA-Z_][a-zA-Z0-9_]*", s)
		}
	}
	return nil
}

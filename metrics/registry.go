// Package metrics sets up a node's Prometheus metrics on
// github.com/prometheus/client_golang: a Registry per node with the Go
// runtime and process collectors, the node's message counters
// (NodeMetrics), the kv layer's per-request latencies (KVMetrics), and an
// HTTP endpoint serving them (Serve). Layers above add their own families
// to a node's Registry with GetOrRegister (elastic mode's are in package
// elastic, elastic.Metrics).
//
// The hot path stays cheap: values the postoffice already counts in atomics
// are read at scrape time (CounterFunc), and the series observed per request
// are looked up once, in NewKVMetrics, never per operation.
package metrics

import (
	"errors"
	"io"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Registry is one node's metrics. It embeds the client_golang registry, so
// it is a prometheus.Registerer and prometheus.Gatherer and takes any
// collector; the zero value is not usable, use NewRegistry or
// NewNodeRegistry.
type Registry struct {
	*prometheus.Registry
	role string // NewNodeRegistry's; "" for NewRegistry
}

// NewNodeRegistry is NewRegistry for the node of role ("scheduler",
// "server" or "worker"): every series it gathers carries the label
// role=role (a series with a role label of its own keeps it), and the
// families of this package and of package elastic register only on the
// roles that observe them (see Role).
func NewNodeRegistry(role string) *Registry {
	r := NewRegistry()
	r.role = role
	return r
}

// Role is NewNodeRegistry's role, "" for a registry of NewRegistry, which
// takes every family.
func (r *Registry) Role() string { return r.role }

// takes reports whether families observed on role belong in r.
func (r *Registry) takes(role string) bool { return r.role == "" || r.role == role }

// Gather implements prometheus.Gatherer: the embedded registry's families,
// with the role label added to every series of a NewNodeRegistry. The
// label is added here rather than at registration, so that GetOrRegister
// still finds the collectors registered before.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) {
	fams, err := r.Registry.Gather()
	if r.role == "" {
		return fams, err
	}
	name, value := "role", r.role
	label := &dto.LabelPair{Name: &name, Value: &value} // shared, read only
	for _, f := range fams {
		for _, m := range f.Metric {
			i, found := slices.BinarySearchFunc(m.Label, "role", func(l *dto.LabelPair, name string) int {
				return strings.Compare(l.GetName(), name)
			})
			if !found {
				m.Label = slices.Insert(m.Label, i, label)
			}
		}
	}
	return fams, err
}

// NewRegistry returns a registry holding the Go runtime collector (go_*)
// and the process collector (process_*), the series every Prometheus user
// expects. Each node gets its own registry, so several nodes in one process
// (tests run whole jobs that way) do not collide.
func NewRegistry() *Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return &Registry{Registry: r}
}

// WriteText writes every series in the Prometheus text format, as a scrape
// of Serve's /metrics would return it (families sorted by name). It is for
// tests and debugging.
func (r *Registry) WriteText(w io.Writer) error {
	fams, err := r.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}

// GetOrRegister registers c in r, or, if a collector with the same
// definition is registered already, returns that one, so that setting the
// same families up twice on one registry shares them. A different
// definition under the same name is an error (r.Register's). Unlike
// r.Register, a duplicate is not an error.
func GetOrRegister[C prometheus.Collector](r *Registry, c C) (C, error) {
	err := r.Register(c)
	var dup prometheus.AlreadyRegisteredError
	if errors.As(err, &dup) {
		if existing, ok := dup.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

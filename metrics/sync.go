package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the families registered by NewSyncMetrics.
const (
	MetricSyncDelayed  = "elasticps_sync_delayed_requests_total"
	MetricSyncParked   = "elasticps_sync_parked_requests"
	MetricSyncParkedS  = "elasticps_sync_parked_seconds"
	MetricSyncReleases = "elasticps_sync_release_batches_total"
	MetricSyncPauses   = "elasticps_sync_pauses_total"
)

// ParkedBuckets (seconds) span 100 µs to 1 min: a parked pull waits for
// the slowest worker's iteration, which takes from a fraction of a
// millisecond (tiny models) to many seconds (a straggler).
var ParkedBuckets = []float64{
	100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// SyncMetrics are the families of a server's synchronization gate (kv's
// sync gate, PS_SYNC_MODE other than asp). Series are resolved once here.
type SyncMetrics struct {
	// Delayed{kind}: requests parked by the sync controller (each counted
	// once, however long it waits), kind KindPush or KindPull.
	Delayed *prometheus.CounterVec
	// Parked: requests parked now.
	Parked prometheus.Gauge
	// ParkedSeconds{kind}: how long each parked request waited, observed
	// when it runs.
	ParkedSeconds *prometheus.HistogramVec
	// Releases: events that let at least one parked request run (a t_min
	// advance releases a whole batch at once).
	Releases prometheus.Counter
	// Pauses: FluentPS's probabilistic pauses of the fastest worker.
	Pauses prometheus.Counter

	delayed [len(kinds)]prometheus.Counter
	parkedS [len(kinds)]prometheus.Observer
}

// AddDelayed counts n more parked pushes or pulls.
func (m *SyncMetrics) AddDelayed(pull bool, n int64) {
	if n > 0 {
		m.delayed[kindIndex(pull)].Add(float64(n))
	}
}

// ObserveParked records that a push or pull waited d parked.
func (m *SyncMetrics) ObserveParked(pull bool, d time.Duration) {
	m.parkedS[kindIndex(pull)].Observe(d.Seconds())
}

// NewSyncMetrics registers the sync families in r; again on the same
// registry, it returns the same families (several servers of one node
// share them).
func NewSyncMetrics(r *Registry) (*SyncMetrics, error) {
	var m SyncMetrics
	var errs [5]error
	m.Delayed, errs[0] = GetOrRegister(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricSyncDelayed,
		Help: "Requests the server's sync controller parked (PS_SYNC_MODE), by kind (push, pull); each counted once.",
	}, []string{"kind"}))
	m.Parked, errs[1] = GetOrRegister(r, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricSyncParked,
		Help: "Requests parked by the server's sync controller now.",
	}))
	m.ParkedSeconds, errs[2] = GetOrRegister(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    MetricSyncParkedS,
		Help:    "Time a request spent parked by the sync controller, by kind (push, pull).",
		Buckets: ParkedBuckets,
	}, []string{"kind"}))
	m.Releases, errs[3] = GetOrRegister(r, prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricSyncReleases,
		Help: "Events that released at least one parked request (a batch).",
	}))
	m.Pauses, errs[4] = GetOrRegister(r, prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricSyncPauses,
		Help: "FluentPS pauses: pulls of the fastest worker held at gap >= s.",
	}))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	for i, kind := range kinds {
		m.delayed[i] = m.Delayed.WithLabelValues(kind)
		m.parkedS[i] = m.ParkedSeconds.WithLabelValues(kind)
	}
	return &m, nil
}

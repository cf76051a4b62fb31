package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the families registered by NewKVMetrics.
const (
	MetricServerHandle    = "elasticps_server_request_handle_seconds"
	MetricWorkerRoundTrip = "elasticps_worker_round_trip_seconds"
)

// Label values used by KVMetrics.
const (
	KindPush = "push"
	KindPull = "pull"

	// PartTotal is the whole round trip seen by the worker; PartHandling
	// the time the server reports it spent handling the request; and
	// PartNetwork the rest (total - handling): transport, queueing and
	// serialization.
	PartTotal    = "total"
	PartHandling = "handling"
	PartNetwork  = "network"
)

// LatencyBuckets (seconds) span 10 µs, an RDMA round trip, to 10 s, a
// stalled request, in roughly 2.5x steps so a shift of one bucket is a
// meaningful change.
var LatencyBuckets = []float64{
	10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// KVMetrics are the per-request latency families of the kv layer, which
// every node has, elastic or not. Their series are resolved once here:
// observe them with ObserveServerHandle and ObserveRoundTrip, which cost no
// lookup and no allocation.
type KVMetrics struct {
	// ServerHandleSeconds{kind}: time a server spends handling one request,
	// from dequeue to response, kind KindPush or KindPull.
	ServerHandleSeconds *prometheus.HistogramVec
	// WorkerRoundTripSeconds{kind,part}: a worker's request round trip,
	// split into PartTotal, PartHandling (reported by the server) and
	// PartNetwork. Histograms cannot be subtracted after the fact, hence
	// the split at observation time.
	WorkerRoundTripSeconds *prometheus.HistogramVec

	// The hot-path series, indexed like kinds and parts.
	serverHandle [len(kinds)]prometheus.Observer
	roundTrip    [len(kinds)][len(parts)]prometheus.Observer
}

// kinds and parts are the label values of the resolved series, in index
// order.
var (
	kinds = [...]string{KindPush, KindPull}
	parts = [...]string{PartTotal, PartHandling, PartNetwork}
)

// kindIndex is the index in kinds of a push (false) or pull (true).
func kindIndex(pull bool) int {
	if pull {
		return 1
	}
	return 0
}

// ObserveServerHandle records that a server handled one push or pull
// request in d.
func (m *KVMetrics) ObserveServerHandle(pull bool, d time.Duration) {
	m.serverHandle[kindIndex(pull)].Observe(d.Seconds())
}

// ObserveRoundTrip records a worker's round trip of one push or pull, rtt
// in all, of which the server reported handling (0: not reported, so only
// the total is recorded).
func (m *KVMetrics) ObserveRoundTrip(pull bool, rtt, handling time.Duration) {
	o := &m.roundTrip[kindIndex(pull)]
	o[0].Observe(rtt.Seconds())
	if handling > 0 {
		o[1].Observe(handling.Seconds())
		o[2].Observe((rtt - handling).Seconds())
	}
}

// NewKVMetrics registers the kv families in r: on a NewNodeRegistry, the
// server's family on a server and the worker's on a worker (the other
// field stays nil and its Observe method does nothing). Calling it again
// on the same registry returns the same families, so several nodes in one
// process can share them.
func NewKVMetrics(r *Registry) (*KVMetrics, error) {
	var m KVMetrics
	var err1, err2 error
	for i := range kinds {
		m.serverHandle[i] = noObserver
		for j := range parts {
			m.roundTrip[i][j] = noObserver
		}
	}
	if r.takes("server") {
		m.ServerHandleSeconds, err1 = GetOrRegister(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricServerHandle,
			Help:    "Time a server spends handling one request, by kind (push, pull).",
			Buckets: LatencyBuckets,
		}, []string{"kind"}))
	}
	if r.takes("worker") {
		m.WorkerRoundTripSeconds, err2 = GetOrRegister(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricWorkerRoundTrip,
			Help:    "Worker request round trip by kind (push, pull) and part (total; handling, as reported by the server; network, the rest).",
			Buckets: LatencyBuckets,
		}, []string{"kind", "part"}))
	}
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	for i, kind := range kinds {
		if m.ServerHandleSeconds != nil {
			m.serverHandle[i] = m.ServerHandleSeconds.WithLabelValues(kind)
		}
		for j, part := range parts {
			if m.WorkerRoundTripSeconds != nil {
				m.roundTrip[i][j] = m.WorkerRoundTripSeconds.WithLabelValues(kind, part)
			}
		}
	}
	return &m, nil
}

// noObserver stands for a family this node's registry does not take.
var noObserver = prometheus.ObserverFunc(func(float64) {})

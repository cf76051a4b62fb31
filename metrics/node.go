package metrics

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StatsSource gives a node's monotonically increasing message counters. It
// is an interface so that this package does not import postoffice; see
// StatsFuncs for a one-literal adapter.
type StatsSource interface {
	SentMessages() int64
	ReceivedMessages() int64
	SentBytes() int64
	ReceivedBytes() int64
	// MalformedMessages counts messages the transport rejected.
	MalformedMessages() int64
	// DroppedMessages counts valid messages that had nowhere to go.
	DroppedMessages() int64
	// RejectedRequests counts control requests the scheduler refused.
	RejectedRequests() int64
	// ReceiveHandOvers counts the times a handler held the receive loop
	// so long that receiving went on in a new goroutine.
	ReceiveHandOvers() int64
	// ReleasedTwice counts received messages released twice (a bug in a
	// consumer; see van.ReleasedTwice).
	ReleasedTwice() int64
}

// StatsFuncs adapts loose functions to StatsSource, so that atomics can be
// exposed with method values and no new type, e.g. for postoffice.Stats:
//
//	st := po.Stats()
//	metrics.StatsFuncs{MsgsSent: st.MsgsSent.Load, MsgsRecv: st.MsgsRecv.Load, ...}
//
// A nil function reads as 0.
type StatsFuncs struct {
	MsgsSent, MsgsRecv   func() int64
	BytesSent, BytesRecv func() int64
	Malformed            func() int64
	Dropped              func() int64
	Rejected             func() int64
	HandOvers            func() int64
	Twice                func() int64
}

var _ StatsSource = StatsFuncs{}

func call(f func() int64) int64 {
	if f == nil {
		return 0
	}
	return f()
}

// SentMessages implements StatsSource.
func (s StatsFuncs) SentMessages() int64 { return call(s.MsgsSent) }

// ReceivedMessages implements StatsSource.
func (s StatsFuncs) ReceivedMessages() int64 { return call(s.MsgsRecv) }

// SentBytes implements StatsSource.
func (s StatsFuncs) SentBytes() int64 { return call(s.BytesSent) }

// ReceivedBytes implements StatsSource.
func (s StatsFuncs) ReceivedBytes() int64 { return call(s.BytesRecv) }

// MalformedMessages implements StatsSource.
func (s StatsFuncs) MalformedMessages() int64 { return call(s.Malformed) }

// DroppedMessages implements StatsSource.
func (s StatsFuncs) DroppedMessages() int64 { return call(s.Dropped) }

// RejectedRequests implements StatsSource.
func (s StatsFuncs) RejectedRequests() int64 { return call(s.Rejected) }

// ReceiveHandOvers implements StatsSource.
func (s StatsFuncs) ReceiveHandOvers() int64 { return call(s.HandOvers) }

// ReleasedTwice implements StatsSource.
func (s StatsFuncs) ReleasedTwice() int64 { return call(s.Twice) }

// Names of the node metrics registered by NodeMetrics; each has one label,
// role.
const (
	MetricMessagesSent      = "elasticps_messages_sent_total"
	MetricMessagesReceived  = "elasticps_messages_received_total"
	MetricBytesSent         = "elasticps_bytes_sent_total"
	MetricBytesReceived     = "elasticps_bytes_received_total"
	MetricMalformedMessages = "elasticps_malformed_messages_total"
	MetricDroppedMessages   = "elasticps_dropped_messages_total"
	MetricRejectedRequests  = "elasticps_rejected_requests_total"
	MetricReceiveHandOvers  = "elasticps_receive_handovers_total"
	MetricReleasedTwice     = "elasticps_messages_released_twice_total"
)

// NodeMetrics registers the standard node counters, labelled
// role="scheduler"|"server"|"worker", read from stats at scrape time (the
// node already counts them atomically; counting again would cost the hot
// path twice). One registry holds one node per role: a second node of the
// same role gets a prometheus.AlreadyRegisteredError, and a process hosting
// several should give each its own Registry or pass a StatsSource that sums
// them. Every counter is attempted; the errors are joined.
func NodeMetrics(r *Registry, role string, stats StatsSource) error {
	if stats == nil {
		return errors.New("metrics: NodeMetrics: nil StatsSource")
	}
	counter := func(name, help string, read func() int64) error {
		err := r.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: name, Help: help, ConstLabels: prometheus.Labels{"role": role},
		}, func() float64 { return float64(read()) }))
		if err != nil {
			return fmt.Errorf("metrics: %s{role=%q}: %w", name, role, err)
		}
		return nil
	}
	return errors.Join(
		counter(MetricMessagesSent, "Messages sent by the node, data and control.", stats.SentMessages),
		counter(MetricMessagesReceived, "Messages received by the node, data and control.", stats.ReceivedMessages),
		counter(MetricBytesSent, "Bytes sent by the node (meta and payload).", stats.SentBytes),
		counter(MetricBytesReceived, "Bytes received by the node (meta and payload).", stats.ReceivedBytes),
		counter(MetricMalformedMessages, "Messages the transport rejected as malformed; the node kept serving.", stats.MalformedMessages),
		counter(MetricDroppedMessages, "Valid messages dropped because nothing was there to take them.", stats.DroppedMessages),
		counter(MetricRejectedRequests, "Control requests the scheduler refused.", stats.RejectedRequests),
		counter(MetricReceiveHandOvers, "Times a message handler ran on the receive goroutine so long that receiving went on in a new goroutine.", stats.ReceiveHandOvers),
		counter(MetricReleasedTwice, "Received messages released twice, in the whole process (a bug in a consumer: the second release was refused); 0 in a correct program.", stats.ReleasedTwice),
	)
}

// Label values used by ElasticMetrics.
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

	ResultOK      = "ok"      // migration committed
	ResultAborted = "aborted" // migration rolled back on purpose (superseded plan, scale change)
	ResultFailed  = "failed"  // migration gave up on an error (peer died, timeout)
)

// LatencyBuckets (seconds) span 10 µs, an RDMA round trip, to 10 s, a
// stalled request, in roughly 2.5x steps so a shift of one bucket is a
// meaningful change.
var LatencyBuckets = []float64{
	10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// StallBuckets (seconds) span 1 ms to 1 min: how long a key range migration
// held requests for the range.
var StallBuckets = []float64{1e-3, 5e-3, 10e-3, 50e-3, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// ElasticMetrics are the families the elastic layer (load measurement,
// rebalance, migration) reports. The per-request series are resolved once
// here: observe them with ObserveServerHandle and ObserveRoundTrip, which
// cost no lookup and no allocation.
type ElasticMetrics struct {
	// ServerHandleSeconds{kind}: time a server spends handling one request,
	// from dequeue to response, kind KindPush or KindPull.
	ServerHandleSeconds *prometheus.HistogramVec
	// WorkerRoundTripSeconds{kind,part}: a worker's request round trip,
	// split into PartTotal, PartHandling (reported by the server) and
	// PartNetwork. Histograms cannot be subtracted after the fact, hence
	// the split at observation time.
	WorkerRoundTripSeconds *prometheus.HistogramVec
	// ServerLoadBytes{server} and ServerLoadRequests{server}: the measured
	// load per server (bytes/s, requests/s) that the planner uses; server
	// is the ps node id. Delete a server's series when it leaves.
	ServerLoadBytes    *prometheus.GaugeVec
	ServerLoadRequests *prometheus.GaugeVec
	// MigrationsTotal{result}: key range migrations by ResultOK,
	// ResultAborted or ResultFailed; all three exist from the start at 0.
	MigrationsTotal *prometheus.CounterVec
	// MigrationStallSeconds: how long each migration held requests for its
	// range.
	MigrationStallSeconds prometheus.Histogram
	// RoutingEpoch: the version of the routing table in force.
	RoutingEpoch prometheus.Gauge
	// ControlUnansweredTotal{node,message}: elastic control requests this
	// node sent that node (the peer's ps id) did not answer within the
	// caller's timeout, by message (routes, prepare, import, ...).
	ControlUnansweredTotal *prometheus.CounterVec

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
func (m *ElasticMetrics) ObserveServerHandle(pull bool, d time.Duration) {
	m.serverHandle[kindIndex(pull)].Observe(d.Seconds())
}

// ObserveRoundTrip records a worker's round trip of one push or pull, rtt
// in all, of which the server reported handling (0: not reported, so only
// the total is recorded).
func (m *ElasticMetrics) ObserveRoundTrip(pull bool, rtt, handling time.Duration) {
	o := &m.roundTrip[kindIndex(pull)]
	o[0].Observe(rtt.Seconds())
	if handling > 0 {
		o[1].Observe(handling.Seconds())
		o[2].Observe((rtt - handling).Seconds())
	}
}

// NewElasticMetrics registers the elastic families in r. Calling it again
// on the same registry returns the same families, so several nodes in one
// process can share them.
func NewElasticMetrics(r *Registry) (*ElasticMetrics, error) {
	var m ElasticMetrics
	var errs []error
	keep := func(err error) { errs = append(errs, err) }
	var err error
	m.ServerHandleSeconds, err = register(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "elasticps_server_request_handle_seconds",
		Help:    "Time a server spends handling one request, by kind (push, pull).",
		Buckets: LatencyBuckets,
	}, []string{"kind"}))
	keep(err)
	m.WorkerRoundTripSeconds, err = register(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "elasticps_worker_round_trip_seconds",
		Help:    "Worker request round trip by kind (push, pull) and part (total; handling, as reported by the server; network, the rest).",
		Buckets: LatencyBuckets,
	}, []string{"kind", "part"}))
	keep(err)
	m.ServerLoadBytes, err = register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "elasticps_server_load_bytes_per_second",
		Help: "Measured load of a server in payload bytes per second, by server id.",
	}, []string{"server"}))
	keep(err)
	m.ServerLoadRequests, err = register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "elasticps_server_load_requests_per_second",
		Help: "Measured load of a server in requests per second, by server id.",
	}, []string{"server"}))
	keep(err)
	m.MigrationsTotal, err = register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "elasticps_migrations_total",
		Help: "Key range migrations by result (ok, aborted, failed).",
	}, []string{"result"}))
	keep(err)
	m.MigrationStallSeconds, err = register(r, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "elasticps_migration_stall_seconds",
		Help:    "How long a key range migration held requests for the range.",
		Buckets: StallBuckets,
	}))
	keep(err)
	m.RoutingEpoch, err = register(r, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "elasticps_routing_epoch",
		Help: "Version of the routing table in force.",
	}))
	keep(err)
	m.ControlUnansweredTotal, err = register(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "elasticps_elastic_unanswered_total",
		Help: "Elastic control requests a peer did not answer within the timeout, by peer node id and message.",
	}, []string{"node", "message"}))
	keep(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, kind := range kinds {
		m.serverHandle[i] = m.ServerHandleSeconds.WithLabelValues(kind)
		for j, part := range parts {
			m.roundTrip[i][j] = m.WorkerRoundTripSeconds.WithLabelValues(kind, part)
		}
	}
	for _, result := range [...]string{ResultOK, ResultAborted, ResultFailed} {
		m.MigrationsTotal.WithLabelValues(result)
	}
	return &m, nil
}

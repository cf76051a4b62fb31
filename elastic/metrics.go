package elastic

import (
	"errors"

	"github.com/elasticps/elasticps/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Values of the result label of Metrics.MigrationsTotal.
const (
	ResultOK      = "ok"      // migration committed
	ResultAborted = "aborted" // migration rolled back on purpose (superseded plan, scale change)
	ResultFailed  = "failed"  // migration gave up on an error (peer died, timeout)
)

// StallBuckets (seconds) span 1 ms to 1 min: how long a key range migration
// held requests for the range.
var StallBuckets = []float64{1e-3, 5e-3, 10e-3, 50e-3, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Metrics are the families elastic mode (load measurement, rebalance,
// migration, its control messages) reports on a node's registry. None is
// observed per request: the coordinator sets them once per load report,
// migration or routing table, and a link on a timeout.
type Metrics struct {
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
	// caller's timeout, by message (MessageName: routes, prepare, import,
	// ...).
	ControlUnansweredTotal *prometheus.CounterVec
}

// NewMetrics registers the elastic families in r (a node's registry,
// postoffice.Metrics); on a node other than the scheduler only
// ControlUnansweredTotal, the others being the coordinator's (nil there).
// Calling it again on the same registry returns the same families, so
// every user of one node shares them.
func NewMetrics(r *metrics.Registry) (*Metrics, error) {
	var m Metrics
	var errs []error
	keep := func(err error) { errs = append(errs, err) }
	var err error
	m.ControlUnansweredTotal, err = metrics.GetOrRegister(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "elasticps_elastic_unanswered_total",
		Help: "Elastic control requests a peer did not answer within the timeout, by peer node id and message.",
	}, []string{"node", "message"}))
	keep(err)
	if r.Role() != "" && r.Role() != "scheduler" {
		// The rest are the coordinator's, which runs on the scheduler.
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		return &m, nil
	}
	m.ServerLoadBytes, err = metrics.GetOrRegister(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "elasticps_server_load_bytes_per_second",
		Help: "Measured load of a server in payload bytes per second, by server id.",
	}, []string{"server"}))
	keep(err)
	m.ServerLoadRequests, err = metrics.GetOrRegister(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "elasticps_server_load_requests_per_second",
		Help: "Measured load of a server in requests per second, by server id.",
	}, []string{"server"}))
	keep(err)
	m.MigrationsTotal, err = metrics.GetOrRegister(r, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "elasticps_migrations_total",
		Help: "Key range migrations by result (ok, aborted, failed).",
	}, []string{"result"}))
	keep(err)
	m.MigrationStallSeconds, err = metrics.GetOrRegister(r, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "elasticps_migration_stall_seconds",
		Help:    "How long a key range migration held requests for the range.",
		Buckets: StallBuckets,
	}))
	keep(err)
	m.RoutingEpoch, err = metrics.GetOrRegister(r, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "elasticps_routing_epoch",
		Help: "Version of the routing table in force.",
	}))
	keep(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// so that rate() sees a result's first migration
	for _, result := range [...]string{ResultOK, ResultAborted, ResultFailed} {
		m.MigrationsTotal.WithLabelValues(result)
	}
	return &m, nil
}

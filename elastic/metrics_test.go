package elastic

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/metrics"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// metricNames are the families NewMetrics registers.
var metricNames = []string{
	"elasticps_server_load_bytes_per_second", "elasticps_server_load_requests_per_second",
	"elasticps_migrations_total", "elasticps_migration_stall_seconds", "elasticps_routing_epoch",
	"elasticps_elastic_unanswered_total",
}

func newMetrics(t *testing.T) (*metrics.Registry, *Metrics) {
	t.Helper()
	r := metrics.NewRegistry()
	m, err := NewMetrics(r)
	require.NoError(t, err)
	return r, m
}

// TestMetricsSeries checks names, help, labels and values of every
// family.
func TestMetricsSeries(t *testing.T) {
	r, m := newMetrics(t)
	m.ServerLoadBytes.WithLabelValues("8").Set(1.5e9)
	m.ServerLoadBytes.WithLabelValues("10").Set(2)
	m.ServerLoadRequests.WithLabelValues("8").Set(1234.5)
	m.MigrationsTotal.WithLabelValues(ResultOK).Inc()
	m.MigrationsTotal.WithLabelValues(ResultFailed).Add(2)
	m.MigrationStallSeconds.Observe(0.003)
	m.MigrationStallSeconds.Observe(2)
	m.RoutingEpoch.Set(7)
	m.ControlUnansweredTotal.WithLabelValues("9", "routes").Add(2)
	assert.True(t, m.ServerLoadBytes.DeleteLabelValues("10"), "a server that left")

	const want = `# HELP elasticps_elastic_unanswered_total Elastic control requests a peer did not answer within the timeout, by peer node id and message.
# TYPE elasticps_elastic_unanswered_total counter
elasticps_elastic_unanswered_total{message="routes",node="9"} 2
# HELP elasticps_migration_stall_seconds How long a key range migration held requests for the range.
# TYPE elasticps_migration_stall_seconds histogram
elasticps_migration_stall_seconds_bucket{le="0.001"} 0
elasticps_migration_stall_seconds_bucket{le="0.005"} 1
elasticps_migration_stall_seconds_bucket{le="0.01"} 1
elasticps_migration_stall_seconds_bucket{le="0.05"} 1
elasticps_migration_stall_seconds_bucket{le="0.1"} 1
elasticps_migration_stall_seconds_bucket{le="0.25"} 1
elasticps_migration_stall_seconds_bucket{le="0.5"} 1
elasticps_migration_stall_seconds_bucket{le="1"} 1
elasticps_migration_stall_seconds_bucket{le="2.5"} 2
elasticps_migration_stall_seconds_bucket{le="5"} 2
elasticps_migration_stall_seconds_bucket{le="10"} 2
elasticps_migration_stall_seconds_bucket{le="30"} 2
elasticps_migration_stall_seconds_bucket{le="60"} 2
elasticps_migration_stall_seconds_bucket{le="+Inf"} 2
elasticps_migration_stall_seconds_sum 2.003
elasticps_migration_stall_seconds_count 2
# HELP elasticps_migrations_total Key range migrations by result (ok, aborted, failed).
# TYPE elasticps_migrations_total counter
elasticps_migrations_total{result="aborted"} 0
elasticps_migrations_total{result="failed"} 2
elasticps_migrations_total{result="ok"} 1
# HELP elasticps_routing_epoch Version of the routing table in force.
# TYPE elasticps_routing_epoch gauge
elasticps_routing_epoch 7
# HELP elasticps_server_load_bytes_per_second Measured load of a server in payload bytes per second, by server id.
# TYPE elasticps_server_load_bytes_per_second gauge
elasticps_server_load_bytes_per_second{server="8"} 1.5e+09
# HELP elasticps_server_load_requests_per_second Measured load of a server in requests per second, by server id.
# TYPE elasticps_server_load_requests_per_second gauge
elasticps_server_load_requests_per_second{server="8"} 1234.5
`
	assert.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(want), metricNames...))
	assert.Equal(t, 2.0, testutil.ToFloat64(m.ControlUnansweredTotal))
	assert.Equal(t, 7.0, testutil.ToFloat64(m.RoutingEpoch))
}

// startSeries is how many series each family has before anything
// happened: the ones known in advance exist at 0, so rate() sees their
// first increment.
var startSeries = map[string]int{
	"elasticps_migrations_total":                3, // ok, aborted, failed
	"elasticps_migration_stall_seconds":         1,
	"elasticps_routing_epoch":                   1,
	"elasticps_server_load_bytes_per_second":    0, // servers are known later
	"elasticps_server_load_requests_per_second": 0,
	"elasticps_elastic_unanswered_total":        0, // peers and messages are known later
}

func TestMetricsStartResolved(t *testing.T) {
	r, _ := newMetrics(t)
	require.ElementsMatch(t, metricNames, slices.Collect(maps.Keys(startSeries)))
	for name, want := range startSeries {
		n, err := testutil.GatherAndCount(r, name)
		require.NoError(t, err)
		assert.Equal(t, want, n, name)
	}
	assert.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(`# HELP elasticps_migrations_total Key range migrations by result (ok, aborted, failed).
# TYPE elasticps_migrations_total counter
elasticps_migrations_total{result="aborted"} 0
elasticps_migrations_total{result="failed"} 0
elasticps_migrations_total{result="ok"} 0
`), "elasticps_migrations_total"))
}

// TestNewMetricsTwiceShares: a second NewMetrics on one registry returns
// the same families, set through either.
func TestNewMetricsTwiceShares(t *testing.T) {
	r, m := newMetrics(t)
	m2, err := NewMetrics(r)
	require.NoError(t, err)
	assert.Same(t, m.ControlUnansweredTotal, m2.ControlUnansweredTotal)
	assert.Same(t, m.MigrationsTotal, m2.MigrationsTotal)
	assert.Equal(t, m.RoutingEpoch, m2.RoutingEpoch)
	m2.RoutingEpoch.Set(3)
	assert.Equal(t, 3.0, testutil.ToFloat64(m.RoutingEpoch))
	m.MigrationsTotal.WithLabelValues(ResultOK).Inc()
	m2.MigrationsTotal.WithLabelValues(ResultOK).Inc()
	assert.Equal(t, 2.0, testutil.ToFloat64(m.MigrationsTotal.WithLabelValues(ResultOK)))
	n, err := testutil.GatherAndCount(r, "elasticps_migrations_total")
	require.NoError(t, err)
	assert.Equal(t, 3, n, "one family, not two")
}

// TestNewMetricsConflict: a name taken by another definition is an error,
// not a silent second family.
func TestNewMetricsConflict(t *testing.T) {
	r := metrics.NewRegistry()
	r.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "elasticps_routing_epoch", Help: "Something else."}))
	m, err := NewMetrics(r)
	assert.Nil(t, m)
	assert.ErrorContains(t, err, "elasticps_routing_epoch")
}

// TestMetricNamesFollowConventions runs promlint over the elastic
// families.
func TestMetricNamesFollowConventions(t *testing.T) {
	r, m := newMetrics(t)
	// one series in every family, so that each is linted
	m.ServerLoadBytes.WithLabelValues("8").Set(1)
	m.ServerLoadRequests.WithLabelValues("8").Set(1)
	m.ControlUnansweredTotal.WithLabelValues("8", "routes").Inc()
	problems, err := testutil.GatherAndLint(r, metricNames...)
	require.NoError(t, err)
	assert.Empty(t, problems)
	n, err := testutil.GatherAndCount(r, metricNames...)
	require.NoError(t, err)
	assert.Equal(t, 1+1+3+1+1+1, n, "every family was gathered")
}

// nodeSeries is what a scrape of an elastic node of role shows of the
// project's families before anything happened: family name -> series.
// Every node has its counters, a server the kv server's family, a worker
// the kv worker's, and the scheduler, with its Link, the coordinator's.
func nodeSeries(role message.Role) map[string]int {
	s := map[string]int{
		metrics.MetricMessagesSent: 1, metrics.MetricMessagesReceived: 1,
		metrics.MetricBytesSent: 1, metrics.MetricBytesReceived: 1,
		metrics.MetricMalformedMessages: 1, metrics.MetricDroppedMessages: 1,
		metrics.MetricRejectedRequests: 1, metrics.MetricReceiveHandOvers: 1,
		metrics.MetricReleasedTwice: 1,
		metrics.MetricLimitRefusals: postoffice.RefusalReasons, // one series per limit
	}
	switch role {
	case message.RoleServer:
		s[metrics.MetricServerHandle] = 2
	case message.RoleWorker:
		s[metrics.MetricWorkerRoundTrip] = 6
	case message.RoleScheduler:
		s["elasticps_migrations_total"] = 3
		s["elasticps_migration_stall_seconds"] = 1
		s["elasticps_routing_epoch"] = 1
	}
	return s
}

// projectFamilies gathers g and returns the elasticps_ families with their
// series counts, and whether the Go and process collectors are there.
func projectFamilies(t *testing.T, g prometheus.Gatherer) (map[string]int, bool) {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	got := map[string]int{}
	var goRuntime, process bool
	for _, f := range fams {
		switch name := f.GetName(); {
		case strings.HasPrefix(name, "elasticps_"):
			got[name] = len(f.GetMetric())
		case name == "go_goroutines":
			goRuntime = true
		case name == "process_cpu_seconds_total":
			process = true
		}
	}
	return got, goRuntime && process
}

// TestNodeScrapeShowsEveryFamily: a node of each role with its elastic
// link shows the families of its role (nodeSeries); without a link (a node of a job that is not
// elastic) it shows none of the elastic ones.
func TestNodeScrapeShowsEveryFamily(t *testing.T) {
	for _, role := range []message.Role{message.RoleScheduler, message.RoleServer, message.RoleWorker} {
		t.Run(role.String(), func(t *testing.T) {
			po, err := postoffice.Open(postoffice.Config{Role: role, NumServers: 1, NumWorkers: 1, Elastic: true,
				SchedulerHost: "127.0.0.1", SchedulerPort: 1, NodeHost: "127.0.0.1"})
			require.NoError(t, err)
			t.Cleanup(po.Stop)

			got, runtime := projectFamilies(t, po.Metrics())
			assert.True(t, runtime, "go_* and process_* collectors")
			for _, name := range metricNames {
				assert.NotContains(t, got, name, "no link, no elastic families")
			}

			l, err := NewLink(po)
			require.NoError(t, err)
			got, runtime = projectFamilies(t, po.Metrics())
			assert.True(t, runtime, "go_* and process_* collectors")
			assert.Equal(t, nodeSeries(role), got)

			// the link's metrics are the node's: whoever asks its registry
			// gets the same families
			m, err := NewMetrics(po.Metrics())
			require.NoError(t, err)
			assert.Same(t, l.Metrics().ControlUnansweredTotal, m.ControlUnansweredTotal)
			if role == message.RoleScheduler {
				m.RoutingEpoch.Set(5)
				assert.Equal(t, 5.0, testutil.ToFloat64(l.Metrics().RoutingEpoch))
			} else {
				assert.Nil(t, m.RoutingEpoch, "the coordinator's families are the scheduler's")
			}
		})
	}
}

// TestNewLinkFailsOnAConflictingFamily: a node whose registry holds
// another family under an elastic name gets no link (and no elastic app).
func TestNewLinkFailsOnAConflictingFamily(t *testing.T) {
	po, err := postoffice.Open(postoffice.Config{Role: message.RoleWorker, NumServers: 1, NumWorkers: 1,
		SchedulerHost: "127.0.0.1", SchedulerPort: 1, NodeHost: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(po.Stop)
	po.Metrics().MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "elasticps_elastic_unanswered_total", Help: "Something else."}))
	l, err := NewLink(po)
	assert.Nil(t, l)
	assert.ErrorContains(t, err, "elasticps_elastic_unanswered_total")
	assert.ErrorContains(t, err, "elastic: metrics: ")

	// the elastic app was not registered: its id is free
	_, err = kv.NewSimpleApp(po, AppID, AppID)
	assert.NoError(t, err)
	_, err = kv.NewSimpleApp(po, AppID, AppID)
	assert.Error(t, err, "an app id is registered once per node")
}

// Nodes other than the scheduler, where the coordinator runs, have only
// the family of unanswered control requests.
func TestMetricsOnlyTheSchedulerHasTheCoordinators(t *testing.T) {
	for role, want := range map[string]int{"scheduler": len(metricNames), "server": 1, "worker": 1} {
		r := metrics.NewNodeRegistry(role)
		m, err := NewMetrics(r)
		require.NoError(t, err)
		m.ControlUnansweredTotal.WithLabelValues("8", "routes").Inc()
		if role == "scheduler" {
			m.RoutingEpoch.Set(1)
			m.ServerLoadBytes.WithLabelValues("8").Set(1)
			m.ServerLoadRequests.WithLabelValues("8").Set(1)
			m.MigrationStallSeconds.Observe(1)
		}
		n := 0
		for _, name := range metricNames {
			if c, err := testutil.GatherAndCount(r, name); err == nil && c > 0 {
				n++
			}
		}
		assert.Equal(t, want, n, role)
	}
}

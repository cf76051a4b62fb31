package metrics

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	_ prometheus.Registerer = (*Registry)(nil)
	_ prometheus.Gatherer   = (*Registry)(nil)
)

// nodeMetricNames are the families NodeMetrics registers.
var nodeMetricNames = []string{
	MetricMessagesSent, MetricMessagesReceived, MetricBytesSent, MetricBytesReceived,
	MetricMalformedMessages, MetricDroppedMessages, MetricRejectedRequests,
	MetricReceiveHandOvers, MetricReleasedTwice,
}

// elasticMetricNames are the families NewElasticMetrics registers.
var elasticMetricNames = []string{
	"elasticps_server_request_handle_seconds", "elasticps_worker_round_trip_seconds",
	"elasticps_server_load_bytes_per_second", "elasticps_server_load_requests_per_second",
	"elasticps_migrations_total", "elasticps_migration_stall_seconds", "elasticps_routing_epoch",
	"elasticps_elastic_unanswered_total",
}

func newElastic(t testing.TB) (*Registry, *ElasticMetrics) {
	t.Helper()
	r := NewRegistry()
	em, err := NewElasticMetrics(r)
	require.NoError(t, err)
	return r, em
}

// histogram returns the count and sum of the series of family name whose
// labels are exactly labels (name, value pairs).
func histogram(t *testing.T, g prometheus.Gatherer, name string, labels ...string) (uint64, float64) {
	t.Helper()
	fams, err := g.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelsAre(m, labels) {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	require.Failf(t, "no such series", "%s%q", name, labels)
	return 0, 0
}

func labelsAre(m *dto.Metric, pairs []string) bool {
	if len(m.GetLabel()) != len(pairs)/2 {
		return false
	}
	for i := 0; i < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == pairs[i] && l.GetValue() == pairs[i+1])
		}
		if !found {
			return false
		}
	}
	return true
}

func TestNewRegistryHasGoAndProcessCollectors(t *testing.T) {
	r := NewRegistry()
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		n, err := testutil.GatherAndCount(r, name)
		require.NoError(t, err)
		assert.Equal(t, 1, n, name)
	}
	// two registries in one process (two nodes) each have their own
	_, err := NewElasticMetrics(NewRegistry())
	require.NoError(t, err)
	n, err := testutil.GatherAndCount(NewRegistry(), "go_goroutines")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

type fakeStats struct{ base int64 }

func (f fakeStats) SentMessages() int64      { return f.base + 1 }
func (f fakeStats) ReceivedMessages() int64  { return f.base + 2 }
func (f fakeStats) SentBytes() int64         { return f.base + 3 }
func (f fakeStats) ReceivedBytes() int64     { return f.base + 4 }
func (f fakeStats) MalformedMessages() int64 { return f.base + 5 }
func (f fakeStats) DroppedMessages() int64   { return f.base + 6 }
func (f fakeStats) RejectedRequests() int64  { return f.base + 7 }
func (f fakeStats) ReceiveHandOvers() int64  { return f.base + 8 }
func (f fakeStats) ReleasedTwice() int64     { return f.base + 9 }

const nodeMetricsGolden = `# HELP elasticps_bytes_received_total Bytes received by the node (meta and payload).
# TYPE elasticps_bytes_received_total counter
elasticps_bytes_received_total{role="server"} 1.099511627776e+12
elasticps_bytes_received_total{role="worker"} 14
# HELP elasticps_bytes_sent_total Bytes sent by the node (meta and payload).
# TYPE elasticps_bytes_sent_total counter
elasticps_bytes_sent_total{role="server"} 0
elasticps_bytes_sent_total{role="worker"} 13
# HELP elasticps_dropped_messages_total Valid messages dropped because nothing was there to take them.
# TYPE elasticps_dropped_messages_total counter
elasticps_dropped_messages_total{role="server"} 0
elasticps_dropped_messages_total{role="worker"} 16
# HELP elasticps_malformed_messages_total Messages the transport rejected as malformed; the node kept serving.
# TYPE elasticps_malformed_messages_total counter
elasticps_malformed_messages_total{role="server"} 0
elasticps_malformed_messages_total{role="worker"} 15
# HELP elasticps_messages_received_total Messages received by the node, data and control.
# TYPE elasticps_messages_received_total counter
elasticps_messages_received_total{role="server"} 0
elasticps_messages_received_total{role="worker"} 12
# HELP elasticps_messages_released_twice_total Received messages released twice, in the whole process (a bug in a consumer: the second release was refused); 0 in a correct program.
# TYPE elasticps_messages_released_twice_total counter
elasticps_messages_released_twice_total{role="server"} 0
elasticps_messages_released_twice_total{role="worker"} 19
# HELP elasticps_messages_sent_total Messages sent by the node, data and control.
# TYPE elasticps_messages_sent_total counter
elasticps_messages_sent_total{role="server"} 42
elasticps_messages_sent_total{role="worker"} 11
# HELP elasticps_receive_handovers_total Times a message handler ran on the receive goroutine so long that receiving went on in a new goroutine.
# TYPE elasticps_receive_handovers_total counter
elasticps_receive_handovers_total{role="server"} 0
elasticps_receive_handovers_total{role="worker"} 18
# HELP elasticps_rejected_requests_total Control requests the scheduler refused.
# TYPE elasticps_rejected_requests_total counter
elasticps_rejected_requests_total{role="server"} 0
elasticps_rejected_requests_total{role="worker"} 17
`

// TestNodeMetrics checks every counter's name, help and value, two roles in
// one registry.
func TestNodeMetrics(t *testing.T) {
	r := NewRegistry()
	// StatsFuncs over atomics, the way postoffice.Stats is meant to be
	// adapted; the value is read at scrape time, not copied at registration.
	var sent, recvBytes atomic.Int64
	require.NoError(t, NodeMetrics(r, "server", StatsFuncs{MsgsSent: sent.Load, BytesRecv: recvBytes.Load}))
	require.NoError(t, NodeMetrics(r, "worker", fakeStats{base: 10}))
	sent.Add(41)
	sent.Add(1)
	recvBytes.Store(1 << 40)
	assert.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(nodeMetricsGolden), nodeMetricNames...))
}

func TestNodeMetricsReadAtScrapeTime(t *testing.T) {
	r := NewRegistry()
	var sent atomic.Int64
	require.NoError(t, NodeMetrics(r, "worker", StatsFuncs{MsgsSent: sent.Load}))
	want := func(v string) io.Reader {
		return strings.NewReader("# HELP elasticps_messages_sent_total Messages sent by the node, data and control.\n" +
			"# TYPE elasticps_messages_sent_total counter\n" +
			`elasticps_messages_sent_total{role="worker"} ` + v + "\n")
	}
	assert.NoError(t, testutil.GatherAndCompare(r, want("0"), MetricMessagesSent))
	sent.Store(7)
	assert.NoError(t, testutil.GatherAndCompare(r, want("7"), MetricMessagesSent))
	sent.Add(3)
	assert.NoError(t, testutil.GatherAndCompare(r, want("10"), MetricMessagesSent))
}

func TestNodeMetricsOneNodePerRole(t *testing.T) {
	r := NewRegistry()
	require.NoError(t, NodeMetrics(r, "server", fakeStats{base: 100}))
	err := NodeMetrics(r, "server", fakeStats{})
	var dup prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &dup, "one node per role per registry")
	for _, name := range nodeMetricNames {
		assert.ErrorContains(t, err, name, "every counter is attempted")
	}
	// the first node's counters are untouched
	n, err := testutil.GatherAndCount(r, nodeMetricNames...)
	require.NoError(t, err)
	assert.Equal(t, len(nodeMetricNames), n)
	assert.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(
		"# HELP elasticps_dropped_messages_total Valid messages dropped because nothing was there to take them.\n"+
			"# TYPE elasticps_dropped_messages_total counter\n"+
			`elasticps_dropped_messages_total{role="server"} 106`+"\n"), MetricDroppedMessages))
}

func TestNodeMetricsNilStats(t *testing.T) {
	r := NewRegistry()
	assert.EqualError(t, NodeMetrics(r, "server", nil), "metrics: NodeMetrics: nil StatsSource")
	n, err := testutil.GatherAndCount(r, nodeMetricNames...)
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestStatsFuncsNilReadsZero(t *testing.T) {
	var s StatsSource = StatsFuncs{Twice: func() int64 { return 5 }}
	for _, f := range []func() int64{
		s.SentMessages, s.ReceivedMessages, s.SentBytes, s.ReceivedBytes,
		s.MalformedMessages, s.DroppedMessages, s.RejectedRequests, s.ReceiveHandOvers,
	} {
		assert.Zero(t, f())
	}
	assert.Equal(t, int64(5), s.ReleasedTwice())
}

// TestElasticMetricsSeries checks names, help, labels and values of the
// elastic families that are not per request.
func TestElasticMetricsSeries(t *testing.T) {
	r, em := newElastic(t)
	em.ServerLoadBytes.WithLabelValues("8").Set(1.5e9)
	em.ServerLoadBytes.WithLabelValues("10").Set(2)
	em.ServerLoadRequests.WithLabelValues("8").Set(1234.5)
	em.MigrationsTotal.WithLabelValues(ResultOK).Inc()
	em.MigrationsTotal.WithLabelValues(ResultFailed).Add(2)
	em.MigrationStallSeconds.Observe(0.003)
	em.MigrationStallSeconds.Observe(2)
	em.RoutingEpoch.Set(7)
	em.ControlUnansweredTotal.WithLabelValues("9", "routes").Add(2)
	assert.True(t, em.ServerLoadBytes.DeleteLabelValues("10"), "a server that left")

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
	assert.NoError(t, testutil.GatherAndCompare(r, strings.NewReader(want),
		"elasticps_elastic_unanswered_total", "elasticps_migration_stall_seconds", "elasticps_migrations_total",
		"elasticps_routing_epoch", "elasticps_server_load_bytes_per_second", "elasticps_server_load_requests_per_second"))
	assert.Equal(t, 2.0, testutil.ToFloat64(em.ControlUnansweredTotal))
	assert.Equal(t, 7.0, testutil.ToFloat64(em.RoutingEpoch))
}

// TestElasticMetricsStartResolved: the series known in advance exist at 0
// from the start, so rate() sees their first increment.
func TestElasticMetricsStartResolved(t *testing.T) {
	r, _ := newElastic(t)
	for name, want := range map[string]int{
		"elasticps_server_request_handle_seconds":   2, // push, pull
		"elasticps_worker_round_trip_seconds":       6, // push, pull x total, handling, network
		"elasticps_migrations_total":                3, // ok, aborted, failed
		"elasticps_migration_stall_seconds":         1,
		"elasticps_routing_epoch":                   1,
		"elasticps_server_load_bytes_per_second":    0, // servers are known later
		"elasticps_server_load_requests_per_second": 0,
		"elasticps_elastic_unanswered_total":        0,
	} {
		n, err := testutil.GatherAndCount(r, name)
		require.NoError(t, err)
		assert.Equal(t, want, n, name)
	}
	for _, kind := range []string{KindPush, KindPull} {
		n, sum := histogram(t, r, "elasticps_server_request_handle_seconds", "kind", kind)
		assert.Zero(t, n)
		assert.Zero(t, sum)
	}
}

func TestObserveServerHandle(t *testing.T) {
	r, em := newElastic(t)
	em.ObserveServerHandle(false, 300*time.Microsecond)
	em.ObserveServerHandle(false, 700*time.Microsecond)
	em.ObserveServerHandle(true, 20*time.Second)
	n, sum := histogram(t, r, "elasticps_server_request_handle_seconds", "kind", KindPush)
	assert.Equal(t, uint64(2), n)
	assert.InDelta(t, 0.001, sum, 1e-12)
	n, sum = histogram(t, r, "elasticps_server_request_handle_seconds", "kind", KindPull)
	assert.Equal(t, uint64(1), n)
	assert.Equal(t, 20.0, sum)
}

// TestObserveRoundTrip checks the split into total, handling and network,
// and that a round trip without a reported handling time counts only in
// the total.
func TestObserveRoundTrip(t *testing.T) {
	r, em := newElastic(t)
	em.ObserveRoundTrip(false, 3*time.Millisecond, time.Millisecond)
	em.ObserveRoundTrip(false, 5*time.Millisecond, 0)
	em.ObserveRoundTrip(true, 8*time.Millisecond, 6*time.Millisecond)
	for _, c := range []struct {
		kind, part string
		n          uint64
		sum        float64
	}{
		{KindPush, PartTotal, 2, 0.008},
		{KindPush, PartHandling, 1, 0.001},
		{KindPush, PartNetwork, 1, 0.002},
		{KindPull, PartTotal, 1, 0.008},
		{KindPull, PartHandling, 1, 0.006},
		{KindPull, PartNetwork, 1, 0.002},
	} {
		n, sum := histogram(t, r, "elasticps_worker_round_trip_seconds", "kind", c.kind, "part", c.part)
		assert.Equal(t, c.n, n, "%s %s", c.kind, c.part)
		assert.InDelta(t, c.sum, sum, 1e-12, "%s %s", c.kind, c.part)
	}
	n, _ := histogram(t, r, "elasticps_server_request_handle_seconds", "kind", KindPush)
	assert.Zero(t, n, "a worker's round trip is not a server's handling")
}

func TestObserveConcurrently(t *testing.T) {
	r, em := newElastic(t)
	const goroutines, each = 8, 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				em.ObserveRoundTrip(g%2 == 1, 2*time.Millisecond, time.Millisecond)
				em.ObserveServerHandle(g%2 == 1, time.Millisecond)
			}
		})
	}
	wg.Wait()
	for _, kind := range []string{KindPush, KindPull} {
		for _, part := range []string{PartTotal, PartHandling, PartNetwork} {
			n, _ := histogram(t, r, "elasticps_worker_round_trip_seconds", "kind", kind, "part", part)
			assert.Equal(t, uint64(goroutines/2*each), n, "%s %s", kind, part)
		}
		n, sum := histogram(t, r, "elasticps_server_request_handle_seconds", "kind", kind)
		assert.Equal(t, uint64(goroutines/2*each), n, kind)
		assert.InDelta(t, goroutines/2*each*1e-3, sum, 1e-9, kind)
	}
}

// TestNewElasticMetricsTwiceShares: a second NewElasticMetrics on one
// registry returns the same families, observed through either.
func TestNewElasticMetricsTwiceShares(t *testing.T) {
	r, em := newElastic(t)
	em2, err := NewElasticMetrics(r)
	require.NoError(t, err)
	assert.Same(t, em.ServerHandleSeconds, em2.ServerHandleSeconds)
	assert.Same(t, em.ControlUnansweredTotal, em2.ControlUnansweredTotal)
	assert.Equal(t, em.RoutingEpoch, em2.RoutingEpoch)
	em.ObserveServerHandle(true, time.Millisecond)
	em2.ObserveServerHandle(true, time.Millisecond)
	n, _ := histogram(t, r, "elasticps_server_request_handle_seconds", "kind", KindPull)
	assert.Equal(t, uint64(2), n)
	em2.RoutingEpoch.Set(3)
	assert.Equal(t, 3.0, testutil.ToFloat64(em.RoutingEpoch))
}

// TestNewElasticMetricsConflict: a name taken by another definition is an
// error, not a silent second family.
func TestNewElasticMetricsConflict(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "elasticps_routing_epoch", Help: "Something else."}))
	em, err := NewElasticMetrics(r)
	assert.Nil(t, em)
	assert.ErrorContains(t, err, "elasticps_routing_epoch")
}

// TestHotPathDoesNotAllocate: the per-request observations cost no lookup
// and no allocation.
func TestHotPathDoesNotAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	r, em := newElastic(t)
	allocs := testing.AllocsPerRun(100, func() {
		em.ObserveRoundTrip(true, 2*time.Millisecond, time.Millisecond)
		em.ObserveServerHandle(false, time.Millisecond)
	})
	assert.Zero(t, allocs)
	n, _ := histogram(t, r, "elasticps_worker_round_trip_seconds", "kind", KindPull, "part", PartNetwork)
	assert.Equal(t, uint64(101), n, "AllocsPerRun runs the function once more to warm up")
}

// TestMetricNamesFollowConventions runs promlint over the project's
// families.
func TestMetricNamesFollowConventions(t *testing.T) {
	r, em := newElastic(t)
	require.NoError(t, NodeMetrics(r, "worker", fakeStats{}))
	// one series in every family, so that each is linted
	em.ServerLoadBytes.WithLabelValues("8").Set(1)
	em.ServerLoadRequests.WithLabelValues("8").Set(1)
	em.ControlUnansweredTotal.WithLabelValues("8", "routes").Inc()
	problems, err := testutil.GatherAndLint(r, slices.Concat(nodeMetricNames, elasticMetricNames)...)
	require.NoError(t, err)
	assert.Empty(t, problems)
	n, err := testutil.GatherAndCount(r, slices.Concat(nodeMetricNames, elasticMetricNames)...)
	require.NoError(t, err)
	assert.Equal(t, 9+2+6+3+1+1+1+1+1, n, "every family was gathered")
}

func TestWriteText(t *testing.T) {
	r, em := newElastic(t)
	require.NoError(t, NodeMetrics(r, "worker", fakeStats{}))
	em.RoutingEpoch.Set(4)
	var b bytes.Buffer
	require.NoError(t, r.WriteText(&b))
	out := b.String()
	for _, line := range []string{
		"# TYPE elasticps_routing_epoch gauge\nelasticps_routing_epoch 4\n",
		`elasticps_messages_sent_total{role="worker"} 1` + "\n",
		`elasticps_worker_round_trip_seconds_count{kind="pull",part="total"} 0` + "\n",
		"# TYPE go_goroutines gauge\n",
		"# TYPE process_cpu_seconds_total counter\n",
	} {
		assert.Contains(t, out, line)
	}
	assert.Less(t, strings.Index(out, "elasticps_"), strings.Index(out, "go_goroutines"), "families sorted by name")
	assert.EqualError(t, r.WriteText(failWriter{}), "disk full")
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestServe scrapes /metrics over HTTP and checks the project's series
// exactly and the runtime and process series by presence.
func TestServe(t *testing.T) {
	r, em := newElastic(t)
	require.NoError(t, NodeMetrics(r, "server", fakeStats{base: 20}))
	em.MigrationsTotal.WithLabelValues(ResultAborted).Inc()
	s, err := Serve("127.0.0.1:0", r, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NotContains(t, s.Addr(), ":0", "the bound port, not the requested one")
	url := "http://" + s.Addr() + "/metrics"

	assert.NoError(t, testutil.ScrapeAndCompare(url, strings.NewReader(`# HELP elasticps_migrations_total Key range migrations by result (ok, aborted, failed).
# TYPE elasticps_migrations_total counter
elasticps_migrations_total{result="aborted"} 1
elasticps_migrations_total{result="failed"} 0
elasticps_migrations_total{result="ok"} 0
# HELP elasticps_bytes_sent_total Bytes sent by the node (meta and payload).
# TYPE elasticps_bytes_sent_total counter
elasticps_bytes_sent_total{role="server"} 23
`), "elasticps_migrations_total", MetricBytesSent))

	resp, err := http.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4"), resp.Header.Get("Content-Type"))
	for _, line := range []string{
		`elasticps_messages_released_twice_total{role="server"} 29` + "\n",
		"# TYPE go_goroutines gauge\ngo_goroutines ",
		"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ",
		"\nprocess_start_time_seconds ",
	} {
		assert.Contains(t, string(body), line)
	}
}

func TestServeRoutes(t *testing.T) {
	s, err := Serve("127.0.0.1:0", NewRegistry(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Addr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("/healthz")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)
	code, _ = get("/other")
	assert.Equal(t, http.StatusNotFound, code)

	postResp, err := http.Post("http://"+s.Addr()+"/metrics", "text/plain", strings.NewReader(""))
	require.NoError(t, err)
	require.NoError(t, postResp.Body.Close())
	assert.Equal(t, http.StatusMethodNotAllowed, postResp.StatusCode)

	addr := s.Addr()
	require.NoError(t, s.Close())
	_, err = http.Get("http://" + addr + "/metrics")
	assert.Error(t, err, "closed server still answers")
	assert.NotPanics(t, func() { _ = s.Close() })
}

func TestServeErrors(t *testing.T) {
	_, err := Serve("127.0.0.1:0", nil, nil)
	assert.EqualError(t, err, "metrics: Serve: nil registry")
	_, err = Serve("256.0.0.1:bad", NewRegistry(), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"256.0.0.1:bad"`, "the error names the address")
}

func BenchmarkObserveRoundTrip(b *testing.B) {
	_, em := newElastic(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			em.ObserveRoundTrip(true, 2*time.Millisecond, time.Millisecond)
		}
	})
}

func BenchmarkScrape(b *testing.B) {
	r, _ := newElastic(b)
	require.NoError(b, NodeMetrics(r, "worker", fakeStats{}))
	b.ReportAllocs()
	for b.Loop() {
		require.NoError(b, r.WriteText(io.Discard))
	}
}

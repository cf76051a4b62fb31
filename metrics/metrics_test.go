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

// kvMetricNames are the families NewKVMetrics registers.
var kvMetricNames = []string{MetricServerHandle, MetricWorkerRoundTrip}

func newKV(t testing.TB) (*Registry, *KVMetrics) {
	t.Helper()
	r := NewRegistry()
	km, err := NewKVMetrics(r)
	require.NoError(t, err)
	return r, km
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
	_, err := NewKVMetrics(NewRegistry())
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
# HELP elasticps_rejected_requests_total Control messages the node refused as invalid; it kept serving.
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

// TestKVMetricsStartResolved: every series exists at 0 from the start, so
// rate() sees its first observation.
func TestKVMetricsStartResolved(t *testing.T) {
	r, _ := newKV(t)
	for name, want := range map[string]int{
		MetricServerHandle:    2, // push, pull
		MetricWorkerRoundTrip: 6, // push, pull x total, handling, network
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
	r, km := newKV(t)
	km.ObserveServerHandle(false, 300*time.Microsecond)
	km.ObserveServerHandle(false, 700*time.Microsecond)
	km.ObserveServerHandle(true, 20*time.Second)
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
	r, km := newKV(t)
	km.ObserveRoundTrip(false, 3*time.Millisecond, time.Millisecond)
	km.ObserveRoundTrip(false, 5*time.Millisecond, 0)
	km.ObserveRoundTrip(true, 8*time.Millisecond, 6*time.Millisecond)
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
	r, km := newKV(t)
	const goroutines, each = 8, 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				km.ObserveRoundTrip(g%2 == 1, 2*time.Millisecond, time.Millisecond)
				km.ObserveServerHandle(g%2 == 1, time.Millisecond)
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

// TestNewKVMetricsTwiceShares: a second NewKVMetrics on one registry
// returns the same families, observed through either.
func TestNewKVMetricsTwiceShares(t *testing.T) {
	r, km := newKV(t)
	km2, err := NewKVMetrics(r)
	require.NoError(t, err)
	assert.Same(t, km.ServerHandleSeconds, km2.ServerHandleSeconds)
	assert.Same(t, km.WorkerRoundTripSeconds, km2.WorkerRoundTripSeconds)
	km.ObserveServerHandle(true, time.Millisecond)
	km2.ObserveServerHandle(true, time.Millisecond)
	n, _ := histogram(t, r, MetricServerHandle, "kind", KindPull)
	assert.Equal(t, uint64(2), n)
	km2.ObserveRoundTrip(false, time.Millisecond, 0)
	n, _ = histogram(t, r, MetricWorkerRoundTrip, "kind", KindPush, "part", PartTotal)
	assert.Equal(t, uint64(1), n)
}

// TestNewKVMetricsConflict: a name taken by another definition is an
// error, not a silent second family; the other family is still attempted.
func TestNewKVMetricsConflict(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricServerHandle, Help: "Something else."}))
	km, err := NewKVMetrics(r)
	assert.Nil(t, km)
	assert.ErrorContains(t, err, MetricServerHandle)
	n, err := testutil.GatherAndCount(r, MetricWorkerRoundTrip)
	require.NoError(t, err)
	assert.Zero(t, n, "no series were resolved")
	fams, err := r.Gather()
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(fams, func(f *dto.MetricFamily) bool {
		return f.GetName() == MetricServerHandle && f.GetType() == dto.MetricType_GAUGE
	}),
		"the gauge that was there first stays")
}

// TestGetOrRegister: a new collector is registered; the same definition
// again gives back the first; a different definition under the name is
// an error, and so is a same definition of another Go type.
func TestGetOrRegister(t *testing.T) {
	r := NewRegistry()
	opts := prometheus.CounterOpts{Name: "test_things_total", Help: "Things."}
	first, err := GetOrRegister(r, prometheus.NewCounterVec(opts, []string{"kind"}))
	require.NoError(t, err)
	again, err := GetOrRegister(r, prometheus.NewCounterVec(opts, []string{"kind"}))
	require.NoError(t, err)
	assert.Same(t, first, again)
	again.WithLabelValues("a").Inc()
	assert.Equal(t, 1.0, testutil.ToFloat64(first.WithLabelValues("a")))

	_, err = GetOrRegister(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_things_total", Help: "Other things."}, []string{"kind"}))
	assert.ErrorContains(t, err, "test_things_total")
	var dup prometheus.AlreadyRegisteredError
	assert.False(t, errors.As(err, &dup), "a conflict, not a duplicate: %v", err)

	// a plain counter and a label-less CounterVec have the same definition
	plain := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_plain_total", Help: "Plain."})
	_, err = GetOrRegister(r, plain)
	require.NoError(t, err)
	_, err = GetOrRegister(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_plain_total", Help: "Plain."}, nil))
	assert.ErrorAs(t, err, &dup, "the existing collector is not a CounterVec")
	assert.Same(t, plain, dup.ExistingCollector)
}

// TestHotPathDoesNotAllocate: the per-request observations cost no lookup
// and no allocation.
func TestHotPathDoesNotAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	r, km := newKV(t)
	allocs := testing.AllocsPerRun(100, func() {
		km.ObserveRoundTrip(true, 2*time.Millisecond, time.Millisecond)
		km.ObserveServerHandle(false, time.Millisecond)
	})
	assert.Zero(t, allocs)
	n, _ := histogram(t, r, "elasticps_worker_round_trip_seconds", "kind", KindPull, "part", PartNetwork)
	assert.Equal(t, uint64(101), n, "AllocsPerRun runs the function once more to warm up")
}

// TestMetricNamesFollowConventions runs promlint over the families of this
// package (elastic's are linted in package elastic).
func TestMetricNamesFollowConventions(t *testing.T) {
	r, _ := newKV(t)
	require.NoError(t, NodeMetrics(r, "worker", fakeStats{}))
	problems, err := testutil.GatherAndLint(r, slices.Concat(nodeMetricNames, kvMetricNames)...)
	require.NoError(t, err)
	assert.Empty(t, problems)
	n, err := testutil.GatherAndCount(r, slices.Concat(nodeMetricNames, kvMetricNames)...)
	require.NoError(t, err)
	assert.Equal(t, 9+2+6, n, "every family was gathered")
}

func TestWriteText(t *testing.T) {
	r, km := newKV(t)
	require.NoError(t, NodeMetrics(r, "worker", fakeStats{}))
	km.ObserveServerHandle(true, 4*time.Second)
	var b bytes.Buffer
	require.NoError(t, r.WriteText(&b))
	out := b.String()
	for _, line := range []string{
		"# TYPE elasticps_server_request_handle_seconds histogram\n",
		`elasticps_server_request_handle_seconds_sum{kind="pull"} 4` + "\n",
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
	r, km := newKV(t)
	require.NoError(t, NodeMetrics(r, "server", fakeStats{base: 20}))
	km.ObserveRoundTrip(true, 3*time.Millisecond, 0)
	s, err := Serve("127.0.0.1:0", r, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NotContains(t, s.Addr(), ":0", "the bound port, not the requested one")
	url := "http://" + s.Addr() + "/metrics"

	assert.NoError(t, testutil.ScrapeAndCompare(url, strings.NewReader(`# HELP elasticps_bytes_sent_total Bytes sent by the node (meta and payload).
# TYPE elasticps_bytes_sent_total counter
elasticps_bytes_sent_total{role="server"} 23
`), MetricBytesSent))

	resp, err := http.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4"), resp.Header.Get("Content-Type"))
	for _, line := range []string{
		`elasticps_messages_released_twice_total{role="server"} 29` + "\n",
		`elasticps_worker_round_trip_seconds_count{kind="pull",part="total"} 1` + "\n",
		`elasticps_worker_round_trip_seconds_count{kind="pull",part="handling"} 0` + "\n",
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
	_, km := newKV(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			km.ObserveRoundTrip(true, 2*time.Millisecond, time.Millisecond)
		}
	})
}

func BenchmarkScrape(b *testing.B) {
	r, _ := newKV(b)
	require.NoError(b, NodeMetrics(r, "worker", fakeStats{}))
	b.ReportAllocs()
	for b.Loop() {
		require.NoError(b, r.WriteText(io.Discard))
	}
}

// A node registry labels every series it gathers with the node's role,
// the runtime's and the kv layer's too, and keeps a role of a series' own;
// GetOrRegister still finds what was registered before.
func TestNodeRegistryLabelsEverySeries(t *testing.T) {
	r := NewNodeRegistry("server")
	km, err := NewKVMetrics(r)
	require.NoError(t, err)
	km.ObserveServerHandle(true, time.Millisecond)
	require.NoError(t, NodeMetrics(r, "server", fakeStats{base: 1}))
	again, err := NewKVMetrics(r)
	require.NoError(t, err)
	assert.Same(t, km.ServerHandleSeconds, again.ServerHandleSeconds)

	fams, err := r.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
		for _, m := range f.GetMetric() {
			var roles []string
			for i, l := range m.GetLabel() {
				if l.GetName() == "role" {
					roles = append(roles, l.GetValue())
				}
				if i > 0 {
					assert.Less(t, m.GetLabel()[i-1].GetName(), l.GetName(), "labels of %s sorted", f.GetName())
				}
			}
			assert.Equal(t, []string{"server"}, roles, f.GetName())
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", MetricServerHandle, MetricBytesReceived} {
		assert.True(t, names[name], name)
	}
	assert.Equal(t, uint64(1), must(histogram(t, r, MetricServerHandle, "kind", KindPull, "role", "server")))
}

func must[A, B any](a A, _ B) A { return a }

// The kv families go to the roles that observe them; a registry of
// NewRegistry takes both, and a role's Observe of the other's does nothing.
func TestKVMetricsByRole(t *testing.T) {
	for _, tc := range []struct {
		role string
		want []string
	}{
		{"server", []string{MetricServerHandle}},
		{"worker", []string{MetricWorkerRoundTrip}},
		{"scheduler", nil},
		{"", kvMetricNames},
	} {
		r := NewNodeRegistry(tc.role)
		km, err := NewKVMetrics(r)
		require.NoError(t, err)
		km.ObserveServerHandle(false, time.Millisecond)
		km.ObserveRoundTrip(false, 2*time.Millisecond, time.Millisecond)
		var got []string
		for _, name := range kvMetricNames {
			if n, err := testutil.GatherAndCount(r, name); err == nil && n > 0 {
				got = append(got, name)
			}
		}
		assert.Equal(t, tc.want, got, "role %q", tc.role)
	}
}

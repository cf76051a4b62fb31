package metrics

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func text(t *testing.T, r *Registry) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, r.WriteText(&b))
	return b.String()
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		require.NoError(t, err)
		return v
	}
}

func TestWriteTextGolden(t *testing.T) {
	r := NewRegistry()
	c := must[*Counter](t)(r.Counter("test_requests_total", "Requests served."))
	c.Add(3)
	// Label names declared out of alphabetical order, series created out of
	// order: the output sorts both.
	cv := must[*CounterVec](t)(r.CounterVec("test_errors_total", "Errors by code and path.", "path", "code"))
	cv.With("/b", "500").Inc()
	cv.With("/a", "404").AddInt(2)
	cv.With("/a", "200").Add(1.5)
	g := must[*Gauge](t)(r.Gauge("test_temperature_celsius", "Temperature in C\\ (line one)\nline two"))
	g.Set(-3.25)
	require.NoError(t, r.GaugeFunc("test_queue_length", "Items waiting, read at scrape time.", func() float64 { return 7 }, Label{"queue", "b"}))
	require.NoError(t, r.GaugeFunc("test_queue_length", "Items waiting, read at scrape time.", func() float64 { return 2 }, Label{"queue", "a"}))
	hv := must[*HistogramVec](t)(r.HistogramVec("test_latency_seconds", "Request latency.", []float64{0.125, 0.5, 1}, "kind"))
	push := hv.With("push")
	push.Observe(0.125) // equal to a bound: that bucket
	push.Observe(0.25)
	push.Observe(2)
	hv.With("pull").Observe(0.0625)
	must[*CounterVec](t)(r.CounterVec("test_unused_total", "No series yet: left out.", "x"))

	const want = `# HELP test_errors_total Errors by code and path.
# TYPE test_errors_total counter
test_errors_total{code="200",path="/a"} 1.5
test_errors_total{code="404",path="/a"} 2
test_errors_total{code="500",path="/b"} 1
# HELP test_latency_seconds Request latency.
# TYPE test_latency_seconds histogram
test_latency_seconds_bucket{kind="pull",le="0.125"} 1
test_latency_seconds_bucket{kind="pull",le="0.5"} 1
test_latency_seconds_bucket{kind="pull",le="1"} 1
test_latency_seconds_bucket{kind="pull",le="+Inf"} 1
test_latency_seconds_sum{kind="pull"} 0.0625
test_latency_seconds_count{kind="pull"} 1
test_latency_seconds_bucket{kind="push",le="0.125"} 1
test_latency_seconds_bucket{kind="push",le="0.5"} 2
test_latency_seconds_bucket{kind="push",le="1"} 2
test_latency_seconds_bucket{kind="push",le="+Inf"} 3
test_latency_seconds_sum{kind="push"} 2.375
test_latency_seconds_count{kind="push"} 3
# HELP test_queue_length Items waiting, read at scrape time.
# TYPE test_queue_length gauge
test_queue_length{queue="a"} 2
test_queue_length{queue="b"} 7
# HELP test_requests_total Requests served.
# TYPE test_requests_total counter
test_requests_total 3
# HELP test_temperature_celsius Temperature in C\\ (line one)\nline two
# TYPE test_temperature_celsius gauge
test_temperature_celsius -3.25
`
	got := text(t, r)
	require.Equal(t, want, got)
	fams, err := parseExposition(got)
	require.NoError(t, err)
	require.Len(t, fams, 5)
	assert.Equal(t, "Temperature in C\\ (line one)\nline two", fams[4].help)
}

func TestHistogramWithoutLabels(t *testing.T) {
	r := NewRegistry()
	h := must[*Histogram](t)(r.Histogram("h_seconds", "h.", []float64{1, 2, math.Inf(+1)}))
	h.Observe(1.5)
	require.Equal(t, `# HELP h_seconds h.
# TYPE h_seconds histogram
h_seconds_bucket{le="1"} 0
h_seconds_bucket{le="2"} 1
h_seconds_bucket{le="+Inf"} 1
h_seconds_sum 1.5
h_seconds_count 1
`, text(t, r))
}

func TestEscaping(t *testing.T) {
	tests := []struct {
		name, value, want string
	}{
		{"plain", "server-1", `server-1`},
		{"backslash", `C:\path`, `C:\\path`},
		{"quote", `say "hi"`, `say \"hi\"`},
		{"newline", "a\nb", `a\nb`},
		{"all", "\\\"\n", `\\\"\n`},
		{"unicode", "größe ✓", "größe ✓"},
		{"invalid utf-8", "a\xffb", "a\uFFFDb"},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRegistry()
			must[*GaugeVec](t)(r.GaugeVec("g", "Help with \\ and \" and\nnewline.", "v")).With(tc.value).Set(1)
			got := text(t, r)
			assert.Equal(t, "# HELP g Help with \\\\ and \" and\\nnewline.\n# TYPE g gauge\ng{v=\""+tc.want+"\"} 1\n", got)
			fams, err := parseExposition(got)
			require.NoError(t, err)
			want := tc.value
			if tc.name == "invalid utf-8" {
				want = "a\uFFFDb"
			}
			assert.Equal(t, want, fams[0].samples[0].labels["v"], "parser round trip")
		})
	}
}

func TestValueFormatting(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{0, "0"}, {1, "1"}, {-2, "-2"}, {1e15, "1000000000000000"},
		{1 << 53, "9.007199254740992e+15"}, {0.5, "0.5"}, {1e-7, "1e-07"},
		{math.Inf(+1), "+Inf"}, {math.Inf(-1), "-Inf"}, {math.NaN(), "NaN"},
	}
	for _, tc := range tests {
		got := formatFloat(tc.v)
		assert.Equal(t, tc.want, got, "%v", tc.v)
		back, err := parseValue(got)
		require.NoError(t, err)
		if !math.IsNaN(tc.v) {
			assert.Equal(t, tc.v, back)
		}
	}
}

// TestConcurrentUpdates hammers every metric kind from many goroutines,
// while others create series and scrape, and checks exact totals (run with
// -race). The float adds use 0.5, exact in binary, so the sums are exact.
func TestConcurrentUpdates(t *testing.T) {
	const goroutines, perG = 16, 2000
	r := NewRegistry()
	c := must[*Counter](t)(r.Counter("c_total", "c."))
	cv := must[*CounterVec](t)(r.CounterVec("cv_total", "cv.", "worker"))
	g := must[*Gauge](t)(r.Gauge("g", "g."))
	h := must[*Histogram](t)(r.Histogram("h", "h.", []float64{1, 2, 3}))

	stop := make(chan struct{})
	var scrapes sync.WaitGroup
	scrapes.Add(1)
	go func() { // scrape concurrently: output must stay well-formed
		defer scrapes.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var b bytes.Buffer
			if err := r.WriteText(&b); err != nil {
				t.Error(err)
				return
			}
			if _, err := parseExposition(b.String()); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := cv.With([]string{"a", "b", "c", "d"}[i%4])
			for j := range perG {
				c.Inc()
				c.AddInt(2)
				c.Add(0.5)
				mine.Inc()
				g.Add(1)
				g.Add(-0.5)
				h.Observe(float64(j % 4)) // 0,1 -> le 1; 2 -> le 2; 3 -> le 3
			}
		}()
	}
	wg.Wait()
	close(stop)
	scrapes.Wait()

	const n = goroutines * perG
	assert.Equal(t, float64(n)*3.5, c.Value())
	assert.Equal(t, float64(n)*0.5, g.Value())
	for _, k := range []string{"a", "b", "c", "d"} {
		assert.Equal(t, float64(n/4), cv.With(k).Value(), k)
	}
	assert.Equal(t, uint64(n), h.Count())
	assert.Equal(t, float64(n/4)*(0+1+2+3), h.Sum())
	cum, _ := h.snapshot()
	assert.Equal(t, []uint64{n / 2, 3 * n / 4, n, n}, cum)
}

func TestHistogramBucketBoundaries(t *testing.T) {
	bounds := []float64{0.001, 0.01, 0.1, 1}
	tests := []struct {
		name   string
		v      float64
		bucket int // index into counts; len(bounds) is +Inf
	}{
		{"below the first bound", 0.0005, 0},
		{"negative", -1, 0},
		{"equal to the first bound", 0.001, 0},
		{"just above the first bound", math.Nextafter(0.001, 1), 1},
		{"equal to a middle bound", 0.1, 2},
		{"just below a middle bound", math.Nextafter(0.1, 0), 2},
		{"equal to the last bound", 1, 3},
		{"just above the last bound", math.Nextafter(1, 2), 4},
		{"+Inf", math.Inf(+1), 4},
		{"NaN", math.NaN(), 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHistogram(bounds)
			h.Observe(tc.v)
			for i := range h.counts {
				want := uint64(0)
				if i == tc.bucket {
					want = 1
				}
				assert.Equal(t, want, h.counts[i].Load(), "bucket %d", i)
			}
		})
	}
}

func TestRegistration(t *testing.T) {
	r := NewRegistry()
	a := must[*CounterVec](t)(r.CounterVec("x_total", "x.", "a"))
	b := must[*CounterVec](t)(r.CounterVec("x_total", "x.", "a"))
	a.With("1").Inc()
	assert.Same(t, a.With("1"), b.With("1"), "same definition: same family")

	_, err := r.GaugeVec("x_total", "x.", "a")
	assert.ErrorIs(t, err, ErrDuplicate)
	_, err = r.CounterVec("x_total", "x.", "b")
	assert.ErrorIs(t, err, ErrDuplicate)
	_, err = r.CounterVec("x_total", "other help", "a")
	assert.ErrorIs(t, err, ErrDuplicate)
	assert.Error(t, r.CounterFunc("x_total", "x.", func() float64 { return 0 }, Label{"a", "2"}), "func vs plain")

	for _, bad := range []string{"", "1abc", "a-b", "a b", "é"} {
		_, err := r.Counter(bad, "h")
		assert.Error(t, err, "metric name %q", bad)
	}
	for _, bad := range []string{"", "__x", "1a", "a:b", "a-b"} {
		_, err := r.CounterVec("ok_total", "h", bad)
		assert.Error(t, err, "label name %q", bad)
	}
	_, err = r.CounterVec("dup_total", "h", "a", "a")
	assert.Error(t, err)
	_, err = r.HistogramVec("h1", "h", []float64{1}, "le")
	assert.ErrorContains(t, err, "reserved")
	for _, bad := range [][]float64{nil, {}, {2, 1}, {1, 1}, {math.NaN()}, {math.Inf(-1), 1}, {math.Inf(+1)}} {
		_, err := r.Histogram("h2", "h", bad)
		assert.Error(t, err, "buckets %v", bad)
	}
	_, err = r.Histogram("h3", "h", ExponentialBuckets(1, 1, 3))
	assert.Error(t, err, "factor 1 gives nil buckets")
	assert.Equal(t, []float64{1, 2, 4}, ExponentialBuckets(1, 2, 3))
	assert.Equal(t, []float64{0, 5, 10}, LinearBuckets(0, 5, 3))

	_, err = a.Get("1", "2")
	assert.ErrorContains(t, err, "takes 1 label values (a), got 2")
	assert.Panics(t, func() { a.With() })

	// Function series: labels in any order, duplicates refused.
	require.NoError(t, r.CounterFunc("f_total", "f.", func() float64 { return 1 }, Label{"b", "1"}, Label{"a", "1"}))
	require.NoError(t, r.CounterFunc("f_total", "f.", func() float64 { return 2 }, Label{"a", "2"}, Label{"b", "1"}))
	err = r.CounterFunc("f_total", "f.", func() float64 { return 3 }, Label{"a", "1"}, Label{"b", "1"})
	assert.ErrorIs(t, err, ErrDuplicate)
	assert.Error(t, r.CounterFunc("f_total", "f.", func() float64 { return 3 }, Label{"a", "3"}))
	assert.Error(t, r.GaugeFunc("nil_fn", "f.", nil))

	assert.True(t, r.Unregister("f_total"))
	assert.False(t, r.Unregister("f_total"))
	require.NoError(t, r.CounterFunc("f_total", "f.", func() float64 { return 3 }, Label{"a", "1"}, Label{"b", "1"}))
}

func TestDelete(t *testing.T) {
	r := NewRegistry()
	gv := must[*GaugeVec](t)(r.GaugeVec("load", "l.", "server"))
	gv.With("8").Set(1)
	gv.With("10").Set(2)
	assert.True(t, gv.Delete("8"))
	assert.False(t, gv.Delete("8"))
	assert.False(t, gv.Delete("8", "extra"))
	assert.Equal(t, "# HELP load l.\n# TYPE load gauge\nload{server=\"10\"} 2\n", text(t, r))
	assert.True(t, gv.Delete("10"))
	assert.Empty(t, text(t, r), "a family with no series is left out")
}

func TestCounterIgnoresDecrements(t *testing.T) {
	var c Counter
	c.Add(-1)
	c.Add(math.NaN())
	c.AddInt(-5)
	c.Add(2.25)
	c.Add(1e300) // too large for the integer part
	assert.Equal(t, 2.25+1e300, c.Value())
}

// TestWellFormed builds a registry with every kind and awkward values and
// checks the output with the independent parser.
func TestWellFormed(t *testing.T) {
	r := NewRegistry()
	em, err := NewElasticMetrics(r)
	require.NoError(t, err)
	em.ServerHandleSeconds.With(KindPush).ObserveDuration(300 * time.Microsecond)
	em.ServerHandleSeconds.With(KindPull).Observe(20)
	rt := em.WorkerRoundTripSeconds
	rt.With(KindPush, PartTotal).Observe(0.002)
	rt.With(KindPush, PartHandling).Observe(0.0003)
	rt.With(KindPush, PartNetwork).Observe(0.0017)
	em.ServerLoadBytes.With("8").Set(1.5e9)
	em.ServerLoadRequests.With("8").Set(1234.5)
	em.MigrationsTotal.With(ResultOK).Inc()
	em.MigrationsTotal.With(ResultFailed).Inc()
	em.MigrationStallSeconds.Observe(0.03)
	em.RoutingEpoch.Set(7)
	em.ControlUnansweredTotal.With("9", "routes").AddInt(2)
	require.NoError(t, r.GaugeFunc("weird", "Values: NaN and infinities.", math.NaN, Label{"v", "nan"}))
	require.NoError(t, r.GaugeFunc("weird", "Values: NaN and infinities.", func() float64 { return math.Inf(-1) }, Label{"v", "-inf"}))
	must[*GaugeVec](t)(r.GaugeVec("labels", "Odd label values.", "a", "b")).With("x\"y", "p\\q\nr").Set(1)

	out := text(t, r)
	fams, err := parseExposition(out)
	require.NoError(t, err, out)
	names := map[string]bool{}
	for _, f := range fams {
		names[f.name] = true
	}
	for _, n := range []string{
		"elasticps_server_request_handle_seconds", "elasticps_worker_round_trip_seconds",
		"elasticps_server_load_bytes_per_second", "elasticps_server_load_requests_per_second",
		"elasticps_migrations_total", "elasticps_migration_stall_seconds", "elasticps_routing_epoch",
		"elasticps_elastic_unanswered_total",
	} {
		assert.True(t, names[n], n)
	}
	assert.Contains(t, out, `elasticps_worker_round_trip_seconds_bucket{kind="push",part="network",le="0.0025"} 1`)
	assert.Contains(t, out, `elasticps_server_load_bytes_per_second{server="8"} 1500000000`)
	assert.Contains(t, out, `elasticps_migrations_total{result="failed"} 1`)
	assert.Contains(t, out, `elasticps_routing_epoch 7`)
	assert.Contains(t, out, `elasticps_elastic_unanswered_total{message="routes",node="9"} 2`)

	// Registering again shares the families (two nodes in one process).
	em2, err := NewElasticMetrics(r)
	require.NoError(t, err)
	assert.Same(t, em.RoutingEpoch, em2.RoutingEpoch)
	assert.Same(t, em.MigrationStallSeconds, em2.MigrationStallSeconds)

	// The parser itself must reject broken input, or the checks above prove
	// nothing.
	for _, bad := range []string{
		"x 1\n", // no HELP/TYPE
		"# HELP x h\n# TYPE x counter\nx{a=\"1} 1\n", // unterminated
		"# HELP x h\n# TYPE x counter\nx{a=\"\"\"} 1\n",
		"# HELP x h\n# TYPE x counter\nx 1\nx 2\n",
		"# HELP x h\n# TYPE x counter\ny 1\n",
		"# HELP x h\n# TYPE x counter\nx 1",
		"# HELP x h\n# TYPE x histogram\nx_bucket{le=\"1\"} 2\nx_bucket{le=\"+Inf\"} 1\nx_sum 1\nx_count 1\n",
		"# HELP x h\n# TYPE x histogram\nx_bucket{le=\"1\"} 1\nx_sum 1\nx_count 1\n",
	} {
		_, err := parseExposition(bad)
		assert.Error(t, err, "%q", bad)
	}
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

	out := text(t, r)
	_, err := parseExposition(out)
	require.NoError(t, err, out)
	for _, line := range []string{
		`elasticps_messages_sent_total{role="server"} 42`,
		`elasticps_bytes_received_total{role="server"} 1099511627776`,
		`elasticps_malformed_messages_total{role="server"} 0`,
		`elasticps_messages_sent_total{role="worker"} 11`,
		`elasticps_messages_received_total{role="worker"} 12`,
		`elasticps_bytes_sent_total{role="worker"} 13`,
		`elasticps_bytes_received_total{role="worker"} 14`,
		`elasticps_malformed_messages_total{role="worker"} 15`,
		`elasticps_dropped_messages_total{role="worker"} 16`,
		`elasticps_rejected_requests_total{role="worker"} 17`,
		`elasticps_receive_handovers_total{role="worker"} 18`,
		`elasticps_messages_released_twice_total{role="worker"} 19`,
		`elasticps_messages_released_twice_total{role="server"} 0`,
	} {
		assert.Contains(t, out, line+"\n")
	}

	err = NodeMetrics(r, "server", fakeStats{})
	assert.ErrorIs(t, err, ErrDuplicate, "one node per role per registry")
	assert.Error(t, NodeMetrics(r, "server", nil))
}

func TestServe(t *testing.T) {
	r := NewRegistry()
	must[*Counter](t)(r.Counter("scraped_total", "s.")).AddInt(5)
	s, err := Serve("127.0.0.1:0", r, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NotContains(t, s.Addr(), ":0", "the bound port, not the requested one")

	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Addr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}
	resp, body := get("/metrics")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, ContentType, resp.Header.Get("Content-Type"))
	assert.Equal(t, "# HELP scraped_total s.\n# TYPE scraped_total counter\nscraped_total 5\n", body)

	resp, body = get("/healthz")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ok\n", body)

	resp, _ = get("/other")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	postResp, err := http.Post("http://"+s.Addr()+"/metrics", "text/plain", strings.NewReader(""))
	require.NoError(t, err)
	postResp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, postResp.StatusCode)

	addr := s.Addr()
	require.NoError(t, s.Close())
	_, err = http.Get("http://" + addr + "/metrics")
	assert.Error(t, err, "closed server still answers")
	assert.NotPanics(t, func() { _ = s.Close() })
}

func TestServeErrors(t *testing.T) {
	_, err := Serve("127.0.0.1:0", nil, nil)
	assert.Error(t, err)
	_, err = Serve("256.0.0.1:bad", NewRegistry(), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"256.0.0.1:bad"`, "the error names the address")
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(p), nil
}

func TestWriteTextReportsErrors(t *testing.T) {
	r := NewRegistry()
	gv := must[*GaugeVec](t)(r.GaugeVec("g", "g.", "i"))
	for i := range 5000 { // more than bufio's buffer, so the error surfaces mid-way
		gv.With(strings.Repeat("x", i%50) + string(rune('a'+i%26))).Set(float64(i))
	}
	assert.EqualError(t, r.WriteText(&failWriter{}), "disk full")
}

func BenchmarkCounterInc(b *testing.B) {
	var c Counter
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}

func BenchmarkHistogramObserve(b *testing.B) {
	h := newHistogram(LatencyBuckets)
	b.RunParallel(func(pb *testing.PB) {
		v := 0.0
		for pb.Next() {
			v += 1e-4
			if v > 1 {
				v = 0
			}
			h.Observe(v)
		}
	})
}

func BenchmarkVecWith(b *testing.B) {
	r := NewRegistry()
	hv, _ := r.HistogramVec("h", "h.", LatencyBuckets, "kind")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			hv.With(KindPush).Observe(1e-3)
		}
	})
}

// TestWithDoesNotAllocate checks that looking up an existing series
// allocates nothing, with one label and with several (the worker's round
// trip histogram has two, looked up for every operation).
func TestWithDoesNotAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	r := NewRegistry()
	one := must[*HistogramVec](t)(r.HistogramVec("h1", "h.", LatencyBuckets, "kind"))
	two := must[*HistogramVec](t)(r.HistogramVec("h2", "h.", LatencyBuckets, "kind", "part"))
	one.With(KindPush).Observe(1e-3)
	two.With(KindPush, PartTotal).Observe(1e-3)
	allocs := testing.AllocsPerRun(100, func() {
		one.With(KindPush).Observe(1e-3)
		two.With(KindPush, PartTotal).Observe(1e-3)
		two.With(KindPull, PartNetwork).Observe(1e-3)
	})
	require.Zero(t, allocs)
	require.Equal(t, uint64(101), two.With(KindPull, PartNetwork).Count())
}

package kv

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/elasticps/elasticps/postoffice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sample returns the value of one exposition line, e.g.
// elasticps_worker_round_trip_seconds_count{kind="push",part="total"}.
func sample(t *testing.T, po *postoffice.Postoffice, series string) float64 {
	t.Helper()
	var b strings.Builder
	require.NoError(t, po.Metrics().WriteText(&b))
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(b.String())
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// The Prometheus metrics count exactly what happened: every operation's
// round trip (with its split into handling and network), every request a
// server handled, and the node's traffic counters.
func TestMetricsCountOperations(t *testing.T) {
	j := startJob(t, 2, 1)
	j.startDefaultServers()
	w := j.newWorker(0, 0)
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 2) // keys on both servers
	const pushes, pulls = 7, 3
	for range pushes {
		ts, err := Push(w, keys, []float32{1, 2, 3, 4}, nil, Options{})
		wait(t, w, ts, err)
	}
	for range pulls {
		var got []float32
		ts, err := Pull(w, keys, &got, nil, Options{})
		wait(t, w, ts, err)
	}
	wp := j.Workers[0]
	for _, c := range []struct {
		series string
		want   float64
	}{
		{`elasticps_worker_round_trip_seconds_count{kind="push",part="total",role="worker"}`, pushes},
		{`elasticps_worker_round_trip_seconds_count{kind="push",part="handling",role="worker"}`, pushes},
		{`elasticps_worker_round_trip_seconds_count{kind="push",part="network",role="worker"}`, pushes},
		{`elasticps_worker_round_trip_seconds_count{kind="pull",part="total",role="worker"}`, pulls},
	} {
		assert.Equal(t, c.want, sample(t, wp, c.series), c.series)
	}
	// each operation sent one request to each of the two servers
	handled := 0.0
	for _, s := range j.Servers {
		handled += sample(t, s, `elasticps_server_request_handle_seconds_count{kind="push",role="server"}`)
		handled += sample(t, s, `elasticps_server_request_handle_seconds_count{kind="pull",role="server"}`)
	}
	assert.EqualValues(t, 2*(pushes+pulls), handled, "requests the servers handled")
	sent := sample(t, wp, `elasticps_messages_sent_total{role="worker"}`)
	assert.Equal(t, float64(wp.Stats().MsgsSent.Load()), sent, "messages_sent_total against the stats")
	assert.GreaterOrEqual(t, sent, float64(2*(pushes+pulls)), "messages_sent_total")
}

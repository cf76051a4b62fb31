package postoffice_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/metrics"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingCustomer counts the data messages it gets.
type countingCustomer struct{ n atomic.Int64 }

func (c *countingCustomer) Accept(*message.Message) { c.n.Add(1) }

// scrape GETs a node's /metrics and returns the value of every series of
// the node's counters, by name, and the labels of every series.
func scrape(t *testing.T, po *postoffice.Postoffice) (map[string]int64, []string) {
	t.Helper()
	srv, err := metrics.Serve("127.0.0.1:0", po.Metrics(), po.Logger())
	require.NoError(t, err)
	defer srv.Close()
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	vals := map[string]int64{}
	var labels []string
	series := regexp.MustCompile(`^([a-z_]+)(\{[^}]*\})? (\S+)$`)
	for _, line := range strings.Split(string(body), "\n") {
		m := series.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels = append(labels, m[1]+m[2])
		if strings.HasPrefix(m[1], "elasticps_") && strings.HasSuffix(m[1], "_total") && m[2] == `{role="`+po.Role().String()+`"}` {
			v, err := strconv.ParseFloat(m[3], 64)
			require.NoError(t, err, line)
			vals[m[1]] = int64(v)
		}
	}
	return vals, labels
}

// Every node counts what its metrics promise, meta and payload, sent and
// received, in every van: what the job's nodes sent is what they
// received, and every series of a node is labelled with its role.
func TestMetricsCountEveryMessage(t *testing.T) {
	for _, van := range []string{"zmq", "tcp", "mem"} {
		t.Run(van, func(t *testing.T) {
			j := jobtest.Start(t, jobtest.Options{Servers: 1, Workers: 1, Van: van})
			srv := &countingCustomer{}
			require.NoError(t, j.Servers[0].AddCustomer(0, 0, srv))
			jobtest.Barrier(t, j.All(), message.AllGroup)
			const sends = 10
			for range sends {
				m := &message.Message{Meta: message.NewMeta()}
				m.Meta.AppID, m.Meta.CustomerID, m.Meta.Request, m.Meta.Push = 0, 0, true, true
				m.Meta.Recver = j.Servers[0].MyNode().ID
				m.AddData(message.Uint64, make([]byte, 8*100))
				_, err := j.Workers[0].Send(m)
				require.NoError(t, err)
			}
			testutil.WaitFor(t, 10*time.Second, func() bool { return srv.n.Load() == sends },
				func() string { return "the server did not get the messages" })
			byRole := map[string]map[string]int64{}
			var sum [4]int64
			testutil.WaitFor(t, 10*time.Second, func() bool {
				sum = [4]int64{}
				for _, po := range j.All() {
					vals, labels := scrape(t, po)
					byRole[po.Role().String()] = vals
					for _, l := range labels {
						require.Contains(t, l, `role="`+po.Role().String()+`"`, "a series of the %s", po.Role())
					}
					for i, name := range []string{metrics.MetricMessagesSent, metrics.MetricMessagesReceived, metrics.MetricBytesSent, metrics.MetricBytesReceived} {
						sum[i] += vals[name]
					}
				}
				return sum[0] == sum[1] && sum[2] == sum[3]
			}, func() string {
				return fmt.Sprintf("the job sent %d messages and %d bytes but received %d and %d", sum[0], sum[2], sum[1], sum[3])
			})
			for role, vals := range byRole {
				for _, name := range []string{metrics.MetricMessagesSent, metrics.MetricMessagesReceived, metrics.MetricBytesSent, metrics.MetricBytesReceived} {
					assert.Positive(t, vals[name], "%s of the %s", name, role)
				}
			}
			// The worker's data: 10 payloads of 800 bytes beside its
			// control messages, and the server received them all.
			assert.Greater(t, byRole["worker"][metrics.MetricBytesSent], int64(sends*800))
			assert.Greater(t, byRole["server"][metrics.MetricBytesReceived], int64(sends*800))
		})
	}
}

// Workers and servers do not export the scheduler's families, nor each
// other's.
func TestMetricsFamiliesByRole(t *testing.T) {
	j := jobtest.Start(t, jobtest.Options{Servers: 1, Workers: 1})
	families := func(po *postoffice.Postoffice) string {
		_, labels := scrape(t, po)
		return strings.Join(labels, "\n")
	}
	w, s := families(j.Workers[0]), families(j.Servers[0])
	assert.Contains(t, w, metrics.MetricWorkerRoundTrip)
	assert.NotContains(t, w, metrics.MetricServerHandle)
	assert.Contains(t, s, metrics.MetricServerHandle)
	assert.NotContains(t, s, metrics.MetricWorkerRoundTrip)
	assert.NotContains(t, families(j.Scheduler), metrics.MetricServerHandle)
}

package elastic_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/postoffice"
)

// TestGoForgetsADeadNodesRequests: a request sent with Link.Go to a node
// that never answers (the worker here runs no elastic app) waits; once
// the node is declared dead its waiter is dropped without calling done,
// and Go to the dead node fails at once with ErrNodeDead.
func TestGoForgetsADeadNodesRequests(t *testing.T) {
	var srv *elastic.Node
	job := jobtest.Start(t, jobtest.Options{Servers: 1, Workers: 1, Start: jobtest.StartWithBarrier,
		Configure: func(c *postoffice.Config) {
			c.Elastic = true
			c.HeartbeatInterval = 100 * time.Millisecond
			c.HeartbeatTimeout = time.Second
		},
		Setup: func(job *jobtest.Job) error {
			if _, err := coord.New(job.Scheduler); err != nil {
				return err
			}
			var err error
			if srv, err = elastic.Attach(job.Servers[0]); err != nil {
				return err
			}
			h := kv.NewDefaultHandler()
			_, err = srv.NewServer(0, kv.ServerOptions{Handler: h.Handle}, h)
			return err
		}})
	worker := job.Workers[0]
	id := worker.MyNode().ID
	answered := make(chan error, 2)
	for range 2 {
		require.NoError(t, elastic.GoForTest(srv, id, elastic.MsgReport, func(_ []byte, err error) { answered <- err }))
	}
	assert.Equal(t, 2, elastic.WaitingForTest(srv), "no answer comes from a node without the elastic app")

	worker.Stop()
	testutil.WaitFor(t, 20*time.Second, func() bool { g, ok := job.Servers[0].Gone(id); return ok && g.Dead },
		func() string { return "the stopped worker was not declared dead" })
	testutil.WaitFor(t, 5*time.Second, func() bool { return elastic.WaitingForTest(srv) == 0 },
		func() string { return "the dead worker's requests still wait" })
	select {
	case err := <-answered:
		t.Fatalf("done was called for a request to a dead node: %v", err)
	default:
	}
	err := elastic.GoForTest(srv, id, elastic.MsgReport, func([]byte, error) { t.Error("done called") })
	require.ErrorIs(t, err, elastic.ErrNodeDead)
	assert.ErrorContains(t, err, "its report request is not sent")
	assert.Equal(t, 0, elastic.WaitingForTest(srv))
}

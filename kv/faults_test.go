package kv

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/postoffice"
)

// heartbeats makes a job's nodes heartbeat every 200 ms, dead after 3 s:
// a stopped server is found dead within seconds, and a live node on a
// loaded 2-core machine is never taken for dead.
func heartbeats(c *postoffice.Config) {
	c.HeartbeatInterval = 200 * time.Millisecond
	c.HeartbeatTimeout = 3 * time.Second
}

// startSumAndSilentServers gives server rank 0 the sum store and server
// rank 1 a handler that never answers, so that requests to it stay
// outstanding until it is declared dead. It returns server rank 1.
func (j *job) startSumAndSilentServers() *postoffice.Postoffice {
	j.t.Helper()
	var silent *postoffice.Postoffice
	for _, po := range j.Servers {
		srv, err := NewServer(po, 0)
		require.NoError(j.t, err)
		j.t.Cleanup(srv.Close)
		if po.MyRank() == 0 {
			srv.SetRequestHandler(NewDefaultHandler().Handle)
		} else {
			srv.SetRequestHandler(func(ReqMeta, KVPairs, *Server) {})
			silent = po
		}
	}
	return silent
}

// bound is how long the tests give a failure that must come within the
// heartbeat timeout and a tick: generous for a loaded machine, and far
// below forever.
const bound = 20 * time.Second

// An operation waiting on a server that dies fails with an error naming
// the server; a new request to it fails at once; requests to the others
// still work; Finalize returns everywhere, with the job's failure.
func TestDeadServerFailsWaitingOperations(t *testing.T) {
	j := startJobWith(t, jobtest.Options{Servers: 2, Workers: 1, Configure: heartbeats})
	silent := j.startSumAndSilentServers()
	w := j.newWorker(0, 0)
	r := j.Workers[0].ServerKeyRanges()
	keys := []uint64{r[0].Begin + 1, r[1].Begin + 1}
	pending, err := Push(w, keys, []float32{1, 2}, nil, Options{})
	require.NoError(t, err)
	dead := silent.MyNode()
	silent.Stop() // from now on: no heartbeats either

	err = testutil.Within(t, bound, func() error { return w.Wait(pending) }, func() string { return "Wait on a dead server did not return" })
	var de *DeadServerError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, dead.ID, de.Node)
	assert.Equal(t, 1, de.Rank)
	assert.Equal(t, fmt.Sprintf("%s:%d", dead.Hostname, dead.Port), de.Addr)
	assert.Equal(t, r[1], de.Range)
	assert.Equal(t, "no heartbeat for 3s (PS_HEARTBEAT_TIMEOUT)", de.Reason)
	assert.ErrorContains(t, err, fmt.Sprintf("kv: request %d: kv: server %d (rank 1, %s:%d) is dead", pending, dead.ID, dead.Hostname, dead.Port))
	assert.ErrorContains(t, err, fmt.Sprintf("key range [%d, %d) are lost", r[1].Begin, r[1].End))

	// a new request to the dead server fails at once, without waiting
	ts, err := Pull(w, keys[1:], new([]float32), nil, Options{})
	require.ErrorAs(t, err, &de, "issue")
	require.ErrorAs(t, w.Wait(ts), &de, "Wait")
	// the live server still serves
	var got []float32
	ts, err = Pull(w, keys[:1], &got, nil, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	assert.Equal(t, []float32{1}, got)

	// Finalize returns on every live node, with the job's failure
	errs := make(chan error, 3)
	for _, po := range append([]*postoffice.Postoffice{j.Scheduler, j.Workers[0]}, j.Servers...) {
		if po != silent {
			go func() { errs <- po.Finalize(0, true) }()
		}
	}
	for range 3 {
		err := testutil.Recv(t, errs, bound, func() string { return "Finalize did not return" })
		require.ErrorIs(t, err, postoffice.ErrNodesLost)
		assert.ErrorContains(t, err, fmt.Sprintf("server %d (rank 1, %s:%d) died", dead.ID, dead.Hostname, dead.Port))
	}
}

// With the scheduler gone, nobody can tell that a server died: the worker
// probes the servers, and an operation fails once its server has not
// answered for the heartbeat timeout, while the operations on a server
// that answers go on, also one it holds for longer than the timeout;
// barriers fail once the scheduler has not come back within
// PS_SCHEDULER_WAIT.
func TestSchedulerLostBoundsWaits(t *testing.T) {
	j := startJobWith(t, jobtest.Options{Servers: 2, Workers: 1, Configure: func(c *postoffice.Config) {
		c.HeartbeatInterval = 100 * time.Millisecond
		c.HeartbeatTimeout = 500 * time.Millisecond
		c.SchedulerWait = 3 * time.Second
	}})
	held := make(chan func(), 1) // answers the held request
	var silent *postoffice.Postoffice
	for _, po := range j.Servers {
		srv, err := NewServer(po, 0)
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		if po.MyRank() == 1 {
			srv.SetRequestHandler(func(ReqMeta, KVPairs, *Server) {})
			silent = po
			continue
		}
		sum := NewDefaultHandler().Handle
		srv.SetRequestHandler(func(m ReqMeta, kvs KVPairs, s *Server) {
			if m.Cmd == 7 {
				held <- func() { _ = s.Response(m, KVPairs{}) }
				return
			}
			sum(m, kvs, s)
		})
	}
	w := j.newWorker(0, 0)
	r := j.Workers[0].ServerKeyRanges()
	pending, err := Push(w, []uint64{r[1].Begin}, []float32{1}, nil, Options{})
	require.NoError(t, err)
	slow, err := Push(w, []uint64{r[0].Begin + 1}, []float32{1}, nil, Options{Cmd: 7})
	require.NoError(t, err)
	answer := testutil.Recv(t, held, bound, func() string { return "the held push did not arrive" })
	j.Scheduler.Stop()
	silent.Stop() // dies while nobody would say so

	err = testutil.Within(t, bound, func() error { return w.Wait(pending) }, func() string { return "Wait with the scheduler lost did not return" })
	require.Error(t, err)
	assert.ErrorContains(t, err, fmt.Sprintf("kv: request %d waited", pending))
	assert.ErrorContains(t, err, fmt.Sprintf("for server %d (rank 1), which has not answered for longer than PS_HEARTBEAT_TIMEOUT while the scheduler is unreachable", silent.MyNode().ID))
	since, lost := j.Workers[0].SchedulerLost()
	require.True(t, lost)
	// the server that answers keeps serving for four timeouts, and its
	// held push waits all along
	for n := 0; n < 3 || time.Since(since) < 2*time.Second; n++ {
		ts, err := Push(w, []uint64{r[0].Begin}, []float32{1}, nil, Options{})
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts), "push %d to the live server", n)
	}
	answer()
	require.NoError(t, w.Wait(slow), "the push the live server held")
	err = testutil.Within(t, bound, func() error { return j.Workers[0].Finalize(0, true) }, func() string { return "Finalize did not return" })
	require.ErrorIs(t, err, postoffice.ErrNodesLost)
	assert.ErrorContains(t, err, "the scheduler (")
	assert.ErrorContains(t, err, "did not come back within 3s")
	assert.False(t, errors.Is(err, postoffice.ErrStopped), "want the failure, not a stop: %v", err)
}

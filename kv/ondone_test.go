package kv

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notices records the calls of an OnDone Notifier.
type notices struct {
	calls atomic.Int32
	last  atomic.Int32 // the last Outcome
	got   chan struct{}
}

func newNotices() *notices { return &notices{got: make(chan struct{}, 8)} }

func (n *notices) Notify(o Outcome) {
	n.calls.Add(1)
	n.last.Store(int32(o))
	n.got <- struct{}{}
}

func (n *notices) await(t *testing.T, what string) {
	t.Helper()
	testutil.Recv(t, n.got, waitLimit, func() string { return what + ": no notice" })
}

// TestOnDone checks the completion notice the C++ bridge's Wait relies on:
// called once when the request completes (its Outcome telling whether Wait
// returns an error), not for requests that are not outstanding or whose
// notice was withdrawn, and with Abandoned when the customer closes.
func TestOnDone(t *testing.T) {
	j := startJob(t, 1, 1)
	gate := make(chan struct{})
	var openGate sync.Once
	j.startServers(func(meta ReqMeta, _ KVPairs, s *Server) {
		<-gate // hold every answer until the test has registered its notice
		if meta.Cmd == 7 {
			_ = s.ResponseError(meta, errors.New("cmd 7 refused"))
			return
		}
		_ = s.Response(meta, KVPairs{})
	})
	w := j.newWorker(0, 0)
	c := w.Customer()
	// Registered after the job's, server's and worker's cleanups, so it
	// runs first: a failed check must not leave a server handler blocked
	// and the job unable to stop.
	t.Cleanup(func() { openGate.Do(func() { close(gate) }) })
	push := func(cmd int32) int32 {
		t.Helper()
		ts, err := Push(w, []uint64{1}, []float32{1}, nil, Options{Cmd: cmd})
		require.NoError(t, err)
		return ts
	}

	// Completes without an error; a second request in flight is counted.
	n := newNotices()
	ts1, ts2 := push(0), push(0)
	require.False(t, c.OnDone(ts1, n, true), "OnDone(%d, alone) with two requests in flight", ts1)
	require.True(t, c.OnDone(ts1, n, false), "OnDone(%d) of a request in flight", ts1)
	gate <- struct{}{}
	n.await(t, "request 1")
	assert.Equal(t, Succeeded, Outcome(n.last.Load()), "request 1 completed without an error")
	assert.NoError(t, w.Wait(ts1), "Wait(%d) after the notice", ts1)
	assert.False(t, c.OnDone(ts1, n, false), "OnDone on a completed request")
	assert.False(t, c.OnDone(12345, n, false), "OnDone on a timestamp never issued")

	// A withdrawn notice is not called; the request still completes.
	require.True(t, c.OnDone(ts2, n, true), "OnDone(%d, alone) of the only request in flight", ts2)
	require.True(t, c.CancelOnDone(ts2), "CancelOnDone of a registered notice")
	assert.False(t, c.CancelOnDone(ts2), "a second CancelOnDone")
	gate <- struct{}{}
	require.NoError(t, testutil.Within(t, waitLimit, func() error { return w.Wait(ts2) }, func() string { return "Wait" }))

	// Completes with an error.
	ts3 := push(7)
	require.True(t, c.OnDone(ts3, n, false), "OnDone of a request in flight")
	gate <- struct{}{}
	n.await(t, "request 3")
	assert.Equal(t, Failed, Outcome(n.last.Load()), "request 3 failed")
	var se *ServerError
	assert.ErrorAs(t, w.Wait(ts3), &se, "Wait(%d): the server's error", ts3)
	assert.EqualValues(t, 2, n.calls.Load(), "notices: request 1 and request 3")

	// Closing the customer notifies the requests it leaves unfinished.
	ts4 := push(0)
	require.True(t, c.OnDone(ts4, n, false), "OnDone of a request in flight")
	w.Close() // the server handler still holds the request at the gate
	openGate.Do(func() { close(gate) })
	n.await(t, "close")
	assert.Equal(t, Abandoned, Outcome(n.last.Load()), "the last notice after Close")
	assert.EqualValues(t, 3, n.calls.Load(), "notices after Close")
	assert.False(t, c.OnDone(ts4, n, false), "OnDone on a closed customer")
}

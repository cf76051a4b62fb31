package kv

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/elasticps/elasticps/internal/testutil"
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
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}

	// Completes without an error; a second request in flight is counted.
	n := newNotices()
	ts1, ts2 := push(0), push(0)
	if c.OnDone(ts1, n, true) {
		t.Fatalf("OnDone(%d, alone) with two requests in flight reported true", ts1)
	}
	if !c.OnDone(ts1, n, false) {
		t.Fatalf("OnDone(%d) of a request in flight reported false", ts1)
	}
	gate <- struct{}{}
	n.await(t, "request 1")
	if o := Outcome(n.last.Load()); o != Succeeded {
		t.Errorf("request 1 completed without an error; notice says %d, want Succeeded", o)
	}
	if err := w.Wait(ts1); err != nil {
		t.Errorf("Wait(%d) after the notice: %v", ts1, err)
	}
	if c.OnDone(ts1, n, false) {
		t.Error("OnDone on a completed request reported true")
	}
	if c.OnDone(12345, n, false) {
		t.Error("OnDone on a timestamp never issued reported true")
	}

	// A withdrawn notice is not called; the request still completes.
	if !c.OnDone(ts2, n, true) {
		t.Fatalf("OnDone(%d, alone) of the only request in flight reported false", ts2)
	}
	if !c.CancelOnDone(ts2) {
		t.Fatal("CancelOnDone of a registered notice reported false")
	}
	if c.CancelOnDone(ts2) {
		t.Error("a second CancelOnDone reported true")
	}
	gate <- struct{}{}
	if err := testutil.Within(t, waitLimit, func() error { return w.Wait(ts2) }, func() string { return "Wait" }); err != nil {
		t.Fatal(err)
	}

	// Completes with an error.
	ts3 := push(7)
	if !c.OnDone(ts3, n, false) {
		t.Fatal("OnDone of a request in flight reported false")
	}
	gate <- struct{}{}
	n.await(t, "request 3")
	if o := Outcome(n.last.Load()); o != Failed {
		t.Errorf("request 3 failed; notice says %d, want Failed", o)
	}
	var se *ServerError
	if err := w.Wait(ts3); !errors.As(err, &se) {
		t.Errorf("Wait(%d) = %v, want the server's error", ts3, err)
	}
	if got := n.calls.Load(); got != 2 {
		t.Errorf("%d notices, want 2 (request 1 and request 3)", got)
	}

	// Closing the customer notifies the requests it leaves unfinished.
	ts4 := push(0)
	if !c.OnDone(ts4, n, false) {
		t.Fatal("OnDone of a request in flight reported false")
	}
	w.Close() // the server handler still holds the request at the gate
	openGate.Do(func() { close(gate) })
	n.await(t, "close")
	if o := Outcome(n.last.Load()); o != Abandoned || n.calls.Load() != 3 {
		t.Errorf("after Close: %d notices, the last %d; want 3, Abandoned", n.calls.Load(), o)
	}
	if c.OnDone(ts4, n, false) {
		t.Error("OnDone on a closed customer reported true")
	}
}

package kv

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/syncctl"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startSyncJob starts a job whose nodes have sync config sc, with a
// DefaultHandler server (kv.NewServer: the gate comes from the config
// alone) on every server node.
func startSyncJob(t *testing.T, servers, workers int, sc postoffice.SyncConfig) (*job, []*Server) {
	t.Helper()
	j := startJobWith(t, jobtest.Options{Servers: servers, Workers: workers,
		Configure: func(c *postoffice.Config) { c.Sync = sc }})
	var srvs []*Server
	j.startServersWith(func(s *Server) {
		s.SetRequestHandler(NewDefaultHandler().Handle)
		srvs = append(srvs, s)
	})
	return j, srvs
}

// syncKeys are two keys on each server.
func syncKeys(po *postoffice.Postoffice) []uint64 {
	var keys []uint64
	for _, r := range po.ServerKeyRanges() {
		keys = append(keys, r.Begin, r.Begin+3)
	}
	return keys
}

// runWorkers runs f for each worker in its own goroutine and returns the
// first error, failing the test if they do not finish.
func runWorkers(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	err := testutil.Within(t, 90*time.Second, func() error {
		errs := make(chan error, n)
		for i := range n {
			go func() { errs <- f(i) }()
		}
		var first error
		for range n {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}, func() string { return "the workers did not finish: a request parked forever?" })
	require.NoError(t, err)
}

// bspVal is what worker w pushes to key index i in round r: integers, so
// float32 sums are exact.
func bspVal(w, r, i int) float32 { return float32((w+1)*100 + r*10 + i) }

// Under BSP, with integer-valued pushes, every worker's pull of round t
// (push, then pull, as MXNet's dist_async program does) gets exactly the
// sum of rounds 1..t of every worker: no pull sees a push of round t+1,
// none misses one of round t.
func TestBSPEveryPullGetsExactlyItsRoundsSum(t *testing.T) {
	const workers, rounds = 3, 40
	j, srvs := startSyncJob(t, 2, workers, postoffice.SyncConfig{Mode: syncctl.BSP})
	keys := syncKeys(j.Workers[0])
	want := func(t, i int) float32 {
		var s float32
		for r := 1; r <= t; r++ {
			for w := range workers {
				s += bspVal(w, r, i)
			}
		}
		return s
	}
	ws := make([]*Worker, workers)
	for i := range ws {
		ws[i] = j.newWorker(i, 0)
	}
	runWorkers(t, workers, func(w int) error {
		var pushes []int32
		for r := 1; r <= rounds; r++ {
			vals := make([]float32, len(keys))
			for i := range vals {
				vals[i] = bspVal(w, r, i)
			}
			ts, err := Push(ws[w], keys, vals, nil, Options{})
			if err != nil {
				return err
			}
			pushes = append(pushes, ts)
			var got []float32
			if ts, err = Pull(ws[w], keys, &got, nil, Options{}); err == nil {
				err = ws[w].Wait(ts)
			}
			if err != nil {
				return fmt.Errorf("worker %d round %d: %w", w, r, err)
			}
			for i := range keys {
				if got[i] != want(r, i) {
					return fmt.Errorf("worker %d round %d key %d: pulled %v, want exactly %v", w, r, keys[i], got[i], want(r, i))
				}
			}
		}
		for _, ts := range pushes {
			if err := ws[w].Wait(ts); err != nil {
				return err
			}
		}
		return nil
	})
	for i, s := range srvs {
		st, _ := s.SyncStats()
		assert.Zero(t, st.Parked, "server %d: nothing left parked", i)
		assert.Equal(t, int64(2*workers*rounds), st.Requests, "server %d: every push and pull admitted once (re-admitted ones are not counted again)", i)
	}
	for i, w := range ws {
		assert.Zero(t, w.dropped.Load(), "worker %d got no response twice", i)
	}
}

// boundJob runs a slow worker 0 against fast workers 1 and 2 under sc: the
// fast ones run `rounds` rounds of push(1) then pull; the slow one pushes
// 1000 per round and does a round only when a fast worker is held (or the
// fast ones are done), so the fast ones would run away without the bound.
// It returns, for every fast pull, its round minus the slow worker's
// pushes it saw (the gap it was answered with), and the servers.
func boundJob(t *testing.T, sc postoffice.SyncConfig, rounds int) (gaps []int, srvs []*Server) {
	t.Helper()
	j, srvs := startSyncJob(t, 2, 3, sc)
	keys := syncKeys(j.Workers[0])
	ws := []*Worker{j.newWorker(0, 0), j.newWorker(1, 0), j.newWorker(2, 0)}
	var mu sync.Mutex
	var fastDone atomic.Int32
	parked := func() int {
		n := 0
		for _, s := range srvs {
			st, _ := s.SyncStats()
			n += st.Parked
		}
		return n
	}
	round := func(w *Worker, v float32) ([]float32, error) {
		ts, err := Push(w, keys, fill(len(keys), v), nil, Options{})
		if err == nil {
			err = w.Wait(ts)
		}
		var got []float32
		if err == nil {
			if ts, err = Pull(w, keys, &got, nil, Options{}); err == nil {
				err = w.Wait(ts)
			}
		}
		return got, err
	}
	runWorkers(t, 3, func(w int) error {
		if w == 0 {
			for r := 0; r < rounds; r++ {
				if !testutil.Until(30*time.Second, func() bool { return fastDone.Load() == 2 || parked() > 0 }) {
					return fmt.Errorf("round %d: no fast worker held and none done", r)
				}
				if _, err := round(ws[0], 1000); err != nil {
					return fmt.Errorf("slow worker round %d: %w", r, err)
				}
			}
			return nil
		}
		defer fastDone.Add(1)
		for r := 1; r <= rounds; r++ {
			got, err := round(ws[w], 1)
			if err != nil {
				return fmt.Errorf("worker %d round %d: %w", w, r, err)
			}
			for _, v := range got {
				mu.Lock()
				gaps = append(gaps, r-int(v)/1000)
				mu.Unlock()
			}
		}
		return nil
	})
	return gaps, srvs
}

func fill(n int, v float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// SSP(s): no fast worker's pull is answered with a gap above s to the slow
// worker; pulls were held to keep it so, and the metrics count them.
func TestSSPBoundsTheGapToTheSlowWorker(t *testing.T) {
	const s, rounds = 2, 10
	gaps, srvs := boundJob(t, postoffice.SyncConfig{Mode: syncctl.SSP, Staleness: s}, rounds)
	require.NotEmpty(t, gaps)
	for _, g := range gaps {
		require.LessOrEqual(t, g, s, "a fast pull answered with gap %d > s: %v", g, gaps)
	}
	var delayed int64
	for i, srv := range srvs {
		st, parked := srv.SyncStats()
		delayed += st.DelayedPulls
		assert.Zero(t, st.DelayedPushes, "server %d: SSP never holds a push", i)
		assert.Zero(t, st.Parked, "server %d", i)
		met := srv.sync.met
		assert.Equal(t, float64(st.DelayedPulls), promtest.ToFloat64(met.Delayed.WithLabelValues("pull")), "server %d: delayed pulls metric", i)
		assert.Equal(t, float64(st.Releases), promtest.ToFloat64(met.Releases), "server %d: release batches metric", i)
		assert.Zero(t, promtest.ToFloat64(met.Parked), "server %d: parked now", i)
		assert.Equal(t, uint64(st.DelayedPulls), sampleCount(t, met.ParkedSeconds.WithLabelValues("pull")), "server %d: each delayed pull's time parked observed once", i)
		if st.DelayedPulls > 0 {
			assert.Positive(t, parked, "server %d: time parked", i)
		}
	}
	assert.Positive(t, delayed, "the fast workers were held")
}

// FluentPS with p = 1: only the fastest is held, at gap >= s, and each
// held pull is released by the slow worker's next iteration (in batches);
// every hold is a pause, and every pull is answered.
func TestFluentHoldsTheFastestUntilTMinAdvances(t *testing.T) {
	const s, rounds = 1, 10
	gaps, srvs := boundJob(t, postoffice.SyncConfig{Mode: syncctl.Fluent, Staleness: s, PauseProb: 1}, rounds)
	require.Len(t, gaps, 2*rounds*4, "every fast pull answered")
	for _, g := range gaps {
		require.LessOrEqual(t, g, s, "with p = 1 the bound holds: %v", gaps)
	}
	var pauses int64
	for i, srv := range srvs {
		st, _ := srv.SyncStats()
		pauses += st.Pauses
		assert.Equal(t, st.Pauses, st.DelayedPulls, "server %d: FluentPS parks pulls only by pausing them", i)
		assert.Zero(t, st.Parked, "server %d", i)
		if st.DelayedPulls > 0 {
			assert.Positive(t, st.Releases, "server %d: parked pulls were released", i)
		}
		assert.Equal(t, float64(st.Pauses), promtest.ToFloat64(srv.sync.met.Pauses), "server %d: pauses metric", i)
	}
	assert.Positive(t, pauses, "the fastest worker was paused")
}

func sampleCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, o.(prometheus.Metric).Write(&m))
	return m.GetHistogram().GetSampleCount()
}

// heldPull has worker 0 of a BSP job of two workers push 1 and pull; the
// pull waits for worker 1, who never pushes.
func heldPull(t *testing.T) (*job, *Server, *Worker, *[]float32, int32) {
	t.Helper()
	j, srvs := startSyncJob(t, 1, 2, postoffice.SyncConfig{Mode: syncctl.BSP})
	w := j.newWorker(0, 0)
	keys := []uint64{5}
	ts, err := Push(w, keys, []float32{1}, nil, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	got := new([]float32)
	ts, err = Pull(w, keys, got, nil, Options{})
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, func() bool { st, _ := srvs[0].SyncStats(); return st.Parked == 1 },
		func() string { st, _ := srvs[0].SyncStats(); return fmt.Sprintf("the pull was not parked: %+v", st) })
	assert.Equal(t, 0, w.c.NumResponse(ts), "not answered while worker 1 has not pushed")
	return j, srvs[0], w, got, ts
}

// A worker that leaves no longer holds the others: the pull it held is
// answered, once.
func TestWorkerLeftReleasesWhatItHeld(t *testing.T) {
	j, srv, w, got, ts := heldPull(t)
	srv.sync.WorkerLeft(j.Workers[1].MyNode().ID)
	require.NoError(t, testutil.Within(t, 10*time.Second, func() error { return w.Wait(ts) }, func() string { return "the pull stayed parked" }))
	assert.Equal(t, []float32{1}, *got)
	// a later round trip to the same server comes after any duplicate
	var again []float32
	ts, err := PushPull(w, []uint64{5}, []float32{2}, &again, nil, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	assert.Equal(t, []float32{3}, again)
	assert.Zero(t, w.dropped.Load(), "no pull answered twice")
}

// Server.Close answers what the sync gate parked, with the values it has.
func TestServerCloseAnswersParkedRequests(t *testing.T) {
	_, srv, w, got, ts := heldPull(t)
	srv.Close()
	require.NoError(t, testutil.Within(t, 10*time.Second, func() error { return w.Wait(ts) }, func() string { return "the parked pull was never answered" }))
	assert.Equal(t, []float32{1}, *got)
	st, _ := srv.SyncStats()
	assert.Zero(t, st.Parked)
}

// ASP (the default) installs no gate: ps-lite's behaviour, at no cost.
func TestASPInstallsNoGate(t *testing.T) {
	_, srvs := startSyncJob(t, 1, 1, postoffice.SyncConfig{})
	assert.Nil(t, srvs[0].gate)
	assert.Nil(t, srvs[0].sync)
	st, parked := srvs[0].SyncStats()
	assert.Zero(t, st)
	assert.Zero(t, parked)
}

// A server with a gate of its own that does not chain the sync gate is
// refused under a sync mode, rather than silently not synchronizing.
func TestForeignGateWithoutSyncIsRefused(t *testing.T) {
	j := startJobWith(t, jobtest.Options{Servers: 1, Workers: 1,
		Configure: func(c *postoffice.Config) { c.Sync.Mode = syncctl.SSP }})
	_, err := NewServerWith(j.Servers[0], 0, ServerOptions{Gate: func(*Server) RequestGate { return &holdFirst{} }})
	require.ErrorContains(t, err, "PS_SYNC_MODE=ssp but the server's own gate does not apply it")
}

// iterationGate records the iteration each request states.
type iterationGate struct {
	mu    sync.Mutex
	iters []int64
}

func (g *iterationGate) Admit(m *message.Message, _ []uint64) (Admitted, bool) {
	g.mu.Lock()
	g.iters = append(g.iters, m.Meta.Ext.Iteration)
	g.mu.Unlock()
	return nil, true
}

// Options.Iteration reaches the server as Meta.Ext.Iteration (field 19).
func TestOptionsIterationIsSent(t *testing.T) {
	j := startJob(t, 1, 1)
	g := &iterationGate{}
	srv, err := NewServerWith(j.Servers[0], 0, ServerOptions{Handler: NewDefaultHandler().Handle,
		Gate: func(*Server) RequestGate { return g }})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	w := j.newWorker(0, 0)
	ts, err := Push(w, []uint64{1}, []float32{1}, nil, Options{Iteration: 7})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	var got []float32
	ts, err = Pull(w, []uint64{1}, &got, nil, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	g.mu.Lock()
	defer g.mu.Unlock()
	assert.Equal(t, []int64{7, 0}, g.iters)
}

// syncReq is a request of worker node for keys, as the gate sees it.
func syncReq(node int32, push, pull bool) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Request, m.Meta.Sender, m.Meta.Push, m.Meta.Pull = true, node, push, pull
	return m
}

// The gate decides nothing new while a request the controller released has
// not run yet (the controller counts a released push as applied): the
// gate is driven by hand here, as the customer goroutine would, with the
// re-admissions captured, so the interleaving is exact.
func TestSyncGateDefersArrivalsUntilReleasedRequestsRan(t *testing.T) {
	j, srvs := startSyncJob(t, 1, 2, postoffice.SyncConfig{Mode: syncctl.BSP})
	g := srvs[0].sync
	readmitted := make(chan *message.Message, 8)
	g.mu.Lock()
	g.readmit = func(m *message.Message) { readmitted <- m }
	g.mu.Unlock()
	w0, w1 := j.Workers[0].MyNode().ID, j.Workers[1].MyNode().ID
	keys := []uint64{5}
	admit := func(m *message.Message) bool { _, run := g.Admit(m, keys); return run }

	require.True(t, admit(syncReq(w0, true, false)), "round 1 push of w0")
	require.True(t, admit(syncReq(w1, true, false)), "round 1 push of w1")
	require.True(t, admit(syncReq(w0, false, true)), "round 1 pull of w0")
	push2w0 := syncReq(w0, true, false)
	require.False(t, admit(push2w0), "BSP holds w0's round 2 push: w1 still owes its round 1 pull")
	require.True(t, admit(syncReq(w1, false, true)), "round 1 pull of w1")
	next := func(what string) *message.Message {
		return testutil.Recv(t, readmitted, 5*time.Second, func() string { return what + " was not re-admitted" })
	}
	require.Same(t, push2w0, next("the held push"))

	// w1 runs ahead before w0's push is back: had the controller seen
	// these, w1's pull would run before w0's round 2 push is applied.
	push2w1, pull2w1 := syncReq(w1, true, false), syncReq(w1, false, true)
	assert.False(t, admit(push2w1), "deferred behind the released push")
	assert.False(t, admit(pull2w1), "deferred behind the released push")
	assert.Empty(t, readmitted, "one re-admission at a time")

	assert.True(t, admit(push2w0), "the released push runs when it comes back, without asking again")
	require.Same(t, push2w1, next("the deferred push"))
	assert.True(t, admit(push2w1))
	require.Same(t, pull2w1, next("the deferred pull"))
	assert.True(t, admit(pull2w1), "both round 2 pushes have run")
	st, _ := g.Stats()
	assert.Equal(t, int64(7), st.Requests, "each of the 7 requests admitted once")
	assert.Equal(t, int64(1), st.DelayedPushes)
}

// A worker declared dead (its heartbeats stop) no longer holds the others:
// the node-gone notice reaches the server's gate, which answers the pull
// the dead worker held back.
func TestDeadWorkerNoLongerHoldsBSP(t *testing.T) {
	j := startJobWith(t, jobtest.Options{Servers: 1, Workers: 2, Configure: func(c *postoffice.Config) {
		c.Sync = postoffice.SyncConfig{Mode: syncctl.BSP}
		heartbeats(c)
	}})
	var srv *Server
	j.startServersWith(func(s *Server) { s.SetRequestHandler(NewDefaultHandler().Handle); srv = s })
	w := j.newWorker(0, 0)
	keys := []uint64{5}
	ts, err := Push(w, keys, []float32{1}, nil, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	var got []float32
	ts, err = Pull(w, keys, &got, nil, Options{})
	require.NoError(t, err)
	testutil.WaitFor(t, 10*time.Second, func() bool { st, _ := srv.SyncStats(); return st.Parked == 1 },
		func() string { return "the pull was not parked" })
	j.Workers[1].Stop() // silent from now on: no Finalize, no goodbye
	require.NoError(t, testutil.Within(t, 20*time.Second, func() error { return w.Wait(ts) },
		func() string { return "the pull stayed parked after its holder died" }))
	assert.Equal(t, []float32{1}, got)
}

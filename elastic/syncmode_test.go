package elastic_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/paramstore"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/syncctl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncJob is an elastic job whose servers synchronize (PS_SYNC_MODE), with
// a coordinator on the scheduler that moves keys when the test says so.
type syncJob struct {
	*jobtest.Job
	coord *coord.Coordinator
	srvs  []*kv.Server
	srvEl []*elastic.Node
	ws    []*kv.Worker
}

// startSyncJob starts ns servers and nw workers in elastic mode with sync
// config sc; newStore gives each server its handler and Migrator.
func startSyncJob(t *testing.T, ns, nw int, sc postoffice.SyncConfig, newStore func() (kv.ServerHandler, elastic.Migrator)) *syncJob {
	t.Helper()
	var j *syncJob
	jobtest.Start(t, jobtest.Options{Servers: ns, Workers: nw, Start: jobtest.StartWithBarrier,
		Configure: func(c *postoffice.Config) { c.Sync = sc },
		Setup: func(job *jobtest.Job) error {
			j = &syncJob{Job: job}
			var err error
			if j.coord, err = coord.New(job.Scheduler); err != nil {
				return err
			}
			j.coord.Timeout = 10 * time.Second
			for _, po := range job.Servers {
				en, err := elastic.Attach(po)
				if err != nil {
					return err
				}
				h, mig := newStore()
				srv, err := en.NewServer(0, kv.ServerOptions{Handler: h}, mig)
				if err != nil {
					return err
				}
				j.srvs, j.srvEl = append(j.srvs, srv), append(j.srvEl, en)
			}
			for _, po := range job.Workers {
				en, err := elastic.Attach(po)
				if err != nil {
					return err
				}
				w, err := en.NewWorker(0, 0)
				if err != nil {
					return err
				}
				j.ws = append(j.ws, w)
			}
			return nil
		}})
	return j
}

func sumStore() (kv.ServerHandler, elastic.Migrator) {
	s := kv.NewDefaultHandler()
	return s.Handle, s
}

// syncKeys are four keys on each server.
func syncKeys(po *postoffice.Postoffice) []uint64 {
	var keys []uint64
	for _, r := range po.ServerKeyRanges() {
		keys = append(keys, r.Begin, r.Begin+1, r.Begin+2, r.Begin+3)
	}
	return keys
}

// mover moves two ranges back and forth between the two servers until
// stop: keys 1-2 of server 0's range (requests span them and keys that
// stay) and keys 0-1 of server 1's. moves counts the completed moves.
type mover struct {
	j     *syncJob
	stop  chan struct{}
	done  chan struct{}
	moves atomic.Int64
	errs  []error
}

func startMover(t *testing.T, j *syncJob) *mover {
	t.Helper()
	r := j.Workers[0].ServerKeyRanges()
	ranges := [][2]uint64{{r[0].Begin + 1, r[0].Begin + 3}, {r[1].Begin, r[1].Begin + 2}}
	m := &mover{j: j, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for i := 0; ; i++ {
			select {
			case <-m.stop:
				return
			default:
			}
			rg := ranges[i%len(ranges)]
			cur := j.coord.Table().Current()
			to := int32(message.ServerRankToID(0))
			if cur.Intervals[cur.Find(rg[0])].Node == to {
				to = int32(message.ServerRankToID(1))
			}
			if _, err := j.coord.Move(rg[0], rg[1], to); err != nil {
				m.errs = append(m.errs, fmt.Errorf("move %d of [%d, %d) to %d: %w", i, rg[0], rg[1], to, err))
				return
			}
			m.moves.Add(1)
		}
	}()
	t.Cleanup(m.halt)
	return m
}

// halt stops the mover and waits for its last move.
func (m *mover) halt() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// waitMoves blocks a worker until at least n moves completed, so that
// moves surely happen while the job trains.
func (m *mover) waitMoves(n int64) error {
	if !testutil.Until(30*time.Second, func() bool { return m.moves.Load() >= n }) {
		return fmt.Errorf("only %d of %d moves completed", m.moves.Load(), n)
	}
	return nil
}

// runWorkers runs f for each worker in its own goroutine and requires that
// all finish without error.
func runWorkers(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	err := testutil.Within(t, 60*time.Second, func() error {
		errs := make(chan error, n)
		for i := range n {
			go func() { errs <- f(i) }()
		}
		var first error
		for range n {
			err := <-errs
			if err != nil {
				t.Log(err) // the others may wait for this one forever
			}
			if err != nil && first == nil {
				first = err
			}
		}
		return first
	}, func() string { return "the workers did not finish: a pull lost?" })
	require.NoError(t, err)
}

// pushPull pushes vals (not waited for) and pulls the keys, waiting for
// the pull; the push's timestamp is appended to pushes.
func pushPull(w *kv.Worker, keys []uint64, vals []float32, pushes *[]int32, opts kv.Options) ([]float32, error) {
	ts, err := kv.Push(w, keys, vals, nil, opts)
	if err != nil {
		return nil, err
	}
	*pushes = append(*pushes, ts)
	var got []float32
	if ts, err = kv.Pull(w, keys, &got, nil, opts); err == nil {
		err = w.Wait(ts)
	}
	return got, err
}

func waitAll(w *kv.Worker, tss []int32) error {
	for _, ts := range tss {
		if err := w.Wait(ts); err != nil {
			return err
		}
	}
	return nil
}

// checkAnsweredOnce asserts that nothing is left parked on any server and
// that no worker got a response twice (a pull answered by both owners
// shows as a dropped response).
func (j *syncJob) checkAnsweredOnce(t *testing.T) {
	t.Helper()
	for i, s := range j.srvs {
		st, _ := s.SyncStats()
		assert.Zero(t, st.Parked, "server %d: nothing left parked", i)
	}
	for i, w := range j.ws {
		assert.Zero(t, w.Dropped(), "worker %d got no response twice", i)
	}
}

func (j *syncJob) redirected() int64 {
	var n int64
	for _, en := range j.srvEl {
		n += en.Redirected()
	}
	return n
}

func bspVal(w, r, i int) float32 { return float32((w+1)*100 + r*10 + i) }

// Under BSP, keys moving back and forth between the two servers while
// rounds go on: every pull of round t gets exactly the sum of rounds 1..t
// of every worker (a moved key's t_min, clocks and owed pulls go with it),
// and each pull is answered once (the pulls the old owner had parked are
// redirected and answered by the new owner).
func TestBSPExactAcrossMoves(t *testing.T) {
	for _, workers := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			const rounds = 100
			j := startSyncJob(t, 2, workers, postoffice.SyncConfig{Mode: syncctl.BSP}, sumStore)
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
			m := startMover(t, j)
			runWorkers(t, workers, func(w int) error {
				var pushes []int32
				for r := 1; r <= rounds; r++ {
					if r == rounds/2 {
						if err := m.waitMoves(10); err != nil {
							return err
						}
					}
					vals := make([]float32, len(keys))
					for i := range vals {
						vals[i] = bspVal(w, r, i)
					}
					got, err := pushPull(j.ws[w], keys, vals, &pushes, kv.Options{})
					if err != nil {
						return fmt.Errorf("worker %d round %d: %w", w, r, err)
					}
					for i := range keys {
						if got[i] != want(r, i) {
							return fmt.Errorf("worker %d round %d key %d: pulled %v, want exactly %v", w, r, keys[i], got[i], want(r, i))
						}
					}
				}
				return waitAll(j.ws[w], pushes)
			})
			m.halt()
			require.Empty(t, m.errs)
			t.Logf("%d moves, %d requests redirected", m.moves.Load(), j.redirected())
			assert.Positive(t, j.redirected(), "requests were redirected during the moves")
			j.checkAnsweredOnce(t)
		})
	}
}

// FluentPS (p = 1, s = 1: the fastest worker's pull is held whenever it is
// a round ahead) with one slow worker, keys moving back and forth: every
// pull is answered once, each worker's pulls never go back, and the final
// values are exactly the sum of every push.
func TestFluentAcrossMoves(t *testing.T) {
	const workers, rounds = 3, 100
	j := startSyncJob(t, 2, workers, postoffice.SyncConfig{Mode: syncctl.Fluent, Staleness: 1, PauseProb: 1}, sumStore)
	keys := syncKeys(j.Workers[0])
	m := startMover(t, j)
	runWorkers(t, workers, func(w int) error {
		var pushes []int32
		last := make([]float32, len(keys))
		for r := 1; r <= rounds; r++ {
			if w == 0 {
				time.Sleep(2 * time.Millisecond) // the straggler
			}
			if r == rounds/2 {
				if err := m.waitMoves(10); err != nil {
					return err
				}
			}
			vals := make([]float32, len(keys))
			for i := range vals {
				vals[i] = bspVal(w, r, i)
			}
			got, err := pushPull(j.ws[w], keys, vals, &pushes, kv.Options{})
			if err != nil {
				return fmt.Errorf("worker %d round %d: %w", w, r, err)
			}
			for i := range keys {
				if got[i] < last[i] {
					return fmt.Errorf("worker %d round %d key %d: pulled %v after %v", w, r, keys[i], got[i], last[i])
				}
			}
			last = got
		}
		return waitAll(j.ws[w], pushes)
	})
	m.halt()
	require.Empty(t, m.errs)
	var got []float32
	ts, err := kv.Pull(j.ws[1], keys, &got, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, j.ws[1].Wait(ts))
	for i := range keys {
		var want float32
		for w := range workers {
			for r := 1; r <= rounds; r++ {
				want += bspVal(w, r, i)
			}
		}
		assert.Equal(t, want, got[i], "key %d", keys[i])
	}
	var pauses int64
	for _, s := range j.srvs {
		st, _ := s.SyncStats()
		pauses += st.Pauses
	}
	assert.Positive(t, pauses, "FluentPS held the fastest worker")
	assert.Positive(t, j.redirected(), "requests were redirected during the moves")
	j.checkAnsweredOnce(t)
}

// The training store under BSP with momentum SGD and dist_sync rounds
// (RoundSize = workers), keys moving back and forth mid-run: every pull
// (BSP makes them deterministic) and the final values equal those of a
// run without moves, so the optimizer's state moved with the keys.
func TestParamstoreMomentumAcrossMoves(t *testing.T) {
	const workers, rounds = 2, 60
	run := func(t *testing.T, move bool) [][][]float32 {
		newStore := func() (kv.ServerHandler, elastic.Migrator) {
			cfg := paramstore.DefaultConfig()
			cfg.Optimizer, cfg.LR, cfg.Momentum = paramstore.Momentum, 0.5, 0.5
			cfg.RoundSize = func() int { return workers }
			s, err := paramstore.New(cfg)
			require.NoError(t, err)
			return s.Handle, s
		}
		j := startSyncJob(t, 2, workers, postoffice.SyncConfig{Mode: syncctl.BSP}, newStore)
		keys := syncKeys(j.Workers[0])
		init := make([]float32, len(keys))
		for i := range init {
			init[i] = float32(8 * i)
		}
		// Worker 0's initializing push counts as its iteration 1 (its
		// first push), so rounds state theirs from 2 on.
		ts, err := kv.Push(j.ws[0], keys, init, nil, kv.Options{})
		require.NoError(t, err)
		require.NoError(t, j.ws[0].Wait(ts))
		var m *mover
		if move {
			m = startMover(t, j)
		}
		pulls := make([][][]float32, workers)
		runWorkers(t, workers, func(w int) error {
			var pushes []int32
			for r := 1; r <= rounds; r++ {
				if m != nil && r == rounds/2 {
					if err := m.waitMoves(10); err != nil {
						return err
					}
				}
				g := make([]float32, len(keys))
				for i := range g {
					g[i] = float32((w+1)*(i%3) - r%4)
				}
				got, err := pushPull(j.ws[w], keys, g, &pushes, kv.Options{Iteration: int64(r + 1)})
				if err != nil {
					return fmt.Errorf("worker %d round %d: %w", w, r, err)
				}
				pulls[w] = append(pulls[w], got)
			}
			return waitAll(j.ws[w], pushes)
		})
		if m != nil {
			m.halt()
			require.Empty(t, m.errs)
			t.Logf("%d moves, %d requests redirected", m.moves.Load(), j.redirected())
			assert.Positive(t, j.redirected(), "requests were redirected during the moves")
		}
		j.checkAnsweredOnce(t)
		return pulls
	}
	var want, got [][][]float32
	t.Run("reference", func(t *testing.T) { want = run(t, false) })
	t.Run("moving", func(t *testing.T) { got = run(t, true) })
	require.Len(t, got, workers)
	for w := range workers {
		require.Len(t, got[w], rounds)
		for r := range rounds {
			assert.Equal(t, want[w][r], got[w][r], "worker %d round %d", w, r+1)
		}
	}
}

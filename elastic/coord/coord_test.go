package coord

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/stretchr/testify/require"
)

type elasticJob struct {
	*jobtest.Job
	stuck   *postoffice.Postoffice // jobOpts.stuckWorker or stuckServer; not in servers or workers
	unstick func()                 // stuckWorker
	coord   *Coordinator
	servers []*postoffice.Postoffice
	stores  []*kv.DefaultHandler
	srvs    []*kv.Server
	srvEl   []*elastic.Node // the servers' elastic sides
	workers []*postoffice.Postoffice
	wrkEl   []*elastic.Node // the workers' elastic sides
	kvw     []*kv.Worker
	stuckEl *elastic.Node // the stuck node's, once unstuck (stuckWorker)
}

// startElasticJob runs a scheduler with a coordinator, servers with the
// sum store and workers, all in elastic mode.
func startElasticJob(t *testing.T, ns, nw int) *elasticJob { return startJobWith(t, ns, nw, jobOpts{}) }

// jobOpts vary startJobWith's job.
type jobOpts struct {
	// fallback: the servers' handlers hide DefaultHandler's Migrator, so
	// keys move by the generic hand-over.
	fallback bool
	// stuckWorker adds a worker (not in workers/kvw; it pushes nothing)
	// whose elastic link takes the scheduler's requests and answers none,
	// as if its handler were blocked, until unstick: then the requests it
	// holds are dropped and the real worker link takes over.
	stuckWorker bool
	// stuckServer adds a server (not in servers) whose elastic link
	// answers that it can take keys (accept) and nothing else; no request
	// handler, so give it no keys to serve.
	stuckServer bool
	// configure changes every node's config (jobtest.Options.Configure).
	configure func(*postoffice.Config)
	// migrator, if set, is each server's Migrator instead of its
	// DefaultHandler.
	migrator func(*kv.DefaultHandler) elastic.Migrator
	// store, if set, gives each server its handler and Migrator instead
	// of a DefaultHandler (stores then holds nil).
	store func() (kv.ServerHandler, elastic.Migrator)
	// timeout, if set, is the coordinator's Timeout instead of 10 s.
	timeout time.Duration
}

// startJobWith starts the job described by opts: its elastic sides, the
// coordinator and the stuck node are set up before the nodes start, as
// ps-lite programs do before ps::Start.
func startJobWith(t *testing.T, ns, nw int, opts jobOpts) *elasticJob {
	t.Helper()
	jo := jobtest.Options{Servers: ns, Workers: nw, Start: jobtest.StartWithBarrier, Configure: opts.configure}
	if opts.stuckWorker {
		jo.Workers++
	}
	if opts.stuckServer {
		jo.Servers++
	}
	var j *elasticJob
	jo.Setup = func(job *jobtest.Job) error {
		j = &elasticJob{Job: job}
		return j.setup(t, ns, nw, opts)
	}
	jobtest.Start(t, jo)
	return j
}

// setup installs the elastic sides on the nodes of j.Job: the first ns
// servers and nw workers are the real ones, a last one the stuck node.
func (j *elasticJob) setup(t *testing.T, ns, nw int, opts jobOpts) error {
	var err error
	if j.coord, err = New(j.Scheduler); err != nil {
		return err
	}
	j.coord.Timeout = cmp.Or(opts.timeout, 10*time.Second)
	for _, po := range j.Servers[:ns] {
		en, err := elastic.Attach(po)
		if err != nil {
			return err
		}
		store := kv.NewDefaultHandler()
		var srv *kv.Server
		switch {
		case opts.store != nil:
			h, mig := opts.store()
			store = nil
			srv, err = en.NewServer(0, kv.ServerOptions{Handler: h}, mig)
		case opts.fallback:
			srv, err = en.NewServer(0, kv.ServerOptions{Handler: opaque{store}.handle}, nil)
		default:
			var mig elastic.Migrator = store
			if opts.migrator != nil {
				mig = opts.migrator(store)
			}
			srv, err = en.NewServer(0, kv.ServerOptions{Handler: store.Handle}, mig)
		}
		if err != nil {
			return err
		}
		j.servers, j.stores, j.srvs, j.srvEl = append(j.servers, po), append(j.stores, store), append(j.srvs, srv), append(j.srvEl, en)
	}
	for _, po := range j.Workers[:nw] {
		en, err := elastic.Attach(po)
		if err != nil {
			return err
		}
		w, err := en.NewWorker(0, 0)
		if err != nil {
			return err
		}
		j.workers, j.kvw, j.wrkEl = append(j.workers, po), append(j.kvw, w), append(j.wrkEl, en)
	}
	if opts.stuckWorker {
		j.stuck = j.Workers[nw]
		release := make(chan struct{})
		app := stuckLink(t, j.stuck, func(d kv.SimpleData) bool { <-release; return false })
		var once sync.Once
		j.unstick = func() {
			once.Do(func() {
				close(release)
				app.Close()
				en, err := elastic.Attach(j.stuck)
				require.NoError(t, err)
				j.stuckEl = en
			})
		}
		t.Cleanup(func() { once.Do(func() { close(release); app.Close() }) })
	}
	if opts.stuckServer {
		j.stuck = j.Servers[ns]
		app := stuckLink(t, j.stuck, func(d kv.SimpleData) bool { return d.Head == elastic.MsgAccept })
		t.Cleanup(app.Close)
	}
	if j.stuck != nil {
		// calls to the stuck node time out soon; moves wait for the
		// acknowledgement of others briefly
		j.coord.Timeout, j.coord.PublishWait = 2*time.Second, 100*time.Millisecond
	}
	return nil
}

// stuckLink stands in for po's elastic link: it answers a request with
// success when answer says so (the link's wire form: a 0 byte, then the
// body) and never answers the others.
func stuckLink(t *testing.T, po *postoffice.Postoffice, answer func(kv.SimpleData) bool) *kv.SimpleApp {
	app, err := kv.NewSimpleApp(po, elastic.AppID, elastic.AppID)
	require.NoError(t, err)
	app.SetRequestHandler(func(d kv.SimpleData, a *kv.SimpleApp) {
		if answer(d) {
			_ = a.Response(d, []byte{0}) // a failure shows as the caller's timeout
		}
	})
	return app
}

// Many migrations while workers push: every acknowledged push is in the
// final sums, exactly, in asynchronous (pipelined pushes, no barriers) and
// synchronous (a barrier after every round) modes.
func TestNoLostUpdateUnderMigrations(t *testing.T) {
	for _, syncMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", syncMode), func(t *testing.T) {
			const ns, nw, keysPerServer, minMoves = 3, 2, 12, 25
			// Synchronous workers run a fixed number of rounds (they meet
			// at a barrier every round); asynchronous ones push until
			// enough migrations have happened.
			rounds := 2000
			if syncMode {
				rounds = 150
			}
			var movesDone atomic.Int64
			j := startElasticJob(t, ns, nw)
			ranges := j.workers[0].ServerKeyRanges()
			var keys []uint64
			var vals []float32
			for s, r := range ranges {
				for i := range keysPerServer {
					keys = append(keys, r.Begin+uint64(i*10))
					vals = append(vals, float32(s*100+i+1))
				}
			}
			var moving atomic.Bool
			moving.Store(true)
			moves := make(chan error, 1)
			go func() {
				rng := rand.New(rand.NewPCG(1, 2))
				var firstErr error
				for moving.Load() {
					k := keys[rng.IntN(len(keys))]
					width := uint64(1 + rng.IntN(3)*10) // one key or a few
					to := int32(message.ServerRankToID(rng.IntN(ns)))
					_, err := j.coord.Move(k, k+width, to)
					if err == nil {
						movesDone.Add(1)
					} else if firstErr == nil && !isBenign(err) {
						firstErr = err
					}
				}
				moves <- firstErr
			}()
			var wg sync.WaitGroup
			pushes := make([]int, nw)
			for wi, w := range j.kvw {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var pending []int32
					for r := range rounds {
						if !syncMode && movesDone.Load() >= minMoves {
							break
						}
						pushes[wi]++
						ts, err := kv.Push(w, keys, vals, nil, kv.Options{})
						require.NoError(t, err)
						pending = append(pending, ts)
						if syncMode || len(pending) == 4 {
							for _, ts := range pending {
								require.NoError(t, w.Wait(ts), "worker %d round %d", wi, r)
							}
							pending = pending[:0]
						}
						if syncMode {
							require.NoError(t, j.workers[wi].Barrier(0, message.WorkerGroup))
						} else if r%3 == 0 {
							// pulls during moves: routed by the push count
							// of their keys, redirected after an export
							for _, ts := range pending {
								require.NoError(t, w.Wait(ts))
							}
							pending = pending[:0]
							var got []float32
							ts, err := kv.Pull(w, keys, &got, nil, kv.Options{})
							require.NoError(t, err)
							require.NoError(t, w.Wait(ts), "worker %d pull in round %d", wi, r)
						}
					}
					for _, ts := range pending {
						require.NoError(t, w.Wait(ts))
					}
				}()
			}
			wg.Wait()
			moving.Store(false)
			require.NoError(t, <-moves)
			j.requireSums(t, keys, vals, float32(pushes[0]+pushes[1]))
			ok := 0
			for _, h := range j.coord.History() {
				if h.Err == nil {
					ok++
				}
			}
			redirects := int64(0)
			for _, w := range j.kvw {
				redirects += w.Redirects()
			}
			t.Logf("%d moves done, %d pushes, %d redirects", ok, pushes, redirects)
			require.GreaterOrEqual(t, ok, 10, "too few migrations happened to test anything")
			// the keys really are spread differently now
			require.Greater(t, j.coord.Table().Epoch(), uint64(10))
		})
	}
}

// isBenign: random moves that target the current owner, or cross two
// owners, are refused before anything happens.
func isBenign(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "are already on node") || strings.Contains(err.Error(), "span servers"))
}

// Scale-out then scale-in while workers push: a standby server joins the
// running job and receives keys, then a server is drained and leaves; the
// final sums are exact and a later barrier on all nodes does not wait for
// the server that left (nor count the standby).
func TestScaleOutAndIn(t *testing.T) {
	for _, syncMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", syncMode), func(t *testing.T) { scaleOutAndIn(t, syncMode) })
	}
}

func scaleOutAndIn(t *testing.T, syncMode bool) {
	const ns, nw = 3, 2
	// Workers push until the scaling is done, then a few rounds more, so
	// both happen mid-run: stopAt is set to a round all workers have yet
	// to reach (they are within one round of each other in sync mode).
	var stopAt, maxRound atomic.Int64
	stopAt.Store(1 << 40)
	j := startElasticJob(t, ns, nw)
	keys, vals := j.firstKeys(8)
	var wg sync.WaitGroup
	pushes := make([]int, nw)
	for wi, w := range j.kvw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := int64(0); r < stopAt.Load(); r++ {
				if r > maxRound.Load() {
					maxRound.Store(r)
				}
				pushes[wi]++
				ts, err := kv.Push(w, keys, vals, nil, kv.Options{})
				require.NoError(t, err)
				require.NoError(t, w.Wait(ts))
				if syncMode {
					require.NoError(t, j.workers[wi].Barrier(0, message.WorkerGroup))
				}
			}
		}()
	}
	// scale-out: a standby joins and takes one logical range
	sb := j.startStandby(t)
	require.Equal(t, int32(message.ServerRankToID(ns)), sb.MyNode().ID)
	r0 := j.workers[0].ServerKeyRanges()[0]
	_, err := j.coord.Move(r0.Begin, r0.End, sb.MyNode().ID)
	require.NoError(t, err)
	// scale-in: drain server rank 1
	drained := int32(message.ServerRankToID(1))
	res, err := j.coord.Drain(drained)
	require.NoError(t, err)
	require.NotEmpty(t, res)
	stopAt.Store(maxRound.Load() + 5)
	wg.Wait()
	require.Equal(t, pushes[0], pushes[1])
	for _, iv := range j.coord.Table().Current().Intervals {
		require.NotEqual(t, drained, iv.Node, "interval still on the drained server")
	}
	var gone *postoffice.Postoffice
	var stay []*postoffice.Postoffice
	for _, po := range j.servers {
		if po.MyNode().ID == drained {
			gone = po
		} else {
			stay = append(stay, po)
		}
	}
	require.Eventually(t, gone.Left, 5*time.Second, 10*time.Millisecond)
	j.requireSums(t, keys, vals, float32(pushes[0]*nw))
	// the server that left finalizes cleanly, as ps-lite programs do
	require.NoError(t, gone.Finalize(0, true))
	// the standby's final barrier lasts until the scheduler releases it
	sbDone := make(chan error, 1)
	go func() { sbDone <- sb.Finalize(0, true) }()
	// the job's final barrier completes without the server that left
	jobtest.Barrier(t, append(append([]*postoffice.Postoffice{j.Scheduler}, stay...), j.workers...), message.AllGroup)
	// Wait a moment for a wrong early return (the standby cannot be
	// polled for not having finalized).
	time.Sleep(200 * time.Millisecond)
	require.Empty(t, sbDone, "the standby finalized before the scheduler released it")
	j.coord.ReleaseStandbys()
	require.NoError(t, testutil.Recv(t, sbDone, 5*time.Second, func() string { return "the released standby did not finalize" }))
}

// pushRounds starts every worker pushing keys/vals rounds times (waiting
// for each push, pausing between them); done counts the pushes completed.
func (j *elasticJob) pushRounds(t *testing.T, keys []uint64, vals []float32, rounds int, pause time.Duration) (*sync.WaitGroup, *atomic.Int64) {
	wg, done := &sync.WaitGroup{}, &atomic.Int64{}
	for _, w := range j.kvw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				ts, err := kv.Push(w, keys, vals, nil, kv.Options{})
				require.NoError(t, err)
				require.NoError(t, w.Wait(ts))
				done.Add(1)
				time.Sleep(pause)
			}
		}()
	}
	return wg, done
}

// requireSums pulls keys and requires each to hold its value times times.
func (j *elasticJob) requireSums(t *testing.T, keys []uint64, vals []float32, times float32) {
	t.Helper()
	var got []float32
	ts, err := kv.Pull(j.kvw[0], keys, &got, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, j.kvw[0].Wait(ts))
	for i, v := range vals {
		require.Equal(t, v*times, got[i], "key %d", keys[i])
	}
}

// firstKeys returns the first n keys of every server range, with small
// integer values (so that float sums stay exact).
func (j *elasticJob) firstKeys(n int) ([]uint64, []float32) {
	var keys []uint64
	var vals []float32
	for s, r := range j.workers[0].ServerKeyRanges() {
		for i := range n {
			keys = append(keys, r.Begin+uint64(i))
			vals = append(vals, float32(s*10+i+1))
		}
	}
	return keys, vals
}

// startStandby starts a server with PS_STANDBY semantics on the running job.
func (j *elasticJob) startStandby(t *testing.T) *postoffice.Postoffice {
	t.Helper()
	po := j.NewNode(message.RoleServer, func(c *postoffice.Config) { c.Standby = true })
	en, err := elastic.Attach(po)
	require.NoError(t, err)
	store := kv.NewDefaultHandler()
	_, err = en.NewServer(0, kv.ServerOptions{Handler: store.Handle}, store)
	require.NoError(t, err)
	require.NoError(t, po.Start(0))
	return po
}

// opaque hides DefaultHandler's Migrator: the server then hands keys over
// through the generic fallback (a capturing pull on the old owner, an
// initializing push on the new one), as an unchanged C++ server would.
type opaque struct{ h *kv.DefaultHandler }

func (o opaque) handle(meta kv.ReqMeta, data kv.KVPairs, srv *kv.Server) { o.h.Handle(meta, data, srv) }

// Moves through the generic fallback keep every update too.
func TestFallbackHandOver(t *testing.T) {
	const rounds = 100
	j := startJobWith(t, 2, 2, jobOpts{fallback: true})
	keys, vals := j.firstKeys(6)
	wg, done := j.pushRounds(t, keys, vals, rounds, 0)
	// every key has been pushed (and so held) before anything moves
	require.Eventually(t, func() bool { return done.Load() >= 4 }, 10*time.Second, time.Millisecond)
	// each key moves once, to the other server (a key may not come back to
	// a server without Migrator that held it: see below)
	moved := 0
	for _, k := range keys {
		r := j.coord.Table().Current()
		to := int32(message.ServerRankToID(0))
		if r.Intervals[r.Find(k)].Node == to {
			to = int32(message.ServerRankToID(1))
		}
		_, err := j.coord.Move(k, k+1, to)
		require.NoError(t, err)
		moved++
	}
	// moving a key back to a server that held it is refused up front
	k := keys[0]
	back := int32(message.ServerRankToID(0))
	if j.coord.Table().Current().Intervals[j.coord.Table().Current().Find(k)].Node == back {
		back = int32(message.ServerRankToID(1))
	}
	_, err := j.coord.Move(k, k+1, back)
	require.ErrorContains(t, err, "held key")
	wg.Wait()
	require.GreaterOrEqual(t, moved, 6)
	j.requireSums(t, keys, vals, rounds*2)
}

// flakyMigrator is the sum store's Migrator, failing its next Export or
// Import once when armed.
type flakyMigrator struct {
	*kv.DefaultHandler
	failExport, failImport atomic.Bool
}

func (f *flakyMigrator) Export(begin, end uint64) ([]byte, error) {
	if f.failExport.CompareAndSwap(true, false) {
		return nil, errors.New("injected export failure")
	}
	return f.DefaultHandler.Export(begin, end)
}

func (f *flakyMigrator) Import(state []byte) error {
	if f.failImport.CompareAndSwap(true, false) {
		return errors.New("injected import failure")
	}
	return f.DefaultHandler.Import(state)
}

// A Migrator that fails loses nothing: a failed export aborts the move at
// once (not after the timeout) and the keys stay; a failed install gives
// the state back to the old owner. Workers push throughout; the sums are
// exact.
func TestFailedHandOverLosesNothing(t *testing.T) {
	const rounds = 300
	j := startElasticJob(t, 2, 2)
	flaky := make([]*flakyMigrator, len(j.srvs)) // by server rank
	for i, en := range j.srvEl {
		f := &flakyMigrator{DefaultHandler: j.stores[i]}
		require.NoError(t, en.SetMigrator(f))
		flaky[j.servers[i].MyRank()] = f
	}
	keys, vals := j.firstKeys(4)
	wg, done := j.pushRounds(t, keys, vals, rounds, time.Millisecond)
	require.Eventually(t, func() bool { return done.Load() >= 4 }, 10*time.Second, time.Millisecond)
	s0, s1 := int32(message.ServerRankToID(0)), int32(message.ServerRankToID(1))
	k := keys[0] // on server 0

	flaky[0].failExport.Store(true)
	res, err := j.coord.Move(k, k+2, s1)
	require.ErrorContains(t, err, "injected export failure")
	require.Less(t, res.Duration, j.coord.Timeout/2, "a failed export aborts the move at once")
	r := j.coord.Table().Current()
	require.Equal(t, s0, r.Intervals[r.Find(k)].Node, "the keys stay on the old owner")

	flaky[1].failImport.Store(true)
	_, err = j.coord.Move(k, k+2, s1)
	require.ErrorContains(t, err, "injected import failure")
	require.ErrorContains(t, err, "went back")
	r = j.coord.Table().Current()
	require.Equal(t, s0, r.Intervals[r.Find(k)].Node, "the keys went back to the old owner")

	// and they still move when nothing fails, there and back
	_, err = j.coord.Move(k, k+2, s1)
	require.NoError(t, err)
	_, err = j.coord.Move(k, k+2, s0)
	require.NoError(t, err)
	wg.Wait()
	j.requireSums(t, keys, vals, rounds*2)
}

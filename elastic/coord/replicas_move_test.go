package coord

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/paramstore"
	"github.com/elasticps/elasticps/postoffice"
)

// pushLoad is workers pushing v, 2v, 3v, 4v on keys (v = round%5+1), a
// few pushes outstanding each, until stop; it counts each worker's rounds
// and records the first failure.
type pushLoad struct {
	stop   atomic.Bool
	rounds []atomic.Int64
	errs   []error
	done   chan struct{}
}

func startPushLoad(j *elasticJob, keys []uint64) *pushLoad {
	const window = 4
	l := &pushLoad{rounds: make([]atomic.Int64, len(j.kvw)), errs: make([]error, len(j.kvw)), done: make(chan struct{})}
	var wg sync.WaitGroup
	for wi, w := range j.kvw {
		wg.Go(func() {
			var pending []int32
			wait := func() bool {
				if err := w.Wait(pending[0]); err != nil {
					l.errs[wi] = err
					return false
				}
				pending = pending[1:]
				return true
			}
			for i := 0; !l.stop.Load(); i++ {
				v := float32(i%5 + 1)
				ts, err := kv.Push(w, keys, []float32{v, 2 * v, 3 * v, 4 * v}, nil, kv.Options{})
				if err != nil {
					l.errs[wi] = err
					return
				}
				l.rounds[wi].Add(1)
				if pending = append(pending, ts); len(pending) == window && !wait() {
					return
				}
			}
			for len(pending) > 0 && wait() {
			}
		})
	}
	go func() { wg.Wait(); close(l.done) }()
	return l
}

// atLeast waits until every worker pushed n more rounds than when called.
func (l *pushLoad) atLeast(t *testing.T, n int64) {
	t.Helper()
	var base []int64
	for i := range l.rounds {
		base = append(base, l.rounds[i].Load())
	}
	testutil.WaitFor(t, 30*time.Second, func() bool {
		for i := range l.rounds {
			if l.rounds[i].Load() < base[i]+n {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("the workers did not push %d more rounds: %v", n, l.errs) })
}

// halt stops the pushes, waits for their acknowledgements and returns the
// sums every key must hold (a worker fails the test if a push failed).
func (l *pushLoad) halt(t *testing.T) []float32 {
	t.Helper()
	l.stop.Store(true)
	testutil.Recv(t, l.done, 40*time.Second, func() string { return "the workers did not finish" })
	var sum float32
	for wi := range l.rounds {
		require.NoError(t, l.errs[wi], "worker %d: every push is acknowledged", wi)
		for i := range l.rounds[wi].Load() {
			sum += float32(i%5 + 1)
		}
	}
	return []float32{sum, 2 * sum, 3 * sum, 4 * sum}
}

// assertPulled checks that every worker pulls want for keys.
func (j *elasticJob) assertPulled(t *testing.T, keys []uint64, want []float32) {
	t.Helper()
	for wi, w := range j.kvw {
		var got []float32
		ts, err := kv.Pull(w, keys, &got, nil, kv.Options{})
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts))
		assert.Equal(t, want, got, "worker %d: exact sums of every push", wi)
	}
}

// holds pulls key from server id's own handler (a backup's copy too).
func (j *elasticJob) holds(t *testing.T, id int32, key uint64) float32 {
	t.Helper()
	i := slices.IndexFunc(j.servers, func(po *postoffice.Postoffice) bool { return po.MyNode().ID == id })
	require.GreaterOrEqual(t, i, 0, "server %d", id)
	res, err := j.srvs[i].HandleLocal(kv.LocalRequest{DataType: message.Float, Data: kv.KVPairs{Keys: []uint64{key}}}, 10*time.Second)
	require.NoError(t, err)
	got, err := kv.FromBytes[float32](res.Vals)
	require.NoError(t, err)
	require.Len(t, got, 1)
	return got[0]
}

// A replicated job (PS_REPLICAS=1, 3 servers, 2 workers) moves keys while
// the workers push: first to the server that backs them up (so their
// backup must be chosen again), then it drains a server (its intervals
// move and the copies it held go elsewhere). Every push is acknowledged,
// and afterwards every key's primary and backup hold exactly the sum of
// the pushes. Then, pushes running again, the new primary of the moved
// keys stops: the failover loses nothing, and the sums stay exact.
func TestReplicatedMovesKeepTheCopies(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	j := startJobWith(t, 3, 2, jobOpts{configure: replicated(1)})
	r0 := j.waitReplicated(t, 1)
	ranges := j.workers[0].ServerKeyRanges()
	keys := []uint64{ranges[0].Begin + 1, ranges[1].Begin + 1, ranges[1].Begin + 2, ranges[2].Begin + 1}
	moved := ranges[1].Begin + 1
	iv := r0.Intervals[r0.Find(moved)]
	to := iv.Backups[0]

	load := startPushLoad(j, keys)
	load.atLeast(t, 50)
	res, err := j.coord.Move(moved, moved+2, to)
	require.NoError(t, err, "move of [%d, %d) from %d to its backup %d", moved, moved+2, iv.Node, to)
	assert.Positive(t, res.Bytes)
	load.atLeast(t, 50)
	drained := r0.Intervals[r0.Find(ranges[0].Begin)].Node
	_, err = j.coord.Drain(drained)
	require.NoError(t, err)
	load.atLeast(t, 50)
	want := load.halt(t)

	r := j.waitReplicated(t, 1)
	for _, iv := range r.Intervals {
		assert.NotEqual(t, drained, iv.Node, "[%d, %d)", iv.Begin, iv.End)
		assert.NotContains(t, iv.Backups, drained, "[%d, %d)", iv.Begin, iv.End)
	}
	moveTo := r.Intervals[r.Find(moved)]
	require.Equal(t, to, moveTo.Node)
	require.NotContains(t, moveTo.Backups, to)
	for i, k := range keys {
		kiv := r.Intervals[r.Find(k)]
		for _, id := range append([]int32{kiv.Node}, kiv.Backups...) {
			// the backup is seeded once the primary lets requests in
			testutil.WaitFor(t, 10*time.Second, func() bool { return j.holds(t, id, k) == want[i] },
				func() string {
					return fmt.Sprintf("key %d: server %d holds %v, want exactly %v (routes %s)", k, id, j.holds(t, id, k), want[i], describe(r))
				})
		}
	}

	// the new primary of the moved keys dies mid-run
	victim := j.servers[slices.IndexFunc(j.servers, func(po *postoffice.Postoffice) bool { return po.MyNode().ID == to })]
	before := want
	load = startPushLoad(j, keys)
	load.atLeast(t, 50)
	victim.Stop()
	load.atLeast(t, 50)
	want = load.halt(t)
	for i := range want {
		want[i] += before[i]
	}
	j.assertPulled(t, keys, want)
	for _, po := range j.All() {
		if po == victim || po.MyNode().ID == drained {
			continue
		}
		testutil.WaitFor(t, 10*time.Second, func() bool { g, ok := po.Gone(to); return ok && g.FailedOver },
			func() string {
				return fmt.Sprintf("%s %d was not told the failover lost nothing", po.Role(), po.MyNode().ID)
			})
		assert.NoError(t, po.Failure(), "%s %d", po.Role(), po.MyNode().ID)
	}
}

// evenUp pushes one more round from worker 0 if the workers' rounds add up
// to an odd number, so that rounds of 2 pushes are all complete; it
// returns the key sums with it.
func (l *pushLoad) evenUp(t *testing.T, j *elasticJob, keys []uint64, want []float32) []float32 {
	t.Helper()
	var n int64
	for i := range l.rounds {
		n += l.rounds[i].Load()
	}
	if n%2 == 0 {
		return want
	}
	v := float32(l.rounds[0].Load()%5 + 1)
	ts, err := kv.Push(j.kvw[0], keys, []float32{v, 2 * v, 3 * v, 4 * v}, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, j.kvw[0].Wait(ts))
	return []float32{want[0] + v, want[1] + 2*v, want[2] + 3*v, want[3] + 4*v}
}

// Handler rounds without a sync mode (paramstore's RoundSize: a key's
// pushes are summed and applied once every 2 of them, MXNet's dist_sync
// without PS_SYNC_MODE) in a replicated job: two workers push while a
// primary stops. Every push is acknowledged, and once the last round is
// complete the pulled values are the exact sums, on the promoted backup
// as everywhere: a backup's open round held the same pushes as its
// primary's.
func TestReplicatedHandlerRoundsUnderASP(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	store := func() (kv.ServerHandler, elastic.Migrator) {
		cfg := paramstore.DefaultConfig()
		cfg.RoundSize = func() int { return 2 }
		s, err := paramstore.New(cfg)
		require.NoError(t, err)
		return s.Handle, s
	}
	j := startJobWith(t, 3, 2, jobOpts{configure: replicated(1), store: store})
	r0 := j.waitReplicated(t, 1)
	ranges := j.workers[0].ServerKeyRanges()
	keys := []uint64{ranges[0].Begin + 1, ranges[1].Begin + 1, ranges[1].Begin + 2, ranges[2].Begin + 1}
	// the first push of a key stores it; the rounds are of the later ones
	ts, err := kv.Push(j.kvw[0], keys, make([]float32, len(keys)), nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, j.kvw[0].Wait(ts))

	dead := r0.Intervals[r0.Find(keys[1])].Node
	victim := j.servers[slices.IndexFunc(j.servers, func(po *postoffice.Postoffice) bool { return po.MyNode().ID == dead })]
	load := startPushLoad(j, keys)
	load.atLeast(t, 100)
	victim.Stop()
	load.atLeast(t, 100)
	want := load.evenUp(t, j, keys, load.halt(t))
	j.assertPulled(t, keys, want)
	r := j.waitReplicated(t, 1, victim)
	for i, k := range keys {
		kiv := r.Intervals[r.Find(k)]
		assert.NotEqual(t, dead, kiv.Node)
		for _, id := range kiv.Backups {
			testutil.WaitFor(t, 10*time.Second, func() bool { return j.holds(t, id, k) == want[i] },
				func() string {
					return fmt.Sprintf("key %d: backup %d holds %v, want exactly %v", k, id, j.holds(t, id, k), want[i])
				})
		}
	}
	for _, po := range j.All() {
		if po != victim {
			assert.NoError(t, po.Failure(), "%s %d", po.Role(), po.MyNode().ID)
		}
	}
}

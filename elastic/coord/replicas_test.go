package coord

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
	"github.com/elasticps/elasticps/syncctl"
)

func replicated(k int) func(*postoffice.Config) {
	return func(c *postoffice.Config) {
		c.Elastic = true
		c.Replicas = k
		// a stopped server is dead after 3 s; a live one on a loaded
		// 2-core machine never is
		c.HeartbeatInterval = 200 * time.Millisecond
		c.HeartbeatTimeout = 3 * time.Second
	}
}

// waitReplicated waits until every node holds a table in which each
// interval has k backups.
func (j *elasticJob) waitReplicated(t *testing.T, k int, dead ...*postoffice.Postoffice) *routing.Routes {
	t.Helper()
	var r *routing.Routes
	testutil.WaitFor(t, 20*time.Second, func() bool {
		r = j.coord.Table().Current()
		for _, iv := range r.Intervals {
			if len(iv.Backups) != k {
				return false
			}
		}
		for i, en := range append(slices.Clone(j.srvEl), j.wrkEl...) {
			if i < len(j.servers) && slices.Contains(dead, j.servers[i]) {
				continue
			}
			if en.Table().Epoch() < r.Epoch {
				return false
			}
		}
		return true
	}, func() string { return "the backups were not placed: " + describe(j.coord.Table().Current()) })
	return r
}

// A job of 3 servers and 2 workers with PS_REPLICAS=1: the workers push
// integer values (several pushes outstanding each) while server rank 1
// stops abruptly. Every push is acknowledged (the ones that waited on
// the dead server went to the backup promoted in its place), the dead
// server's interval is served by its backup, the backups are topped up
// again, and the pulled values are the exact sums of every push.
//
// With k=2 every interval is on all three servers; after the death two
// are left, so each interval gets one backup again.
func TestReplicatedJobSurvivesAServerDeath(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) { survivesAServerDeath(t, k) })
	}
}

func survivesAServerDeath(t *testing.T, k int) {
	const ns, nw, rounds, window = 3, 2, 600, 4
	j := startJobWith(t, ns, nw, jobOpts{configure: replicated(k)})
	r0 := j.waitReplicated(t, k)
	for _, iv := range r0.Intervals {
		require.NotContains(t, iv.Backups, iv.Node)
	}
	ranges := j.workers[0].ServerKeyRanges()
	keys := []uint64{ranges[0].Begin + 1, ranges[1].Begin + 1, ranges[1].Begin + 2, ranges[2].Begin + 1}
	victim := j.servers[1]
	dead := victim.MyNode().ID

	var killOnce sync.Once
	var wg sync.WaitGroup
	errs := make([][]error, nw)
	for wi, w := range j.kvw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pending []int32
			for i := range rounds {
				if wi == 0 && i == rounds/3 {
					killOnce.Do(victim.Stop)
				}
				v := float32(i%5 + 1)
				ts, err := kv.Push(w, keys, []float32{v, 2 * v, 3 * v, 4 * v}, nil, kv.Options{})
				if err != nil {
					errs[wi] = append(errs[wi], err)
					continue
				}
				pending = append(pending, ts)
				if len(pending) == window {
					if err := w.Wait(pending[0]); err != nil {
						errs[wi] = append(errs[wi], err)
					}
					pending = pending[1:]
				}
			}
			for _, ts := range pending {
				if err := w.Wait(ts); err != nil {
					errs[wi] = append(errs[wi], err)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	testutil.Recv(t, done, 40*time.Second, func() string { return "the workers did not finish" })
	for wi, e := range errs {
		require.Empty(t, len(e), "worker %d: every push is acknowledged; the first failure: %v", wi, append(e, nil)[0])
	}

	var sum float32
	for i := range rounds {
		sum += float32(i%5 + 1)
	}
	sum *= nw
	j.assertPulled(t, keys, []float32{sum, 2 * sum, 3 * sum, 4 * sum})

	r := j.coord.Table().Current()
	for _, iv := range r.Intervals {
		assert.NotEqual(t, dead, iv.Node, "no interval stays on the dead server")
		assert.NotContains(t, iv.Backups, dead)
	}
	// k copies again: each interval has a live backup other than its owner
	j.waitReplicated(t, 1, victim)
	// nothing was lost: every live node knows, and the job finishes clean
	for _, po := range j.All() {
		if po == victim {
			continue
		}
		testutil.WaitFor(t, 10*time.Second, func() bool { g, ok := po.Gone(dead); return ok && g.FailedOver },
			func() string {
				return fmt.Sprintf("%s %d was not told the failover lost nothing", po.Role(), po.MyNode().ID)
			})
		assert.NoError(t, po.Failure(), "%s %d", po.Role(), po.MyNode().ID)
	}
}

// The outcome a failover reports: nothing lost, or the intervals lost.
func TestFailoverOutcome(t *testing.T) {
	ok, detail := outcome(3, []routing.Interval{{Begin: 0, End: 5, Node: 8}}, nil)
	assert.True(t, ok)
	assert.Equal(t, "failed over in routing epoch 3: each of the 1 intervals it was the primary of went to a live backup; nothing was lost", detail)
	ok, detail = outcome(4, nil, []routing.Interval{{Begin: 0, End: 5, Node: 10}, {Begin: 9, End: 12, Node: 10}})
	assert.False(t, ok)
	assert.Equal(t, "the values of its intervals [0, 5), [9, 12) are lost: none had a live backup holding a seeded copy (routing epoch 4)", detail)
}

// A push re-sent with the timestamp of one applied before (as a worker
// re-sends after a failover) is acknowledged but not applied again, on
// the primary and on its backup.
func TestReplicatedPrimarySkipsARepeatedPush(t *testing.T) {
	j := startJobWith(t, 3, 1, jobOpts{configure: replicated(1)})
	r := j.waitReplicated(t, 1)
	iv := r.Intervals[0]
	key := iv.Begin + 5
	// The first push goes through the worker, so it is replicated once
	// the backup is seeded.
	ts, err := kv.Push(j.kvw[0], []uint64{key}, []float32{7}, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, j.kvw[0].Wait(ts))

	again := &message.Message{Meta: message.NewMeta()}
	again.Meta.AppID, again.Meta.CustomerID, again.Meta.Timestamp = 0, 0, ts
	again.Meta.Request, again.Meta.Push = true, true
	again.Meta.Recver = iv.Node
	again.Meta.Ext.Epoch = r.Epoch
	again.AddData(message.Uint64, kv.KeysToBytes([]uint64{key}))
	again.AddData(message.Float, kv.AsBytes([]float32{7}))
	_, err = j.workers[0].Send(again)
	require.NoError(t, err)
	// A later push of the same key is applied: the repeat before it was
	// answered (the worker drops that answer: its operation is done).
	ts, err = kv.Push(j.kvw[0], []uint64{key}, []float32{1}, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, j.kvw[0].Wait(ts))
	testutil.WaitFor(t, 10*time.Second, func() bool { return j.kvw[0].Dropped() == 1 }, func() string { return "the repeat was not answered" })
	i := slices.IndexFunc(j.servers, func(po *postoffice.Postoffice) bool { return po.MyNode().ID == iv.Node })
	assert.Equal(t, int64(1), j.srvEl[i].DuplicatePushes())

	for _, id := range []int32{iv.Node, iv.Backups[0]} {
		i := slices.IndexFunc(j.servers, func(po *postoffice.Postoffice) bool { return po.MyNode().ID == id })
		require.GreaterOrEqual(t, i, 0)
		res, err := j.srvs[i].HandleLocal(kv.LocalRequest{DataType: message.Float, Data: kv.KVPairs{Keys: []uint64{key}}}, 10*time.Second)
		require.NoError(t, err)
		got, err := kv.FromBytes[float32](res.Vals)
		require.NoError(t, err)
		assert.Equal(t, []float32{8}, got, "server %d applied the push once", id)
	}
}

// A server of a PS_REPLICAS=1 job dies while the scheduler is lost and the
// scheduler never comes back. A push to a server whose backup is alive is
// answered. A push on the dead server (the worker's wait), and one whose
// primary forwarded it to the dead backup (the primary's wait), wait only
// as long as the scheduler may still return to fail the server over
// (PS_SCHEDULER_WAIT), then fail naming the server and why; the worker's
// Finalize fails too.
//
// Under BSP the primary's wait is for the round's state it ships.
func TestReplicatedWaitEndsWhenTheSchedulerDoesNotComeBack(t *testing.T) {
	t.Parallel() // waits on heartbeat timers, not the CPU
	for _, mode := range []syncctl.Mode{syncctl.ASP, syncctl.BSP} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			waitEndsWithoutTheScheduler(t, mode)
		})
	}
}

func waitEndsWithoutTheScheduler(t *testing.T, mode syncctl.Mode) {
	j := startJobWith(t, 3, 1, jobOpts{configure: func(c *postoffice.Config) {
		replicated(1)(c)
		c.Sync.Mode = mode
		c.HeartbeatTimeout = time.Second
		c.SchedulerWait = 4 * time.Second
	}})
	r := j.waitReplicated(t, 1)
	victim := j.servers[1]
	dead := victim.MyNode().ID
	var deadKey, orphanKey, liveKey uint64
	var orphanPrimary int32
	for _, iv := range r.Intervals {
		switch {
		case iv.Node == dead:
			deadKey = iv.Begin + 1
		case slices.Contains(iv.Backups, dead):
			orphanKey, orphanPrimary = iv.Begin+1, iv.Node
		default:
			liveKey = iv.Begin + 1
		}
	}
	require.NotZero(t, orphanPrimary, describe(r))
	w := j.kvw[0]
	j.Scheduler.Stop()
	testutil.WaitFor(t, 10*time.Second, func() bool { _, lost := j.workers[0].SchedulerLost(); return lost },
		func() string { return "the worker did not find the scheduler lost" })
	victim.Stop()
	start := time.Now()
	onDead, err := kv.Push(w, []uint64{deadKey}, []float32{1}, nil, kv.Options{})
	require.NoError(t, err)
	orphan, err := kv.Push(w, []uint64{orphanKey}, []float32{1}, nil, kv.Options{})
	require.NoError(t, err)
	live, err := kv.Push(w, []uint64{liveKey}, []float32{1}, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, testutil.Within(t, 20*time.Second, func() error { return w.Wait(live) }, func() string { return "the push on a live server was not answered" }),
		"a live server whose backup is alive answers without the scheduler")

	for _, tc := range []struct {
		ts   int32
		want []string
	}{
		{onDead, []string{fmt.Sprintf("for server %d (rank %d)", dead, message.IDToRank(int(dead))), "did not come back within PS_SCHEDULER_WAIT"}},
		{orphan, []string{fmt.Sprintf("server %d: backup server %d ", orphanPrimary, dead), "did not answer within PS_HEARTBEAT_TIMEOUT", "did not come back within PS_SCHEDULER_WAIT"}},
	} {
		err := testutil.Within(t, 30*time.Second, func() error { return w.Wait(tc.ts) }, func() string { return "the push never failed" })
		require.Error(t, err)
		for _, want := range tc.want {
			assert.ErrorContains(t, err, want)
		}
		g, gone := j.workers[0].Gone(message.SchedulerID)
		assert.True(t, gone && g.Dead, "push %d failed before the scheduler's loss was final (after %s)", tc.ts, time.Since(start))
	}
	err = testutil.Within(t, 10*time.Second, func() error { return j.workers[0].Finalize(0, true) }, func() string { return "Finalize did not return" })
	assert.ErrorIs(t, err, postoffice.ErrNodesLost)
}

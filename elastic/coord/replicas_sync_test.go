package coord

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/syncctl"
)

func replicatedSync(k int, mode syncctl.Mode) func(*postoffice.Config) {
	return func(c *postoffice.Config) {
		replicated(k)(c)
		c.Sync.Mode, c.Sync.Staleness = mode, 2
	}
}

func replicatedBSP(k int) func(*postoffice.Config) { return replicatedSync(k, syncctl.BSP) }

// bspRounds runs rounds of BSP training on every worker: push round t
// (value t%5+1 times 1, 2, 3, 4 on keys), wait for it, pull, wait. The
// hook runs on worker 0 before round i. It returns the first error of
// each worker.
func bspRounds(t *testing.T, j *elasticJob, keys []uint64, rounds int, hook func(i int)) []error {
	t.Helper()
	errs := make([]error, len(j.kvw))
	var wg sync.WaitGroup
	for wi, w := range j.kvw {
		wg.Go(func() {
			for i := range rounds {
				if wi == 0 && hook != nil {
					hook(i)
				}
				v := float32(i%5 + 1)
				ts, err := kv.Push(w, keys, []float32{v, 2 * v, 3 * v, 4 * v}, nil, kv.Options{})
				if err == nil {
					err = w.Wait(ts)
				}
				var got []float32
				if err == nil {
					ts, err = kv.Pull(w, keys, &got, nil, kv.Options{})
				}
				if err == nil {
					err = w.Wait(ts)
				}
				if err != nil {
					errs[wi] = err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	testutil.Recv(t, done, 60*time.Second, func() string { return "the workers did not finish their rounds" })
	return errs
}

// bspWant is the values of keys after rounds BSP rounds of nw workers.
func bspWant(rounds, nw int) []float32 {
	var sum float32
	for i := range rounds {
		sum += float32(i%5 + 1)
	}
	sum *= float32(nw)
	return []float32{sum, 2 * sum, 3 * sum, 4 * sum}
}

func (j *elasticJob) pullAll(t *testing.T, keys []uint64) [][]float32 {
	t.Helper()
	var out [][]float32
	for _, w := range j.kvw {
		var got []float32
		ts, err := kv.Pull(w, keys, &got, nil, kv.Options{})
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts))
		out = append(out, got)
	}
	return out
}

// BSP with PS_REPLICAS=1: a server stops abruptly in the middle of the
// run; every push is acknowledged (the unacknowledged ones of the round
// in progress were re-sent to the promoted backup and applied once) and
// the values are the exact sums of every round of every worker.
func TestReplicatedBSPSurvivesAServerDeath(t *testing.T) {
	t.Parallel() // waits on death detection, not the CPU
	survivesInSync(t, syncctl.BSP)
}

// The same under SSP, whose pushes are forwarded one by one and counted
// by the backups' sync controllers: the promoted backup goes on with the
// workers' clocks (a pull it holds would otherwise never be answered).
func TestReplicatedSSPSurvivesAServerDeath(t *testing.T) {
	t.Parallel() // waits on death detection, not the CPU
	survivesInSync(t, syncctl.SSP)
}

func survivesInSync(t *testing.T, mode syncctl.Mode) {
	const ns, nw, rounds = 3, 2, 120
	j := startJobWith(t, ns, nw, jobOpts{configure: replicatedSync(1, mode)})
	j.waitReplicated(t, 1)
	ranges := j.workers[0].ServerKeyRanges()
	keys := []uint64{ranges[0].Begin + 1, ranges[1].Begin + 1, ranges[1].Begin + 2, ranges[2].Begin + 1}
	victim := j.servers[1]
	dead := victim.MyNode().ID
	errs := bspRounds(t, j, keys, rounds, func(i int) {
		if i == rounds/3 {
			victim.Stop()
		}
	})
	for wi, err := range errs {
		require.NoError(t, err, "worker %d: every push and pull is answered", wi)
	}
	for wi, got := range j.pullAll(t, keys) {
		assert.Equal(t, bspWant(rounds, nw), got, "worker %d: exact sums of every round", wi)
	}
	for _, iv := range j.coord.Table().Current().Intervals {
		assert.NotEqual(t, dead, iv.Node, "no interval stays on the dead server")
	}
	j.waitReplicated(t, 1, victim)
}

// BSP replicates once per round: with n workers and R rounds each backup
// receives R states of the interval it backs up and no forwarded push
// (asynchronous replication would forward n*R). A seeding (MsgSeed) is
// not counted: the first round's pushes wait for it and ship after it.
// A primary whose Migrator has AppendSnapshot copies its interval with it
// into the message (one per round and one for the seed), and its backups
// install the copies with Replace; one with only Snapshot copies with
// that; one with neither copies by Export and Import (a C++ server's state
// hook), with the same outcome.
func TestReplicatedBSPShipsOncePerRound(t *testing.T) {
	perPrimary := func(t *testing.T, j *elasticJob, counts map[*kv.DefaultHandler]*copyCounts, what string, get func(*copyCounts) int64) {
		primaries := map[int32]int64{}
		for _, iv := range j.coord.Table().Current().Intervals {
			primaries[iv.Node]++
		}
		for i, h := range j.stores {
			id := j.servers[i].MyNode().ID
			assert.Equal(t, (shipRounds+1)*primaries[id], get(counts[h]), "server %d: %s per round and per seed of each interval it is the primary of", id, what)
		}
	}
	t.Run("append", func(t *testing.T) {
		counts := map[*kv.DefaultHandler]*copyCounts{}
		j := bspShipsOncePerRound(t, func(h *kv.DefaultHandler) elastic.Migrator {
			counts[h] = &copyCounts{}
			return copyCounter{h, counts[h]}
		})
		perPrimary(t, j, counts, "an AppendSnapshot", func(c *copyCounts) int64 { return c.appended.Load() })
		for i, h := range j.stores {
			id := j.servers[i].MyNode().ID
			assert.Zero(t, counts[h].snapshots.Load(), "server %d: no Snapshot", id)
			backedUp := int64(0)
			for _, iv := range j.coord.Table().Current().Intervals {
				if iv.HasBackup(id) {
					backedUp++
				}
			}
			assert.Equal(t, (shipRounds+1)*backedUp, counts[h].replaced.Load(), "server %d: a Replace per round and per seed of each interval it backs up", id)
		}
	})
	t.Run("snapshot", func(t *testing.T) {
		counts := map[*kv.DefaultHandler]*copyCounts{}
		j := bspShipsOncePerRound(t, func(h *kv.DefaultHandler) elastic.Migrator {
			counts[h] = &copyCounts{}
			return snapshotOnly{h, counts[h]}
		})
		perPrimary(t, j, counts, "a Snapshot", func(c *copyCounts) int64 { return c.snapshots.Load() })
	})
	t.Run("export", func(t *testing.T) {
		bspShipsOncePerRound(t, func(h *kv.DefaultHandler) elastic.Migrator { return exportImport{h} })
	})
}

const shipRounds = 20

func bspShipsOncePerRound(t *testing.T, mig func(*kv.DefaultHandler) elastic.Migrator) *elasticJob {
	const ns, nw = 3, 4
	j := startJobWith(t, ns, nw, jobOpts{configure: replicatedBSP(1), migrator: mig})
	r := j.waitReplicated(t, 1)
	ranges := j.workers[0].ServerKeyRanges()
	keys := []uint64{ranges[0].Begin + 1, ranges[1].Begin + 1, ranges[1].Begin + 2, ranges[2].Begin + 1}
	errs := bspRounds(t, j, keys, shipRounds, nil)
	for wi, err := range errs {
		require.NoError(t, err, "worker %d", wi)
	}
	for wi, got := range j.pullAll(t, keys) {
		assert.Equal(t, bspWant(shipRounds, nw), got, "worker %d: exact sums of every round", wi)
	}
	backups := map[int32]int{}
	for _, iv := range r.Intervals {
		backups[iv.Backups[0]]++
	}
	for i, en := range j.srvEl {
		pushes, states := en.ReplicationReceived()
		id := j.servers[i].MyNode().ID
		assert.Equal(t, int64(0), pushes, "server %d: no push forwarded one by one", id)
		assert.Equal(t, int64(shipRounds*backups[id]), states, "server %d: one state per round of each interval it backs up", id)
	}
	return j
}

// copyCounts counts how a server's Migrator copied and installed copies.
type copyCounts struct{ appended, snapshots, replaced atomic.Int64 }

// copyCounter is DefaultHandler's Migrator counting its copies and
// Replaces.
type copyCounter struct {
	*kv.DefaultHandler
	n *copyCounts
}

func (c copyCounter) AppendSnapshot(dst []byte, begin, end uint64) ([]byte, error) {
	c.n.appended.Add(1)
	return c.DefaultHandler.AppendSnapshot(dst, begin, end)
}

func (c copyCounter) Snapshot(begin, end uint64) ([]byte, error) {
	c.n.snapshots.Add(1)
	return c.DefaultHandler.Snapshot(begin, end)
}

func (c copyCounter) Replace(begin, end uint64, state []byte) error {
	c.n.replaced.Add(1)
	return c.DefaultHandler.Replace(begin, end, state)
}

// snapshotOnly is DefaultHandler's Migrator with Snapshot (counted) but
// neither AppendSnapshot nor Replace.
type snapshotOnly struct {
	h *kv.DefaultHandler
	n *copyCounts
}

func (m snapshotOnly) Export(begin, end uint64) ([]byte, error) { return m.h.Export(begin, end) }
func (m snapshotOnly) Import(state []byte) error                { return m.h.Import(state) }
func (m snapshotOnly) Snapshot(begin, end uint64) ([]byte, error) {
	m.n.snapshots.Add(1)
	return m.h.Snapshot(begin, end)
}

// exportImport is DefaultHandler's Migrator without its Snapshot.
type exportImport struct{ h *kv.DefaultHandler }

func (m exportImport) Export(begin, end uint64) ([]byte, error) { return m.h.Export(begin, end) }
func (m exportImport) Import(state []byte) error                { return m.h.Import(state) }

// SSP backups count the forwarded pushes' iterations: worker 1 stops
// after 10 rounds, worker 0 goes 2 ahead (the staleness bound), then the
// primary of the key stops. Worker 0's pull, re-sent to the promoted
// backup, is answered at once: the backup knows worker 1 is at 10 (with
// the clocks of its seed, 0, it would hold the pull until worker 1
// pushed again, which it never does).
func TestReplicatedSSPBackupKeepsClocks(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	const rounds = 10
	j := startJobWith(t, 3, 2, jobOpts{configure: replicatedSync(1, syncctl.SSP)})
	r := j.waitReplicated(t, 1)
	key := j.workers[0].ServerKeyRanges()[1].Begin + 1
	push := func(w *kv.Worker) {
		ts, err := kv.Push(w, []uint64{key}, []float32{1}, nil, kv.Options{})
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts))
	}
	for range rounds {
		for _, w := range j.kvw {
			push(w)
		}
	}
	push(j.kvw[0])
	push(j.kvw[0])
	primary := r.Intervals[r.Find(key)].Node
	for _, po := range j.servers {
		if po.MyNode().ID == primary {
			po.Stop()
		}
	}
	var got []float32
	ts, err := kv.Pull(j.kvw[0], []uint64{key}, &got, nil, kv.Options{})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- j.kvw[0].Wait(ts) }()
	err = testutil.Recv(t, done, 20*time.Second, func() string {
		return "the promoted backup holds the pull: it lost the workers' clocks"
	})
	require.NoError(t, err)
	assert.Equal(t, []float32{2*rounds + 2}, got)
}

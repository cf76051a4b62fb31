package coord

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/elasticps/elasticps/elastic"
	itestutil "github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// A worker whose elastic link answers nothing (its handler blocked, its
// requests lost) must not hold moves up or fail them: the coordinator
// times out on it, counts and logs it, goes on without it and keeps
// sending it the newest routing table, which it takes once its link works
// again. Meanwhile the other workers push through every move and the sums
// stay exact.
func TestMovesGoOnWhileAWorkerLinkIsStuck(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	const ns, nw, moves = 2, 2, 6
	j := startJobWith(t, ns, nw, jobOpts{stuckWorker: true})
	stuck := j.stuck.MyNode().ID
	keys, vals := j.firstKeys(4)
	wg, _ := j.pushRounds(t, keys, vals, 300, time.Millisecond)

	// keys[0] goes back and forth between the two servers
	s0, s1 := int32(message.ServerRankToID(0)), int32(message.ServerRankToID(1))
	for i := range moves {
		to := s1
		if i%2 == 1 {
			to = s0
		}
		_, err := j.coord.Move(keys[0], keys[0]+1, to)
		require.NoError(t, err, "move %d", i)
	}
	require.Equal(t, []int32{stuck}, j.coord.Lagging())
	epoch := j.coord.Table().Epoch()
	require.Equal(t, uint64(2*moves), epoch)
	require.Nil(t, j.stuckEl, "the stuck worker follows no table until unstuck")

	// The unanswered tables are counted against the stuck worker only.
	unanswered := j.coord.Metrics().ControlUnansweredTotal
	stuckRoutes := unanswered.WithLabelValues(strconv.Itoa(int(stuck)), "routes")
	require.Eventually(t, func() bool { return testutil.ToFloat64(stuckRoutes) >= 1 },
		30*time.Second, 10*time.Millisecond)
	for _, po := range append(append(j.servers[:ns:ns], j.workers...), j.Scheduler) {
		id := strconv.Itoa(int(po.MyNode().ID))
		for _, m := range []int32{elastic.MsgRoutes, elastic.MsgPrepare, elastic.MsgAccept, elastic.MsgImport, elastic.MsgAbort} {
			require.Zero(t, testutil.ToFloat64(unanswered.WithLabelValues(id, elastic.MessageName(m))), "node %s, %s", id, elastic.MessageName(m))
		}
	}

	// Its link works again: the table it missed reaches it.
	j.unstick()
	require.Eventually(t, func() bool { return j.stuckEl.Table().Epoch() == epoch && len(j.coord.Lagging()) == 0 },
		30*time.Second, 10*time.Millisecond)
	// and later moves reach it as they reach everyone
	_, err := j.coord.Move(keys[0], keys[0]+1, s1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return j.stuckEl.Table().Epoch() == epoch+2 }, 30*time.Second, 10*time.Millisecond)

	wg.Wait()
	j.requireSums(t, keys, vals, 300*nw)
	for i, h := range j.coord.History() {
		require.NoError(t, h.Err, "move %d", i)
	}
	require.Len(t, j.coord.History(), moves+1)
}

// A move aborted after the old owner exported (here: the new owner takes
// the keys, then answers nothing, so the table that would hand them over
// never reaches it) gives the exported state back to the old owner before
// the keys go back there; the sums stay exact. Before, the state was
// dropped and the old owner served the keys from scratch.
func TestAbortAfterExportGivesTheStateBack(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	const ns, nw, rounds = 2, 2, 200
	j := startJobWith(t, ns, nw, jobOpts{stuckServer: true})
	stuck := j.stuck.MyNode().ID
	keys, vals, from, wg := j.pushAroundStuck(t, rounds)

	_, err := j.coord.Move(keys[0], keys[0]+1, stuck)
	require.ErrorIs(t, err, elastic.ErrNoAnswer)
	require.ErrorContains(t, err, fmt.Sprintf("routing epoch 1 not delivered to node %d", stuck))
	unanswered := j.coord.Metrics().ControlUnansweredTotal
	require.Equal(t, 1.0, testutil.ToFloat64(unanswered.WithLabelValues(strconv.Itoa(int(stuck)), "abort")))
	require.GreaterOrEqual(t, testutil.ToFloat64(unanswered.WithLabelValues(strconv.Itoa(int(stuck)), "routes")), 1.0)
	require.Equal(t, from, j.coord.Table().Current().Intervals[j.coord.Table().Current().Find(keys[0])].Node)

	wg.Wait()
	j.requireSums(t, keys, vals, rounds*nw)
}

// A move whose new owner dies before it acknowledged the move's routing
// table ends when the job declares that server dead, not at the
// coordinator's timeout (10 minutes here): a dead server's failover waits
// for the move in progress. The keys stay on the old owner, the error
// names the dead server, and the sums stay exact.
func TestMoveEndsWhenItsServerDies(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	const ns, nw, rounds = 2, 2, 200
	j := startJobWith(t, ns, nw, jobOpts{stuckServer: true, configure: func(c *postoffice.Config) {
		c.Elastic = true
		c.HeartbeatInterval, c.HeartbeatTimeout = 200*time.Millisecond, 3*time.Second
	}})
	j.coord.Timeout = 10 * time.Minute
	stuck := j.stuck.MyNode().ID
	keys, vals, from, wg := j.pushAroundStuck(t, rounds)

	epoch := j.coord.Table().Epoch()
	moved := make(chan error, 1)
	go func() {
		_, err := j.coord.Move(keys[0], keys[0]+1, stuck)
		moved <- err
	}()
	// The move's first table is out (its new owner does not acknowledge
	// it): the new owner dies.
	require.Eventually(t, func() bool { return j.coord.Table().Epoch() > epoch }, 30*time.Second, time.Millisecond)
	j.stuck.Stop()
	err := itestutil.Recv(t, moved, 60*time.Second, func() string { return "the move waited for its timeout after its new owner died" })
	require.ErrorIs(t, err, elastic.ErrNodeDead)
	require.ErrorContains(t, err, fmt.Sprintf("node %d", stuck))
	r := j.coord.Table().Current()
	require.Equal(t, from, r.Intervals[r.Find(keys[0])].Node, "the keys stay on the old owner")

	wg.Wait()
	j.requireSums(t, keys, vals, rounds*nw)
}

// pushAroundStuck starts every worker pushing two keys of each real server
// (the stuck one serves nothing) rounds times, and waits until 20 pushes
// are done; from is the owner of keys[0].
func (j *elasticJob) pushAroundStuck(t *testing.T, rounds int) (keys []uint64, vals []float32, from int32, wg *sync.WaitGroup) {
	t.Helper()
	stuck := j.stuck.MyNode().ID
	for rank, r := range j.workers[0].ServerKeyRanges() {
		if int32(message.ServerRankToID(rank)) != stuck {
			keys = append(keys, r.Begin, r.Begin+1)
			vals = append(vals, float32(10*rank+1), float32(10*rank+2))
		}
	}
	from, _ = owner(j.coord.Table().Current(), keys[0], keys[0]+1)
	wg, done := j.pushRounds(t, keys, vals, rounds, time.Millisecond)
	require.Eventually(t, func() bool { return done.Load() >= 20 }, 30*time.Second, time.Millisecond)
	return keys, vals, from, wg
}

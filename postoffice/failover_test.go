package postoffice_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// replicatedJob configures a job with PS_REPLICAS=1 and deathHeartbeats.
func replicatedJob(c *postoffice.Config) {
	c.Elastic, c.Replicas = true, 1
	deathHeartbeats(c)
}

// In a job with replicas a dead server counts as lost only when its
// failover lost values: the live nodes' Finalize, after its barrier,
// waits for the scheduler's report of the outcome (the coordinator's
// ReportFailover), then returns nil when nothing was lost, or the loss
// with what was lost.
func TestFinalizeCountsOnlyLostFailovers(t *testing.T) {
	t.Parallel() // waits on heartbeat and resend timers, not the CPU
	for _, tc := range []struct {
		name        string
		nothingLost bool
		detail      string
	}{
		{"nothing lost", true, "failed over in routing epoch 2: each of the 1 intervals it was the primary of went to a live backup; nothing was lost"},
		{"lost", false, "the values of its intervals [0, 5) are lost: none had a live backup (routing epoch 2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := startJob(t, 2, 1, replicatedJob)
			victim := j.Servers[1]
			dead := victim.MyNode().ID
			victim.Stop()
			live := []*postoffice.Postoffice{j.Scheduler, j.Servers[0], j.Workers[0]}
			for _, po := range live {
				testutil.WaitFor(t, 20*time.Second, func() bool { g, ok := po.Gone(dead); return ok && g.Dead },
					func() string { return po.Role().String() + " was not told of the death" })
			}
			finalized := make(chan error, 2)
			for _, po := range []*postoffice.Postoffice{j.Servers[0], j.Workers[0]} {
				go func() { finalized <- po.Finalize(0, true) }()
			}
			// the scheduler's part of the final barrier: once it returns,
			// the others are past theirs
			require.NoError(t, j.Scheduler.Barrier(0, message.AllGroup))
			assert.False(t, testutil.Until(300*time.Millisecond, func() bool { return len(finalized) > 0 }),
				"Finalize returned before the failover's outcome was reported")
			require.NoError(t, j.Scheduler.ReportFailover(dead, tc.nothingLost, tc.detail))
			for range 2 {
				err := testutil.Recv(t, finalized, 20*time.Second, func() string { return "Finalize did not return" })
				if tc.nothingLost {
					assert.NoError(t, err)
					continue
				}
				require.ErrorIs(t, err, postoffice.ErrNodesLost)
				assert.Contains(t, err.Error(), fmt.Sprintf("server %d (rank %d, 127.0.0.1:%d) died (no heartbeat for 3s (PS_HEARTBEAT_TIMEOUT)); %s; the job's results are incomplete: restart the job", dead, victim.MyRank(), victim.MyNode().Port, tc.detail))
				assert.NotContains(t, err.Error(), "without replicas")
			}
			for _, po := range live {
				g, ok := po.Gone(dead)
				require.True(t, ok)
				assert.Equal(t, tc.nothingLost, g.FailedOver, po.Role().String())
			}
			if tc.nothingLost {
				assert.NoError(t, j.Scheduler.Failure())
			} else {
				assert.ErrorIs(t, j.Scheduler.Failure(), postoffice.ErrNodesLost)
			}
		})
	}
}

// Without replicas nothing changes: a dead server is a loss, and Finalize
// does not wait for a failover.
func TestFinalizeWithoutReplicasCountsEveryDeadServer(t *testing.T) {
	t.Parallel() // waits on heartbeat and resend timers, not the CPU
	j := startJob(t, 2, 1, deathHeartbeats)
	dead := j.Servers[1].MyNode().ID
	j.Servers[1].Stop()
	testutil.WaitFor(t, 20*time.Second, func() bool { _, ok := j.Workers[0].Gone(dead); return ok },
		func() string { return "the worker was not told of the death" })
	go func() { _ = j.Scheduler.Barrier(0, message.AllGroup) }()
	go func() { _ = j.Servers[0].Barrier(0, message.AllGroup) }()
	err := testutil.Within(t, 5*time.Second, func() error { return j.Workers[0].Finalize(0, true) },
		func() string { return "Finalize waited" })
	require.ErrorIs(t, err, postoffice.ErrNodesLost)
	assert.Contains(t, err.Error(), "without replicas a server's state dies with it")
	assert.Error(t, j.Scheduler.ReportFailover(dead, true, ""), "no failover in a job without replicas")
}

// recorder is a server customer that hands over the data messages it
// gets.
type recorder chan *message.Message

func (r recorder) Accept(m *message.Message) { r <- m }

// A server restarted at a dead server's address in a job with replicas
// joins as a standby under a new id; every node's path to the new id
// works, the dead id's connection to the same address no longer takes
// this node's identity from it (ZMQ), and what is sent to it arrives
// from the right sender.
func TestRestartedServerAtItsAddressJoinsAsStandby(t *testing.T) {
	t.Parallel() // waits on heartbeat and resend timers, not the CPU
	j := startJob(t, 2, 1, replicatedJob)
	victim := j.Servers[1]
	dead, port := victim.MyNode().ID, victim.MyNode().Port
	victim.Stop()
	back := j.NewNode(message.RoleServer, func(c *postoffice.Config) { c.Port = int(port) })
	got := make(recorder, 64)
	require.NoError(t, back.AddCustomer(0, 0, got))
	require.NoError(t, testutil.Within(t, 20*time.Second, func() error { return back.Start(0) }, func() string { return "the restarted server did not start" }))
	me := back.MyNode()
	assert.Equal(t, port, me.Port)
	assert.Equal(t, int32(message.ServerRankToID(2)), me.ID, "a new id, the first standby's")
	assert.True(t, back.IsStandby(), "it joined as a standby")
	assert.False(t, back.IsRecovery(), "it took over no dead server's id")
	assert.Equal(t, []int32{me.ID}, j.Scheduler.Standbys())
	senders := []*postoffice.Postoffice{j.Scheduler, j.Servers[0], j.Workers[0]}
	for _, po := range senders {
		testutil.WaitFor(t, 20*time.Second, func() bool { return po.Knows(me.ID) }, func() string { return po.Role().String() + " never learnt the standby" })
	}
	// the dead server is declared by its silence meanwhile; the standby
	// is no part of it
	testutil.WaitFor(t, 20*time.Second, func() bool { g, ok := j.Workers[0].Gone(dead); return ok && g.Dead },
		func() string { return "the dead server was not declared dead" })
	const rounds = 20
	for i := range rounds {
		for _, po := range senders {
			m := &message.Message{Meta: message.NewMeta()}
			m.Meta.AppID, m.Meta.CustomerID, m.Meta.Request = 0, 0, true
			m.Meta.Recver, m.Meta.Timestamp = me.ID, int32(i)
			_, err := po.Send(m)
			require.NoError(t, err)
		}
		time.Sleep(50 * time.Millisecond) // spread over reconnections of the dead id's path
	}
	from := map[int32]int{}
	for range rounds * len(senders) {
		m := testutil.Recv(t, got, 20*time.Second, func() string { return fmt.Sprintf("messages to the standby were lost: got %v", from) })
		from[m.Meta.Sender]++
	}
	assert.Equal(t, map[int32]int{1: rounds, j.Servers[0].MyNode().ID: rounds, j.Workers[0].MyNode().ID: rounds}, from)
}

// Keys the scheduler reports lost (a move interrupted with the scheduler
// whose keys no live server holds) make Failure and Finalize fail on every
// node, naming the range; a bad report is refused.
func TestReportedLostKeysFailFinalize(t *testing.T) {
	j := startJob(t, 1, 1, nil)
	require.NoError(t, j.Scheduler.ReportKeysLost(0, 1000, "server 8 is gone"))
	require.ErrorContains(t, j.Scheduler.ReportKeysLost(7, 7, ""), "the range is empty")
	assert.ErrorContains(t, j.Servers[0].ReportKeysLost(0, 1, ""), "only the scheduler")
	for _, po := range j.All() {
		testutil.WaitFor(t, 20*time.Second, func() bool { return len(po.KeysLost()) == 1 },
			func() string { return po.Role().String() + " was not told of the lost keys" })
		assert.Equal(t, []postoffice.LostKeys{{Begin: 0, End: 1000, Detail: "server 8 is gone"}}, po.KeysLost())
	}
	finalized := make(chan error, 3)
	for _, po := range j.All() {
		go func() { finalized <- po.Finalize(0, true) }()
	}
	for range 3 {
		err := testutil.Recv(t, finalized, 20*time.Second, func() string { return "Finalize did not return" })
		require.ErrorIs(t, err, postoffice.ErrKeysLost)
		assert.NotErrorIs(t, err, postoffice.ErrNodesLost)
		assert.Contains(t, err.Error(), "the values of keys [0, 1000) are lost: server 8 is gone; the job's results are incomplete")
	}
}

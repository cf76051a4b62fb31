package scheduler

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

// readyReplicated is readyHB (servers 8 at :6000, 10 at :6001, worker 9 at
// :6002) in a job with PS_REPLICAS=1.
func readyReplicated(t *testing.T) *State {
	t.Helper()
	s := New(Config{NumServers: 2, NumWorkers: 1, Self: self(), HeartbeatTimeout: 10 * time.Second, HeartbeatInterval: time.Second, Replicas: 1}, t0)
	for i, role := range []message.Role{message.RoleServer, message.RoleServer, message.RoleWorker} {
		s.AddNode(t0, message.Empty, node(role, "127.0.0.1", int32(6000+i)))
	}
	require.True(t, s.Ready(), "not ready")
	return s
}

// requireStandbyJoin checks that a is the admission of a standby as id:
// connected to, its own node list marks it a standby (never a recovery),
// and every other live node learns it.
func requireStandbyJoin(t *testing.T, a Actions, id int32, others ...int32) {
	t.Helper()
	require.Empty(t, a.Errors)
	require.Len(t, a.Connect, 1, "actions: %+v", a)
	n := a.Connect[0]
	assert.Equal(t, id, n.ID)
	assert.True(t, n.Standby, "joins as a standby")
	assert.False(t, n.IsRecovery, "takes over no dead server's id")
	sent := nodesSentTo(a)
	for _, o := range others {
		assert.Equal(t, 1, sent[o], "node %d learns the standby", o)
	}
	require.Contains(t, sent, id)
	for _, m := range a.Send {
		if m.Meta.Recver == id && m.Meta.Control.Cmd == message.CmdAddNode {
			for _, l := range m.Meta.Control.Nodes {
				if l.ID == id {
					assert.True(t, l.Standby, "its own entry in its list marks it a standby")
				}
			}
		}
	}
}

// With replicas a server restarted at a dead server's address, before the
// death is even declared, joins as a standby with a new id; the silent
// server is declared dead later and stays so; a server restarted at a new
// address joins the same way, and so does a standby restarted at its own
// address after it died.
func TestReplicatedRestartJoinsAsStandby(t *testing.T) {
	s := readyReplicated(t)
	now := t0.Add(5 * time.Second)
	a := s.AddNode(now, message.Empty, node(message.RoleServer, "127.0.0.1", 6001)) // server 10's address
	requireStandbyJoin(t, a, 12, 8, 9)
	assert.Empty(t, a.Gone, "the server it replaces is not declared dead for it")
	assert.Equal(t, []int32{12}, s.Standbys())
	assert.Zero(t, s.Waiting(), "it does not wait for a dead server to replace")
	assert.Empty(t, s.AddNode(now, message.Empty, node(message.RoleServer, "127.0.0.1", 6001)).Send, "a repeated registration")

	for _, id := range []int32{8, 9, 12} {
		s.Heartbeat(t0.Add(14*time.Second), id)
	}
	a = s.Tick(t0.Add(15 * time.Second))
	require.Len(t, a.Gone, 1)
	assert.Equal(t, int32(10), a.Gone[0].Node.ID, "the silent server is declared dead")
	assert.Equal(t, map[int32][]int32{8: {10}, 9: {10}, 12: {10}}, notices(a, CmdNodeDead))
	assert.True(t, s.Dead(10))
	assert.False(t, s.Dead(12))

	// a new address
	requireStandbyJoin(t, s.AddNode(t0.Add(16*time.Second), message.Empty, node(message.RoleServer, "127.0.0.1", 7000)), 14, 8, 9, 12)
	// standby 12 dies and comes back at its address
	for _, id := range []int32{8, 9, 14} {
		s.Heartbeat(t0.Add(30*time.Second), id)
	}
	require.Len(t, s.Tick(t0.Add(31*time.Second)).Gone, 1)
	require.True(t, s.Dead(12))
	requireStandbyJoin(t, s.AddNode(t0.Add(32*time.Second), message.Empty, node(message.RoleServer, "127.0.0.1", 6001)), 16, 8, 9, 14)
	assert.Equal(t, []int32{12, 14, 16}, s.Standbys())

	// workers are still replaced as before: they hold no state
	a = s.AddNode(t0.Add(33*time.Second), message.Empty, node(message.RoleWorker, "127.0.0.1", 6002))
	assert.Empty(t, a.Connect, "worker 9 is alive: the new one waits")
	assert.Equal(t, 1, s.Waiting())
}

// Failover tells every live node its outcome; nothing lost takes the
// server off Lost; only a dead server's failover is reported.
func TestFailoverOutcomeToldToEveryLiveNode(t *testing.T) {
	s := readyReplicated(t)
	for _, id := range []int32{8, 9} {
		s.Heartbeat(t0.Add(14*time.Second), id)
	}
	require.Len(t, s.Tick(t0.Add(15*time.Second)).Gone, 1)
	require.Len(t, s.Lost(), 1)

	a := s.Failover(10, true, "failed over")
	require.Empty(t, a.Errors)
	assert.Equal(t, map[int32][]int32{8: {10}, 9: {10}}, notices(a, CmdFailedOver))
	for _, m := range a.Send {
		assert.Equal(t, "failed over", string(m.Meta.Body))
	}
	assert.Empty(t, s.Lost(), "nothing lost")

	a = s.Failover(10, false, "the values of its intervals [0, 5) are lost")
	assert.Equal(t, map[int32][]int32{8: {10}, 9: {10}}, notices(a, CmdStateLost))

	a = s.Failover(8, true, "")
	assert.Empty(t, a.Send)
	require.Len(t, a.Errors, 1)
	assert.Contains(t, a.Errors[0].Error(), "failover of node 8: it is no server declared dead")
}

// Without replicas a restarted server still takes the dead server's id.
func TestRestartWithoutReplicasIsARecovery(t *testing.T) {
	s := readyHB(t, 2, 1)
	s.Heartbeat(t0.Add(8*time.Second), 8)
	s.Heartbeat(t0.Add(8*time.Second), 9)
	a := s.AddNode(t0.Add(15*time.Second), message.Empty, node(message.RoleServer, "127.0.0.1", 7001))
	requireRecovery(t, a, 10)
	assert.Empty(t, s.Standbys())
}

// Lost keys (a move interrupted with the scheduler whose keys no live
// server holds) are told to every live node, with the range in the body;
// an empty range is refused.
func TestKeysLostToldToEveryLiveNode(t *testing.T) {
	s := readyReplicated(t)
	for _, id := range []int32{8, 9} {
		s.Heartbeat(t0.Add(14*time.Second), id)
	}
	require.Len(t, s.Tick(t0.Add(15*time.Second)).Gone, 1) // server 10 died

	a := s.KeysLost(0, 1000, "server 8 is gone")
	require.Empty(t, a.Errors)
	var to []int32
	for _, m := range a.Send {
		require.Equal(t, CmdKeysLost, m.Meta.Control.Cmd)
		to = append(to, m.Meta.Recver)
		b := m.Meta.Body
		require.Len(t, b, 16+len("server 8 is gone"))
		assert.Equal(t, uint64(0), binary.LittleEndian.Uint64(b))
		assert.Equal(t, uint64(1000), binary.LittleEndian.Uint64(b[8:]))
		assert.Equal(t, "server 8 is gone", string(b[16:]))
	}
	assert.ElementsMatch(t, []int32{8, 9}, to, "the live nodes, not the dead server")

	a = s.KeysLost(5, 5, "")
	assert.Empty(t, a.Send)
	require.Len(t, a.Errors, 1)
	assert.Contains(t, a.Errors[0].Error(), "lost keys [5, 5): the range is empty")
}

package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

var t0 = time.Unix(1_000_000, 0)

func node(role message.Role, host string, port int32) message.Node {
	n := message.NewNode(role)
	n.Hostname, n.Port, n.CustomerID = host, port, 0
	return n
}

func self() message.Node {
	n := node(message.RoleScheduler, "10.0.0.1", 9000)
	n.ID = 1
	return n
}

func newState(ns, nw int, hb time.Duration) *State {
	return New(Config{NumServers: ns, NumWorkers: nw, Self: self(), HeartbeatTimeout: hb}, t0)
}

func TestGroupsMatchPsLite(t *testing.T) {
	g := Groups(2, 3)
	want := map[int][]int32{
		1: {1}, 2: {8, 10}, 3: {8, 10, 1}, 4: {9, 11, 13}, 5: {9, 11, 13, 1},
		6: {9, 11, 13, 8, 10}, 7: {9, 11, 13, 8, 10, 1}, 8: {8}, 9: {9}, 13: {13},
	}
	for grp, ids := range want {
		assert.Equal(t, ids, g[grp], "group %d", grp)
	}
}

// Ranks follow ps-lite's comparator: hostnames descending, ports ascending;
// not arrival order.
func TestRankAssignmentOrder(t *testing.T) {
	s := newState(2, 2, 0)
	regs := []message.Node{
		node(message.RoleWorker, "10.0.0.2", 7002),
		node(message.RoleServer, "10.0.0.2", 7001),
		node(message.RoleWorker, "10.0.0.3", 7000),
		node(message.RoleServer, "10.0.0.2", 6000),
	}
	var a Actions
	for i, n := range regs {
		a = s.AddNode(t0, message.Empty, n)
		require.Empty(t, a.Errors, "registration %d", i)
		require.Equal(t, i == len(regs)-1, a.Ready, "registration %d: ready", i)
	}
	got := map[string]int32{}
	for _, n := range s.Nodes() {
		got[addrKey(n)] = n.ID
	}
	want := map[string]int32{
		"10.0.0.3:7000": 9,  // worker rank 0: the larger hostname sorts first
		"10.0.0.2:7002": 11, // worker rank 1
		"10.0.0.2:6000": 8,  // server rank 0: same host, lower port first
		"10.0.0.2:7001": 10, // server rank 1
		"10.0.0.1:9000": 1,
	}
	assert.Equal(t, want, got)
	assert.Equal(t, int32(1), s.Nodes()[4].ID, "scheduler must be the last node")
	assert.Len(t, a.Connect, 4)
	require.Len(t, a.Send, 4, "want 4 node lists")
	for _, m := range a.Send {
		assert.Equal(t, message.CmdAddNode, m.Meta.Control.Cmd, "node list to %d: %v", m.Meta.Recver, m.Meta.String())
		assert.Len(t, m.Meta.Control.Nodes, 5, "node list to %d", m.Meta.Recver)
	}
}

// Two customers of one worker process register from the same host:port:
// the second shares the id and its rank becomes an alias nothing is sent to.
func TestSharedNodeAlias(t *testing.T) {
	s := newState(1, 2, 0)
	w := node(message.RoleWorker, "127.0.0.1", 5000)
	w1 := w
	w1.CustomerID = 1
	s.AddNode(t0, message.Empty, w)
	s.AddNode(t0, message.Empty, w1)
	a := s.AddNode(t0, message.Empty, node(message.RoleServer, "127.0.0.1", 5001))
	require.True(t, a.Ready, "not ready after 3 registrations")
	require.True(t, s.IsAlias(11), "want id 11 aliased to 9; aliases: %v", s.shared)
	require.False(t, s.IsAlias(9), "9 is the real id; aliases: %v", s.shared)
	assert.ElementsMatch(t, []int32{8, 9}, recipients(a), "no node list to alias 11")
	assert.Len(t, a.Connect, 2)
	// Barrier on workers counts both customers but answers once.
	require.Empty(t, s.Barrier(9, 0, 0, message.WorkerGroup).Send, "barrier released after 1 of 2")
	assert.Equal(t, []int32{9}, recipients(s.Barrier(9, 0, 1, message.WorkerGroup)), "want one release to 9")
}

func TestBarrierCountsAndResets(t *testing.T) {
	s := ready(t, 2, 2)
	for round := range 2 {
		for i, id := range []int32{9, 11, 8, 10, 1} {
			a := s.Barrier(id, 0, 0, message.AllGroup)
			if i < 4 {
				require.Empty(t, a.Send, "round %d: released after %d arrivals", round, i+1)
				continue
			}
			require.Len(t, a.Send, 5, "round %d: releases", round)
			for _, m := range a.Send {
				assert.False(t, m.Meta.Request, "bad release %v", m.Meta.String())
				assert.Equal(t, message.CmdBarrier, m.Meta.Control.Cmd, "bad release %v", m.Meta.String())
				assert.Equal(t, int32(0), m.Meta.AppID, "bad release %v", m.Meta.String())
			}
		}
	}
	assert.Len(t, s.Barrier(9, 0, 0, 12).Errors, 1, "group 12 accepted")
}

func ready(t *testing.T, ns, nw int) *State {
	t.Helper()
	s := newState(ns, nw, 10*time.Second)
	port := int32(6000)
	for range ns {
		s.AddNode(t0, message.Empty, node(message.RoleServer, "127.0.0.1", port))
		port++
	}
	for range nw {
		s.AddNode(t0, message.Empty, node(message.RoleWorker, "127.0.0.1", port))
		port++
	}
	require.True(t, s.Ready(), "not ready")
	return s
}

func TestTooManyRegistrationsRejected(t *testing.T) {
	s := newState(1, 1, 0)
	s.AddNode(t0, message.Empty, node(message.RoleServer, "h", 1))
	a := s.AddNode(t0, message.Empty, node(message.RoleServer, "h", 2))
	assert.Len(t, a.Errors, 1, "second server accepted: %+v", a)
	assert.False(t, a.Ready)
	assert.Len(t, s.AddNode(t0, message.Empty, node(message.RoleScheduler, "h", 3)).Errors, 1, "scheduler registration accepted")
}

func TestDeadNodesAndRecovery(t *testing.T) {
	s := ready(t, 2, 1) // servers 8 (port 6000), 10 (6001); worker 9 (6002)
	require.Empty(t, s.DeadNodes(t0.Add(5*time.Second), 10*time.Second), "dead before timeout")
	s.Heartbeat(t0.Add(8*time.Second), 8)
	s.Heartbeat(t0.Add(8*time.Second), 9)
	now := t0.Add(15 * time.Second)
	require.Equal(t, []int32{10}, s.DeadNodes(now, 10*time.Second))
	// A worker restart with no dead worker waits (no error, nothing sent)
	// until a worker is dead.
	a := s.AddNode(now, message.Empty, node(message.RoleWorker, "127.0.0.1", 7000))
	require.Empty(t, a.Errors, "worker recovery without a dead worker")
	require.Empty(t, a.Send, "worker recovery without a dead worker")
	require.Equal(t, 1, s.Waiting(), "the worker waits")
	// A restarted server takes over id 10.
	a = s.AddNode(now, message.Empty, node(message.RoleServer, "127.0.0.1", 7001))
	require.Empty(t, a.Errors)
	requireRecovery(t, a, 10)
	// Full list to the recovered node, the one node to the others.
	assert.Equal(t, map[int32]int{10: 4, 8: 1, 9: 1}, nodesSentTo(a), "recovery sends")
	assert.Empty(t, s.DeadNodes(now, 10*time.Second), "still dead after recovery")
}

// A node whose heartbeats are late when another node recovers still gets
// the new address: otherwise it would keep sending to the dead one, though
// it is alive (seen as a flaky postoffice.TestServerRecovery under load).
func TestRecoveryReachesNodesThatLookDead(t *testing.T) {
	s := ready(t, 2, 1) // servers 8 (port 6000), 10 (6001); worker 9 (6002)
	s.Heartbeat(t0.Add(8*time.Second), 8)
	now := t0.Add(15 * time.Second) // 10 and 9 have been silent for 15 s
	require.Equal(t, []int32{9, 10}, s.DeadNodes(now, 10*time.Second))
	a := s.AddNode(now, message.Empty, node(message.RoleServer, "127.0.0.1", 7001))
	requireRecovery(t, a, 10)
	assert.Equal(t, map[int32]int{10: 4, 8: 1, 9: 1}, nodesSentTo(a),
		"recovery sends: want the full list to 10 and the new node to 8 and to 9")
}

// nodesSentTo maps each recipient of a's node lists (ADD_NODE) to the
// number of nodes its list carries.
func nodesSentTo(a Actions) map[int32]int {
	got := map[int32]int{}
	for _, m := range a.Send {
		if m.Meta.Control.Cmd == message.CmdAddNode {
			got[m.Meta.Recver] = len(m.Meta.Control.Nodes)
		}
	}
	return got
}

// recipients lists the receivers of a's messages in order, but for the
// notices of dead or departed nodes (see notices).
func recipients(a Actions) []int32 {
	var ids []int32
	for _, m := range a.Send {
		if c := m.Meta.Control.Cmd; c != CmdNodeDead && c != CmdNodeLeft {
			ids = append(ids, m.Meta.Recver)
		}
	}
	return ids
}

// notices maps each recipient of a's cmd notices (CmdNodeDead or
// CmdNodeLeft) to the ids they name, in order.
func notices(a Actions, cmd message.Command) map[int32][]int32 {
	got := map[int32][]int32{}
	for _, m := range a.Send {
		if m.Meta.Control.Cmd == cmd {
			for _, n := range m.Meta.Control.Nodes {
				got[m.Meta.Recver] = append(got[m.Meta.Recver], n.ID)
			}
		}
	}
	return got
}

// requireRecovery checks that a connects exactly one node, the replacement
// that takes over id.
func requireRecovery(t *testing.T, a Actions, id int32) {
	t.Helper()
	require.Len(t, a.Connect, 1, "recovery actions: %+v", a)
	require.Equal(t, id, a.Connect[0].ID, "recovery actions: %+v", a)
	require.True(t, a.Connect[0].IsRecovery, "recovery actions: %+v", a)
}

func TestHeartbeatReply(t *testing.T) {
	s := ready(t, 1, 1)
	a := s.Heartbeat(t0, 9)
	require.Equal(t, []int32{9}, recipients(a), "heartbeat reply %+v", a)
	assert.Equal(t, message.CmdHeartbeat, a.Send[0].Meta.Control.Cmd)
	require.Len(t, a.Send[0].Meta.Control.Nodes, 1)
	assert.Equal(t, int32(1), a.Send[0].Meta.Control.Nodes[0].ID, "the reply carries the scheduler")
}

// A node restarted before the scheduler noticed the death is parked, then
// takes over the id on the first Tick after the timeout.
func TestQuickRestartWaitsForTimeout(t *testing.T) {
	s := ready(t, 1, 1) // server 8, worker 9, timeout 10s
	s.Heartbeat(t0.Add(9*time.Second), 9)
	a := s.AddNode(t0.Add(9*time.Second), message.Empty, node(message.RoleServer, "127.0.0.1", 8000))
	require.Empty(t, a.Send, "restart before the timeout was not parked: %+v", a)
	require.Equal(t, 1, s.Waiting(), "restart before the timeout was not parked")
	require.Empty(t, s.Tick(t0.Add(9500*time.Millisecond)).Send, "recovered before server 8 was dead")
	a = s.Tick(t0.Add(11 * time.Second))
	requireRecovery(t, a, 8)
	assert.Equal(t, 0, s.Waiting(), "tick after timeout")
}

func TestRestartWithoutHeartbeatsIsAnError(t *testing.T) {
	s := New(Config{NumServers: 1, NumWorkers: 1, Self: self()}, t0)
	s.AddNode(t0, message.Empty, node(message.RoleServer, "h", 1))
	s.AddNode(t0, message.Empty, node(message.RoleWorker, "h", 2))
	a := s.AddNode(t0, message.Empty, node(message.RoleServer, "h", 3))
	assert.Len(t, a.Errors, 1, "want an error explaining the heartbeat settings, got %+v", a)
}

// A repeated arrival of the same node and customer counts once: a node
// restarted after its predecessor reached the barrier must not release it
// before the others arrive.
func TestBarrierArrivalsAreASet(t *testing.T) {
	s := ready(t, 1, 1) // 8, 9
	s.Barrier(8, 0, 0, message.AllGroup)
	s.Barrier(8, 0, 0, message.AllGroup) // the replacement of 8
	require.Empty(t, s.Barrier(1, 0, 0, message.AllGroup).Send, "released without worker 9")
	assert.Len(t, s.Barrier(9, 0, 0, message.AllGroup).Send, 3, "releases")
}

// A drained server that leaves no longer holds barriers up, is never dead,
// and a barrier it was the last one missing from is released at once.
func TestLeave(t *testing.T) {
	s := ready(t, 2, 1) // servers 8, 10; worker 9
	s.Barrier(8, 0, 0, message.AllGroup)
	s.Barrier(9, 0, 0, message.AllGroup)
	require.Empty(t, s.Barrier(1, 0, 0, message.AllGroup).Send, "released without server 10")
	a := s.Leave(10)
	assert.ElementsMatch(t, []int32{1, 8, 9}, recipients(a),
		"leave of the last missing member releases the others, not the node that left")
	assert.NotContains(t, s.DeadNodes(t0.Add(time.Hour), time.Second), int32(10), "a node that left is reported dead")
	// next round needs only 8, 9 and the scheduler
	s.Barrier(8, 0, 0, message.AllGroup)
	s.Barrier(9, 0, 0, message.AllGroup)
	assert.Len(t, s.Barrier(1, 0, 0, message.AllGroup).Send, 3, "round after leave: releases")
}

// A standby server joins the running job with the next server id, gets the
// full node list, is announced to everyone, and takes part in no barrier.
func TestStandbyJoin(t *testing.T) {
	s := ready(t, 2, 1) // servers 8, 10; worker 9
	sb := node(message.RoleServer, "127.0.0.1", 9999)
	sb.Standby = true
	a := s.AddNode(t0, message.Empty, sb)
	require.Len(t, a.Connect, 1, "standby connect %+v", a.Connect)
	require.Equal(t, int32(12), a.Connect[0].ID, "standby connect")
	got := nodesSentTo(a)
	require.Equal(t, 5, got[12], "standby announcements %v", got)
	for _, id := range []int32{8, 9, 10} {
		require.Equal(t, 1, got[id], "standby announcements %v", got)
	}
	require.Equal(t, []int32{12}, s.Standbys())
	// a standby is in no group: its barrier returns at once and counts for
	// nothing
	require.Equal(t, []int32{12}, recipients(s.Barrier(12, 0, 0, message.AllGroup)), "standby barrier")
	for _, id := range []int32{8, 9, 10} {
		require.Empty(t, s.Barrier(id, 0, 0, message.AllGroup).Send, "released early: the standby must not count")
	}
	assert.Len(t, s.Barrier(1, 0, 0, message.AllGroup).Send, 4, "want the 4 members released")
	// a worker cannot be a standby
	w := node(message.RoleWorker, "127.0.0.1", 9998)
	w.Standby = true
	assert.Len(t, s.AddNode(t0, message.Empty, w).Errors, 1, "a standby worker was accepted")
}

// readyHB is ready with heartbeats on: every node heartbeats each second,
// the timeout is 10 s.
func readyHB(t *testing.T, ns, nw int) *State {
	t.Helper()
	s := New(Config{NumServers: ns, NumWorkers: nw, Self: self(), HeartbeatTimeout: 10 * time.Second, HeartbeatInterval: time.Second}, t0)
	port := int32(6000)
	for i := range ns + nw {
		role := message.RoleServer
		if i >= ns {
			role = message.RoleWorker
		}
		s.AddNode(t0, message.Empty, node(role, "127.0.0.1", port))
		port++
	}
	require.True(t, s.Ready(), "not ready")
	return s
}

// A node silent past the timeout is declared dead once, on a Tick, and
// every live node is told, with the reason; a dead server's state is lost.
func TestSilentNodeDeclaredDeadAndEveryoneTold(t *testing.T) {
	s := readyHB(t, 2, 2) // servers 8, 10; workers 9, 11
	for _, id := range []int32{8, 9, 11} {
		s.Heartbeat(t0.Add(8*time.Second), id)
	}
	require.Empty(t, s.Tick(t0.Add(9*time.Second)).Gone, "declared dead before the timeout")
	a := s.Tick(t0.Add(15 * time.Second))
	require.Len(t, a.Gone, 1, "gone: %+v", a.Gone)
	assert.Equal(t, int32(10), a.Gone[0].Node.ID)
	assert.Equal(t, "127.0.0.1:6001", addrKey(a.Gone[0].Node))
	assert.True(t, a.Gone[0].Dead)
	assert.Equal(t, "no heartbeat for 10s (PS_HEARTBEAT_TIMEOUT)", a.Gone[0].Reason)
	assert.Equal(t, map[int32][]int32{8: {10}, 9: {10}, 11: {10}}, notices(a, CmdNodeDead))
	for _, m := range a.Send {
		assert.Equal(t, "no heartbeat for 10s (PS_HEARTBEAT_TIMEOUT)", string(m.Meta.Body))
	}
	assert.True(t, s.Dead(10))
	require.Len(t, s.Lost(), 1)
	assert.Equal(t, int32(10), s.Lost()[0].Node.ID)
	for _, id := range []int32{8, 9, 11} {
		s.Heartbeat(t0.Add(16*time.Second), id)
	}
	assert.Empty(t, s.Tick(t0.Add(17*time.Second)).Send, "a dead node is declared once")
}

// Without heartbeats every node is silent: Tick declares nobody dead.
func TestNoHeartbeatsNoDeaths(t *testing.T) {
	s := ready(t, 2, 1) // timeout 10 s, no interval
	assert.Empty(t, s.Tick(t0.Add(time.Hour)).Gone)
}

// A barrier waits only for the live: the death of the last node missing
// releases the others, and the next round does without it.
func TestBarrierSkipsDeadNodes(t *testing.T) {
	s := readyHB(t, 2, 1) // servers 8, 10; worker 9
	s.Heartbeat(t0.Add(8*time.Second), 8)
	s.Heartbeat(t0.Add(8*time.Second), 9)
	s.Barrier(8, 0, 0, message.AllGroup)
	s.Barrier(9, 0, 0, message.AllGroup)
	require.Empty(t, s.Barrier(1, 0, 0, message.AllGroup).Send, "released without server 10")
	a := s.Tick(t0.Add(15 * time.Second))
	assert.ElementsMatch(t, []int32{1, 8, 9}, recipients(a), "the death of 10 releases the live members only")
	s.Barrier(8, 0, 0, message.AllGroup)
	s.Barrier(9, 0, 0, message.AllGroup)
	assert.ElementsMatch(t, []int32{1, 8, 9}, recipients(s.Barrier(1, 0, 0, message.AllGroup)), "next round without the dead")
}

// Gossip declares a server dead at once, before the heartbeat timeout.
func TestGossipFailureDeclaredAtOnce(t *testing.T) {
	s := readyHB(t, 2, 1)
	a := s.MarkFailed(10)
	require.Len(t, a.Gone, 1)
	assert.Equal(t, "membership gossip: its probes failed", a.Gone[0].Reason)
	assert.Equal(t, map[int32][]int32{8: {10}, 9: {10}}, notices(a, CmdNodeDead))
	assert.Empty(t, s.MarkFailed(10).Send, "declared twice")
}

// A restarted server that takes a dead server's id is told the state of
// every dead server is lost, its predecessor's included; a replacement
// found before any Tick declared the death first tells the others.
func TestRecoveryToldOfLostState(t *testing.T) {
	s := readyHB(t, 2, 1) // servers 8, 10; worker 9
	s.Heartbeat(t0.Add(8*time.Second), 8)
	s.Heartbeat(t0.Add(8*time.Second), 9)
	now := t0.Add(15 * time.Second)
	a := s.AddNode(now, message.Empty, node(message.RoleServer, "127.0.0.1", 7001))
	requireRecovery(t, a, 10)
	require.Len(t, a.Gone, 1, "the death is declared before the replacement")
	assert.Equal(t, "replaced by a restarted process at 127.0.0.1:7001", a.Gone[0].Reason)
	assert.Equal(t, map[int32][]int32{8: {10}, 9: {10}, 10: {10}}, notices(a, CmdNodeDead),
		"the others learn of the death, the replacement of the lost state")
	assert.False(t, s.Dead(10), "the replacement is alive")
	assert.Len(t, s.Lost(), 1, "its state stays lost")
	// the replacement counts in barriers again
	s.Barrier(8, 0, 0, message.AllGroup)
	s.Barrier(9, 0, 0, message.AllGroup)
	require.Empty(t, s.Barrier(1, 0, 0, message.AllGroup).Send, "released without the replacement")
	assert.Len(t, s.Barrier(10, 0, 0, message.AllGroup).Send, 4)
}

// A server that leaves (drained) is announced as gone, not dead.
func TestLeaveIsAnnounced(t *testing.T) {
	s := readyHB(t, 2, 1)
	a := s.Leave(10)
	require.Len(t, a.Gone, 1)
	assert.False(t, a.Gone[0].Dead)
	assert.Equal(t, map[int32][]int32{8: {10}, 9: {10}}, notices(a, CmdNodeLeft))
	assert.Empty(t, s.Lost())
}

// A node declared dead whose heartbeats come back is told it is out.
func TestLateNodeToldItIsDead(t *testing.T) {
	s := readyHB(t, 1, 1) // server 8, worker 9
	s.Heartbeat(t0.Add(8*time.Second), 8)
	require.Len(t, s.Tick(t0.Add(15*time.Second)).Gone, 1, "worker 9 declared dead")
	a := s.Heartbeat(t0.Add(16*time.Second), 9)
	assert.Equal(t, map[int32][]int32{9: {9}}, notices(a, CmdNodeDead))
	assert.Equal(t, []int32{9}, recipients(a), "the heartbeat is answered too")
}

// A server gone after the job's final barrier was released exited: gossip
// may report its leave as a failure, and heartbeats stop, but it is no
// loss. The same barrier outside Finalize (Start's) does not end the job.
func TestGoneAfterTheFinalBarrierIsNoLoss(t *testing.T) {
	for _, finishing := range []bool{false, true} {
		s := ready(t, 2, 1) // servers 8, 10; worker 9
		if finishing {
			s.Finishing()
		}
		for _, id := range []int32{8, 9, 10, 1} {
			s.Barrier(id, 0, 0, message.AllGroup)
		}
		assert.Equal(t, finishing, s.Ended())
		a := s.MarkFailed(10)
		if finishing {
			assert.Empty(t, a.Gone, "exited after the final barrier")
			assert.Empty(t, a.Send, "nobody is told")
			assert.Empty(t, s.Lost())
			assert.False(t, s.Dead(10))
			continue
		}
		require.Len(t, a.Gone, 1, "a death after Start's barrier")
		assert.Len(t, s.Lost(), 1)
	}
}

package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

// member is node n of a running job, with its id.
func member(role message.Role, id int32, port int32) message.Node {
	n := node(role, "10.0.0.2", port)
	n.ID = id
	return n
}

func rebuildState(ns, nw int) *State {
	return New(Config{NumServers: ns, NumWorkers: nw, Self: self(), HeartbeatTimeout: 2 * time.Second, HeartbeatInterval: time.Second}, t0)
}

// A restarted scheduler adopts the nodes that re-register with their ids:
// same ids, ranks and addresses, and the state each sent; once all are
// back it is ready, sends each the node list, and barriers work.
func TestRejoinRebuildsTheJob(t *testing.T) {
	s := rebuildState(2, 1)
	nodes := []message.Node{member(message.RoleServer, 10, 7001), member(message.RoleWorker, 9, 7002), member(message.RoleServer, 8, 7000)}
	// heartbeats and barriers queued for the old scheduler are not answered
	assert.Empty(t, s.Heartbeat(t0, 9).Send, "heartbeat from a node that has not re-registered")
	assert.Empty(t, s.Barrier(9, 0, 0, message.AllGroup).Send, "barrier before the job is rebuilt")
	var a Actions
	for i, n := range nodes {
		a = s.Rejoin(t0, n, []byte{byte(i)})
		require.Empty(t, a.Errors, "rejoin %d", i)
		require.Equal(t, i == len(nodes)-1, a.Ready, "rejoin %d: ready", i)
	}
	require.True(t, s.Ready())
	ids := map[string]int32{}
	for _, n := range s.Nodes() {
		ids[addrKey(n)] = n.ID
	}
	assert.Equal(t, map[string]int32{"10.0.0.2:7000": 8, "10.0.0.2:7001": 10, "10.0.0.2:7002": 9, "10.0.0.1:9000": 1}, ids)
	require.Len(t, a.Rebuilt, 3)
	for i, r := range a.Rebuilt {
		assert.Equal(t, []int32{8, 9, 10}[i], r.Node.ID)
	}
	assert.Equal(t, []byte{2}, a.Rebuilt[0].State, "server 8's state")
	assert.Len(t, a.Connect, 3)
	require.Len(t, a.Send, 3)
	for _, m := range a.Send {
		assert.Equal(t, message.CmdAddNode, m.Meta.Control.Cmd)
		assert.Len(t, m.Meta.Control.Nodes, 4, "node list to %d", m.Meta.Recver)
	}
	assert.Empty(t, a.Gone)
	assert.Len(t, s.Heartbeat(t0, 9).Send, 1, "a member's heartbeat is answered")
	var released int
	for _, id := range []int32{8, 9, 10, 1} {
		released = len(s.Barrier(id, 0, 0, message.AllGroup).Send)
	}
	assert.Equal(t, 4, released, "the barrier of all nodes releases everyone")
}

// Nodes that do not come back within RebuildWait are declared dead; the
// job goes on with the live ones. A late one is told it is out.
func TestRejoinGoesOnWithoutTheMissing(t *testing.T) {
	s := rebuildState(2, 1)
	require.Empty(t, s.Rejoin(t0, member(message.RoleServer, 8, 7000), nil).Errors)
	require.Empty(t, s.Rejoin(t0, member(message.RoleWorker, 9, 7002), nil).Errors)
	assert.False(t, s.Tick(t0.Add(4*time.Second)).Ready, "before RebuildWait (5 s)")
	a := s.Tick(t0.Add(5 * time.Second))
	require.True(t, a.Ready)
	require.Len(t, a.Gone, 1)
	assert.Equal(t, int32(10), a.Gone[0].Node.ID)
	assert.Contains(t, a.Gone[0].Reason, "did not re-register with the restarted scheduler within 5s")
	assert.True(t, s.Dead(10))
	late := s.Rejoin(t0.Add(6*time.Second), member(message.RoleServer, 10, 7001), nil)
	require.Len(t, late.Send, 1)
	assert.Equal(t, CmdNodeDead, late.Send[0].Meta.Control.Cmd)
	// a restarted server process takes the dead id, as after any death
	r := s.AddNode(t0.Add(6*time.Second), message.Empty, node(message.RoleServer, "10.0.0.5", 7005))
	require.Empty(t, r.Errors)
	assert.Equal(t, "10.0.0.5:7005", s.Addr(10))
}

// A scheduler whose job is complete (it was only unreachable) answers a
// re-registration with the node list; a wrong id is refused.
func TestRejoinOfACompleteJob(t *testing.T) {
	s := rebuildState(1, 1)
	s.AddNode(t0, message.Empty, node(message.RoleServer, "10.0.0.2", 7000))
	require.True(t, s.AddNode(t0, message.Empty, node(message.RoleWorker, "10.0.0.2", 7001)).Ready)
	a := s.Rejoin(t0, member(message.RoleWorker, 9, 7001), nil)
	require.Empty(t, a.Errors)
	require.Len(t, a.Send, 1)
	assert.Equal(t, message.CmdAddNode, a.Send[0].Meta.Control.Cmd)
	assert.Equal(t, int32(9), a.Send[0].Meta.Recver)
	assert.Nil(t, a.Rebuilt)
	assert.NotEmpty(t, s.Rejoin(t0, member(message.RoleWorker, 9, 7999), nil).Errors, "another address")
	assert.NotEmpty(t, s.Rejoin(t0, member(message.RoleWorker, 11, 7002), nil).Errors, "worker rank 1 of a 1-worker job")
	assert.NotEmpty(t, s.Rejoin(t0, member(message.RoleServer, 9, 7002), nil).Errors, "a server with a worker's id")
}

// A fresh job is never taken for a restart: registrations without ids
// make a fresh job; a node of another job that re-registers meanwhile is
// refused once a whole new job has registered.
func TestFreshJobIsNoRestart(t *testing.T) {
	s := rebuildState(1, 1)
	s.AddNode(t0, message.Empty, node(message.RoleServer, "10.0.0.3", 7000))
	stray := s.Rejoin(t0, member(message.RoleWorker, 9, 6000), nil)
	require.Empty(t, stray.Errors)
	assert.False(t, s.Ready())
	a := s.AddNode(t0, message.Empty, node(message.RoleWorker, "10.0.0.3", 7001))
	require.True(t, a.Ready, "the new job is complete")
	require.Len(t, a.Errors, 1)
	assert.Contains(t, a.Errors[0].Error(), "10.0.0.2:6000 re-registered with id 9, but a whole new job registered meanwhile")
	assert.Equal(t, "10.0.0.3:7001", s.Addr(9))
	assert.Equal(t, "10.0.0.3:7000", s.Addr(8))
	assert.Nil(t, a.Rebuilt)
}

// Standbys re-register with their ids and stay standbys; a new one gets
// the next free id.
func TestRejoinKeepsStandbys(t *testing.T) {
	s := rebuildState(1, 1)
	s.Rejoin(t0, member(message.RoleServer, 12, 7003), nil) // rank 2: a standby of a 1-server job
	s.Rejoin(t0, member(message.RoleServer, 8, 7000), nil)
	a := s.Rejoin(t0, member(message.RoleWorker, 9, 7001), nil)
	require.True(t, a.Ready, "standbys are not waited for")
	assert.Equal(t, []int32{12}, s.Standbys())
	j := s.AddNode(t0, message.Empty, func() message.Node {
		n := node(message.RoleServer, "10.0.0.4", 7004)
		n.Standby = true
		return n
	}())
	require.Empty(t, j.Errors)
	assert.Equal(t, []int32{12, 14}, s.Standbys(), "12 is taken")
}

// A worker process with two customers (counted as the job's two workers:
// ps-lite's multi-customer processes) re-registers each under its one
// id: the restarted scheduler counts both, is ready without waiting for
// RebuildWait, declares no one dead, and makes the second customer's
// rank an alias of the id again; a barrier of both customers and the
// server releases them.
func TestRejoinRebuildsMultiCustomerAliases(t *testing.T) {
	s := rebuildState(1, 2)
	w := member(message.RoleWorker, 9, 7002)
	require.Empty(t, s.Rejoin(t0, member(message.RoleServer, 8, 7000), nil).Errors)
	require.False(t, s.Rejoin(t0, w, nil).Ready, "one customer of the worker process")
	again := s.Rejoin(t0, w, nil)
	require.False(t, again.Ready, "the same customer again counts once")
	w.CustomerID = 1
	a := s.Rejoin(t0, w, nil)
	require.Empty(t, a.Errors)
	require.True(t, a.Ready, "both customers of the worker process are back")
	assert.Empty(t, a.Gone, "no one is missing")
	assert.True(t, s.IsAlias(11), "the second customer's rank is an alias of id 9")
	assert.False(t, s.IsAlias(9))
	assert.Contains(t, a.Events, "node 10.0.0.2:7002 shares id 9 (alias 11): another customer of its process")
	var released []int
	for _, b := range []struct{ id, customer int32 }{{9, 0}, {8, 0}, {1, 0}, {9, 1}} {
		released = append(released, len(s.Barrier(b.id, 0, b.customer, message.AllGroup).Send))
	}
	assert.Equal(t, []int{0, 0, 0, 3}, released, "the barrier of all nodes waits for the second customer, then releases the worker process, the server and the scheduler")
}

// A job with instance groups (DMLC_GROUP_SIZE=2: BytePS's joint
// processes) whose scheduler restarts: every instance re-registers with
// its id, the rebuilt scheduler has the same ids and ranks, and its group
// barriers count one request per process and its instance barriers every
// instance, as before the restart.
func TestRejoinRebuildsAJobWithInstanceGroups(t *testing.T) {
	cfg := Config{NumServers: 2, NumWorkers: 4, Self: self(), GroupSize: 2, HeartbeatTimeout: 2 * time.Second, HeartbeatInterval: time.Second}
	first := New(cfg, t0)
	var regs []message.Node
	for i := range 2 {
		regs = append(regs, wanting(message.RoleServer, "10.0.0.2", int32(6000+i), i))
	}
	for i := range 4 {
		regs = append(regs, wanting(message.RoleWorker, "10.0.0.3", int32(7000+i), i))
	}
	ids := register(t, first, regs)

	s := New(cfg, t0.Add(time.Minute)) // the restarted scheduler
	var a Actions
	for i, n := range first.Nodes() {
		if n.Role == message.RoleScheduler {
			continue
		}
		a = s.Rejoin(t0.Add(time.Minute), n, nil)
		require.Empty(t, a.Errors, "rejoin %d (%s)", i, n)
	}
	require.True(t, s.Ready(), "ready once all 6 instances are back")
	for _, n := range s.Nodes() {
		if n.Role != message.RoleScheduler {
			assert.Equal(t, ids[addrKey(n)], n.ID, "%s keeps its id", addrKey(n))
		}
	}
	recvers := func(a Actions) []int32 {
		var out []int32
		for _, m := range a.Send {
			out = append(out, m.Meta.Recver)
		}
		return out
	}
	w := func(r int) int32 { return int32(message.WorkerRankToID(r)) }
	srv0 := int32(message.ServerRankToID(0))
	// group 7: 2 worker processes, 1 server process, the scheduler
	assert.Empty(t, recvers(s.Barrier(w(0), 0, 0, message.AllGroup)))
	assert.Empty(t, recvers(s.Barrier(w(2), 0, 0, message.AllGroup)))
	assert.Empty(t, recvers(s.Barrier(srv0, 0, 0, message.AllGroup)))
	assert.ElementsMatch(t, []int32{w(0), w(2), srv0, message.SchedulerID}, recvers(s.Barrier(message.SchedulerID, 0, 0, message.AllGroup)))
	// an instance barrier (Finalize's) waits for every worker instance
	for r := range 3 {
		assert.Empty(t, recvers(s.InstanceBarrier(w(r), 0, 0, message.WorkerGroup)), "instance %d", r)
	}
	assert.ElementsMatch(t, []int32{w(0), w(1), w(2), w(3)}, recvers(s.InstanceBarrier(w(3), 0, 0, message.WorkerGroup)))
}

package scheduler

import (
	"slices"
	"testing"
	"time"

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
		if got := g[grp]; !equal(got, ids) {
			t.Errorf("group %d = %v, want %v", grp, got, ids)
		}
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
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
		if len(a.Errors) != 0 {
			t.Fatalf("registration %d: %v", i, a.Errors)
		}
		if (i == len(regs)-1) != a.Ready {
			t.Fatalf("registration %d: ready=%v", i, a.Ready)
		}
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
	for k, id := range want {
		if got[k] != id {
			t.Errorf("%s got id %d, want %d", k, got[k], id)
		}
	}
	if last := s.Nodes()[4]; last.ID != 1 {
		t.Errorf("scheduler must be the last node, got %v", last)
	}
	if len(a.Connect) != 4 || len(a.Send) != 4 {
		t.Fatalf("want 4 connects and 4 node lists, got %d, %d", len(a.Connect), len(a.Send))
	}
	for _, m := range a.Send {
		if m.Meta.Control.Cmd != message.CmdAddNode || len(m.Meta.Control.Nodes) != 5 {
			t.Errorf("node list to %d: %v", m.Meta.Recver, m.Meta.String())
		}
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
	if !a.Ready {
		t.Fatal("not ready after 3 registrations")
	}
	if !s.IsAlias(11) || s.IsAlias(9) {
		t.Fatalf("want id 11 aliased to 9; aliases: %v", s.shared)
	}
	for _, m := range a.Send {
		if m.Meta.Recver == 11 {
			t.Error("node list sent to alias 11")
		}
	}
	if len(a.Send) != 2 || len(a.Connect) != 2 {
		t.Errorf("sends %d connects %d, want 2 and 2", len(a.Send), len(a.Connect))
	}
	// Barrier on workers counts both customers but answers once.
	if b := s.Barrier(9, 0, 0, message.WorkerGroup); len(b.Send) != 0 {
		t.Fatal("barrier released after 1 of 2")
	}
	b := s.Barrier(9, 0, 1, message.WorkerGroup)
	if len(b.Send) != 1 || b.Send[0].Meta.Recver != 9 {
		t.Fatalf("want one release to 9, got %d", len(b.Send))
	}
}

func TestBarrierCountsAndResets(t *testing.T) {
	s := ready(t, 2, 2)
	for round := range 2 {
		for i, id := range []int32{9, 11, 8, 10, 1} {
			a := s.Barrier(id, 0, 0, message.AllGroup)
			if i < 4 && len(a.Send) != 0 {
				t.Fatalf("round %d: released after %d arrivals", round, i+1)
			}
			if i == 4 {
				if len(a.Send) != 5 {
					t.Fatalf("round %d: %d releases, want 5", round, len(a.Send))
				}
				for _, m := range a.Send {
					if m.Meta.Request || m.Meta.Control.Cmd != message.CmdBarrier || m.Meta.AppID != 0 {
						t.Errorf("bad release %v", m.Meta.String())
					}
				}
			}
		}
	}
	if a := s.Barrier(9, 0, 0, 12); len(a.Errors) != 1 {
		t.Error("group 12 accepted")
	}
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
	if !s.Ready() {
		t.Fatal("not ready")
	}
	return s
}

func TestTooManyRegistrationsRejected(t *testing.T) {
	s := newState(1, 1, 0)
	s.AddNode(t0, message.Empty, node(message.RoleServer, "h", 1))
	a := s.AddNode(t0, message.Empty, node(message.RoleServer, "h", 2))
	if len(a.Errors) != 1 || a.Ready {
		t.Fatalf("second server accepted: %+v", a)
	}
	if a := s.AddNode(t0, message.Empty, node(message.RoleScheduler, "h", 3)); len(a.Errors) != 1 {
		t.Fatal("scheduler registration accepted")
	}
}

func TestDeadNodesAndRecovery(t *testing.T) {
	s := ready(t, 2, 1) // servers 8 (port 6000), 10 (6001); worker 9 (6002)
	if d := s.DeadNodes(t0.Add(5*time.Second), 10*time.Second); len(d) != 0 {
		t.Fatalf("dead before timeout: %v", d)
	}
	s.Heartbeat(t0.Add(8*time.Second), 8)
	s.Heartbeat(t0.Add(8*time.Second), 9)
	now := t0.Add(15 * time.Second)
	if d := s.DeadNodes(now, 10*time.Second); !equal(d, []int32{10}) {
		t.Fatalf("dead = %v, want [10]", d)
	}
	// A worker restart with no dead worker waits (no error, nothing sent)
	// until a worker is dead.
	if a := s.AddNode(now, message.Empty, node(message.RoleWorker, "127.0.0.1", 7000)); len(a.Errors) != 0 || len(a.Send) != 0 || s.Waiting() != 1 {
		t.Fatalf("worker recovery without a dead worker: %+v", a)
	}
	// A restarted server takes over id 10.
	a := s.AddNode(now, message.Empty, node(message.RoleServer, "127.0.0.1", 7001))
	if len(a.Errors) != 0 || len(a.Connect) != 1 || a.Connect[0].ID != 10 || !a.Connect[0].IsRecovery {
		t.Fatalf("recovery actions: %+v", a)
	}
	// Full list to the recovered node, the one node to the others.
	got := nodesSentTo(a)
	if got[10] != 4 || got[8] != 1 || got[9] != 1 || len(got) != 3 {
		t.Fatalf("recovery sends %v", got)
	}
	if d := s.DeadNodes(now, 10*time.Second); len(d) != 0 {
		t.Fatalf("still dead after recovery: %v", d)
	}
}

// A node whose heartbeats are late when another node recovers still gets
// the new address: otherwise it would keep sending to the dead one, though
// it is alive (seen as a flaky postoffice.TestServerRecovery under load).
func TestRecoveryReachesNodesThatLookDead(t *testing.T) {
	s := ready(t, 2, 1) // servers 8 (port 6000), 10 (6001); worker 9 (6002)
	s.Heartbeat(t0.Add(8*time.Second), 8)
	now := t0.Add(15 * time.Second) // 10 and 9 have been silent for 15 s
	if d := s.DeadNodes(now, 10*time.Second); !equal(d, []int32{9, 10}) {
		t.Fatalf("dead = %v, want [9 10]", d)
	}
	a := s.AddNode(now, message.Empty, node(message.RoleServer, "127.0.0.1", 7001))
	if len(a.Connect) != 1 || a.Connect[0].ID != 10 {
		t.Fatalf("recovery actions: %+v", a)
	}
	got := nodesSentTo(a)
	if got[10] != 4 || got[8] != 1 || got[9] != 1 || len(got) != 3 {
		t.Fatalf("recovery sends %v, want the full list to 10 and the new node to 8 and to 9", got)
	}
}

// nodesSentTo maps each recipient of a's messages to the number of nodes
// its node list carries.
func nodesSentTo(a Actions) map[int32]int {
	got := map[int32]int{}
	for _, m := range a.Send {
		got[m.Meta.Recver] = len(m.Meta.Control.Nodes)
	}
	return got
}

func TestHeartbeatReply(t *testing.T) {
	s := ready(t, 1, 1)
	a := s.Heartbeat(t0, 9)
	if len(a.Send) != 1 || a.Send[0].Meta.Recver != 9 || a.Send[0].Meta.Control.Cmd != message.CmdHeartbeat ||
		a.Send[0].Meta.Control.Nodes[0].ID != 1 {
		t.Fatalf("heartbeat reply %+v", a)
	}
}

// A node restarted before the scheduler noticed the death is parked, then
// takes over the id on the first Tick after the timeout.
func TestQuickRestartWaitsForTimeout(t *testing.T) {
	s := ready(t, 1, 1) // server 8, worker 9, timeout 10s
	s.Heartbeat(t0.Add(9*time.Second), 9)
	a := s.AddNode(t0.Add(9*time.Second), message.Empty, node(message.RoleServer, "127.0.0.1", 8000))
	if len(a.Send) != 0 || s.Waiting() != 1 {
		t.Fatalf("restart before the timeout was not parked: %+v", a)
	}
	if a := s.Tick(t0.Add(9500 * time.Millisecond)); len(a.Send) != 0 {
		t.Fatalf("recovered before server 8 was dead: %+v", a)
	}
	a = s.Tick(t0.Add(11 * time.Second))
	if len(a.Connect) != 1 || a.Connect[0].ID != 8 || !a.Connect[0].IsRecovery || s.Waiting() != 0 {
		t.Fatalf("tick after timeout: %+v", a)
	}
}

func TestRestartWithoutHeartbeatsIsAnError(t *testing.T) {
	s := New(Config{NumServers: 1, NumWorkers: 1, Self: self()}, t0)
	s.AddNode(t0, message.Empty, node(message.RoleServer, "h", 1))
	s.AddNode(t0, message.Empty, node(message.RoleWorker, "h", 2))
	if a := s.AddNode(t0, message.Empty, node(message.RoleServer, "h", 3)); len(a.Errors) != 1 {
		t.Fatalf("want an error explaining the heartbeat settings, got %+v", a)
	}
}

// A repeated arrival of the same node and customer counts once: a node
// restarted after its predecessor reached the barrier must not release it
// before the others arrive.
func TestBarrierArrivalsAreASet(t *testing.T) {
	s := ready(t, 1, 1) // 8, 9
	s.Barrier(8, 0, 0, message.AllGroup)
	s.Barrier(8, 0, 0, message.AllGroup) // the replacement of 8
	if a := s.Barrier(1, 0, 0, message.AllGroup); len(a.Send) != 0 {
		t.Fatal("released without worker 9")
	}
	if a := s.Barrier(9, 0, 0, message.AllGroup); len(a.Send) != 3 {
		t.Fatalf("want 3 releases, got %d", len(a.Send))
	}
}

// A drained server that leaves no longer holds barriers up, is never dead,
// and a barrier it was the last one missing from is released at once.
func TestLeave(t *testing.T) {
	s := ready(t, 2, 1) // servers 8, 10; worker 9
	s.Barrier(8, 0, 0, message.AllGroup)
	s.Barrier(9, 0, 0, message.AllGroup)
	if a := s.Barrier(1, 0, 0, message.AllGroup); len(a.Send) != 0 {
		t.Fatal("released without server 10")
	}
	a := s.Leave(10)
	if len(a.Send) != 3 {
		t.Fatalf("leave of the last missing member: %d releases, want 3", len(a.Send))
	}
	for _, m := range a.Send {
		if m.Meta.Recver == 10 {
			t.Error("release sent to the node that left")
		}
	}
	if d := s.DeadNodes(t0.Add(time.Hour), time.Second); slices.Contains(d, 10) {
		t.Errorf("a node that left is reported dead: %v", d)
	}
	// next round needs only 8, 9 and the scheduler
	s.Barrier(8, 0, 0, message.AllGroup)
	s.Barrier(9, 0, 0, message.AllGroup)
	if a := s.Barrier(1, 0, 0, message.AllGroup); len(a.Send) != 3 {
		t.Fatalf("round after leave: %d releases, want 3", len(a.Send))
	}
}

// A standby server joins the running job with the next server id, gets the
// full node list, is announced to everyone, and takes part in no barrier.
func TestStandbyJoin(t *testing.T) {
	s := ready(t, 2, 1) // servers 8, 10; worker 9
	sb := node(message.RoleServer, "127.0.0.1", 9999)
	sb.Standby = true
	a := s.AddNode(t0, message.Empty, sb)
	if len(a.Connect) != 1 || a.Connect[0].ID != 12 {
		t.Fatalf("standby connect %+v", a.Connect)
	}
	got := nodesSentTo(a)
	if got[12] != 5 || got[8] != 1 || got[10] != 1 || got[9] != 1 {
		t.Fatalf("standby announcements %v", got)
	}
	if ids := s.Standbys(); len(ids) != 1 || ids[0] != 12 {
		t.Fatalf("standbys %v", ids)
	}
	// a standby is in no group: its barrier returns at once and counts for
	// nothing
	if a := s.Barrier(12, 0, 0, message.AllGroup); len(a.Send) != 1 || a.Send[0].Meta.Recver != 12 {
		t.Fatalf("standby barrier: %+v", a.Send)
	}
	for _, id := range []int32{8, 9, 10} {
		if a := s.Barrier(id, 0, 0, message.AllGroup); len(a.Send) != 0 {
			t.Fatal("released early: the standby must not count")
		}
	}
	if a := s.Barrier(1, 0, 0, message.AllGroup); len(a.Send) != 4 {
		t.Fatalf("want the 4 members released, got %d", len(a.Send))
	}
	// a worker cannot be a standby
	w := node(message.RoleWorker, "127.0.0.1", 9998)
	w.Standby = true
	if a := s.AddNode(t0, message.Empty, w); len(a.Errors) != 1 {
		t.Fatal("a standby worker was accepted")
	}
}

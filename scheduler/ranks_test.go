package scheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

func wanting(role message.Role, host string, port int32, rank int) message.Node {
	n := node(role, host, port)
	n.WantRank = message.WantRankOf(rank)
	return n
}

// register adds regs and returns the id each address got.
func register(t *testing.T, s *State, regs []message.Node) map[string]int32 {
	t.Helper()
	for i, n := range regs {
		a := s.AddNode(t0, message.Empty, n)
		require.Empty(t, a.Errors, "registration %d (%s)", i, n)
	}
	require.True(t, s.Ready())
	got := map[string]int32{}
	for _, n := range s.Nodes() {
		got[addrKey(n)] = n.ID
	}
	return got
}

// Nodes that ask for a rank get it, whatever the comparator says; the
// others fill the ranks left, in the comparator's order.
func TestWantedRanksFirst(t *testing.T) {
	s := newState(2, 3, 0)
	got := register(t, s, []message.Node{
		wanting(message.RoleWorker, "10.0.0.9", 7000, 2), // would be rank 0 by hostname
		node(message.RoleWorker, "10.0.0.2", 7001),
		wanting(message.RoleServer, "10.0.0.2", 6001, 0), // would be rank 1 by port
		node(message.RoleWorker, "10.0.0.3", 7000),
		node(message.RoleServer, "10.0.0.2", 6000),
	})
	assert.Equal(t, map[string]int32{
		"10.0.0.9:7000": int32(message.WorkerRankToID(2)),
		"10.0.0.3:7000": int32(message.WorkerRankToID(0)),
		"10.0.0.2:7001": int32(message.WorkerRankToID(1)),
		"10.0.0.2:6001": int32(message.ServerRankToID(0)),
		"10.0.0.2:6000": int32(message.ServerRankToID(1)),
		"10.0.0.1:9000": message.SchedulerID,
	}, got)
}

// A rank asked for twice, or beyond the job's count, is refused with an
// error naming it, and the job still completes with the right nodes.
func TestWantedRankRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		bad  message.Node
		want string
	}{
		{"duplicate", wanting(message.RoleWorker, "10.0.0.5", 7000, 1), "rank 1 is already taken by worker 10.0.0.2:7000"},
		{"out of range", wanting(message.RoleWorker, "10.0.0.5", 7000, 2), "asks for rank 2, but the job has 2 worker ranks (0 to 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newState(1, 2, 0)
			a := s.AddNode(t0, message.Empty, wanting(message.RoleWorker, "10.0.0.2", 7000, 1))
			require.Empty(t, a.Errors)
			a = s.AddNode(t0, message.Empty, tc.bad)
			require.Len(t, a.Errors, 1)
			assert.Contains(t, a.Errors[0].Error(), tc.want)
			assert.Equal(t, 1, s.Registered(message.RoleWorker), "the refused node must not count")
			got := register(t, s, []message.Node{
				node(message.RoleWorker, "10.0.0.3", 7000),
				node(message.RoleServer, "10.0.0.3", 6000),
			})
			assert.Equal(t, int32(message.WorkerRankToID(1)), got["10.0.0.2:7000"])
			assert.Equal(t, int32(message.WorkerRankToID(0)), got["10.0.0.3:7000"])
			assert.NotContains(t, got, addrKey(tc.bad))
		})
	}
}

// With instance groups every instance asks for rank*GroupSize+i and gets
// it; an instance that asks for none is refused.
func TestGroupRanks(t *testing.T) {
	s := New(Config{NumServers: 2 * 2, NumWorkers: 1 * 2, Self: self(), GroupSize: 2}, t0)
	a := s.AddNode(t0, message.Empty, node(message.RoleWorker, "10.0.0.7", 7000))
	require.Len(t, a.Errors, 1)
	assert.Contains(t, a.Errors[0].Error(), "DMLC_GROUP_SIZE=2 every instance must ask for its rank")
	var regs []message.Node
	for proc, host := range []string{"10.0.0.2", "10.0.0.3"} { // server processes
		for i := range 2 {
			regs = append(regs, wanting(message.RoleServer, host, int32(6000+i), proc*2+i))
		}
	}
	for i := range 2 {
		regs = append(regs, wanting(message.RoleWorker, "10.0.0.4", int32(7000+i), i))
	}
	got := register(t, s, regs)
	assert.Equal(t, int32(message.ServerRankToID(0)), got["10.0.0.2:6000"])
	assert.Equal(t, int32(message.ServerRankToID(1)), got["10.0.0.2:6001"])
	assert.Equal(t, int32(message.ServerRankToID(2)), got["10.0.0.3:6000"])
	assert.Equal(t, int32(message.ServerRankToID(3)), got["10.0.0.3:6001"])
	assert.Equal(t, int32(message.WorkerRankToID(1)), got["10.0.0.4:7001"])
}

// A group barrier completes with one request per process (the scheduler
// counting as one) and releases only the requesters; an instance barrier
// still waits for every instance.
func TestGroupBarrier(t *testing.T) {
	s := New(Config{NumServers: 2, NumWorkers: 4, Self: self(), GroupSize: 2}, t0)
	var regs []message.Node
	for i := range 2 {
		regs = append(regs, wanting(message.RoleServer, "10.0.0.2", int32(6000+i), i))
	}
	for i := range 4 {
		regs = append(regs, wanting(message.RoleWorker, "10.0.0.3", int32(7000+i), i))
	}
	register(t, s, regs)
	w0, w2, srv0 := int32(message.WorkerRankToID(0)), int32(message.WorkerRankToID(2)), int32(message.ServerRankToID(0))
	recvers := func(a Actions) []int32 {
		var out []int32
		for _, m := range a.Send {
			out = append(out, m.Meta.Recver)
		}
		return out
	}
	// group 7: 2 worker processes, 1 server process, the scheduler
	assert.Empty(t, recvers(s.Barrier(w0, 0, 0, message.AllGroup)))
	assert.Empty(t, recvers(s.Barrier(w0, 0, 0, message.AllGroup)), "a repeated request counts once")
	assert.Empty(t, recvers(s.Barrier(w2, 0, 0, message.AllGroup)))
	assert.Empty(t, recvers(s.Barrier(srv0, 0, 0, message.AllGroup)))
	assert.ElementsMatch(t, []int32{w0, w2, srv0, message.SchedulerID}, recvers(s.Barrier(message.SchedulerID, 0, 0, message.AllGroup)))
	// group 4: the two worker processes
	assert.Empty(t, recvers(s.Barrier(w0, 0, 0, message.WorkerGroup)))
	assert.ElementsMatch(t, []int32{w0, int32(message.WorkerRankToID(3))}, recvers(s.Barrier(int32(message.WorkerRankToID(3)), 0, 0, message.WorkerGroup)))
	// an instance barrier waits for all 4 worker instances
	for r := range 3 {
		assert.Empty(t, recvers(s.InstanceBarrier(int32(message.WorkerRankToID(r)), 0, 0, message.WorkerGroup)))
	}
	assert.Len(t, recvers(s.InstanceBarrier(int32(message.WorkerRankToID(3)), 0, 0, message.WorkerGroup)), 4)
}

func TestAssignRanksFillsGaps(t *testing.T) {
	nodes := []message.Node{
		node(message.RoleWorker, "a", 1), wanting(message.RoleWorker, "b", 1, 0),
		node(message.RoleWorker, "c", 1), wanting(message.RoleServer, "d", 1, 1), node(message.RoleServer, "e", 1),
	}
	assert.Equal(t, []int{1, 0, 2, 1, 0}, assignRanks(nodes))
}

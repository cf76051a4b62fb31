package postoffice_test

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/anyvan"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startJob starts a job of ns servers and nw workers (jobtest.Start), with
// mod, if set, changing every node's config.
func startJob(t *testing.T, ns, nw int, mod func(*postoffice.Config)) *jobtest.Job {
	t.Helper()
	return jobtest.Start(t, jobtest.Options{Servers: ns, Workers: nw, Configure: mod})
}

// deathTimeout is the heartbeat timeout of the tests that stop a node and
// wait for it to be declared dead: long enough that a live node on a
// loaded 2-core machine is never taken for dead, short enough that a
// stopped one is found within seconds.
const deathTimeout = 3 * time.Second

// deathHeartbeats makes a job's nodes heartbeat every 200 ms and count a
// node dead after deathTimeout of silence.
func deathHeartbeats(c *postoffice.Config) {
	c.HeartbeatInterval = 200 * time.Millisecond
	c.HeartbeatTimeout = deathTimeout
}

// The connection matrix of ps-lite's test_connection: ids follow the rank
// rules, every node knows its rank, and barriers on every group work.
func TestConnection(t *testing.T) {
	for _, sz := range [][2]int{{1, 1}, {2, 2}, {3, 2}, {1, 4}} {
		t.Run(fmt.Sprintf("%ds%dw", sz[0], sz[1]), func(t *testing.T) {
			j := startJob(t, sz[0], sz[1], nil)
			ids := map[int32]bool{}
			for i, p := range j.Servers {
				id := p.MyNode().ID
				require.Zero(t, id%2, "server %d id %d", i, id)
				ids[id] = true
			}
			for _, p := range j.Workers {
				require.Equal(t, int32(1), p.MyNode().ID%2)
				ids[p.MyNode().ID] = true
			}
			require.Len(t, ids, sz[0]+sz[1], "ids must be distinct")
			for r := range sz[0] {
				require.True(t, ids[int32(message.ServerRankToID(r))])
			}
			for r := range sz[1] {
				require.True(t, ids[int32(message.WorkerRankToID(r))])
			}
			jobtest.Barrier(t, j.All(), message.AllGroup)
			jobtest.Barrier(t, j.Workers, message.WorkerGroup)
			jobtest.Barrier(t, append([]*postoffice.Postoffice{j.Scheduler}, j.Servers...), message.SchedulerGroup|message.ServerGroup)
			jobtest.Barrier(t, j.All(), message.AllGroup) // a second round reuses the counters
			for _, p := range j.All() {
				require.NoError(t, p.Finalize(0, false))
			}
		})
	}
}

func TestBarrierRejectsForeignGroup(t *testing.T) {
	j := startJob(t, 2, 1, nil)
	err := j.Workers[0].Barrier(0, message.ServerGroup)
	require.ErrorContains(t, err, "cannot join a barrier on group 2")
}

// Heartbeats keep nodes alive; a node that stops sending is reported dead
// by the scheduler after the timeout, and the scheduler is alive to nodes.
func TestHeartbeatsAndDeadNodes(t *testing.T) {
	t.Parallel() // waits on heartbeat and resend timers, not the CPU
	j := startJob(t, 2, 1, deathHeartbeats)
	time.Sleep(deathTimeout + time.Second) // longer than the timeout: only heartbeats keep them alive
	require.Empty(t, j.Scheduler.DeadNodes(deathTimeout), "no node is dead while heartbeating")
	require.Empty(t, j.Workers[0].DeadNodes(deathTimeout), "scheduler answers heartbeats")
	dead := j.Servers[1].MyNode().ID
	j.Servers[1].Stop()
	require.Eventually(t, func() bool {
		d := j.Scheduler.DeadNodes(deathTimeout)
		return len(d) == 1 && d[0] == dead
	}, 20*time.Second, 50*time.Millisecond)
	require.Empty(t, j.Scheduler.DeadNodes(0), "timeout 0 means never dead")
}

// A garbage frame at a node's port is rejected and counted; the node keeps
// serving barriers.
func TestGarbageFrameRejected(t *testing.T) {
	if anyvan.TestKind() != "zmq" {
		t.Skip("sends raw ZeroMQ frames; van/vantest covers malformed input for every van")
	}
	j := startJob(t, 1, 1, nil)
	srv := j.Servers[0].MyNode()
	// raw TCP garbage (not even ZMTP)
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", srv.Port))
	require.NoError(t, err)
	_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n\x00\xff\xfe"))
	c.Close()
	// a real ZeroMQ peer sending a malformed meta
	tr, err := anyvan.Open("zmq", van.Options{Logger: jobtest.Logger()})
	require.NoError(t, err)
	defer tr.Close()
	require.NoError(t, tr.Connect(srv, 77))
	before := j.Servers[0].Stats().Malformed.Load()
	bad := &message.Message{Meta: message.NewMeta()}
	bad.Meta.Recver = srv.ID
	bad.Meta.AppID = 0
	bad.Meta.DataType = []message.DataType{message.Uint64, message.Float}
	bad.Data = [][]byte{make([]byte, 8), make([]byte, 4)}
	_, err = tr.Send(bad) // valid
	require.NoError(t, err)
	raw, err := rawDealer(srv)
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.SendMessage([]byte{0x08, 0xff, 0xff}) // truncated varint
	require.NoError(t, err)
	require.Eventually(t, func() bool { return j.Servers[0].Stats().Malformed.Load() > before }, 5*time.Second, 20*time.Millisecond)
	jobtest.Barrier(t, j.All(), message.AllGroup)
}

// A server that dies is replaced by a new process: it takes the old id with
// IsRecovery, the worker learns its new address and reaches it, and the
// job's final barrier completes.
func TestServerRecovery(t *testing.T) {
	t.Parallel() // waits on heartbeat and resend timers, not the CPU
	j := startJob(t, 2, 1, deathHeartbeats)
	old := j.Servers[1].MyNode()
	j.Servers[1].Stop()
	// restart at once: the scheduler parks it until the old one times out
	repl := j.NewNode(message.RoleServer, nil)
	require.NoError(t, repl.Start(0))
	me := repl.MyNode()
	require.Equal(t, old.ID, me.ID)
	require.True(t, repl.IsRecovery())
	require.NotEqual(t, old.Port, me.Port)
	// the worker can reach the recovered server: a barrier on servers and
	// workers and the scheduler involves every node's connections to the
	// scheduler; a direct data message checks worker -> new server.
	got := make(chan *message.Message, 1)
	require.NoError(t, repl.AddCustomer(0, 0, acceptFunc(func(m *message.Message) { got <- m })))
	require.Eventually(t, func() bool {
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.AppID, m.Meta.CustomerID, m.Meta.Recver, m.Meta.Request = 0, 0, me.ID, true
		_, err := j.Workers[0].Send(m)
		if err != nil {
			return false
		}
		select {
		case r := <-got:
			return r.Meta.Sender == j.Workers[0].MyNode().ID
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}, 10*time.Second, 10*time.Millisecond)
	jobtest.Barrier(t, []*postoffice.Postoffice{j.Scheduler, j.Servers[0], repl, j.Workers[0]}, message.AllGroup)
}

type acceptFunc func(*message.Message)

func (f acceptFunc) Accept(m *message.Message) { f(m) }

// With membership gossip and no heartbeats, a killed server is known dead
// within seconds and a restarted process takes over its id.
func TestGossipFailureDetection(t *testing.T) {
	gossip := porttest.Free(t)
	j := startJob(t, 2, 1, func(c *postoffice.Config) { c.GossipPort = gossip })
	sched, s1 := j.Scheduler, j.Servers[1]
	require.Eventually(t, func() bool { return sched.GossipMembers() == 3 },
		10*time.Second, 20*time.Millisecond, "both servers joined the gossip")
	victim := s1.MyNode()
	// An abrupt death: shut the gossip member down without leaving, then
	// the node's sockets.
	s1.KillGossip()
	s1.Stop()
	require.Eventually(t, func() bool {
		d := sched.DeadNodes(time.Hour) // far below the timeout: only gossip can say so
		return len(d) == 1 && d[0] == victim.ID
	}, 20*time.Second, 50*time.Millisecond)
	repl := j.NewNode(message.RoleServer, nil)
	require.NoError(t, repl.Start(0))
	require.Equal(t, victim.ID, repl.MyNode().ID)
	require.True(t, repl.IsRecovery())
	require.Empty(t, sched.DeadNodes(time.Hour))
}

// TestShareHostCPUsInJob checks that a node that may share lowers
// GOMAXPROCS once it has the scheduler's node list: a worker of a 1x1 job
// on 127.0.0.1 shares the host with the server and the scheduler.
func TestShareHostCPUsInJob(t *testing.T) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		t.Skip("GOMAXPROCS is set: nodes leave it as it is")
	}
	before := runtime.GOMAXPROCS(6)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	j := startJob(t, 1, 1, func(c *postoffice.Config) {
		if c.Role == message.RoleWorker {
			c.ShareHostCPUs = true
			c.VanType = "tcp"
		}
	})
	assert.Equal(t, postoffice.SharedProcs(6, 3, 1), runtime.GOMAXPROCS(0), "GOMAXPROCS after the job started (6 shared by 3 nodes)")
	w := j.Workers[0]
	assert.True(t, w.HostCPUsLowered(), "the worker lowered GOMAXPROCS")
	assert.False(t, j.Servers[0].HostCPUsLowered(), "the server (ShareHostCPUs off) lowered nothing")

	// Restoring gives back what the runtime had, once, and for good: a
	// later node list does not lower it again.
	w.RestoreHostCPUs("test")
	assert.Equal(t, 6, runtime.GOMAXPROCS(0), "GOMAXPROCS after RestoreHostCPUs")
	assert.False(t, w.HostCPUsLowered())
	runtime.GOMAXPROCS(5)
	w.RestoreHostCPUs("test")
	assert.Equal(t, 5, runtime.GOMAXPROCS(0), "a second RestoreHostCPUs changed GOMAXPROCS")
	me := message.Node{Hostname: "127.0.0.1", Port: 1, Role: message.RoleWorker}
	w.ShareHostCPUs(me, []message.Node{me, {Hostname: "127.0.0.1", Port: 2, Role: message.RoleServer}})
	assert.Equal(t, 5, runtime.GOMAXPROCS(0), "GOMAXPROCS lowered again after RestoreHostCPUs")
}

package postoffice

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/anyvan"
	"github.com/stretchr/testify/require"
)

// testJob is a whole job (scheduler, servers, workers) inside one process,
// over real ZeroMQ sockets on loopback.
type testJob struct {
	sched   *Postoffice
	servers []*Postoffice
	workers []*Postoffice
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newNode(t *testing.T, role message.Role, ns, nw, port int, mod func(*Config)) *Postoffice {
	t.Helper()
	cfg := Config{Role: role, NumServers: ns, NumWorkers: nw, SchedulerHost: "127.0.0.1", SchedulerPort: port,
		NodeHost: "127.0.0.1", Logger: quietLogger()}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := anyvan.FromTestEnv(cfg.Logger)
	require.NoError(t, err)
	p, err := New(cfg, tr)
	require.NoError(t, err)
	t.Cleanup(p.Stop)
	return p
}

// startJob starts every node's customer 0 concurrently and waits. The
// scheduler's port is picked free and bound a moment later; when another
// test's node took it in between (seen under go test ./..., which runs
// packages at once), the job is started again on another port.
func startJob(t *testing.T, ns, nw int, mod func(*Config)) *testJob {
	t.Helper()
	return porttest.StartRetrying(t, func() (*testJob, error) { return tryStartJob(t, ns, nw, mod) }, func(j *testJob) {
		for _, p := range j.all() {
			p.Stop()
		}
	})
}

func tryStartJob(t *testing.T, ns, nw int, mod func(*Config)) (*testJob, error) {
	t.Helper()
	port := porttest.Free(t)
	j := &testJob{sched: newNode(t, message.RoleScheduler, ns, nw, port, mod)}
	for range ns {
		j.servers = append(j.servers, newNode(t, message.RoleServer, ns, nw, port, mod))
	}
	for range nw {
		j.workers = append(j.workers, newNode(t, message.RoleWorker, ns, nw, port, mod))
	}
	errs := make(chan error, 1+ns+nw)
	for _, p := range j.all() {
		go func() { errs <- p.Start(0) }()
	}
	for range j.all() {
		select {
		case err := <-errs:
			if err != nil {
				return j, err
			}
		case <-time.After(20 * time.Second):
			t.Fatal("job did not start within 20s")
		}
	}
	return j, nil
}

func (j *testJob) all() []*Postoffice {
	out := []*Postoffice{j.sched}
	out = append(out, j.servers...)
	return append(out, j.workers...)
}

// barrierAll runs Barrier(0, group) on every member concurrently.
func barrierAll(t *testing.T, nodes []*Postoffice, group int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, p := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- p.Barrier(0, group) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("barrier on group %d did not complete", group)
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// The connection matrix of ps-lite's test_connection: ids follow the rank
// rules, every node knows its rank, and barriers on every group work.
func TestConnection(t *testing.T) {
	for _, sz := range [][2]int{{1, 1}, {2, 2}, {3, 2}, {1, 4}} {
		t.Run(fmt.Sprintf("%ds%dw", sz[0], sz[1]), func(t *testing.T) {
			j := startJob(t, sz[0], sz[1], nil)
			ids := map[int32]bool{}
			for i, p := range j.servers {
				id := p.MyNode().ID
				require.Zero(t, id%2, "server %d id %d", i, id)
				ids[id] = true
			}
			for _, p := range j.workers {
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
			barrierAll(t, j.all(), message.AllGroup)
			barrierAll(t, j.workers, message.WorkerGroup)
			barrierAll(t, append([]*Postoffice{j.sched}, j.servers...), message.SchedulerGroup|message.ServerGroup)
			barrierAll(t, j.all(), message.AllGroup) // a second round reuses the counters
			for _, p := range j.all() {
				require.NoError(t, p.Finalize(0, false))
			}
		})
	}
}

func TestBarrierRejectsForeignGroup(t *testing.T) {
	j := startJob(t, 2, 1, nil)
	err := j.workers[0].Barrier(0, message.ServerGroup)
	require.ErrorContains(t, err, "cannot join a barrier on group 2")
}

// Heartbeats keep nodes alive; a node that stops sending is reported dead
// by the scheduler after the timeout, and the scheduler is alive to nodes.
func TestHeartbeatsAndDeadNodes(t *testing.T) {
	j := startJob(t, 2, 1, func(c *Config) {
		c.HeartbeatInterval = 100 * time.Millisecond
		c.HeartbeatTimeout = 600 * time.Millisecond
	})
	time.Sleep(900 * time.Millisecond)
	require.Empty(t, j.sched.DeadNodes(600*time.Millisecond), "no node is dead while heartbeating")
	require.Empty(t, j.workers[0].DeadNodes(600*time.Millisecond), "scheduler answers heartbeats")
	dead := j.servers[1].MyNode().ID
	j.servers[1].Stop()
	require.Eventually(t, func() bool {
		d := j.sched.DeadNodes(600 * time.Millisecond)
		return len(d) == 1 && d[0] == dead
	}, 10*time.Second, 50*time.Millisecond)
	require.Empty(t, j.sched.DeadNodes(0), "timeout 0 means never dead")
}

// A garbage frame at a node's port is rejected and counted; the node keeps
// serving barriers.
func TestGarbageFrameRejected(t *testing.T) {
	if anyvan.TestKind() != "zmq" {
		t.Skip("sends raw ZeroMQ frames; van/vantest covers malformed input for every van")
	}
	j := startJob(t, 1, 1, nil)
	srv := j.servers[0].MyNode()
	// raw TCP garbage (not even ZMTP)
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", srv.Port))
	require.NoError(t, err)
	_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n\x00\xff\xfe"))
	c.Close()
	// a real ZeroMQ peer sending a malformed meta
	tr, err := anyvan.Open("zmq", van.Options{Logger: quietLogger()})
	require.NoError(t, err)
	defer tr.Close()
	require.NoError(t, tr.Connect(srv, 77))
	before := j.servers[0].Stats().Malformed.Load()
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
	require.Eventually(t, func() bool { return j.servers[0].Stats().Malformed.Load() > before }, 5*time.Second, 20*time.Millisecond)
	barrierAll(t, j.all(), message.AllGroup)
}

// A server that dies is replaced by a new process: it takes the old id with
// IsRecovery, the worker learns its new address and reaches it, and the
// job's final barrier completes.
func TestServerRecovery(t *testing.T) {
	hb := func(c *Config) {
		c.HeartbeatInterval = 100 * time.Millisecond
		c.HeartbeatTimeout = 500 * time.Millisecond
	}
	j := startJob(t, 2, 1, hb)
	port := int(j.sched.MyNode().Port)
	old := j.servers[1].MyNode()
	j.servers[1].Stop()
	// restart at once: the scheduler parks it until the old one times out
	repl := newNode(t, message.RoleServer, 2, 1, port, hb)
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
		_, err := j.workers[0].Send(m)
		if err != nil {
			return false
		}
		select {
		case r := <-got:
			return r.Meta.Sender == j.workers[0].MyNode().ID
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}, 10*time.Second, 10*time.Millisecond)
	barrierAll(t, []*Postoffice{j.sched, j.servers[0], repl, j.workers[0]}, message.AllGroup)
}

type acceptFunc func(*message.Message)

func (f acceptFunc) Accept(m *message.Message) { f(m) }

// With membership gossip and no heartbeats, a killed server is known dead
// within seconds and a restarted process takes over its id.
func TestGossipFailureDetection(t *testing.T) {
	var gossip int
	gp := func(c *Config) { c.GossipPort = gossip }
	port := porttest.Free(t)
	gossip = porttest.Free(t)
	sched := newNode(t, message.RoleScheduler, 2, 1, port, gp)
	s0 := newNode(t, message.RoleServer, 2, 1, port, gp)
	s1 := newNode(t, message.RoleServer, 2, 1, port, gp)
	w := newNode(t, message.RoleWorker, 2, 1, port, gp)
	errs := make(chan error, 4)
	for _, p := range []*Postoffice{sched, s0, s1, w} {
		go func() { errs <- p.Start(0) }()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
	require.Eventually(t, func() bool {
		sched.memberMu.Lock()
		defer sched.memberMu.Unlock()
		return sched.member != nil && len(sched.member.Members()) == 3
	}, 10*time.Second, 20*time.Millisecond, "both servers joined the gossip")
	victim := s1.MyNode()
	// An abrupt death: shut the gossip member down without leaving, then
	// the node's sockets.
	s1.memberMu.Lock()
	_ = s1.member.Shutdown()
	s1.member = nil
	s1.memberMu.Unlock()
	s1.Stop()
	require.Eventually(t, func() bool {
		d := sched.DeadNodes(time.Hour) // far below the timeout: only gossip can say so
		return len(d) == 1 && d[0] == victim.ID
	}, 20*time.Second, 50*time.Millisecond)
	repl := newNode(t, message.RoleServer, 2, 1, port, gp)
	require.NoError(t, repl.Start(0))
	require.Equal(t, victim.ID, repl.MyNode().ID)
	require.True(t, repl.IsRecovery())
	require.Empty(t, sched.DeadNodes(time.Hour))
}

package postoffice

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordingTransport records what the scheduler does on the network, in
// order, and delivers only the TERMINATE a node sends itself on Stop.
type recordingTransport struct {
	mu     sync.Mutex
	ops    []string
	inbox  chan *message.Message
	closed chan struct{}
	once   sync.Once
}

func newRecordingTransport() *recordingTransport {
	return &recordingTransport{inbox: make(chan *message.Message, 1), closed: make(chan struct{})}
}

func (t *recordingTransport) record(op string) {
	t.mu.Lock()
	t.ops = append(t.ops, op)
	t.mu.Unlock()
}

// take returns the operations recorded since the last take.
func (t *recordingTransport) take() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ops := t.ops
	t.ops = nil
	return ops
}

func (t *recordingTransport) Bind(n message.Node, _ int) (int, error) { return int(n.Port), nil }

func (t *recordingTransport) Connect(n message.Node, _ int32) error {
	t.record(fmt.Sprintf("connect %d", n.ID))
	return nil
}

func (t *recordingTransport) Send(m *message.Message) (int, error) {
	if m.Meta.Control.Cmd == message.CmdTerminate {
		t.inbox <- m
		return 0, nil
	}
	t.record(fmt.Sprintf("send %s to %d", m.Meta.Control.Cmd, m.Meta.Recver))
	return 0, nil
}

func (t *recordingTransport) Recv() (*message.Message, error) {
	select {
	case m := <-t.inbox:
		return m, nil
	case <-t.closed:
		return nil, van.ErrClosed
	}
}

func (t *recordingTransport) Release(*message.Message) {}
func (t *recordingTransport) Detach(*message.Message)  {}

func (t *recordingTransport) Close() error {
	t.once.Do(func() { close(t.closed) })
	return nil
}

// within runs f and fails the test if f does not return in 5 s: the
// driver's callers must never block on a driver that does not run.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	testutil.Within(t, 5*time.Second, func() bool { f(); return true }, func() string { return what + " blocked" })
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func registration(role message.Role, port int32) *message.Message {
	n := message.NewNode(role)
	n.Hostname, n.Port = "10.0.0.1", port
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Control.Cmd = message.CmdAddNode
	m.Meta.Control.Nodes = []message.Node{n}
	return m
}

func barrierRequest(from int32) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Sender = from
	m.Meta.Request = true
	m.Meta.AppID, m.Meta.CustomerID = 0, 0
	m.Meta.Control.Cmd = message.CmdBarrier
	m.Meta.Control.BarrierGroup = message.AllGroup
	return m
}

// The scheduler's driver handles each control request, and carries out its
// actions (connect, then send), before the receive loop goes on; its
// queries answer from the state, and return at once, without an answer,
// before Start and after Stop.
func TestSchedulerDriver(t *testing.T) {
	tr := newRecordingTransport()
	p, err := New(Config{Role: message.RoleScheduler, NumServers: 1, NumWorkers: 1,
		SchedulerHost: "127.0.0.1", SchedulerPort: 9000, Logger: quietLogger()}, tr)
	require.NoError(t, err)
	t.Cleanup(p.Stop)
	server, worker := int32(message.ServerRankToID(0)), int32(message.WorkerRankToID(0))

	within(t, "queries before Start", func() {
		assert.False(t, p.HasLeft(server))
		assert.Nil(t, p.Standbys())
		assert.Equal(t, []int32{server}, p.Members(message.ServerGroup))
		assert.Nil(t, p.DeadNodes(time.Hour))
		assert.Error(t, p.Leave(server))
		assert.NotErrorIs(t, p.Leave(server), ErrStopped)
	})

	require.NoError(t, p.startOnce())
	assert.Equal(t, []string{"connect 1"}, tr.take(), "the scheduler connects to itself")

	p.handle(registration(message.RoleServer, 7000))
	assert.Empty(t, tr.take(), "one of two nodes registered: nothing to do yet")
	require.False(t, p.isReady())
	p.handle(registration(message.RoleWorker, 7001))
	assert.Equal(t, []string{
		"connect " + fmt.Sprint(server), "connect " + fmt.Sprint(worker),
		"send ADD_NODE to " + fmt.Sprint(worker), "send ADD_NODE to " + fmt.Sprint(server),
	}, tr.take(), "the registration that completes the job is carried out when handle returns")
	assert.True(t, p.isReady())

	for _, id := range []int32{server, worker} {
		p.handle(barrierRequest(id))
		assert.Empty(t, tr.take(), "barrier of node %d: not everyone has arrived", id)
	}
	p.handle(barrierRequest(message.SchedulerID))
	assert.ElementsMatch(t, []string{
		"send BARRIER to " + fmt.Sprint(server), "send BARRIER to " + fmt.Sprint(worker), "send BARRIER to 1",
	}, tr.take())

	assert.Equal(t, []int32{worker}, p.Members(message.WorkerGroup))
	assert.Empty(t, p.DeadNodes(time.Hour))
	require.NoError(t, p.Leave(server))
	assert.Equal(t, []string{"send CMD(65) to " + fmt.Sprint(worker)}, tr.take(), "the worker is told the server left (scheduler.CmdNodeLeft)")
	assert.True(t, p.HasLeft(server))
	assert.Empty(t, p.Members(message.ServerGroup), "a server that left is no member")

	within(t, "Stop", p.Stop)
	within(t, "queries after Stop", func() {
		assert.False(t, p.HasLeft(server))
		assert.Nil(t, p.Standbys())
		assert.Equal(t, []int32{server}, p.Members(message.ServerGroup))
		assert.ErrorIs(t, p.Leave(worker), ErrStopped)
		p.handle(barrierRequest(worker)) // dropped
	})
	assert.Empty(t, tr.take())
}

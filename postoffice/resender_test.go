package postoffice

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/anyvan"
)

// newTestResender returns the resender of a worker node that is never
// started (its ACKs go nowhere), with id id, and its monitor stopped: the
// tests step it by hand.
func newTestResender(t *testing.T, id int32) *resender {
	t.Helper()
	cfg := Config{Role: message.RoleWorker, NumServers: 1, NumWorkers: 1, SchedulerHost: "127.0.0.1", SchedulerPort: 1, NodeHost: "127.0.0.1",
		Logger: slog.New(slog.DiscardHandler)}
	tr, err := anyvan.FromTestEnv(cfg.logger())
	require.NoError(t, err)
	p, err := New(cfg, tr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	p.myID.Store(id)
	r := newResender(p, 10*time.Millisecond, 3)
	r.stop()
	p.resender = r
	return r
}

func msg(sender, recver int32, cmd message.Command, ts int32, request bool) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Sender, m.Meta.Recver = sender, recver
	m.Meta.Control.Cmd = cmd
	m.Meta.Timestamp = ts
	m.Meta.Request = request
	return m
}

func anonRegistration(host string, port int32) *message.Message {
	m := msg(message.Empty, message.SchedulerID, message.CmdAddNode, 0, false)
	n := message.NewNode(message.RoleWorker)
	n.Hostname, n.Port, n.CustomerID = host, port, 0
	m.Meta.Control.Nodes = []message.Node{n}
	return m
}

// The signature tells apart what ps-lite's 8-bit packing confused: two
// customers of one app, ids 256 apart, a control message and a data
// message with the same timestamp.
func TestSignatureDistinguishes(t *testing.T) {
	base := msg(9, 8, message.CmdEmpty, 5, true).Meta
	same := base
	assert.Equal(t, signature(&base), signature(&same))
	for name, change := range map[string]func(*message.Meta){
		"customer":   func(m *message.Meta) { m.CustomerID = 1 },
		"app":        func(m *message.Meta) { m.AppID = 1 },
		"sender+256": func(m *message.Meta) { m.Sender += 256 },
		"recver+256": func(m *message.Meta) { m.Recver += 256 },
		"timestamp":  func(m *message.Meta) { m.Timestamp = 6 },
		"response":   func(m *message.Meta) { m.Request = false },
		"command":    func(m *message.Meta) { m.Control.Cmd = message.CmdBarrier },
	} {
		m := base
		change(&m)
		assert.NotEqual(t, signature(&base), signature(&m), name)
	}
}

// An ACK removes what it acknowledges; heartbeats, TERMINATE and ACKs are
// not kept, nor acknowledged.
func TestResenderAckAndUntracked(t *testing.T) {
	r := newTestResender(t, 9)
	b := msg(9, message.SchedulerID, message.CmdBarrier, 0, true)
	sig, kept := r.addOutgoing(b)
	require.True(t, kept)
	for _, cmd := range []message.Command{message.CmdHeartbeat, message.CmdTerminate, message.CmdAck} {
		_, kept := r.addOutgoing(msg(9, message.SchedulerID, cmd, 1, true))
		assert.False(t, kept, cmd.String())
		if cmd != message.CmdAck {
			assert.False(t, r.addIncoming(msg(message.SchedulerID, 9, cmd, 1, false)), cmd.String())
		}
	}
	require.Len(t, r.pending, 1)
	ack := msg(message.SchedulerID, 9, message.CmdAck, 0, false)
	ack.Meta.Control.MsgSig = sig
	assert.True(t, r.addIncoming(ack), "an ACK is never processed further")
	assert.Empty(t, r.pending)
	assert.Empty(t, r.seen, "heartbeats are not recorded")
}

// A control message whose ACK was lost comes again: the second copy is
// dropped (acknowledged again), for every control command.
func TestResenderDuplicateControl(t *testing.T) {
	r := newTestResender(t, message.SchedulerID)
	for i, cmd := range []message.Command{message.CmdAddNode, message.CmdBarrier, message.Command(100)} {
		m := msg(9, message.SchedulerID, cmd, int32(i), true)
		assert.False(t, r.addIncoming(m), "first %s", cmd)
		assert.True(t, r.addIncoming(m), "duplicate %s", cmd)
	}
}

// An anonymous registration gets a nonce timestamp, so that a process
// restarted at the same address is not a duplicate of its predecessor;
// its own resends are duplicates. It is never given up, and once the node
// has its id it is answered and never resent.
func TestResenderAnonymousRegistration(t *testing.T) {
	sched := newTestResender(t, message.SchedulerID)
	node := newTestResender(t, message.Empty)
	first, second := anonRegistration("h", 7), anonRegistration("h", 7)
	node.addOutgoing(first)
	node.addOutgoing(second)
	require.NotEqual(t, first.Meta.Timestamp, second.Meta.Timestamp, "nonces")
	assert.False(t, sched.addIncoming(first))
	assert.True(t, sched.addIncoming(first), "a resend of the same registration")
	assert.False(t, sched.addIncoming(second), "a new process at the same address")
	other := anonRegistration("h", 8)
	other.Meta.Timestamp = first.Meta.Timestamp
	assert.False(t, sched.addIncoming(other), "another node with the same nonce")

	data := msg(message.Empty, 8, message.CmdEmpty, 3, true)
	node.addOutgoing(data)
	node.mu.Lock()
	for _, o := range node.pending {
		o.retries, o.sent = node.maxRetry, time.Now().Add(-time.Hour)
	}
	node.mu.Unlock()
	node.resendDue(time.Now())
	assert.Len(t, node.pending, 3, "anonymous messages are never given up")
	assert.Zero(t, node.gaveUp.Load())

	node.p.myID.Store(9)
	list := msg(message.SchedulerID, message.Empty, message.CmdAddNode, 4, false)
	node.registered(list)
	assert.Empty(t, node.pending, "the node list answers every anonymous message")
	// The node list is recorded as its sender computed it: to id 9.
	list.Meta.Recver = 9
	assert.True(t, node.addIncoming(list), "a resent node list is a duplicate")
}

// After maxRetry resends a message to a registered node is given up.
func TestResenderGivesUp(t *testing.T) {
	r := newTestResender(t, 9)
	r.addOutgoing(msg(9, 8, message.CmdEmpty, 1, true))
	now := time.Now()
	for i := range r.maxRetry + 1 {
		r.resendDue(now.Add(time.Duration(i+2) * r.timeout))
	}
	assert.Empty(t, r.pending)
	assert.Equal(t, int64(1), r.gaveUp.Load())
}

// A restarted process counts timestamps from 0 again: once the node knows
// of the recovery, the new process's messages are no duplicates, and what
// was kept for its predecessor is dropped.
func TestResenderForgetsRecoveredPeer(t *testing.T) {
	r := newTestResender(t, 9)
	old := msg(8, 9, message.CmdEmpty, 0, false)
	require.False(t, r.addIncoming(old))
	require.False(t, r.addIncoming(msg(10, 9, message.CmdEmpty, 0, false)))
	r.addOutgoing(msg(9, 8, message.CmdEmpty, 1, true))
	r.addOutgoing(msg(9, 10, message.CmdEmpty, 1, true))
	n := message.NewNode(message.RoleServer)
	n.ID, n.IsRecovery = 8, true
	r.p.nodeRecovered(n)
	assert.False(t, r.addIncoming(msg(8, 9, message.CmdEmpty, 0, false)), "the new process's first message")
	assert.True(t, r.addIncoming(msg(10, 9, message.CmdEmpty, 0, false)), "other senders are remembered")
	require.Len(t, r.pending, 1)
	for _, o := range r.pending {
		assert.Equal(t, int32(10), o.msg.Meta.Recver)
	}
}

// The record of received signatures forgets an entry once its sender can
// no longer resend it (the horizon after its last receipt), and never
// holds more than maxSeen.
func TestResenderSeenIsPruned(t *testing.T) {
	r := newTestResender(t, 9)
	t0 := time.Now()
	m := msg(8, 9, message.CmdEmpty, 0, true)
	for i := range 1000 {
		r.record(seenKey{8, uint64(i)}, m, t0)
	}
	r.record(seenKey{8, 0}, m, t0.Add(r.horizon/2)) // a resend refreshes it
	r.mu.Lock()
	r.pruneLocked(t0.Add(r.horizon))
	r.mu.Unlock()
	assert.Len(t, r.seen, 1, "only the refreshed entry is left")
	assert.Len(t, r.order[r.head:], 1)
	assert.LessOrEqual(t, len(r.order), 2, "the queue is compacted")
	assert.True(t, r.record(seenKey{8, 0}, m, t0.Add(r.horizon)))

	r.maxSeen = 100
	for i := range 1000 {
		r.record(seenKey{8, uint64(1000 + i)}, m, t0.Add(r.horizon))
	}
	assert.Len(t, r.seen, 100)
	assert.LessOrEqual(t, len(r.order)-r.head, 101)
	assert.True(t, r.record(seenKey{8, 1999}, m, t0.Add(r.horizon)), "the newest are kept")
}

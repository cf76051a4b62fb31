//go:build rdma && cgo

package rdma

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/vantest"
)

// A peer that writes a message and then goes away (Close after a final
// barrier release, or a link retired by Connect) closes its bootstrap
// connection right after the write completed on its side. The receiver may
// notice the closed connection before its completion queue yields the
// write: the message must still be delivered, not rejected as a write into
// a freed slot.
func TestWriteCompletionAfterPeerClosed(t *testing.T) {
	recver := newNode(t, fabricConfig(), message.RoleWorker, workerID)
	sender, err := New(fabricConfig())
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			sender.Close()
		}
	})
	require.NoError(t, sender.Connect(recver.node, schedulerID))

	// Warm up: the link is established and works.
	_, err = sender.Send(controlMsg(workerID, message.CmdAddNode))
	require.NoError(t, err)
	m := vantest.MustRecv(t, recver.Transport)
	require.Equal(t, int32(schedulerID), m.Meta.Sender)

	// Hold the receiver's progress goroutine right after it granted the
	// slot of the next rendezvous, so the write's completion waits in its
	// queue while the sender goes away.
	paused, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(evs []event) {
		for i := range evs {
			if evs[i].kind != evRecv {
				continue
			}
			if c, err := parseCtrl(evs[i].data[:]); err == nil && c.typ == ctrlStart {
				once.Do(func() {
					close(paused)
					<-release
				})
			}
		}
	}
	recver.afterBatch.Store(&hook)
	defer once.Do(func() {}) // no-op if the hook fired
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	msg := controlMsg(workerID, message.CmdBarrier)
	msg.Meta.Timestamp = 77
	_, err = sender.Send(msg)
	require.NoError(t, err)
	testutil.Recv(t, paused, recvTimeout, func() string { return "the receiver never answered the rendezvous" })
	// The write completed on the sender's side: its image is in flight to
	// (or already queued at) the receiver.
	require.Eventually(t, func() bool {
		sender.mu.Lock()
		defer sender.mu.Unlock()
		return len(sender.freeOps) == maxOps
	}, recvTimeout, time.Millisecond)
	require.NoError(t, sender.Close())
	closed = true

	// Wait until the receiver's bootstrap watcher saw the link close.
	require.Eventually(t, func() bool {
		recver.mu.Lock()
		defer recver.mu.Unlock()
		for _, l := range recver.links {
			if !l.out && l.peer == schedulerID && !l.peerGone {
				return false
			}
		}
		return true
	}, recvTimeout, time.Millisecond)
	recver.afterBatch.Store(nil)
	released = true
	close(release)

	m, err = vantest.RecvWithin(t, recver.Transport)
	require.NoError(t, err, "the message written before the peer closed was rejected")
	require.Equal(t, message.CmdBarrier, m.Meta.Control.Cmd)
	require.Equal(t, int32(77), m.Meta.Timestamp)
	require.Equal(t, int32(schedulerID), m.Meta.Sender)
	require.Zero(t, recver.Stats().BadWrites.Load())
}

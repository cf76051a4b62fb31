//go:build cgo

package zmq

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/vantest"
)

// TestAfterSent checks that AfterSent's function runs only once libzmq has
// released the zero-copy frames it waits for, and at once for memory that
// is not in flight (copied frames, or nothing sent).
func TestAfterSent(t *testing.T) {
	server := newNode(t, Config{}, message.RoleServer, serverID)
	worker := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))

	var idle atomic.Int32
	AfterSent(func() { idle.Add(1) }, make([]byte, 1<<20))
	require.EqualValues(t, 1, idle.Load(), "nothing in flight: runs at once")

	small := make([]byte, 100) // below ZeroCopySendMin: copied during Send
	_, err := worker.Send(vantest.KVMsg(serverID, 1, true, false, vantest.U64s(1), small, nil))
	require.NoError(t, err)
	var copied atomic.Int32
	AfterSent(func() { copied.Add(1) }, small)
	require.EqualValues(t, 1, copied.Load(), "copied frame: runs at once")

	// A large frame sent and received: fn runs once libzmq let go of it.
	big := make([]byte, 8<<20)
	big[len(big)-1] = 7
	_, err = worker.Send(vantest.KVMsg(serverID, 2, true, false, vantest.U64s(1), big, nil))
	require.NoError(t, err)
	var ran atomic.Int32
	AfterSent(func() { ran.Add(1) }, big)
	mustRecv(t, server.Transport) // the small one
	m := mustRecv(t, server.Transport)
	require.Len(t, m.Data[1], len(big))
	require.EqualValues(t, 7, m.Data[1][len(big)-1])
	deadline := time.Now().Add(10 * time.Second)
	for ran.Load() == 0 && time.Now().Before(deadline) {
		drainReleases() // what every Send and Recv does
		time.Sleep(time.Millisecond)
	}
	require.EqualValues(t, 1, ran.Load(), "runs once the frame is released")
	drainReleases()
	require.EqualValues(t, 1, ran.Load(), "runs once")
}

// TestAfterSentWaitsForQueuedFrame holds a zero-copy frame in libzmq's
// queue (its peer's address has no listener, so nothing is written) and
// checks that AfterSent's function waits until the frame is released, here
// by closing the transport.
func TestAfterSentWaitsForQueuedFrame(t *testing.T) {
	worker := newNode(t, Config{}, message.RoleWorker, workerID)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	nobody := message.NewNode(message.RoleServer)
	nobody.ID, nobody.Hostname, nobody.Port = serverID, "127.0.0.1", int32(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	require.NoError(t, worker.Connect(nobody, workerID))

	big := make([]byte, 1<<20)
	_, err = worker.Send(vantest.KVMsg(serverID, 1, true, false, vantest.U64s(1), big, nil))
	require.NoError(t, err)
	var ran atomic.Int32
	AfterSent(func() { ran.Add(1) }, big[100:], big) // a view past the frame's start (no match), and the frame
	for range 20 {
		drainReleases()
		time.Sleep(time.Millisecond)
	}
	require.True(t, pinnedWithin(big), "the frame is still queued")
	require.Zero(t, ran.Load(), "must not run while libzmq holds the frame")
	require.NoError(t, worker.Close())
	require.EqualValues(t, 1, ran.Load(), "runs when Close releases the frame")
}

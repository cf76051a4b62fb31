//go:build cgo

package zmq

import (
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
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
	vantest.MustRecv(t, server.Transport) // the small one
	m := vantest.MustRecv(t, server.Transport)
	require.Len(t, m.Data[1], len(big))
	require.EqualValues(t, 7, m.Data[1][len(big)-1])
	testutil.Until(10*time.Second, func() bool {
		drainReleases() // what every Send and Recv does
		return ran.Load() != 0
	})
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

// TestInFlightRecords pins frames straight into the release registry,
// releases them out of order and checks that AfterSent waits for exactly
// the frames in flight within its buffers, and that the in-flight list
// stays equal to the set of busy records.
func TestInFlightRecords(t *testing.T) {
	bufs := make([][]byte, 5)
	nodes := make([]*relRecord, len(bufs))
	releases.mu.Lock()
	for i := range bufs {
		bufs[i] = make([]byte, 4096)
		nodes[i] = pinFrameLocked(unsafe.Pointer(&bufs[i][0]))
	}
	releases.mu.Unlock()
	checkList := func() {
		t.Helper()
		releases.mu.Lock()
		defer releases.mu.Unlock()
		// Every record is either idle or in flight, exactly once.
		seen := map[uint32]int{}
		for _, id := range releases.free {
			seen[id]++
		}
		for i, id := range releases.inFlight {
			seen[id]++
			require.Equal(t, i, relSlotOf(id).pos, "record %d's position", id)
		}
		require.Len(t, seen, len(releases.slots)*relChunk)
		for id, n := range seen {
			require.Equal(t, 1, n, "record %d is listed %d times among idle and in-flight records", id, n)
		}
	}
	checkList()
	var ran [3]atomic.Int32
	AfterSent(func() { ran[0].Add(1) }, bufs[1], bufs[3]) // two frames
	AfterSent(func() { ran[1].Add(1) }, bufs[4][1:])      // past the frame's start: none
	AfterSent(func() { ran[2].Add(1) }, bufs[3])          // one frame
	require.EqualValues(t, 1, ran[1].Load(), "nothing in flight starts in the buffer: runs at once")
	release := func(i int) {
		releases.mu.Lock()
		releaseLocked(nodes[i])
		releases.mu.Unlock()
		drainReleases()
		checkList()
	}
	release(3)
	require.Zero(t, ran[0].Load(), "bufs[1] is still in flight")
	require.EqualValues(t, 1, ran[2].Load())
	release(0)
	release(4)
	require.Zero(t, ran[0].Load())
	release(1)
	require.EqualValues(t, 1, ran[0].Load())
	release(2)
	require.EqualValues(t, [3]int32{1, 1, 1}, [3]int32{ran[0].Load(), ran[1].Load(), ran[2].Load()})
	runtime.KeepAlive(bufs)
}

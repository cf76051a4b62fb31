//go:build cgo && !race

package zmq

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/vantest"
)

// TestSendDoesNotAllocate checks that a steady-state Send allocates nothing,
// for copied and zero-copy frames. Nothing is received meanwhile (libzmq
// queues the messages; Recv, which allocates, does not run). Each send
// waits until libzmq has released the previous one's frames, as in
// request/response traffic: with many zero-copy frames in flight at once,
// runtime.Pinner itself may allocate (its per-P cache holds one pinner).
func TestSendDoesNotAllocate(t *testing.T) {
	server := newNode(t, Config{}, message.RoleServer, serverID)
	worker := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))
	for _, size := range []int{100, 4 << 10, 1 << 20} {
		m := vantest.KVMsg(serverID, 1, true, false, vantest.U64s(1), make([]byte, size), []byte{1, 0, 0, 0})
		for range 10 {
			_, err := worker.Send(m)
			require.NoError(t, err)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := worker.Send(m); err != nil {
				t.Fatal(err)
			}
			for pinnedFrames() > 0 {
				runtime.Gosched()
			}
		})
		require.Zero(t, allocs, "allocations per Send of %d value bytes", size)
	}
}

// TestRoundTripDoesNotAllocate checks that a steady-state request and its
// response, received and released as kv.Worker and kv.Server do, allocate
// nothing: not the messages, not their small frames, not the records of
// zero-copy views (4 MB frames are delivered as views).
func TestRoundTripDoesNotAllocate(t *testing.T) {
	vantest.RequireRoundTripsDoNotAllocate(t, factory)
}

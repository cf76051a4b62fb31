package vantest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// RequireRoundTripsDoNotAllocate fails t unless RoundTripAllocs is 0 for
// values of 100 B, 4 KB, 256 KB and 4 MB (small frames, a frame below and
// one above van/zmq's zero-copy receive size, a large pooled frame).
func RequireRoundTripsDoNotAllocate(t *testing.T, f Factory) {
	for _, size := range []int{100, 4 << 10, 256 << 10, 4 << 20} {
		allocs := RoundTripAllocs(t, f, size)
		require.Zero(t, allocs, "allocations per round trip of %d value bytes", size)
	}
}

// RoundTripAllocs returns the heap allocations, process-wide, of one
// steady-state KV exchange with size value bytes each way: the worker
// sends a push request, the server receives it, answers from buffers of
// its own and releases the request, and the worker receives the answer and
// releases it (what kv.Worker and kv.Server do). Both ends run on the
// calling goroutine, so the count is the transports' own (their background
// goroutines included). Recv is called directly (a timeout would allocate): each message was sent just before,
// over loopback.
func RoundTripAllocs(t *testing.T, f Factory, size int) float64 {
	server := newNode(t, f, van.Options{}, message.RoleServer, serverID)
	worker := newNode(t, f, van.Options{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))
	require.NoError(t, server.Connect(worker.node, serverID))

	keys := U64s(42)
	req := KVMsg(serverID, 0, true, false, keys, make([]byte, size), []byte{0, 0, 0, 0})
	resp := KVMsg(workerID, 0, false, false, keys, make([]byte, size), []byte{0, 0, 0, 0})
	resp.Meta.Request = false
	// t.Fatal, not require: boxing the checked values would allocate.
	exchange := func() {
		if _, err := worker.Send(req); err != nil {
			t.Fatal(err)
		}
		in, err := server.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Data) != 3 || len(in.Data[1]) != size {
			t.Fatalf("request has %d frames, want 3 with %d value bytes", len(in.Data), size)
		}
		resp.Meta.Timestamp = in.Meta.Timestamp
		if _, err := server.Send(resp); err != nil {
			t.Fatal(err)
		}
		server.Release(in)
		out, err := worker.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Data) != 3 || len(out.Data[1]) != size {
			t.Fatalf("response has %d frames, want 3 with %d value bytes", len(out.Data), size)
		}
		worker.Release(out)
	}
	for range 50 { // connect, size buffers, fill pools
		exchange()
	}
	return testing.AllocsPerRun(200, exchange)
}

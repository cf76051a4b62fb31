package vantest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// BenchRoundTrip measures a KV-shaped request (keys, vals, lens) of size
// value bytes from a worker to a server that echoes it back, over loopback.
// Throughput counts both directions. With release, both ends give received
// messages back to a Releaser transport (what a releasing consumer does).
func BenchRoundTrip(b *testing.B, f Factory, size int, release bool) {
	server := newNode(b, f, Options{}, message.RoleServer, serverID)
	worker := newNode(b, f, Options{}, message.RoleWorker, workerID)
	require.NoError(b, worker.Connect(server.node, workerID))
	require.NoError(b, server.Connect(worker.node, serverID))
	srvRel, _ := server.Transport.(Releaser)
	wrkRel, _ := worker.Transport.(Releaser)
	if !release {
		srvRel, wrkRel = nil, nil
	}

	echoErr := make(chan error, 1)
	go func() {
		// The echo reuses one message so that only the transports'
		// allocations are counted.
		out := KVMsg(workerID, 0, false, false, nil, nil, []byte{})
		out.Meta.Request = false
		for {
			m, err := server.Recv()
			if err != nil {
				if !errors.Is(err, van.ErrClosed) {
					echoErr <- err
				}
				close(echoErr)
				return
			}
			copy(out.Data, m.Data)
			out.Meta.Timestamp = m.Meta.Timestamp
			if _, err := server.Send(out); err != nil {
				echoErr <- err
				return
			}
			if srvRel != nil {
				srvRel.Release(m)
			}
		}
	}()

	req := KVMsg(serverID, 0, true, false, U64s(42), make([]byte, size), []byte{0, 0, 0, 0})
	b.SetBytes(2 * int64(size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := worker.Send(req); err != nil {
			b.Fatal(err)
		}
		m, err := worker.Recv()
		if err != nil {
			b.Fatal(err)
		}
		if len(m.Data) != 3 || len(m.Data[1]) != size {
			b.Fatalf("echo has %d frames, want 3 with %d value bytes", len(m.Data), size)
		}
		if wrkRel != nil {
			wrkRel.Release(m)
		}
	}
	b.StopTimer()
	require.NoError(b, server.Close())
	require.NoError(b, <-echoErr)
}

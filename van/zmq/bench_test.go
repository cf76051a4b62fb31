//go:build cgo

package zmq

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// BenchmarkRoundTrip measures a KV-shaped request (keys, vals, lens) from a
// worker to a server that echoes it back, over loopback TCP. Throughput is
// counted for both directions.
func BenchmarkRoundTrip(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int
	}{{"4KB", 4 << 10}, {"1MB", 1 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			server := newNode(b, Config{}, message.RoleServer, serverID)
			worker := newNode(b, Config{}, message.RoleWorker, workerID)
			require.NoError(b, worker.Connect(server.node, workerID))
			require.NoError(b, server.Connect(worker.node, serverID))

			echoErr := make(chan error, 1)
			go func() {
				for {
					m, err := server.Recv()
					if err != nil {
						if !errors.Is(err, van.ErrClosed) {
							echoErr <- err
						}
						close(echoErr)
						return
					}
					m.Meta.Recver, m.Meta.Request = m.Meta.Sender, false
					if _, err := server.Send(m); err != nil {
						echoErr <- err
						return
					}
				}
			}()

			req := kvMsg(serverID, 0, true, false, u64s(42), make([]byte, bc.size), []byte{0, 0, 0, 0})
			b.SetBytes(2 * int64(bc.size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := worker.Send(req); err != nil {
					b.Fatal(err)
				}
				m, err := worker.Recv()
				if err != nil {
					b.Fatal(err)
				}
				if len(m.Data[1]) != bc.size {
					b.Fatalf("echo has %d value bytes, want %d", len(m.Data[1]), bc.size)
				}
			}
			b.StopTimer()
			require.NoError(b, server.Close())
			require.NoError(b, <-echoErr)
		})
	}
}

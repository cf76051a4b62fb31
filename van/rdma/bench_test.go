//go:build rdma && cgo

package rdma

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// BenchmarkRoundTrip measures a KV request (one key, vals, lens) from a
// worker to a server that echoes it back, over the fabric backend on
// loopback; the same shape as van/zmq's BenchmarkRoundTrip, so the two
// compare directly. Throughput counts both directions. "registered" sends
// from buffers registered with RegisterBuffer (zero-copy on the send side).
func BenchmarkRoundTrip(b *testing.B) {
	for _, bc := range []struct {
		name       string
		size       int
		registered bool
	}{{"4KB", 4 << 10, false}, {"1MB", 1 << 20, false}, {"1MB-registered", 1 << 20, true}} {
		b.Run(bc.name, func(b *testing.B) {
			server, worker := pair(b, fabricConfig())
			vals := make([]byte, bc.size)
			if bc.registered {
				require.NoError(b, worker.RegisterBuffer(vals))
			}
			echoErr := make(chan error, 1)
			go func() {
				defer close(echoErr)
				var reg []byte
				for {
					m, err := server.Recv()
					if err != nil {
						if !errors.Is(err, van.ErrClosed) {
							echoErr <- err
						}
						return
					}
					if bc.registered && reg == nil {
						// A server that keeps its values in a registered
						// store answers from it zero-copy as well.
						reg = make([]byte, bc.size)
						if err := server.RegisterBuffer(reg); err != nil {
							echoErr <- err
							return
						}
					}
					if reg != nil {
						copy(reg, m.Data[1])
						m.Data[1] = reg
					}
					m.Meta.Recver, m.Meta.Request = m.Meta.Sender, false
					if _, err := server.Send(m); err != nil {
						if !errors.Is(err, van.ErrClosed) {
							echoErr <- err
						}
						return
					}
				}
			}()
			req := kvMsg(serverID, 0, true, false, u64s(42), vals, []byte{0, 0, 0, 0})
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
			b.ReportMetric(float64(worker.stats.Rendezvous.Load()), "rendezvous")
			require.NoError(b, server.Close())
			require.NoError(b, <-echoErr)
		})
	}
}

var _ = message.Empty

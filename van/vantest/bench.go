package vantest

import (
	"errors"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// BenchRoundTrip measures a KV-shaped request (keys, vals, lens) of size
// value bytes from a worker to a server that echoes it back, over loopback.
// Throughput counts both directions. With release, both ends give received
// messages back to the transport (what a releasing consumer does).
func BenchRoundTrip(b *testing.B, f Factory, size int, release bool) {
	server := newNode(b, f, van.Options{}, message.RoleServer, serverID)
	worker := newNode(b, f, van.Options{}, message.RoleWorker, workerID)
	require.NoError(b, worker.Connect(server.node, workerID))
	require.NoError(b, server.Connect(worker.node, serverID))

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
			if release {
				server.Release(m)
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
		if release {
			worker.Release(m)
		}
	}
	b.StopTimer()
	require.NoError(b, server.Close())
	require.NoError(b, <-echoErr)
}

// BenchRoundTrips runs BenchRoundTrip for 4 KB and 1 MB values, with and
// without release, as sub-benchmarks named "4KB", "4KB/release", ...
func BenchRoundTrips(b *testing.B, f Factory) {
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, release := range []bool{false, true} {
			name := SizeName(size)
			if release {
				name += "/release"
			}
			b.Run(name, func(b *testing.B) { BenchRoundTrip(b, f, size, release) })
		}
	}
}

// SizeName names a byte count the way benchmark names show it: "4KB",
// "1MB" (whole KiB or MiB, rounded down).
func SizeName(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MB"
	}
	return strconv.Itoa(n>>10) + "KB"
}

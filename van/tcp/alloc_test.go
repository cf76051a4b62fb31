//go:build !race

package tcp

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/vantest"
)

// TestSendDoesNotAllocate checks that a steady-state Send to a connected
// peer allocates nothing. The peer is a plain listener that discards the
// bytes, so that only the sender's allocations are counted.
func TestSendDoesNotAllocate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	tr, err := New(Config{})
	require.NoError(t, err)
	defer tr.Close()
	sink := message.NewNode(message.RoleServer)
	sink.ID, sink.Hostname, sink.Port = 8, "127.0.0.1", int32(ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, tr.Connect(sink, 9))
	require.Eventually(t, func() bool { // the dial runs in the background
		tr.mu.RLock()
		p := tr.peers[8]
		tr.mu.RUnlock()
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.conn != nil
	}, 10*time.Second, time.Millisecond)
	for _, size := range []int{4 << 10, 1 << 20} {
		m := vantest.KVMsg(8, 1, true, false, vantest.U64s(1), make([]byte, size), []byte{1, 0, 0, 0})
		for range 10 { // connect and size the per-peer buffers
			_, err := tr.Send(m)
			require.NoError(t, err)
		}
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := tr.Send(m); err != nil {
				t.Fatal(err)
			}
		})
		require.Zero(t, allocs, "allocations per Send of %d value bytes", size)
	}
}

// TestRoundTripDoesNotAllocate checks that a steady-state request and its
// response, received and released as kv.Worker and kv.Server do, allocate
// nothing: not the messages, not their small frames, not the pooled large
// frames.
func TestRoundTripDoesNotAllocate(t *testing.T) {
	vantest.RequireRoundTripsDoNotAllocate(t, factory)
}

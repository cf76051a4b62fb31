//go:build linux

package shm

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

// TestSendCopiesFrames: Send has copied every data frame when it returns,
// inline ones (below the default InlineMax, 32 KiB) into the message
// stream and large ones into the segment, so
// the caller may overwrite them at once. The C ABI bridge relies on it to
// send C++ memory without a Go copy first (cbridge/capi sendModeOf).
func TestSendCopiesFrames(t *testing.T) {
	const serverID, workerID = 8, 9
	bind := func(role message.Role, id int32) (van.Transport, message.Node) {
		tr := factory.New(t, van.Options{})
		t.Cleanup(func() { assert.NoError(t, tr.Close()) })
		n := message.NewNode(role)
		n.ID, n.Hostname = id, "127.0.0.1"
		port, err := tr.Bind(n, 0)
		require.NoError(t, err)
		n.Port = int32(port)
		require.NoError(t, tr.Connect(n, id))
		return tr, n
	}
	server, sn := bind(message.RoleServer, serverID)
	worker, _ := bind(message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(sn, workerID))
	for i, size := range []int{100, 32<<10 - 64, 32 << 10, 1 << 20} {
		vals := bytes.Repeat([]byte{byte(i + 1)}, size)
		want := bytes.Clone(vals)
		_, err := worker.Send(vantest.KVMsg(serverID, int32(i), true, false, vantest.U64s(1), vals, nil))
		require.NoError(t, err)
		for j := range vals {
			vals[j] = 0xee // what the caller writes next
		}
		got := vantest.MustRecv(t, server)
		assert.True(t, bytes.Equal(want, got.Data[1]), "%d-byte frame: the receiver did not get the bytes sent (read after Send returned?)", size)
		server.Release(got)
	}
}

//go:build cgo

package zmq

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/vantest"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func isView(m *message.Message, i int) bool {
	kept.mu.Lock()
	defer kept.mu.Unlock()
	v := kept.m[m]
	for j := range v.n {
		if v.at(j).idx == i {
			return true
		}
	}
	return false
}

// waitOpenViews waits for openViews to reach want: closes deferred behind an
// echoing zero-copy Send happen when a transport next passes by.
func waitOpenViews(t *testing.T, want int64) {
	t.Helper()
	testutil.Until(10*time.Second, func() bool {
		drainReleases()
		return openViews.Load() == want
	})
	require.Equal(t, want, openViews.Load())
}

// TestZeroCopyRecv checks that a large frame arrives intact as a view of
// libzmq's buffer, aligned, stays valid across later receives until
// Release, and that Release closes it exactly once.
func TestZeroCopyRecv(t *testing.T) {
	base := openViews.Load()
	server := newNode(t, Config{}, message.RoleServer, serverID)
	worker := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))

	big := pattern(DefaultZeroCopyRecvMin+24, 1)
	small := pattern(1000, 2)
	_, err := worker.Send(vantest.KVMsg(serverID, 1, true, false, vantest.U64s(1), big, nil))
	require.NoError(t, err)
	_, err = worker.Send(vantest.KVMsg(serverID, 2, true, false, vantest.U64s(1), pattern(3<<20, 3), nil))
	require.NoError(t, err)
	_, err = worker.Send(vantest.KVMsg(serverID, 3, true, false, vantest.U64s(1), small, nil))
	require.NoError(t, err)

	m1 := vantest.MustRecv(t, server.Transport)
	m2 := vantest.MustRecv(t, server.Transport)
	m3 := vantest.MustRecv(t, server.Transport)
	require.True(t, isView(m1, 1), "large frame is a view")
	require.False(t, isView(m1, 0), "keys frame is copied")
	require.False(t, isView(m3, 1), "small frame is copied")
	require.EqualValues(t, 2, openViews.Load()-base)
	require.Zero(t, uintptr(unsafe.Pointer(unsafe.SliceData(m1.Data[1])))%8, "views are 8-byte aligned")
	require.Equal(t, big, m1.Data[1], "still intact after later receives")
	require.Equal(t, small, m3.Data[1])

	server.Release(m1)
	require.EqualValues(t, 1, openViews.Load()-base)
	require.Nil(t, m1.Data)
	server.Release(m1) // idempotent
	require.EqualValues(t, 1, openViews.Load()-base)

	// Detach: the message becomes Go memory, the view is closed.
	server.Detach(m2)
	require.EqualValues(t, 0, openViews.Load()-base)
	require.Equal(t, pattern(3<<20, 3), m2.Data[1])
	server.Detach(m2)
	server.Release(m2)
	require.EqualValues(t, 0, openViews.Load()-base)
}

// TestZeroCopyRecvOff checks that ZeroCopyRecvMin < 0 copies every frame.
func TestZeroCopyRecvOff(t *testing.T) {
	base := openViews.Load()
	server := newNode(t, Config{ZeroCopyRecvMin: -1}, message.RoleServer, serverID)
	worker := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))
	big := pattern(1<<20, 4)
	_, err := worker.Send(vantest.KVMsg(serverID, 1, true, false, vantest.U64s(1), big, nil))
	require.NoError(t, err)
	m := vantest.MustRecv(t, server.Transport)
	require.False(t, isView(m, 1))
	require.Equal(t, base, openViews.Load())
	require.Equal(t, big, m.Data[1])
}

// TestZeroCopyRecvEcho sends a received view straight back with a
// zero-copy Send and Releases it at once: the close must wait until libzmq
// has sent the bytes, which must arrive intact.
func TestZeroCopyRecvEcho(t *testing.T) {
	base := openViews.Load()
	server := newNode(t, Config{}, message.RoleServer, serverID)
	worker := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))
	require.NoError(t, server.Connect(worker.node, serverID))
	for round := range 20 {
		big := pattern(1<<20, byte(round))
		_, err := worker.Send(vantest.KVMsg(serverID, int32(round), true, false, vantest.U64s(1), big, nil))
		require.NoError(t, err)
		m := vantest.MustRecv(t, server.Transport)
		require.True(t, isView(m, 1))
		_, err = server.Send(vantest.KVMsg(workerID, int32(round), false, false, vantest.U64s(1), m.Data[1], nil))
		require.NoError(t, err)
		server.Release(m)
		back := vantest.MustRecv(t, worker.Transport)
		require.Equal(t, big, back.Data[1])
		worker.Release(back)
	}
	waitOpenViews(t, base)
}

package tcp

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// boundTransport is a Transport bound on 127.0.0.1 with lim, and a raw
// connection to it that has sent the hello of node id.
func boundTransport(t *testing.T, lim van.Limits, id int32) (*Transport, net.Conn) {
	tr, err := New(Config{Options: van.Options{Limits: lim}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	port, err := tr.Bind(message.Node{Hostname: "127.0.0.1"}, 0)
	require.NoError(t, err)
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	hello := []byte{'E', 'P', 'S', 'V', protoVersion, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(hello[8:], uint32(id))
	_, err = c.Write(hello)
	require.NoError(t, err)
	return tr, c
}

// writeMsg writes meta and data frames in the tcp van's framing.
func writeMsg(t *testing.T, c net.Conn, frames ...[]byte) {
	hdr := binary.LittleEndian.AppendUint32(nil, uint32(len(frames)))
	for _, f := range frames {
		hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(f)))
	}
	bufs := net.Buffers(append([][]byte{hdr}, frames...))
	_, err := bufs.WriteTo(c)
	require.NoError(t, err)
}

func recvRefusal(t *testing.T, tr *Transport) *van.FrameError {
	err := testutil.Within(t, 10*time.Second, func() error { _, err := tr.Recv(); return err },
		func() string { return "nothing was refused" })
	var fe *van.FrameError
	require.True(t, errors.As(err, &fe), "want a FrameError, got %v", err)
	return fe
}

func pushMeta(ts int32) []byte {
	return message.EncodeMeta(&message.Meta{AppID: 0, Request: true, Push: true, Timestamp: ts, DataType: []message.DataType{message.Uint8}})
}

// A meta above MaxMetaBytes is refused from its length alone, and the
// connection is closed: the peer is broken or hostile.
func TestMetaAboveLimitIsRefused(t *testing.T) {
	tr, c := boundTransport(t, van.Limits{MaxMetaBytes: 64}, 9)
	writeMsg(t, c, make([]byte, 65))
	fe := recvRefusal(t, tr)
	assert.Equal(t, van.ReasonMeta, fe.Reason)
	assert.Equal(t, "ps9", fe.Peer)
	assert.ErrorContains(t, fe, "meta frame of 65 bytes exceeds the 64-byte limit (PS_MAX_META_BYTES)")
}

// A peer whose messages wait for Recv beyond MaxPendingBytes is cut off;
// what it sent within the limit is delivered.
func TestPendingBytesAboveLimitCutThePeerOff(t *testing.T) {
	tr, c := boundTransport(t, van.Limits{MaxPendingBytes: 1000}, 9)
	for ts := range 3 {
		writeMsg(t, c, pushMeta(int32(ts)), make([]byte, 600))
	}
	// Nothing is received until the server closed the connection.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	require.Error(t, err)
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the connection is closed")
	m, err := tr.Recv() // the first: nothing was pending
	require.NoError(t, err)
	assert.Equal(t, int32(0), m.Meta.Timestamp)
	fe := recvRefusal(t, tr)
	assert.Equal(t, van.ReasonPending, fe.Reason)
	assert.ErrorContains(t, fe, "1200 bytes received and not yet taken, the limit is 1000 (PS_MAX_PENDING_BYTES)")
}

// Messages taken by Recv no longer count as pending.
func TestPendingBytesFallWhenReceived(t *testing.T) {
	tr, c := boundTransport(t, van.Limits{MaxPendingBytes: 1000}, 9)
	for ts := range 5 {
		writeMsg(t, c, pushMeta(int32(ts)), make([]byte, 600))
		m, err := tr.Recv()
		require.NoError(t, err)
		assert.Equal(t, int32(ts), m.Meta.Timestamp)
	}
}

// An anonymous connection that does not register within RegisterTimeout
// is cut off; a registered one may stay idle.
func TestHalfOpenPeerIsCutOff(t *testing.T) {
	tr, c := boundTransport(t, van.Limits{RegisterTimeout: 200 * time.Millisecond}, message.Empty)
	_, idle := boundTransport(t, van.Limits{RegisterTimeout: 200 * time.Millisecond}, 9)
	fe := recvRefusal(t, tr)
	assert.Equal(t, van.ReasonRegister, fe.Reason)
	assert.Equal(t, "anonymous", fe.Peer)
	assert.ErrorContains(t, fe, "stayed anonymous for 200ms without registering (PS_REGISTER_TIMEOUT)")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	assert.Error(t, err, "the connection is closed")
	_ = idle.SetReadDeadline(time.Now().Add(400 * time.Millisecond))
	_, err = idle.Read(make([]byte, 1))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "a registered idle connection stays open")
}

package tcp

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

// bufferCountingConn counts the bytes that reads bring into the reader's
// read buffer, as opposed to straight into a frame's own buffer.
type bufferCountingConn struct {
	net.Conn
	rd       *reader
	buffered int
}

func (c *bufferCountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if sharesArray(p, c.rd.buf) {
		c.buffered += n
	}
	return n, err
}

// sharesArray reports whether p is a tail slice of buf (as rd.buf[w:end]
// is): both then end at the same last element of the array.
func sharesArray(p, buf []byte) bool {
	if cap(p) == 0 || cap(buf) == 0 {
		return false
	}
	return &p[:cap(p)][cap(p)-1] == &buf[:cap(buf)][cap(buf)-1]
}

// TestLargeFramesBypassReadBuffer checks that once a connection carries
// large frames, a message's header read brings in at most leanRead bytes,
// so that its large frame is read by the kernel into the frame's buffer and
// not copied out of the read buffer; and that every frame arrives intact,
// also when small messages follow large ones.
func TestLargeFramesBypassReadBuffer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	const big = 128 << 10
	sizes := []int{big, big, big, 100, 4 << 10, big}
	msgs := make([]*message.Message, len(sizes))
	var wire []byte
	for i, size := range sizes {
		vals := make([]byte, size)
		for j := range vals {
			vals[j] = byte(j*7 + i)
		}
		msgs[i] = vantest.KVMsg(8, int32(i+1), true, false, vantest.U64s(uint64(i)), vals, []byte{byte(size), byte(size >> 8), byte(size >> 16), 0})
		_, iov, _, err := encode(nil, nil, msgs[i])
		require.NoError(t, err)
		for _, b := range iov {
			wire = append(wire, b...)
		}
	}
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(wire) // everything is waiting when the reader starts
	}()
	c, err := ln.Accept()
	require.NoError(t, err)
	defer c.Close()

	rd := newReader(nil, van.Limits{MaxFrames: 16, MaxMessageBytes: 1 << 30})
	cc := &bufferCountingConn{Conn: c, rd: rd}
	rd.c = cc
	for i, want := range msgs {
		cc.buffered = 0
		got, err := rd.next()
		require.NoError(t, err, "message %d", i)
		require.Equal(t, want.Meta.Timestamp, got.Meta.Timestamp, "message %d", i)
		require.Len(t, got.Data, len(want.Data), "message %d", i)
		for f := range want.Data {
			require.Equal(t, want.Data[f], got.Data[f], "message %d, frame %d", i, f)
		}
		if i > 0 && sizes[i-1] >= directReadMin {
			require.LessOrEqual(t, cc.buffered, leanRead,
				"message %d follows a large frame: its header read should stop at %d bytes", i, leanRead)
		}
	}
}

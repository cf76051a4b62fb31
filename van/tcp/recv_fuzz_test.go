package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// streamConn is an accepted connection whose peer sent the bytes of r,
// delivered at most chunk bytes per Read (so a message straddles reads).
type streamConn struct {
	net.Conn // nil: only Read and SetReadDeadline are used
	r        *bytes.Reader
	chunk    int
}

func (c *streamConn) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.chunk)]) }

func (c *streamConn) SetReadDeadline(time.Time) error { return nil }

// fuzzLimits keep a fuzzed header from allocating more than a worker can
// hold (the limits themselves are van.Limits' business).
var fuzzLimits = van.Limits{MaxFrames: 8, MaxMessageBytes: 1 << 20}

// wire is msg as the tcp van sends it, header included.
func wire(t testing.TB, msg *message.Message) []byte {
	h, iov, _, err := encode(nil, nil, msg)
	require.NoError(t, err)
	var out []byte
	for _, b := range iov {
		out = append(out, b...)
	}
	require.NotEmpty(t, h)
	return out
}

// readAll reads the messages of stream until it ends or turns fatal.
func readAll(b []byte, chunk int) (msgs []*message.Message, frameErrs int) {
	rd := newReader(&streamConn{r: bytes.NewReader(b), chunk: chunk}, fuzzLimits)
	for {
		msg, err := rd.next()
		var fe *van.FrameError
		switch {
		case err == nil:
			msgs = append(msgs, msg)
			continue
		case errors.As(err, &fe) && !errors.Is(err, errFatal):
			frameErrs++
			continue
		}
		return msgs, frameErrs
	}
}

// FuzzConnStream feeds what a peer sends on an accepted connection (the
// hello, then framed messages) to the tcp van's reader: it never panics,
// and every message it accepts is framed again by the van's encoder to a
// stream that reads back as the same message.
func FuzzConnStream(f *testing.F) {
	hello := make([]byte, helloLen)
	copy(hello, helloMagic[:])
	hello[4] = protoVersion
	binary.LittleEndian.PutUint32(hello[8:], 9)

	add := &message.Message{Meta: message.NewMeta()}
	add.Meta.Control = message.Control{Cmd: message.CmdAddNode, Nodes: []message.Node{{Role: message.RoleWorker, ID: message.Empty, Hostname: "10.0.0.2", Port: 9001}}}
	push := &message.Message{Meta: message.NewMeta()}
	push.Meta.Request, push.Meta.Push, push.Meta.Timestamp = true, true, 7
	push.AddData(message.Uint64, binary.LittleEndian.AppendUint64(nil, 3))
	push.AddData(message.Float, []byte{0, 0, 128, 63, 0, 0, 0, 64})
	push.AddData(message.Int32, binary.LittleEndian.AppendUint32(nil, 2))
	empty := &message.Message{Meta: message.NewMeta()}
	empty.Meta.Request, empty.Meta.Pull = true, true
	empty.AddData(message.Uint64, nil)

	stream := func(chunk byte, msgs ...*message.Message) []byte {
		b := append([]byte{chunk}, hello...)
		for _, m := range msgs {
			b = append(b, wire(f, m)...)
		}
		return b
	}
	testutil.FuzzSeeds(f, stream(255, add), stream(3, add, push), stream(17, push, empty, push), stream(1))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		chunk := int(b[0]) + 1
		c := &streamConn{r: bytes.NewReader(b[1:]), chunk: chunk}
		_, tag, err := readHello(c, time.Second)
		if err != nil {
			return
		}
		rest := b[1+helloLen+len(tag):]
		msgs, _ := readAll(rest, chunk)
		for _, m := range msgs {
			again, frameErrs := readAll(wire(t, m), chunk)
			require.Zero(t, frameErrs)
			require.Len(t, again, 1, "a re-framed message did not read back as one")
			m2 := again[0]
			require.Equal(t, message.EncodeMeta(&m.Meta), message.EncodeMeta(&m2.Meta), "the meta changed")
			require.Equal(t, m.Meta.DataSize, m2.Meta.DataSize)
			require.Equal(t, m.Data, m2.Data, "the data frames changed")
		}
	})
}

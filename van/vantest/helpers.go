package vantest

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// node is a bound transport together with the Node others connect to.
type node struct {
	van.Transport
	node message.Node
}

// newNode returns a transport bound to a free port on 127.0.0.1, connected
// to itself (as ps-lite nodes are, which also tells it its own id), and
// closed at the end of the test.
func newNode(t testing.TB, f Factory, opt van.Options, role message.Role, id int32) *node {
	t.Helper()
	tr := f.New(t, opt)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	n := message.NewNode(role)
	n.ID = id
	n.Hostname = "127.0.0.1"
	port, err := tr.Bind(n, 0)
	require.NoError(t, err)
	require.Positive(t, port)
	n.Port = int32(port)
	if id != message.Empty {
		require.NoError(t, tr.Connect(n, id))
	}
	return &node{Transport: tr, node: n}
}

// RecvWithin calls tr.Recv and fails the test if nothing arrives within
// RecvTimeout. On timeout the Recv goroutine stays blocked until tr is
// closed.
func RecvWithin(t testing.TB, tr van.Transport) (*message.Message, error) {
	t.Helper()
	type result struct {
		msg *message.Message
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := tr.Recv()
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		return r.msg, r.err
	case <-time.After(RecvTimeout):
		t.Fatalf("no message within %v", RecvTimeout)
		return nil, nil
	}
}

// MustRecv is RecvWithin that also fails the test on a Recv error.
func MustRecv(t testing.TB, tr van.Transport) *message.Message {
	t.Helper()
	m, err := RecvWithin(t, tr)
	require.NoError(t, err)
	return m
}

// frameErr receives and asserts that the next message was rejected.
func frameErr(t *testing.T, tr van.Transport) *van.FrameError {
	t.Helper()
	_, err := RecvWithin(t, tr)
	var fe *van.FrameError
	require.ErrorAs(t, err, &fe)
	return fe
}

func controlMsg(to int32, cmd message.Command) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = to
	m.Meta.Control.Cmd = cmd
	m.Meta.Timestamp = 3
	return m
}

// KVMsg builds a ps-lite KV request: keys, vals and optional lens frames.
func KVMsg(to int32, ts int32, push, pull bool, keys, vals, lens []byte) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = to
	m.Meta.AppID, m.Meta.CustomerID, m.Meta.Timestamp = 0, 0, ts
	m.Meta.Request, m.Meta.Push, m.Meta.Pull = true, push, pull
	m.Meta.Head = 0
	m.AddData(message.Uint64, keys)
	m.AddData(message.Other, vals)
	if lens != nil {
		m.AddData(message.Int32, lens)
	}
	return m
}

// U64s encodes little-endian uint64s.
func U64s(vs ...uint64) []byte {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

// deadPort returns a loopback port nobody listens on.
func deadPort(t testing.TB, f Factory) int32 {
	t.Helper()
	tr := f.New(t, van.Options{})
	n := message.NewNode(message.RoleServer)
	n.Hostname = "127.0.0.1"
	port, err := tr.Bind(n, 0)
	require.NoError(t, err)
	require.NoError(t, tr.Close())
	return int32(port)
}

package memvan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

func newTransport(t *testing.T, n *Network) *Transport {
	t.Helper()
	tr, err := n.NewTransport(van.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	return tr
}

func TestBindPicksPortsDeterministically(t *testing.T) {
	n := NewNetwork()
	node := message.NewNode(message.RoleServer)
	for _, want := range []int{firstPort, firstPort + 1} {
		got, err := newTransport(t, n).Bind(node, 0)
		require.NoError(t, err)
		assert.Equal(t, want, got, "port 0: the lowest free one")
	}

	node.Port = firstPort
	_, err := newTransport(t, n).Bind(node, 0)
	assert.ErrorContains(t, err, "address in use", "a taken port without retries")
	got, err := newTransport(t, n).Bind(node, 3)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, got, retryPortMin)
	assert.Less(t, got, retryPortMax)

	_, err = n.NewTransport(van.Options{WaterMark: -1})
	assert.ErrorContains(t, err, "WaterMark must not be negative")
}

func TestQueuedUntilBoundInOrder(t *testing.T) {
	n := NewNetwork()
	sender := newTransport(t, n)
	peer := message.NewNode(message.RoleServer)
	peer.ID, peer.Port = 8, 20000
	require.NoError(t, sender.Connect(peer, message.Empty))
	for ts := range int32(3) {
		if ts == 2 {
			require.NoError(t, sender.Connect(peer, 9)) // registered meanwhile
		}
		m := vantest.KVMsg(8, ts, true, false, vantest.U64s(1), []byte{byte(ts)}, nil)
		_, err := sender.Send(m)
		require.NoError(t, err)
	}

	recver := newTransport(t, n)
	port, err := recver.Bind(peer, 0)
	require.NoError(t, err)
	require.Equal(t, 20000, port)
	for ts, sender := range []int32{message.Empty, message.Empty, 9} {
		m := vantest.MustRecv(t, recver)
		assert.Equal(t, int32(ts), m.Meta.Timestamp)
		assert.Equal(t, sender, m.Meta.Sender, "the identity it was sent under")
		assert.Equal(t, []byte{byte(ts)}, m.Data[1])
		recver.Release(m)
		assert.Equal(t, message.Message{}, *m, "Release clears the message")
	}
}

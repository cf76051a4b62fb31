package message_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

// The standby extension (PBNode field 14) round-trips and is absent from
// the bytes of an ordinary node, which stay exactly ps-lite's.
func TestNodeStandbyExtension(t *testing.T) {
	m := message.NewMeta()
	m.Control.Cmd = message.CmdAddNode
	n := message.NewNode(message.RoleServer)
	n.Hostname, n.Port = "10.0.0.1", 9000
	m.Control.Nodes = []message.Node{n}
	plain := message.EncodeMeta(&m)
	m.Control.Nodes[0].Standby = true
	ext := message.EncodeMeta(&m)
	require.Len(t, ext, len(plain)+2, "standby encoding: plain %x, with standby %x", plain, ext)
	require.True(t, bytes.Contains(ext, []byte{0x70, 0x01}), "standby encoding %x lacks field 14 = 1", ext)
	var back message.Meta
	require.NoError(t, message.DecodeMeta(ext, &back))
	require.Len(t, back.Control.Nodes, 1)
	assert.True(t, back.Control.Nodes[0].Standby, "decoded %+v", back.Control.Nodes)
	require.NoError(t, message.DecodeMeta(plain, &back))
	require.Len(t, back.Control.Nodes, 1)
	assert.False(t, back.Control.Nodes[0].Standby, "plain node decoded as standby")
}

package message_test

import (
	"bytes"
	"testing"

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
	if len(ext) != len(plain)+2 || !bytes.Contains(ext, []byte{0x70, 0x01}) {
		t.Fatalf("standby encoding: plain %x, with standby %x", plain, ext)
	}
	var back message.Meta
	if err := message.DecodeMeta(ext, &back); err != nil || !back.Control.Nodes[0].Standby {
		t.Fatalf("decode: %v %+v", err, back.Control.Nodes)
	}
	if err := message.DecodeMeta(plain, &back); err != nil || back.Control.Nodes[0].Standby {
		t.Fatalf("plain node decoded as standby: %v", err)
	}
}

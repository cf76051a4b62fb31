package message_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

// A preferred rank travels as PBNode field 15 on the dmlc wire (absent
// when unset, so ordinary nodes keep ps-lite's bytes) and as the fork's
// aux_id on its raw wire (-1 when unset); both round-trip.
func TestNodeWantRank(t *testing.T) {
	for _, w := range []message.Wire{message.WireDmlc, message.WireBytedance} {
		t.Run(w.String(), func(t *testing.T) {
			m := message.NewMeta()
			m.Control.Cmd = message.CmdAddNode
			n := message.NewNode(message.RoleWorker)
			n.Hostname, n.Port = "10.0.0.1", 9000
			m.Control.Nodes = []message.Node{n}
			plain, err := w.Encode(&m)
			require.NoError(t, err)
			for _, rank := range []int{0, 3, 300} {
				m.Control.Nodes[0].WantRank = message.WantRankOf(rank)
				b, err := w.Encode(&m)
				require.NoError(t, err)
				var back message.Meta
				require.NoError(t, w.Decode(b, &back))
				require.Len(t, back.Control.Nodes, 1)
				got, ok := back.Control.Nodes[0].WantedRank()
				assert.True(t, ok && got == rank, "rank %d decoded as %d (set %v)", rank, got, ok)
			}
			var back message.Meta
			require.NoError(t, w.Decode(plain, &back))
			_, ok := back.Control.Nodes[0].WantedRank()
			assert.False(t, ok, "a node without a preferred rank decoded with one")
			if w == message.WireDmlc {
				m.Control.Nodes[0].WantRank = message.WantRankOf(3)
				b, _ := w.Encode(&m)
				assert.True(t, bytes.Contains(b, []byte{0x78, 0x03}), "dmlc encoding %x lacks field 15 = 3", b)
			} else {
				aux := binary.LittleEndian.Uint32(plain[message.RawMetaSize+544:])
				assert.Equal(t, uint32(0xffffffff), aux, "aux_id of a node without a preferred rank")
			}
		})
	}
}

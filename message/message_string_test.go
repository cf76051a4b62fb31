package message

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Unset ids read "unassigned", never ps-lite's INT_MAX, and a message
// lists its frames' sizes as ps-lite's debug string does.
func TestMessageString(t *testing.T) {
	m := &Message{Meta: NewMeta()}
	m.Meta.Sender, m.Meta.AppID, m.Meta.CustomerID = 9, 0, 0
	m.AddData(Uint64, make([]byte, 16))
	m.AddData(Float, make([]byte, 8))
	assert.Equal(t, "9 => unassigned app=0 customer=0 request=false push=false pull=false simple_app=false head=unassigned dtype=[UINT64 FLOAT] data_size=16 data_size=8", m.String())

	c := &Message{Meta: NewMeta()}
	c.Meta.Control.Cmd = CmdAddNode
	c.Meta.Control.Nodes = []Node{NewNode(RoleServer)}
	assert.Equal(t, "unassigned => unassigned control={ADD_NODE server[id=?, :unassigned]}", c.String())
	assert.NotContains(t, c.String()+m.String(), "2147483647")
}

package scheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

// The fork's Start barrier: fork nodes ask with INSTANCE_BARRIER, elasticps
// nodes on the fork's wire too, a node that joins the round with a BARRIER
// is counted in it; each is answered with the command it asked with, the
// workers last.
func TestInstanceBarrierJoinsTheRoundAndAnswersInKind(t *testing.T) {
	s := ready(t, 2, 2)
	arrivals := []struct {
		id       int32
		instance bool
	}{{9, true}, {8, true}, {11, false}, {10, true}, {1, true}}
	var a Actions
	for i, arr := range arrivals {
		if arr.instance {
			a = s.InstanceBarrier(arr.id, 0, 0, message.AllGroup)
		} else {
			a = s.Barrier(arr.id, 0, 0, message.AllGroup)
		}
		require.Empty(t, a.Errors)
		if i < len(arrivals)-1 {
			require.Empty(t, a.Send, "released after %d of 5 arrivals", i+1)
		}
	}
	got := map[int32]message.Command{}
	var order []int32
	for _, m := range a.Send {
		assert.False(t, m.Meta.Request, "bad release %v", m.Meta.String())
		assert.Equal(t, int32(message.AllGroup), m.Meta.Control.BarrierGroup, "bad release %v", m.Meta.String())
		got[m.Meta.Recver] = m.Meta.Control.Cmd
		order = append(order, m.Meta.Recver)
	}
	assert.Equal(t, map[int32]message.Command{
		9: message.CmdInstanceBarrier, 8: message.CmdInstanceBarrier, 11: message.CmdBarrier,
		10: message.CmdInstanceBarrier, 1: message.CmdInstanceBarrier,
	}, got)
	assert.Equal(t, []int32{8, 10, 1, 9, 11}, order, "servers and the scheduler are released before the workers")

	// The next round starts afresh: a BARRIER from 9 is answered as one.
	for _, id := range []int32{8, 10, 1, 11} {
		require.Empty(t, s.Barrier(id, 0, 0, message.AllGroup).Send)
	}
	a = s.Barrier(9, 0, 0, message.AllGroup)
	require.Len(t, a.Send, 5)
	for _, m := range a.Send {
		assert.Equal(t, message.CmdBarrier, m.Meta.Control.Cmd, "release to %d", m.Meta.Recver)
	}
	assert.Empty(t, s.instance, "no arrival is left marked")
}

// A request the scheduler drops (a bad group) leaves nothing marked.
func TestInstanceBarrierDroppedLeavesNoMark(t *testing.T) {
	s := ready(t, 1, 1)
	a := s.InstanceBarrier(9, 0, 0, 12)
	assert.Len(t, a.Errors, 1, "group 12 accepted")
	assert.Empty(t, s.instance)
}

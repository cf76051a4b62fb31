package postoffice_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// events collects a node's NodeEvents.
type events struct {
	mu  sync.Mutex
	got []postoffice.NodeEvent
}

func (e *events) add(ev postoffice.NodeEvent) { e.mu.Lock(); e.got = append(e.got, ev); e.mu.Unlock() }

func (e *events) list() []postoffice.NodeEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]postoffice.NodeEvent(nil), e.got...)
}

// A server that stops heartbeating is declared dead and every live node,
// the scheduler included, is told once; a subscriber that comes later is
// told of it at once; a callback may call back into its node.
func TestOnNodeGoneOnEveryNode(t *testing.T) {
	t.Parallel() // waits on heartbeat and resend timers, not the CPU
	j := startJob(t, 2, 1, deathHeartbeats)
	victim := j.Servers[1]
	dead := victim.MyNode()
	live := []*postoffice.Postoffice{j.Scheduler, j.Servers[0], j.Workers[0]}
	seen := make([]*events, len(live))
	for i, po := range live {
		seen[i] = &events{}
		po.OnNodeGone(func(ev postoffice.NodeEvent) {
			g, ok := po.Gone(ev.ID) // calls back into the node
			assert.True(t, ok && g.Dead, "Gone(%d) inside the callback", ev.ID)
			seen[i].add(ev)
		})
	}
	victim.Stop()
	want := []postoffice.NodeEvent{{ID: dead.ID, Role: message.RoleServer, Dead: true}}
	for i, po := range live {
		testutil.WaitFor(t, 20*time.Second, func() bool { return len(seen[i].list()) > 0 },
			func() string { return po.Role().String() + " was not told" })
	}
	// a later subscriber hears of it too
	late := &events{}
	j.Workers[0].OnNodeGone(late.add)
	testutil.WaitFor(t, 5*time.Second, func() bool { return len(late.list()) > 0 }, func() string { return "no replay" })
	// once: a barrier of the live nodes passes (every notice was sent
	// before the release), then nothing more came
	errs := make(chan error, len(live))
	for _, po := range live {
		go func() { errs <- po.Barrier(0, message.AllGroup) }()
	}
	for range live {
		require.NoError(t, testutil.Recv(t, errs, 20*time.Second, func() string { return "barrier without the dead server" }))
	}
	for i, po := range live {
		assert.Equal(t, want, seen[i].list(), po.Role().String())
		g, ok := po.Gone(dead.ID)
		require.True(t, ok, po.Role().String())
		assert.Equal(t, dead.Port, g.Node.Port)
		assert.Equal(t, "no heartbeat for 3s (PS_HEARTBEAT_TIMEOUT)", g.Reason)
		assert.ErrorIs(t, po.Failure(), postoffice.ErrNodesLost, po.Role().String())
	}
	assert.Equal(t, want, late.list())
}

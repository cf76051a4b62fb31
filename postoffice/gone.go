package postoffice

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/scheduler"
)

// NodeEvent is a node the job lost: declared dead by the scheduler (a
// heartbeat timeout or membership gossip, whichever notices first), or,
// with Dead false, a server that left the job (drained). On a server or
// worker the scheduler itself (ID 1) is reported dead once it has not
// answered heartbeats for PS_HEARTBEAT_TIMEOUT.
type NodeEvent struct {
	ID   int32
	Role message.Role
	Dead bool
}

// GoneNode is what this node knows of a node the job lost.
type GoneNode struct {
	Node   message.Node // as the job knew it: its id, role and last address
	Dead   bool         // false: it left the job
	Reason string       // how the scheduler found out
	// Replaced is set once a restarted process took over the id
	// (is_recovery). A server's state stays lost: the new process holds
	// none of it.
	Replaced bool
}

// ErrNodesLost is wrapped by Finalize's error (and Failure's) when the job
// lost a node while it ran: its results are incomplete.
var ErrNodesLost = errors.New("postoffice: the job lost nodes")

// goneTable records the lost nodes and tells the OnNodeGone subscribers,
// one event at a time, in order, on a goroutine of its own that holds no
// lock while a callback runs (a callback may call back into the node).
type goneTable struct {
	any     atomic.Bool // a node was lost: the send path looks further
	mu      sync.Mutex
	nodes   map[int32]*GoneNode
	order   []int32
	history []NodeEvent
	subs    []func(NodeEvent)
	queue   []goneItem
	running bool // a goroutine delivers the queue
}

// goneItem is an event for every subscriber, or a new subscriber to replay
// the events before it to.
type goneItem struct {
	ev     NodeEvent
	sub    func(NodeEvent)
	replay []NodeEvent
}

// OnNodeGone calls f once for every node the job lost (NodeEvent), on
// every node, the scheduler included; also, at once, for the ones lost
// before f was registered. Calls come one at a time, in order, on a
// goroutine that holds no lock of the node: f may call the node's methods,
// but a slow f delays the next events.
func (p *Postoffice) OnNodeGone(f func(NodeEvent)) {
	t := &p.gone
	t.mu.Lock()
	t.push(p, goneItem{sub: f, replay: append([]NodeEvent(nil), t.history...)})
	t.mu.Unlock()
}

// push queues it and starts delivering if nothing does; t.mu is held.
func (t *goneTable) push(p *Postoffice, it goneItem) {
	t.queue = append(t.queue, it)
	if !t.running {
		t.running = true
		go t.deliver(p)
	}
}

func (t *goneTable) deliver(p *Postoffice) {
	for {
		t.mu.Lock()
		if len(t.queue) == 0 {
			t.running = false
			t.mu.Unlock()
			return
		}
		it := t.queue[0]
		t.queue = t.queue[1:]
		var subs []func(NodeEvent)
		if it.sub != nil {
			t.subs = append(t.subs, it.sub)
		} else {
			subs = append(subs, t.subs...)
		}
		t.mu.Unlock()
		if it.sub != nil {
			for _, ev := range it.replay {
				it.sub(ev)
			}
			continue
		}
		for _, f := range subs {
			f(it.ev)
		}
	}
}

// nodeGone records g and tells the subscribers; a node already known dead
// is not reported again.
func (p *Postoffice) nodeGone(g GoneNode) {
	t := &p.gone
	t.mu.Lock()
	if old, ok := t.nodes[g.Node.ID]; ok && (old.Dead || !g.Dead) && !old.Replaced {
		t.mu.Unlock()
		return
	}
	if t.nodes == nil {
		t.nodes = map[int32]*GoneNode{}
	}
	if _, ok := t.nodes[g.Node.ID]; !ok {
		t.order = append(t.order, g.Node.ID)
	}
	t.nodes[g.Node.ID] = &g
	t.any.Store(true)
	ev := NodeEvent{ID: g.Node.ID, Role: g.Node.Role, Dead: g.Dead}
	t.history = append(t.history, ev)
	t.push(p, goneItem{ev: ev})
	t.mu.Unlock()
	switch {
	case !g.Dead:
		p.log.Info("a node left the job", "node", g.Node.String(), "reason", g.Reason)
	case g.Node.ID == p.myID.Load() && p.IsRecovery():
		p.log.Error("this server took over the id of a dead server whose state is lost: it starts empty, and workers get an error for its key range instead of its values",
			"dead", g.Node.String(), "reason", g.Reason)
	default:
		p.log.Error("a node of the job is dead", "node", g.Node.String(), "reason", g.Reason)
	}
}

// nodeRecovered records that n (is_recovery) took over a lost node's id.
func (p *Postoffice) nodeRecovered(n message.Node) {
	t := &p.gone
	t.mu.Lock()
	if g, ok := t.nodes[n.ID]; ok && g.Dead {
		g.Replaced = true
	}
	t.mu.Unlock()
	if p.resender != nil {
		p.resender.forgetPeer(n.ID)
	}
}

// Gone reports what this node knows of node id if the job lost it.
func (p *Postoffice) Gone(id int32) (GoneNode, bool) {
	t := &p.gone
	if !t.any.Load() {
		return GoneNode{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if g, ok := t.nodes[id]; ok {
		return *g, true
	}
	return GoneNode{}, false
}

// Failure returns nil, or an error wrapping ErrNodesLost that names every
// node whose loss makes the job's results incomplete: each server that
// died (its state is lost, even if a restarted process took its id), each
// worker that died and was not replaced, and the scheduler if it stopped
// answering. Nodes that left the job (drained) are no failure.
func (p *Postoffice) Failure() error {
	t := &p.gone
	if !t.any.Load() {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, id := range t.order {
		g := t.nodes[id]
		if !g.Dead || g.Replaced && g.Node.Role != message.RoleServer {
			continue
		}
		s := fmt.Sprintf("%s died (%s)", describe(g.Node), g.Reason)
		if g.Node.Role == message.RoleServer {
			s += fmt.Sprintf("; the values of its key range %s are lost", p.rangeOf(g.Node.ID))
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; without replicas a server's state dies with it, so the job's results are incomplete: restart the job", ErrNodesLost, strings.Join(parts, "; "))
}

// describe names a node for an error: role, id, rank and address.
func describe(n message.Node) string {
	if n.Role == message.RoleScheduler {
		return fmt.Sprintf("the scheduler (%s)", addrOf(n))
	}
	return fmt.Sprintf("%s %d (rank %d, %s)", n.Role, n.ID, message.IDToRank(int(n.ID)), addrOf(n))
}

// rangeOf is server id's key range, as ps-lite's GetServerKeyRanges gives
// it ("none" for a standby, which has no range of its own).
func (p *Postoffice) rangeOf(id int32) string {
	r := message.IDToRank(int(id))
	if r >= len(p.ranges) {
		return "(none: a standby)"
	}
	return fmt.Sprintf("[%d, %d)", p.ranges[r].Begin, p.ranges[r].End)
}

// nodeGoneNotice handles the scheduler's notice of a dead or departed node
// (scheduler.CmdNodeDead, CmdNodeLeft) on a server or worker.
func (p *Postoffice) nodeGoneNotice(m *message.Message) {
	if m.Meta.Sender != message.SchedulerID || len(m.Meta.Control.Nodes) != 1 {
		p.reject(fmt.Errorf("%s notice from node %d with %d nodes; only the scheduler (id 1) sends them, naming 1 node", m.Meta.Control.Cmd, m.Meta.Sender, len(m.Meta.Control.Nodes)))
		return
	}
	n := m.Meta.Control.Nodes[0]
	dead := m.Meta.Control.Cmd == scheduler.CmdNodeDead
	if dead && n.ID == p.myID.Load() && !p.IsRecovery() {
		// Alive, but too late: the others no longer wait for this node.
		err := fmt.Errorf("%w: the scheduler declared this node (%s) dead (%s): the job goes on without it; restart the job", ErrNodesLost, describe(n), m.Meta.Body)
		p.log.Error("the scheduler declared this node dead", "err", err)
		p.failBarriers(err)
	}
	p.nodeGone(GoneNode{Node: n, Dead: dead, Reason: string(m.Meta.Body)})
}

// failBarriers makes every barrier of this node, waiting now or later,
// return err: the scheduler will not release it.
func (p *Postoffice) failBarriers(err error) {
	p.mu.Lock()
	if p.barrierErr == nil {
		p.barrierErr = err
	}
	p.mu.Unlock()
	p.releaseBarrier()
}

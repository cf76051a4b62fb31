package postoffice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// FailedOver is set, in a job with PS_REPLICAS, once the scheduler
	// reported that every interval the dead server held failed over to a
	// live copy: nothing was lost, and the job's results are complete.
	FailedOver bool
}

// failover is the outcome of a dead server's failover, as the scheduler
// reported it (ReportFailover, scheduler.CmdFailedOver / CmdStateLost).
type failover struct {
	nothingLost bool
	detail      string
}

// ErrNodesLost is wrapped by Finalize's error (and Failure's) when the job
// lost a node while it ran: its results are incomplete.
var ErrNodesLost = errors.New("postoffice: the job lost nodes")

// ErrKeysLost is wrapped by Finalize's error (and Failure's) when the
// scheduler reported a key range lost (ReportKeysLost): its values are
// gone, and requests for it fail.
var ErrKeysLost = errors.New("postoffice: the job lost keys")

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
	// failovers are the outcomes of dead servers' failovers (PS_REPLICAS),
	// kept apart from nodes: the outcome may come before the death notice.
	failovers map[int32]failover
	changed   chan struct{} // closed and replaced on every death and outcome
	// keysLost are key ranges whose values are lost although no death
	// says so: a move interrupted with the scheduler (ReportKeysLost)
	keysLost []LostKeys
}

// LostKeys is a key range whose values the job lost, as the scheduler
// reported it (ReportKeysLost, scheduler.CmdKeysLost).
type LostKeys struct {
	Begin, End uint64
	Detail     string // what happened
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
	p.forgetPeer(g.Node.ID) // a new process under its id proves itself anew
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
	t.signal()
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
		out := *g
		out.FailedOver = g.Node.Role == message.RoleServer && t.failovers[id].nothingLost
		return out, true
	}
	return GoneNode{}, false
}

// GoneChanged returns a channel that is closed at the next change of what
// this node knows of lost nodes (a death, a departure, a failover's
// outcome): a caller waiting on a node re-checks Gone when it closes.
func (p *Postoffice) GoneChanged() <-chan struct{} {
	t := &p.gone
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changedLocked()
}

// changedLocked is the channel signal closes next; t.mu is held.
func (t *goneTable) changedLocked() chan struct{} {
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	return t.changed
}

// Failure returns nil, or an error that names every loss that makes the
// job's results incomplete. It wraps ErrNodesLost for the nodes: each
// server that died (its state is lost, even if a restarted process took
// its id) unless the scheduler reported that its failover lost nothing
// (PS_REPLICAS, ReportFailover), each worker that died and was not
// replaced, and the scheduler if it stopped answering; nodes that left the
// job (drained) are no failure. It wraps ErrKeysLost for the key ranges
// the scheduler reported lost (ReportKeysLost).
func (p *Postoffice) Failure() error {
	t := &p.gone
	if !t.any.Load() {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	nodes := t.nodesLost(p)
	if len(t.keysLost) == 0 {
		return nodes
	}
	parts := make([]string, 0, len(t.keysLost))
	for _, l := range t.keysLost {
		parts = append(parts, fmt.Sprintf("the values of keys [%d, %d) are lost: %s", l.Begin, l.End, l.Detail))
	}
	keys := fmt.Errorf("%w: %s; the job's results are incomplete: restart the job", ErrKeysLost, strings.Join(parts, "; "))
	if nodes != nil {
		return fmt.Errorf("%w; %w", nodes, keys)
	}
	return keys
}

// nodesLost is Failure's part for the nodes the job lost; t.mu is held.
func (t *goneTable) nodesLost(p *Postoffice) error {
	var parts []string
	for _, id := range t.order {
		g := t.nodes[id]
		if !g.Dead || g.Replaced && g.Node.Role != message.RoleServer {
			continue
		}
		f, reported := t.failovers[id]
		if g.Node.Role == message.RoleServer && f.nothingLost {
			continue // failed over to live copies: nothing was lost
		}
		s := fmt.Sprintf("%s died (%s)", describe(g.Node), g.Reason)
		switch {
		case g.Node.Role != message.RoleServer:
		case p.cfg.Replicas == 0:
			s += fmt.Sprintf("; the values of its key range %s are lost", p.rangeOf(g.Node.ID))
		case reported:
			s += "; " + f.detail
		default:
			s += "; no failover of it was reported, so the values it held may be lost"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return nil
	}
	why := "without replicas a server's state dies with it, so "
	if p.cfg.Replicas > 0 {
		why = ""
	}
	return fmt.Errorf("%w: %s; %sthe job's results are incomplete: restart the job", ErrNodesLost, strings.Join(parts, "; "), why)
}

// ReportFailover records, on the scheduler, the outcome of dead server
// id's failover (PS_REPLICAS) and tells every live server and worker
// (scheduler.CmdFailedOver or CmdStateLost): nothingLost when every
// interval it held failed over to a live copy, so that its death is no
// loss of the job (Failure, Finalize); detail says what happened to its
// intervals. The coordinator (elastic/coord) calls it after each failover.
func (p *Postoffice) ReportFailover(id int32, nothingLost bool, detail string) error {
	if p.driver == nil {
		return errors.New("postoffice: only the scheduler reports failovers")
	}
	if p.cfg.Replicas == 0 {
		return fmt.Errorf("postoffice: failover of server %d reported in a job without replicas (PS_REPLICAS=0): its state died with it", id)
	}
	p.failedOver(id, failover{nothingLost: nothingLost, detail: detail})
	if p.driver.do(func(s *scheduler.State) scheduler.Actions { return s.Failover(id, nothingLost, detail) }) {
		return nil
	}
	if p.isStopped() {
		return ErrStopped
	}
	return errNoScheduler
}

// ReportKeysLost records, on the scheduler, that the values of keys
// [begin, end) are lost, and tells every live server and worker
// (scheduler.CmdKeysLost): from then on Failure, and so Finalize, fail
// naming the range; detail says what happened. The coordinator
// (elastic/coord) calls it when a restarted scheduler finds a move its
// predecessor left half-done whose keys no live server holds.
func (p *Postoffice) ReportKeysLost(begin, end uint64, detail string) error {
	if p.driver == nil {
		return errors.New("postoffice: only the scheduler reports lost keys")
	}
	if end <= begin {
		return fmt.Errorf("postoffice: lost keys [%d, %d): the range is empty", begin, end)
	}
	p.keysLost(LostKeys{Begin: begin, End: end, Detail: detail})
	if p.driver.do(func(s *scheduler.State) scheduler.Actions { return s.KeysLost(begin, end, detail) }) {
		return nil
	}
	if p.isStopped() {
		return ErrStopped
	}
	return errNoScheduler
}

// KeysLost lists the key ranges the scheduler reported lost
// (ReportKeysLost), in the order reported.
func (p *Postoffice) KeysLost() []LostKeys {
	t := &p.gone
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]LostKeys(nil), t.keysLost...)
}

func (p *Postoffice) keysLost(l LostKeys) {
	t := &p.gone
	t.mu.Lock()
	t.keysLost = append(t.keysLost, l)
	t.any.Store(true)
	t.signal()
	t.mu.Unlock()
	p.log.Error("the values of a key range are lost: requests for it fail, and so does Finalize", "begin", l.Begin, "end", l.End, "detail", l.Detail)
}

// keysLostNotice handles the scheduler's scheduler.CmdKeysLost on a
// server or worker.
func (p *Postoffice) keysLostNotice(m *message.Message) {
	b := m.Meta.Body
	if m.Meta.Sender != message.SchedulerID || len(b) < 16 {
		p.reject(fmt.Errorf("%s notice from node %d with a body of %d bytes; only the scheduler (id 1) sends them, with at least 16 bytes (the range)", m.Meta.Control.Cmd, m.Meta.Sender, len(b)))
		return
	}
	l := LostKeys{Begin: binary.LittleEndian.Uint64(b), End: binary.LittleEndian.Uint64(b[8:]), Detail: string(b[16:])}
	if l.End <= l.Begin {
		p.reject(fmt.Errorf("%s notice from the scheduler names the empty range [%d, %d)", m.Meta.Control.Cmd, l.Begin, l.End))
		return
	}
	p.keysLost(l)
}

// failedOver records the outcome of dead server id's failover.
func (p *Postoffice) failedOver(id int32, f failover) {
	t := &p.gone
	t.mu.Lock()
	if t.failovers == nil {
		t.failovers = map[int32]failover{}
	}
	t.failovers[id] = f
	t.signal()
	t.mu.Unlock()
	if f.nothingLost {
		p.log.Info("a dead server failed over to live copies: nothing was lost", "node", id, "detail", f.detail)
	} else {
		p.log.Error("a dead server's failover lost values", "node", id, "detail", f.detail)
	}
}

// failoverNotice handles the scheduler's scheduler.CmdFailedOver or
// CmdStateLost on a server or worker.
func (p *Postoffice) failoverNotice(m *message.Message) {
	if m.Meta.Sender != message.SchedulerID || len(m.Meta.Control.Nodes) != 1 {
		p.reject(fmt.Errorf("%s notice from node %d with %d nodes; only the scheduler (id 1) sends them, naming 1 node", m.Meta.Control.Cmd, m.Meta.Sender, len(m.Meta.Control.Nodes)))
		return
	}
	p.failedOver(m.Meta.Control.Nodes[0].ID, failover{nothingLost: m.Meta.Control.Cmd == scheduler.CmdFailedOver, detail: string(m.Meta.Body)})
}

// signal wakes awaitFailovers; t.mu is held.
func (t *goneTable) signal() {
	if t.changed != nil {
		close(t.changed)
	}
	t.changed = make(chan struct{})
}

// failoverWait bounds how long Finalize waits for the outcome of a dead
// server's failover: the coordinator publishes the failover's routing
// table first, waiting up to PublishWait (2 s) for each of the servers'
// and the workers' acknowledgements.
const failoverWait = 15 * time.Second

// awaitFailovers waits, in a job with PS_REPLICAS, until the outcome of
// every dead server's failover is known (a server that died near the end
// of the job), so that Failure counts exactly the servers whose values
// were lost; it gives up after wait, once the scheduler is lost, or when
// the node stops.
func (p *Postoffice) awaitFailovers(wait time.Duration) {
	if p.cfg.Replicas == 0 {
		return
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	t := &p.gone
	for {
		t.mu.Lock()
		pending := false
		for _, g := range t.nodes {
			if _, ok := t.failovers[g.Node.ID]; ok || !g.Dead || g.Node.Role != message.RoleServer {
				continue
			}
			pending = true
		}
		if sched, ok := t.nodes[message.SchedulerID]; ok && sched.Dead {
			pending = false // nobody will report it
		}
		changed := t.changedLocked()
		t.mu.Unlock()
		if !pending {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			p.log.Warn("no failover outcome of a dead server reported in time; the job counts it as lost", "waited", wait)
			return
		case <-p.stopped:
			return
		}
	}
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

// retirePath drops this node's path to old, a node that had the address
// of newcomer n, another id (a server restarted at a dead server's address
// joins under a new id, see scheduler's rejoin): two processes cannot
// listen on one address, so old is gone. Left in place, the transport's
// connection to old would reconnect to n under this node's identity,
// which the path to n's id uses too, and the two would take the identity
// from each other (ZMQ's ROUTER hands it to the newer); an anonymous one
// stays apart, and what still goes to old arrives as from an unknown
// sender.
func (p *Postoffice) retirePath(old int32, n message.Node) {
	dead := n
	dead.ID = old
	if err := p.tr.Connect(dead, message.Empty); err != nil {
		p.log.Warn("cannot retire the path to a node whose address a new one took", "old", old, "new", n.String(), "err", err)
	}
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

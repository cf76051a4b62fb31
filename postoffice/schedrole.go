package postoffice

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/elasticps/elasticps/membership"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/scheduler"
)

// schedulerDriver runs the scheduler role: one goroutine (run) owns the
// scheduler.State and is the only one to step it. Everything that changes
// or reads the state reaches run as a value over a channel:
//
//   - the control requests the receive loop reads (ADD_NODE, BARRIER
//     requests, HEARTBEAT), in arrival order; the receive loop waits until
//     each is handled, so a registration or barrier is carried out before
//     the next message is read, as when the receive loop handled it itself;
//   - a tick, which lets parked recoveries go on once the node they replace
//     timed out (with heartbeat timeouts or gossip) and ends a restarted
//     scheduler's rebuild;
//   - membership gossip events (a server seen to fail);
//   - requests from other goroutines (Members, DeadNodes, Leave, ...).
//
// run carries out the Actions of each step (connect, then send) before it
// takes the next input. Before Start, and once the node stopped, there is
// no state to ask: requests return at once without an answer.
type schedulerDriver struct {
	p        *Postoffice
	controlc chan request
	eventc   chan membership.Event
	reqc     chan request
	running  chan struct{} // closed when run starts
	done     chan struct{} // closed when run returns
}

// request is a step run on the driver's goroutine; done is closed once the
// step and its Actions are carried out.
type request struct {
	step func(*scheduler.State) scheduler.Actions
	done chan struct{}
}

func newSchedulerDriver(p *Postoffice) *schedulerDriver {
	return &schedulerDriver{
		p:        p,
		controlc: make(chan request),
		eventc:   make(chan membership.Event),
		reqc:     make(chan request),
		running:  make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// start runs the driver over a new state; a second call does nothing.
func (d *schedulerDriver) start(cfg scheduler.Config, now time.Time) {
	if isClosed(d.running) {
		return
	}
	close(d.running)
	go d.run(scheduler.New(cfg, now))
}

func (d *schedulerDriver) run(s *scheduler.State) {
	defer close(d.done)
	// Always a tick: besides heartbeat timeouts and gossip, it ends a
	// restarted scheduler's rebuild when not every node came back
	// (scheduler.Config.RebuildWait).
	every := time.Second
	if t := d.p.cfg.HeartbeatTimeout; t > 0 {
		every = min(t/4, every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	tick := t.C
	for {
		select {
		case r := <-d.controlc:
			d.apply(r.step(s))
			close(r.done)
		case now := <-tick:
			d.apply(s.Tick(now))
		case ev := <-d.eventc:
			d.apply(d.memberEvent(s, ev))
		case r := <-d.reqc:
			d.apply(r.step(s))
			close(r.done)
		case <-d.p.stopped:
			return
		}
	}
}

// deliver hands v to run over ch. It reports false, at once, when the
// driver does not run: before Start and once the node stopped.
func deliver[T any](d *schedulerDriver, ch chan<- T, v T) bool {
	if !isClosed(d.running) {
		return false
	}
	select {
	case ch <- v:
		return true
	case <-d.p.stopped:
		return false
	}
}

// do runs step on the driver's goroutine and waits until it and its
// Actions are done; false when the driver does not run or, on a node that
// is no scheduler, d is nil.
func (d *schedulerDriver) do(step func(*scheduler.State) scheduler.Actions) bool {
	if d == nil {
		return false
	}
	return d.call(d.reqc, step)
}

// query is do for a step that only reads the state.
func (d *schedulerDriver) query(read func(*scheduler.State)) bool {
	return d.do(func(s *scheduler.State) scheduler.Actions { read(s); return scheduler.Actions{} })
}

func (d *schedulerDriver) call(ch chan<- request, step func(*scheduler.State) scheduler.Actions) bool {
	r := request{step: step, done: make(chan struct{})}
	if !deliver(d, ch, r) {
		return false
	}
	<-r.done
	return true
}

// wait returns once run returned (at once if it never ran).
func (d *schedulerDriver) wait() {
	if d != nil && isClosed(d.running) {
		<-d.done
	}
}

// control hands a control request from the receive loop to the driver and
// waits until it is handled. Once the node stopped it is dropped.
func (d *schedulerDriver) control(m *message.Message) {
	d.call(d.controlc, func(s *scheduler.State) scheduler.Actions { return d.step(s, m) })
}

// step is the scheduler's handling of a control request.
func (d *schedulerDriver) step(s *scheduler.State, m *message.Message) scheduler.Actions {
	switch m.Meta.Control.Cmd {
	case message.CmdAddNode:
		if len(m.Meta.Control.Nodes) != 1 {
			return rejected(fmt.Errorf("ADD_NODE from node %d carries %d nodes; a registration carries exactly 1", m.Meta.Sender, len(m.Meta.Control.Nodes)))
		}
		if n := m.Meta.Control.Nodes[0]; n.ID != message.Empty {
			// A node of a running job re-registering (rebuild.go in
			// package scheduler has the rule).
			return s.Rejoin(time.Now(), n, m.Meta.Body)
		}
		if n, limit := s.Size(), d.p.cfg.Limits.MaxNodes; n >= limit && m.Meta.Sender == message.Empty {
			d.p.refused.add(ReasonNodes)
			return rejected(errTooManyNodes(n, limit))
		}
		return s.AddNode(time.Now(), m.Meta.Sender, m.Meta.Control.Nodes[0])
	case message.CmdBarrier:
		return s.Barrier(m.Meta.Sender, m.Meta.AppID, m.Meta.CustomerID, m.Meta.Control.BarrierGroup)
	case message.CmdInstanceBarrier:
		return s.InstanceBarrier(m.Meta.Sender, m.Meta.AppID, m.Meta.CustomerID, m.Meta.Control.BarrierGroup)
	case message.CmdHeartbeat:
		if m.Meta.Sender == message.Empty {
			return rejected(errors.New("HEARTBEAT from an unregistered node"))
		}
		return s.Heartbeat(time.Now(), m.Meta.Sender)
	}
	return rejected(fmt.Errorf("unknown control command %d from node %d", m.Meta.Control.Cmd, m.Meta.Sender))
}

func rejected(err error) scheduler.Actions { return scheduler.Actions{Errors: []error{err}} }

// memberEvent handles a gossip event: a server seen to fail is dead at
// once (a restarted process then takes its id).
func (d *schedulerDriver) memberEvent(s *scheduler.State, ev membership.Event) scheduler.Actions {
	meta, err := membership.DecodeMeta(ev.Meta)
	if err != nil || meta.Role != message.RoleServer.String() {
		return scheduler.Actions{}
	}
	switch ev.Kind {
	case membership.Fail:
		// Ignore a stale member whose id a recovered process already holds.
		if current := s.Addr(meta.ID); current != "" && current != meta.Addr {
			return scheduler.Actions{}
		}
		d.p.log.Warn("membership: server failed", "node", meta.ID, "addr", meta.Addr)
		return s.MarkFailed(meta.ID)
	case membership.Leave:
		d.p.vlog(1, "membership: server left", "node", meta.ID)
	}
	return scheduler.Actions{}
}

// apply carries out the scheduler's actions: connect first, then send.
func (d *schedulerDriver) apply(a scheduler.Actions) {
	p := d.p
	for _, e := range a.Events {
		p.vlog(1, e)
	}
	if a.Rebuilt != nil {
		p.rebuilt(a.Rebuilt)
	}
	for _, err := range a.Errors {
		p.reject(err)
	}
	for _, g := range a.Gone {
		p.nodeGone(GoneNode{Node: g.Node, Dead: g.Dead, Reason: g.Reason})
	}
	for _, n := range a.Connect {
		if n.IsRecovery {
			p.nodeRecovered(n)
		}
		if err := p.tr.Connect(n, message.SchedulerID); err != nil {
			p.log.Error("scheduler cannot connect to node", "node", n.String(), "err", err)
			continue
		}
		p.mu.Lock()
		old, ok := p.connected[addrOf(n)]
		p.connected[addrOf(n)] = n.ID
		p.mu.Unlock()
		if ok && old != n.ID {
			p.retirePath(old, n)
		}
	}
	for _, m := range a.Send {
		p.proveScheduler(m)
		if err := p.sendControl(m); err != nil {
			p.log.Error("scheduler cannot send", "to", m.Meta.Recver, "cmd", m.Meta.Control.Cmd.String(), "err", err)
		}
	}
	if a.Ready {
		p.markReady()
	}
}

// startScheduler starts the scheduler role once the transport is bound as
// me: the driver, the gossip it listens to, and the self-connection.
func (p *Postoffice) startScheduler(me message.Node) error {
	p.driver.start(scheduler.Config{
		NumServers: p.cfg.NumServers * p.cfg.groupSize(), NumWorkers: p.cfg.NumWorkers * p.cfg.groupSize(),
		GroupSize: p.cfg.GroupSize,
		Self:      me, HeartbeatTimeout: p.cfg.HeartbeatTimeout, HeartbeatInterval: p.cfg.HeartbeatInterval,
		Gossip: p.cfg.GossipPort > 0, Replicas: p.cfg.Replicas,
	}, p.startTime)
	if p.auth.key == nil {
		p.log.Warn("PS_AUTH_TOKEN is not set: the job is open; any host that reaches its ports can join it or send it control messages (docs/security.md)")
	}
	if err := p.startGossip(me); err != nil {
		return err
	}
	// The scheduler talks to itself (its own barrier requests) over a
	// self-connection, as ps-lite does.
	if err := p.tr.Connect(me, message.SchedulerID); err != nil {
		return fmt.Errorf("postoffice: scheduler cannot connect to itself: %w", err)
	}
	return nil
}

// onMembership receives the scheduler's gossip events (on the membership
// package's event goroutine) and hands them to the driver.
func (p *Postoffice) onMembership(ev membership.Event) {
	deliver(p.driver, p.driver.eventc, ev)
}

// errNoScheduler is returned by the scheduler's commands before Start.
var errNoScheduler = errors.New("postoffice: the scheduler is not started")

// Leave records on the scheduler that server id left the job after being
// drained: barriers stop waiting for it and it is never reported dead.
// It fails before Start, and returns ErrStopped once the node stopped.
func (p *Postoffice) Leave(id int32) error {
	if p.driver == nil {
		return errors.New("postoffice: only the scheduler records that a node left")
	}
	if p.driver.do(func(s *scheduler.State) scheduler.Actions { return s.Leave(id) }) {
		return nil
	}
	if p.isStopped() {
		return ErrStopped
	}
	return errNoScheduler
}

// HasLeft reports, on the scheduler, whether node id left the job (false
// before Start and after Stop).
func (p *Postoffice) HasLeft(id int32) bool {
	left := false
	p.driver.query(func(s *scheduler.State) { left = s.Left(id) })
	return left
}

// Standbys lists, on the scheduler, the servers that joined the running job
// (scale-out); none before Start and after Stop.
func (p *Postoffice) Standbys() []int32 {
	var ids []int32
	p.driver.query(func(s *scheduler.State) { ids = s.Standbys() })
	return ids
}

// OnRebuild calls f, on the scheduler, when the scheduler rebuilt its state
// from a running job's nodes (it was restarted; see package scheduler,
// Rejoin), with the state each node re-registered with (SetRejoinState):
// on the driver's goroutine, before the node is ready and before any node
// is declared dead, so f must not block nor call the scheduler's methods.
// Register it before Start.
func (p *Postoffice) OnRebuild(f func(states map[int32][]byte)) {
	p.sched.mu.Lock()
	p.sched.rebuilt = append(p.sched.rebuilt, f)
	p.sched.mu.Unlock()
}

// rebuilt marks this scheduler as one that took over a running job
// (IsRecovery: it skips the start barrier the others passed long ago) and
// tells the OnRebuild subscribers.
func (p *Postoffice) rebuilt(nodes []scheduler.Rejoined) {
	p.mu.Lock()
	p.myNode.IsRecovery = true
	p.mu.Unlock()
	states := make(map[int32][]byte, len(nodes))
	for _, r := range nodes {
		states[r.Node.ID] = r.State
	}
	p.log.Warn("scheduler: restarted into a running job: rebuilt its state from the nodes that re-registered (ids, ranks and addresses as they were)",
		"nodes", len(nodes), "expected", p.cfg.NumServers+p.cfg.NumWorkers)
	p.sched.mu.Lock()
	subs := slices.Clone(p.sched.rebuilt)
	p.sched.mu.Unlock()
	for _, f := range subs {
		f(states)
	}
}

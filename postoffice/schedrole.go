package postoffice

import (
	"errors"
	"fmt"
	"time"

	"github.com/elasticps/elasticps/membership"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/scheduler"
)

// schedCall runs f on the scheduler state under the node lock; the receive
// loop takes the same lock for its steps.
func (p *Postoffice) schedCall(f func(*scheduler.State)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sched != nil {
		f(p.sched)
	}
}

// apply carries out the scheduler's actions: connect first, then send.
func (p *Postoffice) apply(a scheduler.Actions) {
	for _, e := range a.Events {
		p.vlog(1, e)
	}
	for _, err := range a.Errors {
		p.reject(err)
	}
	for _, n := range a.Connect {
		if err := p.tr.Connect(n, message.SchedulerID); err != nil {
			p.log.Error("scheduler cannot connect to node", "node", n.String(), "err", err)
			continue
		}
		p.mu.Lock()
		p.connected[addrOf(n)] = n.ID
		p.mu.Unlock()
		p.hbMu.Lock()
		p.heartbeats[n.ID] = time.Now()
		p.hbMu.Unlock()
	}
	for _, m := range a.Send {
		if err := p.sendControl(m); err != nil {
			p.log.Error("scheduler cannot send", "to", m.Meta.Recver, "cmd", m.Meta.Control.Cmd.String(), "err", err)
		}
	}
	if a.Ready {
		p.markReady()
	}
}

func (p *Postoffice) schedulerAddNode(m *message.Message) {
	if len(m.Meta.Control.Nodes) != 1 {
		p.reject(fmt.Errorf("ADD_NODE from node %d carries %d nodes; a registration carries exactly 1", m.Meta.Sender, len(m.Meta.Control.Nodes)))
		return
	}
	var a scheduler.Actions
	now := time.Now()
	p.schedCall(func(s *scheduler.State) { a = s.AddNode(now, m.Meta.Sender, m.Meta.Control.Nodes[0]) })
	p.apply(a)
}

// schedulerTickLoop gives the scheduler state its clock: parked recoveries
// retry once the node they replace has timed out.
func (p *Postoffice) schedulerTickLoop() {
	every := time.Second
	if p.cfg.HeartbeatTimeout > 0 {
		every = min(p.cfg.HeartbeatTimeout/4, every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stopped:
			return
		case now := <-t.C:
			var a scheduler.Actions
			p.schedCall(func(s *scheduler.State) { a = s.Tick(now) })
			p.apply(a)
		}
	}
}

// Leave records on the scheduler that server id left the job after being
// drained: barriers stop waiting for it and it is never reported dead.
func (p *Postoffice) Leave(id int32) error {
	if p.cfg.Role != message.RoleScheduler {
		return errors.New("postoffice: only the scheduler records that a node left")
	}
	var a scheduler.Actions
	p.schedCall(func(s *scheduler.State) { a = s.Leave(id) })
	p.apply(a)
	return nil
}

// HasLeft reports, on the scheduler, whether node id left the job.
func (p *Postoffice) HasLeft(id int32) bool {
	left := false
	p.schedCall(func(s *scheduler.State) { left = s.Left(id) })
	return left
}

// Standbys lists, on the scheduler, the servers that joined the running job
// (scale-out).
func (p *Postoffice) Standbys() []int32 {
	var ids []int32
	p.schedCall(func(s *scheduler.State) { ids = s.Standbys() })
	return ids
}

// onMembership runs on the scheduler for gossip events: a server seen to
// fail is dead at once (a restarted process then takes its id).
func (p *Postoffice) onMembership(ev membership.Event) {
	meta, err := membership.DecodeMeta(ev.Meta)
	if err != nil || meta.Role != message.RoleServer.String() {
		return
	}
	switch ev.Kind {
	case membership.Fail:
		// Ignore a stale member whose id a recovered process already holds.
		current := ""
		p.schedCall(func(s *scheduler.State) { current = s.Addr(meta.ID) })
		if current != "" && current != meta.Addr {
			return
		}
		p.log.Warn("membership: server failed", "node", meta.ID, "addr", meta.Addr)
		var a scheduler.Actions
		p.schedCall(func(s *scheduler.State) { a = s.MarkFailed(meta.ID) })
		p.apply(a)
	case membership.Leave:
		p.vlog(1, "membership: server left", "node", meta.ID)
	}
}

package postoffice

import (
	"errors"
	"fmt"
	"maps"

	"github.com/elasticps/elasticps/message"
)

// Barrier blocks until every node of group has called Barrier
// (ps::Postoffice::Barrier). One response releases every customer of this
// process that is waiting, not only customer 0. With instance groups
// (Config.GroupSize > 1) it waits for one instance of every process of the
// group, as the BytePS fork's Barrier does.
func (p *Postoffice) Barrier(customerID int, group int) error {
	return p.barrier(customerID, group, message.CmdBarrier)
}

// barrier is Barrier with the request's command (see lifecycleBarrier).
func (p *Postoffice) barrier(customerID int, group int, cmd message.Command) error {
	ids := p.NodeIDs(group)
	if len(ids) <= 1 || cmd == message.CmdBarrier && len(ids) <= p.cfg.groupSize() {
		// with instance groups a BARRIER is one of processes: a group
		// of one process has nothing to wait for
		return nil
	}
	role := p.cfg.Role
	if role == message.RoleScheduler && group&message.SchedulerGroup == 0 ||
		role == message.RoleWorker && group&message.WorkerGroup == 0 ||
		role == message.RoleServer && group&message.ServerGroup == 0 {
		return fmt.Errorf("postoffice: a %s cannot join a barrier on group %d, which does not include it", role, group)
	}
	ch := make(chan struct{})
	p.mu.Lock()
	if err := p.barrierErr; err != nil {
		p.mu.Unlock()
		return fmt.Errorf("postoffice: barrier on group %d: %w", group, err)
	}
	if old, ok := p.barrierWait[int32(customerID)]; ok {
		p.mu.Unlock()
		_ = old
		return fmt.Errorf("postoffice: customer %d is already in a barrier", customerID)
	}
	p.barrierWait[int32(customerID)] = barrierWaiter{done: ch, group: int32(group), cmd: cmd}
	p.mu.Unlock()
	if err := p.sendBarrier(int32(customerID), int32(group), cmd); err != nil && !p.awaitsScheduler(err) {
		p.mu.Lock()
		delete(p.barrierWait, int32(customerID))
		p.mu.Unlock()
		return fmt.Errorf("postoffice: barrier on group %d: %w", group, err)
	}
	select {
	case <-ch:
	case <-p.stopped:
		return ErrStopped
	}
	if p.isStopped() {
		return ErrStopped
	}
	p.mu.Lock()
	err := p.barrierErr
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("postoffice: barrier on group %d: %w", group, err)
	}
	return nil
}

// awaitsScheduler reports whether a barrier whose request could not be
// sent (err) waits on: the scheduler is lost, so the request is sent again
// when it is back (resendBarriers), or the barrier fails when it does not
// come back in time. A van that dials a lost peer again (the fabric van)
// fails the send, where others queue it.
func (p *Postoffice) awaitsScheduler(err error) bool {
	if errors.Is(err, ErrStopped) {
		return false
	}
	_, lost := p.SchedulerLost()
	if lost {
		p.vlog(1, "barrier request not sent while the scheduler is lost: it is sent again when it is back", "err", err)
	}
	return lost
}

// barrierWaiter is a customer waiting in a barrier.
type barrierWaiter struct {
	done  chan struct{} // closed on release
	group int32
	cmd   message.Command // CmdBarrier or CmdInstanceBarrier
}

// sendBarrier sends customer's barrier request (cmd) for group to the
// scheduler.
func (p *Postoffice) sendBarrier(customer, group int32, cmd message.Command) error {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = message.SchedulerID
	m.Meta.Request = true
	m.Meta.AppID = 0
	m.Meta.CustomerID = customer
	m.Meta.Control.Cmd = cmd
	m.Meta.Control.BarrierGroup = group
	return p.sendControl(m)
}

// resendBarriers sends the requests of every barrier this node waits in
// again (to a scheduler that came back: it counts each arrival once).
func (p *Postoffice) resendBarriers() {
	p.mu.Lock()
	waiting := make(map[int32]barrierWaiter, len(p.barrierWait))
	maps.Copy(waiting, p.barrierWait)
	p.mu.Unlock()
	for c, w := range waiting {
		if err := p.sendBarrier(c, w.group, w.cmd); err != nil {
			p.log.Warn("barrier request not sent again", "group", w.group, "err", err)
		}
	}
}

func (p *Postoffice) releaseBarrier() {
	p.mu.Lock()
	for c, w := range p.barrierWait {
		close(w.done)
		delete(p.barrierWait, c)
	}
	p.mu.Unlock()
}

package postoffice

import (
	"fmt"

	"github.com/elasticps/elasticps/message"
)

// Barrier blocks until every node of group has called Barrier
// (ps::Postoffice::Barrier). One response releases every customer of this
// process that is waiting, not only customer 0.
func (p *Postoffice) Barrier(customerID int, group int) error {
	ids := p.NodeIDs(group)
	if len(ids) <= 1 {
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
	p.barrierWait[int32(customerID)] = ch
	p.mu.Unlock()
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = message.SchedulerID
	m.Meta.Request = true
	m.Meta.AppID = 0
	m.Meta.CustomerID = int32(customerID)
	m.Meta.Control.Cmd = message.CmdBarrier
	m.Meta.Control.BarrierGroup = int32(group)
	if err := p.sendControl(m); err != nil {
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

func (p *Postoffice) releaseBarrier() {
	p.mu.Lock()
	for c, ch := range p.barrierWait {
		close(ch)
		delete(p.barrierWait, c)
	}
	p.mu.Unlock()
}

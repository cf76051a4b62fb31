package postoffice

import (
	"errors"
	"fmt"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/scheduler"
)

// DeadNodes is ps-lite's GetDeadNodes(t): on the scheduler, the servers and
// workers silent for longer than timeout; elsewhere, the scheduler if it is.
func (p *Postoffice) DeadNodes(timeout time.Duration) []int32 {
	if !p.isReady() || timeout <= 0 {
		return nil
	}
	now := time.Now()
	if p.cfg.Role == message.RoleScheduler {
		var out []int32
		p.driver.query(func(s *scheduler.State) { out = s.DeadNodes(now, timeout) })
		return out
	}
	if !now.After(p.startTime.Add(timeout)) {
		return nil
	}
	p.hbMu.Lock()
	last := p.schedBeat
	p.hbMu.Unlock()
	if last.IsZero() || now.After(last.Add(timeout)) {
		return []int32{message.SchedulerID}
	}
	return nil
}

// heardScheduler records, on a server or worker, that the scheduler is
// alive (its node list or its answer to a heartbeat arrived). The
// scheduler's own record of the others is scheduler.State's.
func (p *Postoffice) heardScheduler() {
	p.hbMu.Lock()
	p.schedBeat = time.Now()
	p.hbMu.Unlock()
}

// checkScheduler declares the scheduler dead, once, when it has not
// answered heartbeats for PS_HEARTBEAT_TIMEOUT: nobody would tell this node
// of a dead server any more, nor release its barriers, so they fail now and
// the node's operations are bounded by their own wait (see kv.Worker).
func (p *Postoffice) checkScheduler(now time.Time) {
	timeout := p.cfg.HeartbeatTimeout
	if timeout <= 0 || !now.After(p.startTime.Add(timeout)) {
		return
	}
	p.hbMu.Lock()
	last := p.schedBeat
	p.hbMu.Unlock()
	if !last.IsZero() && !now.After(last.Add(timeout)) {
		return
	}
	if g, ok := p.Gone(message.SchedulerID); ok && g.Dead {
		return
	}
	reason := fmt.Sprintf("no answer to heartbeats for %s (PS_HEARTBEAT_TIMEOUT)", timeout)
	p.failBarriers(fmt.Errorf("%w: the scheduler (%s:%d) is unreachable: %s", ErrNodesLost, p.cfg.SchedulerHost, p.cfg.SchedulerPort, reason))
	p.nodeGone(GoneNode{Node: p.schedulerNode(), Dead: true, Reason: reason})
}

// startHeartbeat starts, on a server or worker, the heartbeats to the
// scheduler (PS_HEARTBEAT_INTERVAL); once per node.
func (p *Postoffice) startHeartbeat() {
	if p.cfg.Role == message.RoleScheduler || p.cfg.HeartbeatInterval <= 0 {
		return
	}
	p.startMu.Lock()
	defer p.startMu.Unlock()
	if p.hbDone == nil {
		return
	}
	done := p.hbDone
	p.hbDone = nil
	go func() {
		defer close(done)
		t := time.NewTicker(p.cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-p.stopped:
				return
			case now := <-t.C:
				p.checkScheduler(now)
				m := &message.Message{Meta: message.NewMeta()}
				m.Meta.Recver = message.SchedulerID
				m.Meta.Control.Cmd = message.CmdHeartbeat
				m.Meta.Control.Nodes = []message.Node{p.MyNode()}
				if err := p.sendControl(m); err != nil && !errors.Is(err, ErrStopped) {
					p.log.Warn("heartbeat not sent", "err", err)
				}
			}
		}
	}()
}

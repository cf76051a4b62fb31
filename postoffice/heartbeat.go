package postoffice

import (
	"errors"
	"fmt"
	"slices"
	"sync"
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

// schedLink is what a node keeps of a lost scheduler and of its rebuild.
type schedLink struct {
	mu      sync.Mutex
	lostAt  time.Time // server, worker: when the scheduler was found lost (zero: it answers)
	logged  time.Time // when waiting for it was last logged
	gaveUp  bool      // waited longer than schedulerWait: barriers fail
	state   func() []byte
	rebuilt []func(map[int32][]byte) // scheduler: OnRebuild subscribers
	peers   map[int32]time.Time      // worker: when each server last answered a probe
	probing map[int32]bool           // worker: servers whose probe is still being sent
}

// schedulerWaitFactor: by default a node waits this many
// PS_HEARTBEAT_TIMEOUTs for a lost scheduler to come back before its
// barriers fail (Config.SchedulerWait); schedulerLogEvery spaces the lines
// that say it still waits.
const (
	schedulerWaitFactor = 30
	schedulerLogEvery   = 30 * time.Second
)

func (p *Postoffice) schedulerWait() time.Duration {
	if w := p.cfg.SchedulerWait; w > 0 {
		return w
	}
	return schedulerWaitFactor * p.cfg.HeartbeatTimeout
}

// SetRejoinState sets, on a server or worker, what the node sends along
// when it re-registers with a restarted scheduler (the scheduler's
// OnRebuild subscribers get it): an elastic node's routing table. Set it
// before Start.
func (p *Postoffice) SetRejoinState(f func() []byte) {
	p.sched.mu.Lock()
	p.sched.state = f
	p.sched.mu.Unlock()
}

// checkScheduler finds the scheduler lost when it has not answered
// heartbeats for PS_HEARTBEAT_TIMEOUT. The data path does not need it, so
// the node goes on (a worker bounds the operations waiting on a server
// that stopped answering, as nobody would report its death: see
// SchedulerLost), and re-registers with its id every heartbeat until the
// scheduler (restarted with the same DMLC_PS_ROOT_URI/PORT) answers with
// the node list. After Config.SchedulerWait without one the loss
// is final: the scheduler is reported gone (OnNodeGone, Failure) and the
// node's barriers fail, as the job cannot finish.
func (p *Postoffice) checkScheduler(now time.Time) {
	timeout := p.cfg.HeartbeatTimeout
	if timeout <= 0 || !now.After(p.startTime.Add(timeout)) {
		return
	}
	p.hbMu.Lock()
	last := p.schedBeat
	p.hbMu.Unlock()
	l := &p.sched
	l.mu.Lock()
	lostAt, first := l.lostAt, false
	if lostAt.IsZero() {
		if !last.IsZero() && !now.After(last.Add(timeout)) {
			l.mu.Unlock()
			return
		}
		lostAt, first = now, true
		l.lostAt, l.logged = now, now
	}
	logAgain := !first && now.Sub(l.logged) >= schedulerLogEvery
	if logAgain {
		l.logged = now
	}
	giveUp := !l.gaveUp && now.Sub(lostAt) > p.schedulerWait()
	if giveUp {
		l.gaveUp = true
	}
	l.mu.Unlock()
	addr := fmt.Sprintf("%s:%d", p.cfg.SchedulerHost, p.cfg.SchedulerPort)
	reason := fmt.Sprintf("no answer to heartbeats for %s (PS_HEARTBEAT_TIMEOUT)", timeout)
	if first && p.resender != nil {
		// A restarted scheduler counts its timestamps from 0 again: what
		// it sends must not be taken for duplicates of the old one's.
		p.resender.forgetPeer(message.SchedulerID)
	}
	switch {
	case first:
		p.log.Warn("the scheduler is unreachable: training goes on, and this node re-registers with it every PS_HEARTBEAT_INTERVAL until it is back (restart it with the same environment)",
			"scheduler", addr, "reason", reason)
	case logAgain:
		p.log.Warn("still waiting for the scheduler", "scheduler", addr, "waited", now.Sub(lostAt).Round(time.Second))
	}
	if giveUp {
		reason = fmt.Sprintf("%s, and it did not come back within %s", reason, p.schedulerWait())
		p.failBarriers(fmt.Errorf("%w: the scheduler (%s) is unreachable: %s", ErrNodesLost, addr, reason))
		p.nodeGone(GoneNode{Node: p.schedulerNode(), Dead: true, Reason: reason})
	}
	if now.Sub(lostAt) <= p.schedulerWait() {
		// not after: a scheduler started later at this address runs
		// another job, which must not take this node for one of its own
		p.rejoin()
	}
}

// probeServers sends, on a worker that lost the scheduler, a HEARTBEAT to
// every server it is connected to; a live server answers it
// (answerProbe), which HeardFrom records: the scheduler cannot say any
// more which servers are alive. Each probe is sent on its own goroutine,
// at most one per server at a time: a send to a dead server can block
// (the fabric van re-dials it and waits for the dial's timeout, longer
// than PS_HEARTBEAT_TIMEOUT), and must neither delay the probes of the
// live ones, whose operations would fail as unanswered, nor this node's
// heartbeats.
func (p *Postoffice) probeServers() {
	p.mu.Lock()
	var ids []int32
	for _, id := range p.connected {
		if id >= 8 && id%2 == 0 && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.sched.mu.Lock()
		busy := p.sched.probing[id]
		if !busy {
			if p.sched.probing == nil {
				p.sched.probing = map[int32]bool{}
			}
			p.sched.probing[id] = true
		}
		p.sched.mu.Unlock()
		if busy {
			continue
		}
		go func() {
			if err := p.sendHeartbeat(id); err != nil && !errors.Is(err, ErrStopped) {
				p.vlog(1, "probe not sent", "server", id, "err", err)
			}
			p.sched.mu.Lock()
			delete(p.sched.probing, id)
			p.sched.mu.Unlock()
		}()
	}
}

// sendHeartbeat sends node `to` a HEARTBEAT naming this node.
func (p *Postoffice) sendHeartbeat(to int32) error {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = to
	m.Meta.Control.Cmd = message.CmdHeartbeat
	m.Meta.Control.Nodes = []message.Node{p.MyNode()}
	return p.sendControl(m)
}

// peerHeartbeat handles a HEARTBEAT from a node other than the scheduler:
// a server answers a worker's probe; a worker records the answer.
func (p *Postoffice) peerHeartbeat(m *message.Message) {
	from := m.Meta.Sender
	switch {
	case p.cfg.Role == message.RoleServer && from >= 9 && from%2 == 1:
		if err := p.sendHeartbeat(from); err != nil && !errors.Is(err, ErrStopped) {
			p.vlog(1, "probe not answered", "worker", from, "err", err)
		}
	case p.cfg.Role == message.RoleWorker && from >= 8 && from%2 == 0:
		p.sched.mu.Lock()
		if p.sched.peers == nil {
			p.sched.peers = map[int32]time.Time{}
		}
		p.sched.peers[from] = time.Now()
		p.sched.mu.Unlock()
	}
}

// HeardFrom is, on a worker, when server id last answered a liveness probe
// (sent while the scheduler is lost, see SchedulerLost); zero if never.
func (p *Postoffice) HeardFrom(id int32) time.Time {
	p.sched.mu.Lock()
	defer p.sched.mu.Unlock()
	return p.sched.peers[id]
}

// rejoin sends the scheduler this node's registration with its id, rank
// and address, and its rejoin state (SetRejoinState).
// A process with several customers that registered (each counted as a
// worker of the job) re-registers each, under the one id, so that the
// restarted scheduler counts them all.
func (p *Postoffice) rejoin() {
	p.sched.mu.Lock()
	state := p.sched.state
	p.sched.mu.Unlock()
	var body []byte
	if state != nil {
		body = state()
	}
	for _, c := range p.registeredCustomers() {
		n := p.MyNode()
		n.CustomerID = c
		n.Standby = p.cfg.Standby
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.Recver = message.SchedulerID
		m.Meta.Control.Cmd = message.CmdAddNode
		m.Meta.Control.Nodes = []message.Node{n}
		m.Meta.Body = body
		if err := p.sendControl(m); err != nil && !errors.Is(err, ErrStopped) {
			p.vlog(1, "re-registration not sent", "err", err)
		}
	}
}

// schedulerBack handles, on a server or worker, the node list of a
// scheduler this node had found lost: it rebuilt the job (or was only
// unreachable). The loss is no loss any more (Failure), and the barriers
// this node waits in are sent again: the scheduler may never have
// counted them.
func (p *Postoffice) schedulerBack() {
	l := &p.sched
	l.mu.Lock()
	lostAt := l.lostAt
	back := !lostAt.IsZero() && !l.gaveUp // a final loss stays one: the barriers failed already
	if back {
		l.lostAt = time.Time{}
	}
	l.mu.Unlock()
	if !back {
		return
	}
	p.heardScheduler()
	p.rejoinGossip()
	p.log.Info("the scheduler is back: this node is a member of the job again", "scheduler", fmt.Sprintf("%s:%d", p.cfg.SchedulerHost, p.cfg.SchedulerPort),
		"after", time.Since(lostAt).Round(time.Millisecond))
	p.resendBarriers()
}

// SchedulerLost reports, on a server or worker with heartbeats on,
// whether the scheduler is lost (has not answered heartbeats for
// PS_HEARTBEAT_TIMEOUT and not come back since), and since when.
func (p *Postoffice) SchedulerLost() (since time.Time, lost bool) {
	p.sched.mu.Lock()
	defer p.sched.mu.Unlock()
	return p.sched.lostAt, !p.sched.lostAt.IsZero()
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
				if _, lost := p.SchedulerLost(); lost && p.cfg.Role == message.RoleWorker {
					p.probeServers()
				}
				if err := p.sendHeartbeat(message.SchedulerID); err != nil && !errors.Is(err, ErrStopped) {
					p.log.Warn("heartbeat not sent", "err", err)
				}
			}
		}
	}()
}

package postoffice

import (
	"errors"
	"fmt"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/scheduler"
)

// Start registers customer customerID of this node with the job and blocks
// until every node has registered (ps::StartAsync; ps::Start adds a barrier
// on group 7, see StartWithBarrier). The first call binds the transport and
// starts the receive loop; every call sends its own ADD_NODE, as a process
// with several customers does in ps-lite.
func (p *Postoffice) Start(customerID int) error {
	if err := p.startOnce(); err != nil {
		return err
	}
	if p.cfg.Role != message.RoleScheduler {
		if err := p.register(customerID); err != nil {
			return err
		}
	}
	select {
	case <-p.ready:
	case <-p.stopped:
		return ErrStopped
	case <-p.startFail.done():
		return p.startFail.error()
	}
	p.startHeartbeat()
	if p.cfg.Role == message.RoleServer {
		if err := p.startGossip(p.MyNode()); err != nil {
			p.log.Warn("membership gossip not started; failures are detected by heartbeats only", "err", err)
		}
	}
	return nil
}

// StartWithBarrier is ps::Start: Start, then a barrier on all nodes.
func (p *Postoffice) StartWithBarrier(customerID int) error {
	if err := p.Start(customerID); err != nil {
		return err
	}
	return p.JobBarrier(customerID)
}

func (p *Postoffice) startOnce() error {
	p.startMu.Lock()
	defer p.startMu.Unlock()
	if p.started {
		return nil
	}
	select {
	case <-p.stopped:
		return ErrStopped
	default:
	}
	if err := p.cfg.checkGroupRank(); err != nil {
		return err
	}
	retries := 40
	if p.cfg.Role == message.RoleScheduler {
		retries = 0
	}
	bindNode := p.myNode
	port, err := p.tr.Bind(bindNode, retries)
	if err != nil {
		return fmt.Errorf("postoffice: %s cannot listen on %s:%d: %w", p.cfg.Role, bindNode.Hostname, bindNode.Port, err)
	}
	p.mu.Lock()
	p.myNode.Port = int32(port)
	me := p.myNode
	p.mu.Unlock()
	p.vlog(1, "bound", "node", me.String())
	p.announceUp(me)
	p.startTime = time.Now()
	if err := p.serveMetrics(); err != nil {
		return err
	}
	if p.cfg.Role == message.RoleScheduler {
		err = p.startScheduler(me)
	} else {
		err = p.connectScheduler()
	}
	if err != nil {
		return err
	}
	if p.cfg.Resend {
		p.resender = newResender(p, p.cfg.ResendTimeout, 10)
	}
	p.started = true
	p.startReceiving()
	go p.reportUntilReady()
	return nil
}

// Finalize is ps::Finalize: an optional barrier on all nodes, then, for
// customer 0, the node stops. The barrier does not wait for dead nodes;
// when the job lost any (see Failure), Finalize returns that error, so
// that the process can exit non-zero. With PS_REPLICAS it first waits (up
// to 15 s) for the outcome of each dead server's failover: a server whose
// intervals all failed over to live copies is no loss.
//
// A standby server (scale-out) is in no barrier group: its final barrier
// would return at once and the node would leave while it may hold keys, so
// it waits instead until the scheduler lets it go (at the end of the job,
// or by draining it). A node drained out of the job finalizes without
// error: its barrier ends when it leaves, which is what it was asked to do.
func (p *Postoffice) Finalize(customerID int, barrier bool) error {
	var err error
	switch {
	case barrier && p.IsStandby() && p.isStarted():
		<-p.stopped
		err = ErrStopped
	case barrier:
		err = p.FinalBarrier(customerID)
	}
	if customerID == 0 {
		p.awaitFailovers(failoverWait)
		p.Stop()
	}
	if p.Left() {
		return nil
	}
	if f := p.Failure(); f != nil && !errors.Is(err, ErrNodesLost) {
		return errors.Join(f, err)
	}
	return err
}

// FinalBarrier is the job barrier of Finalize (JobBarrier): on the
// scheduler, for customer 0, its release ends the job, after which a node
// that goes away (exits) is no loss (scheduler.State.Finishing).
func (p *Postoffice) FinalBarrier(customerID int) error {
	if customerID == 0 {
		p.driver.do(func(s *scheduler.State) scheduler.Actions { s.Finishing(); return scheduler.Actions{} })
	}
	return p.JobBarrier(customerID)
}

func (p *Postoffice) isStarted() bool {
	p.startMu.Lock()
	defer p.startMu.Unlock()
	return p.started
}

// Stop shuts the node down: the receive loop ends, heartbeats stop, the
// transport closes and exit callbacks run. It is idempotent.
func (p *Postoffice) Stop() {
	p.stopOnce.Do(func() {
		started := p.isStarted()
		if p.resender != nil {
			if started {
				p.resender.settle(p.cfg.Role == message.RoleScheduler)
			}
			p.resender.stop() // before the transport goes: no resend after close
		}
		p.stopGossip()
		if started {
			p.stopReceiving()
		} else {
			close(p.stopped)
		}
		_ = p.tr.Close()
		if started {
			<-p.loopDone
		}
		p.driver.wait()
		p.releaseBarrier()
		p.mu.Lock()
		fns := p.exitFns
		p.mu.Unlock()
		for _, f := range fns {
			f()
		}
		p.vlog(1, "stopped", "node", p.MyNode().String())
	})
}

// stopReceiving marks the node stopped after a TERMINATE to itself, which
// ends the receive loop after everything already queued (ps-lite's
// shutdown path), and waits up to 2 s for the loop to see it.
func (p *Postoffice) stopReceiving() {
	me := p.MyNode()
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Control.Cmd = message.CmdTerminate
	m.Meta.Recver = me.ID
	m.Meta.CustomerID = 0
	sent := false
	if me.ID != message.Empty {
		if _, err := p.tr.Send(m); err == nil {
			sent = true
		}
	}
	close(p.stopped)
	if !sent {
		return
	}
	select {
	case <-p.loopDone:
	case <-time.After(2 * time.Second):
		p.log.Warn("receive loop did not see TERMINATE in 2s; closing the transport")
	}
}

func (p *Postoffice) isStopped() bool { return isClosed(p.stopped) }

// Done is closed when the node stops.
func (p *Postoffice) Done() <-chan struct{} { return p.stopped }

// RegisterExitCallback runs f after the node stops.
func (p *Postoffice) RegisterExitCallback(f func()) {
	p.mu.Lock()
	p.exitFns = append(p.exitFns, f)
	p.mu.Unlock()
}

// Ready is closed once the node is registered and connected.
func (p *Postoffice) Ready() <-chan struct{} { return p.ready }

func (p *Postoffice) isReady() bool { return isClosed(p.ready) }

// isClosed reports whether ch, one of the node's ready or stopped, is
// closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (p *Postoffice) markReady() {
	p.readyOnce.Do(func() {
		close(p.ready)
		p.vlog(1, "node is ready", "node", p.MyNode().String())
	})
}

// LeaveJob stops this node because the scheduler drained it out of the job
// (scale-in). Left then reports true, so the process can exit cleanly.
func (p *Postoffice) LeaveJob() {
	p.left.Store(true)
	p.Stop()
}

// Left reports whether this node left the job on the scheduler's request.
func (p *Postoffice) Left() bool { return p.left.Load() }

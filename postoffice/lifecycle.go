package postoffice

import (
	"fmt"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/metrics"
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
		p.mu.Lock()
		n := p.myNode
		p.mu.Unlock()
		n.ID = message.Empty
		n.CustomerID = int32(customerID)
		n.Standby = p.cfg.Standby
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.Recver = message.SchedulerID
		m.Meta.Control.Cmd = message.CmdAddNode
		m.Meta.Control.Nodes = []message.Node{n}
		if err := p.sendControl(m); err != nil {
			return fmt.Errorf("postoffice: cannot register with the scheduler at %s:%d: %w", p.cfg.SchedulerHost, p.cfg.SchedulerPort, err)
		}
	}
	p.numStarted.Add(1)
	select {
	case <-p.ready:
	case <-p.stopped:
		return ErrStopped
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
	return p.Barrier(customerID, message.AllGroup)
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
	p.startTime = time.Now()
	if p.cfg.MetricsAddr != "" {
		srv, err := metrics.Serve(p.cfg.MetricsAddr, p.reg, p.log)
		if err != nil {
			return fmt.Errorf("postoffice: PS_METRICS_ADDR=%s: %w", p.cfg.MetricsAddr, err)
		}
		p.log.Info("metrics endpoint (Prometheus)", "addr", "http://"+srv.Addr()+"/metrics")
		p.RegisterExitCallback(func() { _ = srv.Close() })
	}
	if p.cfg.Role == message.RoleScheduler {
		p.sched = scheduler.New(scheduler.Config{
			NumServers: p.cfg.NumServers, NumWorkers: p.cfg.NumWorkers,
			Self: me, HeartbeatTimeout: p.cfg.HeartbeatTimeout, Gossip: p.cfg.GossipPort > 0,
		}, p.startTime)
		if err := p.startGossip(me); err != nil {
			return err
		}
		// The scheduler talks to itself (its own barrier requests) over a
		// self-connection, as ps-lite does.
		if err := p.tr.Connect(me, message.SchedulerID); err != nil {
			return fmt.Errorf("postoffice: scheduler cannot connect to itself: %w", err)
		}
	} else if err := p.tr.Connect(p.schedulerNode(), message.Empty); err != nil {
		return fmt.Errorf("postoffice: cannot connect to the scheduler at %s:%d: %w", p.cfg.SchedulerHost, p.cfg.SchedulerPort, err)
	}
	if p.cfg.Resend {
		p.resender = newResender(p, p.cfg.ResendTimeout, 10)
	}
	p.started = true
	if p.cfg.InlineHandOver > 0 {
		p.inline = newHandOver(p.cfg.InlineHandOver, func() { go p.receiveLoop() }, func(held time.Duration) {
			p.stats.HandOvers.Add(1)
			p.vlog(1, "a customer's handler held the receive loop; receiving goes on in a new goroutine", "held_at_least", held, "hand_overs", p.stats.HandOvers.Load())
		})
		go p.inline.watch(p.stopped)
	}
	go p.receiveLoop()
	go p.parkedLoop()
	if p.sched != nil && (p.cfg.HeartbeatTimeout > 0 || p.cfg.GossipPort > 0) {
		go p.schedulerTickLoop()
	}
	return nil
}

// Finalize is ps::Finalize: an optional barrier on all nodes, then, for
// customer 0, the node stops.
//
// A standby server (scale-out) is in no barrier group: its final barrier
// would return at once and the node would leave while it may hold keys, so
// it waits instead until the scheduler lets it go (at the end of the job,
// or by draining it). A node drained out of the job finalizes without
// error: its barrier ends when it leaves, which is what it was asked to do.
func (p *Postoffice) Finalize(customerID int, barrier bool) error {
	var err error
	switch {
	case barrier && p.cfg.Standby && p.isStarted():
		<-p.stopped
		err = ErrStopped
	case barrier:
		err = p.Barrier(customerID, message.AllGroup)
	}
	if customerID == 0 {
		p.Stop()
	}
	if p.Left() {
		return nil
	}
	return err
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
		p.startMu.Lock()
		started := p.started
		p.startMu.Unlock()
		if p.resender != nil {
			p.resender.stop() // before the transport goes: no resend after close
		}
		p.memberMu.Lock()
		if m := p.member; m != nil {
			// a clean stop is a Leave for the others, not a failure
			_ = m.Leave(time.Second)
			_ = m.Shutdown()
			p.member = nil
		}
		p.memberMu.Unlock()
		if started {
			// TERMINATE to ourselves ends the receive loop after everything
			// already queued (ps-lite's shutdown path).
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
			if sent {
				select {
				case <-p.loopDone:
				case <-time.After(2 * time.Second):
					p.log.Warn("receive loop did not see TERMINATE in 2s; closing the transport")
				}
			}
		} else {
			close(p.stopped)
		}
		_ = p.tr.Close()
		if started {
			<-p.loopDone
		}
		p.mu.Lock()
		fns := p.exitFns
		for _, ch := range p.barrierWait {
			close(ch)
		}
		p.barrierWait = map[int32]chan struct{}{}
		p.mu.Unlock()
		for _, f := range fns {
			f()
		}
		p.vlog(1, "stopped", "node", p.MyNode().String())
	})
}

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

func (p *Postoffice) isReady() bool {
	select {
	case <-p.ready:
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

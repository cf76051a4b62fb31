package postoffice

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/scheduler"
	"github.com/elasticps/elasticps/van"
)

// Customer receives the data messages addressed to one (app id, customer id).
// Accept is called from the receive loop and must not block.
type Customer interface {
	Accept(msg *message.Message)
}

type customerKey struct{ app, customer int32 }

type parked struct {
	msg      *message.Message
	deadline time.Time
	size     int64 // counted in Postoffice.parkedBytes
}

// AddCustomer registers c for data messages to (appID, customerID).
// Messages that arrived before registration are delivered now.
func (p *Postoffice) AddCustomer(appID, customerID int, c Customer) error {
	k := customerKey{int32(appID), int32(customerID)}
	p.mu.Lock()
	if _, ok := p.customers[k]; ok {
		p.mu.Unlock()
		return fmt.Errorf("postoffice: customer %d of app %d already exists: use a distinct customer id per KVWorker/SimpleApp", customerID, appID)
	}
	// Parked messages go first, under the lock, so that a newer message the
	// receive loop dispatches right after cannot overtake them (Accept does
	// not block).
	for _, pm := range p.parked[k] {
		p.unpark(pm)
		c.Accept(pm.msg)
	}
	delete(p.parked, k)
	p.customers[k] = c
	p.mu.Unlock()
	return nil
}

// RemoveCustomer unregisters a customer.
func (p *Postoffice) RemoveCustomer(appID, customerID int) {
	p.mu.Lock()
	delete(p.customers, customerKey{int32(appID), int32(customerID)})
	p.mu.Unlock()
}

// receiveLoop is the only reader of the transport: one goroutine at a time
// runs it, the one Start starts and then, each time a customer's handler
// held it too long (see InlineCustomer), a new one.
func (p *Postoffice) receiveLoop() {
	movedOn := false
	defer func() {
		if !movedOn {
			close(p.loopDone)
		}
	}()
	for {
		m, err := p.recv() // auth.go: only what the node may act on
		if err != nil {
			var fe *van.FrameError
			if errors.As(err, &fe) {
				p.noteFrameError(err)
				p.frameRefused(fe)
				continue
			}
			if errors.Is(err, van.ErrClosed) {
				return
			}
			p.log.Error("receive failed; the node stops receiving", "err", err)
			return
		}
		size := messageBytes(m)
		if p.resender != nil {
			p.resender.arrived()
		}
		// PS_DROP_MSG simulates loss on the network; the TERMINATE a node
		// sends itself to stop never crosses one.
		if p.cfg.DropPercent > 0 && p.isReady() && m.Meta.Control.Cmd != message.CmdTerminate && rand.IntN(100) < p.cfg.DropPercent {
			p.log.Warn("PS_DROP_MSG: dropping", "msg", m.Meta.String())
			p.Release(m)
			continue
		}
		if p.dropFilter != nil && p.dropFilter(m) {
			p.Release(m)
			continue
		}
		if p.cfg.Verbose >= 2 {
			p.log.Info("recv", "message", m.String())
		}
		anonymous := p.myID.Load() == message.Empty
		if p.resender != nil && p.resender.addIncoming(m) {
			p.Release(m) // a duplicate or an ACK: nothing keeps it
			continue
		}
		if m.Meta.Control.Cmd == message.CmdTerminate {
			p.vlog(1, "received TERMINATE", "node", p.MyNode().String())
			p.Release(m)
			return
		}
		if m.Meta.Control.Cmd == message.CmdEmpty {
			if !p.dispatch(m, size) {
				movedOn = true // a newer goroutine receives now
				return
			}
			continue
		}
		p.Detach(m) // control handling keeps no promise to Release
		p.handle(m)
		if anonymous && p.resender != nil {
			p.resender.registered(m) // m gave this node its id
		}
	}
}

func messageBytes(m *message.Message) int {
	n := 0
	for _, d := range m.Data {
		n += len(d)
	}
	return n
}

// handle runs a control message on the receive loop. The scheduler's
// requests go to its driver, which has handled each when handle returns.
func (p *Postoffice) handle(m *message.Message) {
	switch {
	case m.Meta.Control.Cmd == message.CmdAck:
		// handled by the resender; an ACK without a resender is harmless
	case isBarrierCmd(m.Meta.Control.Cmd) && !m.Meta.Request:
		p.releaseBarrier()
	case p.driver != nil:
		p.driver.control(m) // the scheduler's requests
	default:
		p.handleAsNode(m)
	}
}

// handleAsNode handles a control message from the scheduler on a server or
// worker.
func (p *Postoffice) handleAsNode(m *message.Message) {
	switch m.Meta.Control.Cmd {
	case message.CmdAddNode:
		p.nodeAddNode(m)
	case message.CmdBarrier, message.CmdInstanceBarrier:
		p.reject(fmt.Errorf("BARRIER request from node %d reached a %s; only the scheduler counts barriers", m.Meta.Sender, p.cfg.Role))
	case message.CmdHeartbeat:
		if m.Meta.Sender != message.SchedulerID {
			p.peerHeartbeat(m) // a probe while the scheduler is lost
			return
		}
		p.heardScheduler()
	case scheduler.CmdNodeDead, scheduler.CmdNodeLeft:
		p.nodeGoneNotice(m)
	case scheduler.CmdFailedOver, scheduler.CmdStateLost:
		p.failoverNotice(m)
	case scheduler.CmdKeysLost:
		p.keysLostNotice(m)
	default:
		p.reject(fmt.Errorf("unknown control command %d from node %d", m.Meta.Control.Cmd, m.Meta.Sender))
	}
}

func (p *Postoffice) reject(err error) {
	p.stats.Rejected.Add(1)
	// A stranger can send any number of these: at most one line per
	// distinct error per LogInterval (the table of errors is bounded).
	p.ratelog.Log(slog.LevelError, "", err.Error(), "rejected a control message; the node keeps serving", "rejected_total", p.stats.Rejected.Load())
}

// dispatch hands a data message to its customer. Workers route by
// (app_id, customer_id); servers and the scheduler by (app_id, app_id).
// It is called by the receive loop only, and returns false when the receive
// loop moved to another goroutine while a customer handled m on this one.
func (p *Postoffice) dispatch(m *message.Message, size int) bool {
	if m.Meta.AppID == message.Empty || m.Meta.Sender == message.Empty {
		p.stats.Dropped.Add(1)
		p.ratelog.Log(slog.LevelError, senderName(m.Meta.Sender), "unaddressed", "dropped a data message without app_id or from an unregistered sender", "msg", m.Meta.String())
		p.Release(m)
		return true
	}
	cid := m.Meta.AppID
	if p.cfg.Role == message.RoleWorker {
		cid = m.Meta.CustomerID
	}
	k := customerKey{m.Meta.AppID, cid}
	p.mu.Lock()
	c, ok := p.customers[k]
	if !ok {
		// Not blocking the receive loop: park it until the customer
		// registers or CustomerWait passes, within the sender's
		// MaxPendingBytes. Parked messages may be dropped and their
		// customer may not release: no views.
		if held := p.parkedBytes[m.Meta.Sender]; held > 0 && held+int64(size) > p.cfg.Limits.MaxPendingBytes {
			p.mu.Unlock()
			p.stats.Dropped.Add(1)
			p.refused.add(van.ReasonPending)
			p.ratelog.Log(slog.LevelError, senderName(m.Meta.Sender), van.ReasonPending, "dropped a message for a customer not registered yet: the sender has too many bytes parked here",
				"parked_bytes", held, "limit", p.cfg.Limits.MaxPendingBytes, "env", "PS_MAX_PENDING_BYTES")
			p.Release(m)
			return true
		}
		p.Detach(m)
		p.parkedBytes[m.Meta.Sender] += int64(size)
		p.parked[k] = append(p.parked[k], parked{msg: m, deadline: time.Now().Add(p.cfg.CustomerWait), size: int64(size)})
		p.mu.Unlock()
		return true
	}
	p.mu.Unlock()
	if rc, ok := c.(ReleasingCustomer); !ok || !rc.ReleasesMessages() {
		p.Detach(m)
	}
	if ic, ok := c.(InlineCustomer); ok && p.inline != nil && size <= inlineMaxBytes {
		s := p.inline.begin()
		ic.AcceptInline(m)
		return p.inline.end(s)
	}
	c.Accept(m)
	return true
}

// unpark forgets pm's bytes in parkedBytes. Caller holds p.mu.
func (p *Postoffice) unpark(pm parked) {
	s := pm.msg.Meta.Sender
	if p.parkedBytes[s] -= pm.size; p.parkedBytes[s] <= 0 {
		delete(p.parkedBytes, s)
	}
}

// senderName names a sender in logs as the transports do.
func senderName(id int32) string {
	if id == message.Empty {
		return "anonymous"
	}
	return "ps" + strconv.Itoa(int(id))
}

// startReceiving starts the receive loop, the inline hand-over's watch
// over it, and the clean-up of parked messages.
func (p *Postoffice) startReceiving() {
	if p.cfg.InlineHandOver > 0 {
		p.inline = newHandOver(p.cfg.InlineHandOver, func() { go p.receiveLoop() }, func(held time.Duration) {
			p.stats.HandOvers.Add(1)
			p.vlog(1, "a customer's handler held the receive loop; receiving goes on in a new goroutine", "held_at_least", held, "hand_overs", p.stats.HandOvers.Load())
		})
		go p.inline.watch(p.stopped)
	}
	go p.receiveLoop()
	go p.parkedLoop()
}

// parkedLoop drops parked messages whose customer never appeared.
func (p *Postoffice) parkedLoop() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stopped:
			return
		case now := <-t.C:
			p.mu.Lock()
			for k, list := range p.parked {
				keep := list[:0]
				for _, pm := range list {
					if now.After(pm.deadline) {
						p.unpark(pm)
						p.stats.Dropped.Add(1)
						p.ratelog.Log(slog.LevelError, senderName(pm.msg.Meta.Sender), "no_customer", "dropped a message: no customer registered for it", "app_id", k.app, "customer_id", k.customer, "waited", p.cfg.CustomerWait, "msg", pm.msg.Meta.String())
						continue
					}
					keep = append(keep, pm)
				}
				if len(keep) == 0 {
					delete(p.parked, k)
				} else {
					p.parked[k] = keep
				}
			}
			p.mu.Unlock()
		}
	}
}

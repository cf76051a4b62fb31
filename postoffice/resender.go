package postoffice

import (
	"sync"
	"time"

	"github.com/elasticps/elasticps/message"
)

// resender is the PS_RESEND layer: every sent message but ACKs is kept until
// the receiver acknowledges it, and resent after timeout·(1+retries);
// duplicates are acknowledged and dropped on receipt.
//
// Differences from ps-lite, on purpose: it stops before the transport closes
// (ps-lite's monitor thread races with shutdown and CHECK-fails), giving up
// after maxRetry logs an error instead of aborting the process, and the set
// of seen signatures is bounded.
type resender struct {
	p        *Postoffice
	timeout  time.Duration
	maxRetry int

	mu      sync.Mutex
	pending map[uint64]*outgoing
	seen    map[uint64]struct{}
	seenLog []uint64 // insertion order, to bound seen
	done    chan struct{}
	wg      sync.WaitGroup
}

type outgoing struct {
	msg     *message.Message
	sent    time.Time
	retries int
}

const maxSeen = 1 << 20

func newResender(p *Postoffice, timeout time.Duration, maxRetry int) *resender {
	r := &resender{p: p, timeout: timeout, maxRetry: maxRetry,
		pending: map[uint64]*outgoing{}, seen: map[uint64]struct{}{}, done: make(chan struct{})}
	r.wg.Add(1)
	go r.monitorLoop()
	return r
}

// signature identifies a message as ps-lite does:
// app_id<<48 | sender<<40 | recver<<32 | timestamp<<1 | request.
func signature(m *message.Meta) uint64 {
	s := uint64(uint16(m.AppID))<<48 | uint64(uint8(m.Sender))<<40 | uint64(uint8(m.Recver))<<32 |
		uint64(uint32(m.Timestamp))<<1
	if m.Request {
		s |= 1
	}
	return s
}

func (r *resender) addOutgoing(m *message.Message) {
	if m.Meta.Control.Cmd == message.CmdAck || m.Meta.Control.Cmd == message.CmdTerminate {
		return
	}
	sig := signature(&m.Meta)
	r.mu.Lock()
	r.pending[sig] = &outgoing{msg: m, sent: time.Now()}
	r.mu.Unlock()
}

// addIncoming acknowledges m and reports whether it is a duplicate (or an
// ACK) that the caller must not process further.
func (r *resender) addIncoming(m *message.Message) bool {
	switch m.Meta.Control.Cmd {
	case message.CmdTerminate:
		return false
	case message.CmdAck:
		r.mu.Lock()
		delete(r.pending, m.Meta.Control.MsgSig)
		r.mu.Unlock()
		return true
	}
	meta := m.Meta
	if meta.Sender == message.Empty {
		return false // anonymous registration: cannot be acknowledged
	}
	// The signature is computed as the sender computed it.
	meta.Recver = r.p.MyNode().ID
	sig := signature(&meta)
	ack := &message.Message{Meta: message.NewMeta()}
	ack.Meta.Recver = m.Meta.Sender
	ack.Meta.Control.Cmd = message.CmdAck
	ack.Meta.Control.MsgSig = sig
	ack.Meta.Sender = r.p.MyNode().ID
	_, _ = r.p.tr.Send(ack)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.seen[sig]; dup {
		r.p.log.Warn("dropping a duplicated message", "sig", sig, "msg", m.Meta.String())
		return true
	}
	r.seen[sig] = struct{}{}
	r.seenLog = append(r.seenLog, sig)
	if len(r.seenLog) > maxSeen {
		delete(r.seen, r.seenLog[0])
		r.seenLog = r.seenLog[1:]
	}
	return false
}

func (r *resender) monitorLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.timeout)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case now := <-t.C:
			var resend []*message.Message
			r.mu.Lock()
			for sig, o := range r.pending {
				if now.Sub(o.sent) < r.timeout*time.Duration(1+o.retries) {
					continue
				}
				if o.retries >= r.maxRetry {
					r.p.log.Error("giving up on a message after retries; the receiver is unreachable", "retries", o.retries, "msg", o.msg.Meta.String())
					delete(r.pending, sig)
					continue
				}
				o.retries++
				resend = append(resend, o.msg)
			}
			r.mu.Unlock()
			for _, m := range resend {
				r.p.log.Warn("resending a message that was not acknowledged", "msg", m.Meta.String())
				_, _ = r.p.tr.Send(m)
			}
		}
	}
}

func (r *resender) stop() {
	close(r.done)
	r.wg.Wait()
}

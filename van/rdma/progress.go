//go:build rdma && cgo

package rdma

import (
	"fmt"
	"time"

	"github.com/elasticps/elasticps/van"
)

// progressLoop is the only goroutine that polls the device. It completes
// writes, answers rendezvous starts, hands replies to waiting Sends and
// queues arrived images for Recv, in batches under mu. It never waits on
// the network with mu held: control messages that find the queue full are
// deferred and retried on the next round.
func (t *Transport) progressLoop() {
	defer close(t.progressDone)
	evs := make([]event, 64)
	for !t.closed.Load() {
		timeout := 200 * time.Millisecond
		t.mu.Lock()
		if len(t.deferCtrl) > 0 {
			timeout = time.Millisecond
		} else if len(t.draining) > 0 {
			timeout = 10 * time.Millisecond
		}
		t.mu.Unlock()
		n, err := t.dev.poll(evs, timeout)
		if t.closed.Load() {
			return
		}
		if err != nil {
			t.log.Error("van/rdma: polling the completion queue failed", "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var broken []*link
		t.mu.Lock()
		for i := range evs[:n] {
			if l := t.handleLocked(&evs[i]); l != nil {
				broken = append(broken, l)
			}
		}
		t.flushCtrlLocked()
		t.reapDrainingLocked()
		t.mu.Unlock()
		for _, l := range broken {
			t.closeLink(l)
		}
		if h := t.afterBatch.Load(); h != nil {
			(*h)(evs[:n])
		}
	}
}

// handleLocked handles one event; it returns a link that must be torn down.
func (t *Transport) handleLocked(ev *event) *link {
	switch ev.kind {
	case evDone:
		t.finishOpLocked(ev.op, nil)
	case evError:
		o := t.ops[ev.op]
		if o == nil {
			return nil
		}
		err := fmt.Errorf("van/rdma: write to node %d failed: %w", o.link.peer, ev.err)
		t.log.Warn("van/rdma: write failed; closing the connection", "node", o.link.peer, "err", ev.err)
		t.finishOpLocked(ev.op, err)
		return o.link
	case evRecv:
		m, err := parseCtrl(ev.data[:])
		if err != nil {
			t.stats.BadWrites.Add(1)
			t.log.Warn("van/rdma: dropped a control message", "err", err)
			return nil
		}
		l := t.links[m.link]
		switch {
		case l == nil:
			// A link torn down meanwhile: nothing waits for it.
		case m.typ == ctrlStart && !l.out:
			if !l.peerGone {
				// (The peer closed the link: nobody waits for the reply.)
				t.onStartLocked(l, m)
			}
		case m.typ == ctrlReply && l.out:
			if w := l.waiters[m.token]; w != nil {
				delete(l.waiters, m.token)
				w <- m
			}
		default:
			t.stats.BadWrites.Add(1)
		}
	case evWriteImm:
		return t.onWriteLocked(ev.imm)
	case evFatal:
		t.log.Error("van/rdma: completion queue error", "err", ev.err)
	}
	return nil
}

// onStartLocked answers a rendezvous start: a slot of the asked size, bound
// to the key if the sender wants it cached and the budget allows. Without
// memory for it, the start waits in deferStart until a slot is freed.
func (t *Transport) onStartLocked(l *link, m ctrlMsg) {
	r := ctrlMsg{typ: ctrlReply, link: l.remote, token: m.token}
	if m.size < hdrSize || int64(m.size) > t.cfg.Limits.MaxMessageBytes+int64(hdrSize+8*t.cfg.Limits.MaxFrames) {
		// Refused before a byte moves; Recv still reports it, as it would
		// a message it received and rejected.
		r.status = replyTooBig
		t.sendCtrlLocked(l, &r)
		t.stats.BadWrites.Add(1)
		t.inbox = append(t.inbox, inItem{err: &van.FrameError{Peer: peerName(l.peer),
			Err: fmt.Errorf("refused a message of %d bytes: it exceeds the %d-byte limit", m.size, t.cfg.Limits.MaxMessageBytes)}})
		t.cond.Signal()
		return
	}
	s, err := t.allocSlotLocked(int(m.size))
	if err != nil {
		t.log.Warn("van/rdma: cannot allocate a receive slot", "bytes", m.size, "err", err)
		r.status = replyNoMemory
		t.sendCtrlLocked(l, &r)
		return
	}
	if s == nil {
		t.deferStart = append(t.deferStart, deferredStart{l: l, m: m})
		return
	}
	s.state, s.link = slotGranted, l
	size := int64(s.buf.size)
	if m.flags&startWantCache != 0 && l.inCache[m.key] < t.cfg.CachedSlotsPerKey &&
		t.cachedBytes+size <= t.cfg.MaxRecvMemory/2 {
		s.cached, s.ckey = true, m.key
		l.inCache[m.key]++
		t.cachedBytes += size
		r.flags |= replyCached
	}
	if m.replace != 0 && int(m.replace-1) < len(t.slots) {
		if old := t.slots[m.replace-1]; old.link == l && old.cached && old.state == slotGranted {
			t.freeSlotLocked(old)
		}
	}
	r.slot = s.buf.remote(s.idx)
	t.sendCtrlLocked(l, &r)
}

// retryStartsLocked answers deferred starts while memory allows.
func (t *Transport) retryStartsLocked() {
	if t.closed.Load() || len(t.deferStart) == 0 {
		return
	}
	q := t.deferStart
	t.deferStart = nil
	for i, d := range q {
		if d.l.dead || d.l.peerGone {
			continue
		}
		t.onStartLocked(d.l, d.m)
		if len(t.deferStart) > 0 {
			// Still no memory: keep the rest, in order.
			t.deferStart = append(t.deferStart, q[i+1:]...)
			return
		}
	}
}

func (t *Transport) sendCtrlLocked(l *link, m *ctrlMsg) {
	var b [ctrlSize]byte
	m.put(&b)
	if len(t.deferCtrl) == 0 {
		if err := t.dev.sendCtrl(l.dl, &b); err == nil {
			return
		} else if err != errAgain {
			t.log.Warn("van/rdma: control message failed", "node", l.peer, "err", err)
			return
		}
	}
	t.deferCtrl = append(t.deferCtrl, deferredCtrl{l: l, msg: b})
}

func (t *Transport) flushCtrlLocked() {
	for len(t.deferCtrl) > 0 {
		d := &t.deferCtrl[0]
		if !d.l.dead {
			if err := t.dev.sendCtrl(d.l.dl, &d.msg); err == errAgain {
				return
			} else if err != nil {
				t.log.Warn("van/rdma: control message failed", "node", d.l.peer, "err", err)
			}
		}
		t.deferCtrl = t.deferCtrl[1:]
	}
}

// onWriteLocked takes an image that landed in slot idx: it checks the image
// against the slot's owner, applies a handed-back cached slot, and queues it
// for Recv in the order of its link. A rejected image leaves a hole in its
// link's numbering that nothing will fill, so the link that wrote it (as
// far as the slot tells) is returned to be torn down; the peer dials again.
func (t *Transport) onWriteLocked(idx uint32) *link {
	if int(idx) >= len(t.slots) {
		t.badWriteLocked(nil, "anonymous", fmt.Errorf("write into slot %d, beyond the address pool", idx))
		return nil
	}
	s := t.slots[idx]
	if s.state != slotGranted && s.state != slotLanding {
		t.badWriteLocked(nil, "anonymous", fmt.Errorf("write into slot %d, which is %s", idx, s.state))
		return nil
	}
	peer := s.peer
	culprit := s.link
	if s.link != nil {
		peer = s.link.peer
	} else {
		for _, x := range t.links {
			if !x.out && x.peer == s.peer {
				culprit = x
			}
		}
	}
	h, err := parseHeader(s.buf.bytes()[:hdrSize])
	var l *link
	if err == nil {
		l = t.links[h.link]
		switch {
		case l == nil || l.out:
			err = fmt.Errorf("unknown link %d", h.link)
		case s.state == slotGranted && s.link != l:
			err = fmt.Errorf("slot %d was granted to another connection", idx)
		case s.state == slotLanding && l.peer != s.peer:
			err = fmt.Errorf("landing slot %d for node %d written by node %d", idx, s.peer, l.peer)
		case h.total < hdrSize || h.total > uint64(s.buf.size):
			err = fmt.Errorf("image of %d bytes in a %d-byte slot", h.total, s.buf.size)
		case int32(h.seq-l.next) < 0:
			err = fmt.Errorf("message %d repeats one already delivered", h.seq)
		}
	}
	if err != nil {
		t.badWriteLocked(s, peerName(peer), fmt.Errorf("slot %d: %w", idx, err))
		return culprit
	}
	if h.flags&flagGrant != 0 {
		t.applyGrantLocked(l.peer, &h)
	}
	s.state, s.link, s.hdr = slotArrived, l, h
	if h.seq != l.next {
		l.held[h.seq] = s
		return nil
	}
	t.inbox = append(t.inbox, inItem{s: s})
	l.next++
	for {
		n, ok := l.held[l.next]
		if !ok {
			break
		}
		delete(l.held, l.next)
		t.inbox = append(t.inbox, inItem{s: n})
		l.next++
	}
	t.cond.Signal()
	return nil
}

// badWriteLocked reports a rejected image to Recv as a FrameError and frees
// its slot (a landing slot too: its response is lost either way).
func (t *Transport) badWriteLocked(s *slot, peer string, err error) {
	t.stats.BadWrites.Add(1)
	if s != nil {
		t.freeSlotLocked(s)
	}
	t.inbox = append(t.inbox, inItem{err: &van.FrameError{Peer: peer, Err: err}})
	t.cond.Signal()
}

// applyGrantLocked makes a cached slot that node handed back usable again.
func (t *Transport) applyGrantLocked(node int32, h *header) {
	p := t.peers[node]
	if p == nil || p.link == nil || p.link.dead || p.link.remote != h.grantLink {
		return
	}
	if cs := p.link.byIdx[h.grant.idx]; cs != nil {
		cs.remote, cs.busy = h.grant, false
	}
}

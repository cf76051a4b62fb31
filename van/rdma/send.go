//go:build rdma && cgo

package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// zeroCopyMin is the smallest frame written straight from a registered
// buffer; shorter ones are copied into staging, which costs less than a
// gather segment plus waiting for the completion.
const zeroCopyMin = 64 << 10

// sendPlan is where one message goes and what its header says.
type sendPlan struct {
	hdr        header
	target     remoteSlot
	haveTarget bool
	landed     bool // target is the requester's landing slot

	// KV request with one key: rendezvous parameters and bookkeeping.
	kvReq     bool
	ckey      chanKey
	wantCache bool
	replace   uint32
	cs        *cachedSlot // cached slot written into (busy until handed back)
	landing   *slot       // our landing slot offered for the response
	reqKey    respKey

	grant *slot // our slot handed back in this response
}

type sendScratch struct {
	meta []byte
	sg   []sge
	zc   []*userReg
}

var scratchPool = sync.Pool{New: func() any { return new(sendScratch) }}

// Send implements van.Transport. It writes msg as one image into a slot of
// the receiver: a cached or landing slot when there is one, otherwise after
// a rendezvous. Frames are copied into registered staging before Send
// returns, except frames inside a RegisterBuffer region of at least 64 KiB,
// which are written zero-copy; Send then returns once that write completed.
// Either way the caller may reuse msg.Data when Send returns. It returns the
// bytes of meta and frames.
//
// Sends to one peer are delivered in the order they were posted; Send
// blocks while the link has Config.SendDepth writes in flight.
func (t *Transport) Send(msg *message.Message) (int, error) {
	id := msg.Meta.Recver
	if err := message.CheckFrames(&msg.Meta, len(msg.Data)); err != nil {
		return 0, fmt.Errorf("van/rdma: send to node %d: %w", id, err)
	}
	if len(msg.Data) > t.cfg.Limits.MaxFrames {
		return 0, fmt.Errorf("van/rdma: send to node %d: %d data frames exceed the limit of %d", id, len(msg.Data), t.cfg.Limits.MaxFrames)
	}
	if t.closed.Load() {
		return 0, van.ErrClosed
	}
	// Bounded by time, not by a count: Connect may replace the link many
	// times in a row (each replacement cuts a rendezvous short), and every
	// replacement is a reason to try again, not to fail.
	deadline := time.Now().Add(sendRetryFor)
	for {
		l, err := t.linkTo(id)
		if err != nil {
			return 0, err
		}
		n, err := t.sendOn(l, msg)
		if err == nil {
			return n, nil
		}
		if t.closed.Load() {
			// Whatever failed, it failed because Close tore things down.
			return 0, van.ErrClosed
		}
		// The link closed under this Send before the message was posted
		// (a Connect replaced it, or the peer went away): send it on the
		// link that replaced it, or on a new dial, instead of failing.
		if !errors.Is(err, errLinkClosed) || time.Now().After(deadline) {
			return 0, err
		}
	}
}

// sendRetryFor bounds how long Send keeps re-sending a message whose link
// closed under it (replaced by Connect, or the peer went away).
const sendRetryFor = 10 * time.Second

func (t *Transport) sendOn(l *link, msg *message.Message) (int, error) {
	id := msg.Meta.Recver
	sc := scratchPool.Get().(*sendScratch)
	defer func() {
		if cap(sc.meta) > 64<<10 {
			sc.meta = nil
		}
		clear(sc.zc)
		sc.sg, sc.zc = sc.sg[:0], sc.zc[:0]
		scratchPool.Put(sc)
	}()
	sc.meta = msg.Meta.MarshalTo(sc.meta[:0])
	var data int64
	for _, d := range msg.Data {
		data += int64(len(d))
	}
	payload := int64(len(sc.meta)) + data
	if payload > t.cfg.Limits.MaxMessageBytes {
		return 0, fmt.Errorf("van/rdma: send to node %d: message of %d bytes exceeds the %d-byte limit", id, payload, t.cfg.Limits.MaxMessageBytes)
	}
	total := hdrSize + 8*len(msg.Data) + int(payload)

	pl, err := t.plan(l, msg, total)
	if err != nil {
		return 0, err
	}
	n, err := t.sendPlanned(l, msg, sc, pl, total)
	if err != nil {
		t.mu.Lock()
		t.failPlanLocked(pl)
		t.mu.Unlock()
		return 0, err
	}
	return n, nil
}

func (t *Transport) sendPlanned(l *link, msg *message.Message, sc *sendScratch, pl *sendPlan, total int) (int, error) {
	if !pl.haveTarget {
		target, err := t.rendezvous(l, pl, total)
		if err != nil {
			return 0, err
		}
		pl.target, pl.haveTarget = target, true
		t.stats.Rendezvous.Add(1)
	} else if pl.landed {
		t.stats.Landed.Add(1)
	} else {
		t.stats.Cached.Add(1)
	}

	// Registered memory (staging, slots) stays allocated while memMu is
	// held: Close frees it only after taking memMu for writing.
	t.memMu.RLock()
	defer t.memMu.RUnlock()

	// Pick the frames written zero-copy. Each may split the staged bytes
	// in two, so at most (maxSGE-1)/2 of them fit one write.
	maxZC := (t.dev.maxSGE() - 1) / 2
	staged := total
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return 0, van.ErrClosed
	}
	for cap(sc.zc) < len(msg.Data) {
		sc.zc = append(sc.zc[:cap(sc.zc)], nil)
	}
	sc.zc = sc.zc[:len(msg.Data)]
	var users []*userReg
	for i, d := range msg.Data {
		if len(users) == maxZC || len(d) < zeroCopyMin {
			continue
		}
		if r := t.mrs.find(uintptr(unsafe.Pointer(unsafe.SliceData(d))), len(d)); r != nil {
			r.refs++
			sc.zc[i] = r
			users = append(users, r)
			staged -= len(d)
		}
	}
	staging, err := t.pool.get(staged)
	if err != nil {
		t.releaseUsersLocked(users)
		t.mu.Unlock()
		return 0, err
	}
	t.mu.Unlock()

	// Fill the staging buffer: header, frame lengths, meta and the copied
	// frames, cutting a gather segment around each zero-copy frame.
	b := staging.bytes()
	h := &pl.hdr
	h.metaLen, h.nframes, h.total = uint32(len(sc.meta)), uint32(len(msg.Data)), uint64(total)
	h.put(b)
	off := hdrSize
	for _, d := range msg.Data {
		binary.LittleEndian.PutUint64(b[off:], uint64(len(d)))
		off += 8
	}
	off += copy(b[off:], sc.meta)
	base := uintptr(staging.p)
	start := 0
	for i, d := range msg.Data {
		if r := sc.zc[i]; r != nil {
			if off > start {
				sc.sg = append(sc.sg, sge{addr: base + uintptr(start), len: uint64(off - start), desc: staging.mr.desc})
			}
			sc.sg = append(sc.sg, sge{addr: uintptr(unsafe.Pointer(unsafe.SliceData(d))), len: uint64(len(d)), desc: r.mr.desc})
			start = off
			continue
		}
		off += copy(b[off:], d)
	}
	if off > start {
		sc.sg = append(sc.sg, sge{addr: base + uintptr(start), len: uint64(off - start), desc: staging.mr.desc})
	}

	o := &op{link: l, buf: staging, users: users}
	if len(users) > 0 {
		o.done = make(chan error, 1)
		t.stats.ZeroCopy.Add(int64(len(users)))
	}
	if err := t.post(l, o, sc.sg, pl.target); err != nil {
		return 0, err
	}
	if o.done != nil {
		// The device reads the caller's buffer until the completion; only
		// a completion or a shut-down device releases it.
		select {
		case err := <-o.done:
			if err != nil {
				return 0, err
			}
		case <-t.devDone:
			return 0, van.ErrClosed
		}
	}
	return total - hdrSize - 8*len(msg.Data), nil
}

// post numbers the image and writes it. On failure o's resources are
// returned and the link is torn down (a failed post leaves the link in an
// unknown state).
func (t *Transport) post(l *link, o *op, sg []sge, target remoteSlot) error {
	select {
	case l.depth <- struct{}{}:
	case <-l.closed:
		t.abortOp(o, false)
		return fmt.Errorf("van/rdma: connection to node %d: %w", l.peer, errLinkClosed)
	case <-t.done:
		t.abortOp(o, false)
		return van.ErrClosed
	}
	id, err := t.getOp(o)
	if err != nil {
		t.abortOp(o, true)
		return err
	}
	b := o.buf.bytes()
	l.sendMu.Lock()
	binary.LittleEndian.PutUint32(b[12:], l.seq)
	for {
		if isClosed(l.closed) {
			// Never write on a link whose closing began (closeLink): the
			// peer may have let its slots go.
			err = errLinkClosed
			break
		}
		err = t.dev.write(l.dl, sg, target.addr, target.rkey, target.idx, id)
		if !errors.Is(err, errAgain) {
			break
		}
		// The queue is full: the progress goroutine frees entries as it
		// polls completions.
		if t.closed.Load() {
			err = van.ErrClosed
			break
		}
		time.Sleep(20 * time.Microsecond)
	}
	if err == nil {
		l.seq++
	}
	l.sendMu.Unlock()
	if err != nil {
		t.mu.Lock()
		if t.ops[id] == o {
			t.ops[id] = nil
			t.freeOps = append(t.freeOps, id)
		}
		t.mu.Unlock()
		t.abortOp(o, true)
		if errors.Is(err, van.ErrClosed) {
			return err
		}
		if t.isDead(l) {
			// Closed under us (by a Connect that replaced it, or the peer
			// going away): the message was not posted.
			return fmt.Errorf("van/rdma: write to node %d: %w", l.peer, errLinkClosed)
		}
		t.closeLink(l)
		return fmt.Errorf("van/rdma: write to node %d: %w", l.peer, err)
	}
	return nil
}

// abortOp returns the resources of an op that was never posted.
func (t *Transport) abortOp(o *op, holdsDepth bool) {
	if holdsDepth {
		<-o.link.depth
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if o.buf != nil && !t.closed.Load() {
		t.pool.put(o.buf)
	}
	t.releaseUsersLocked(o.users)
}

func (t *Transport) releaseUsersLocked(users []*userReg) {
	for _, r := range users {
		r.refs--
		if r.dropped && r.refs == 0 && !t.closed.Load() {
			t.releaseUserLocked(r)
		}
	}
}

// kvKey returns the key of a KV message with exactly one key: its first
// frame is one uint64 (ps-lite's keys frame).
func kvKey(m *message.Meta, data [][]byte) (uint64, bool) {
	if !m.Control.Empty() || m.SimpleApp || len(data) == 0 || len(m.DataType) == 0 ||
		m.DataType[0] != message.Uint64 || len(data[0]) != 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(data[0]), true
}

// plan decides where msg goes without waiting for anything: a cached slot
// or the requester's landing slot, or a rendezvous to come.
func (t *Transport) plan(l *link, msg *message.Message, total int) (*sendPlan, error) {
	m := &msg.Meta
	pl := &sendPlan{}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l.dead {
		return nil, fmt.Errorf("van/rdma: connection to node %d: %w", l.peer, errLinkClosed)
	}
	pl.hdr.link = l.remote
	if m.Request {
		key, ok := kvKey(m, msg.Data)
		if !ok || t.myID.Load() == message.Empty {
			return pl, nil
		}
		kind := uint8(0)
		if m.Push {
			kind |= 1
		}
		if m.Pull {
			kind |= 2
		}
		pl.kvReq, pl.ckey = true, chanKey{key: key, kind: kind}
		t.offerLandingLocked(l, m, pl)
		var small *cachedSlot
		for _, cs := range l.cache[pl.ckey] {
			switch {
			case cs.busy:
			case cs.remote.cap >= uint64(total):
				cs.busy = true
				pl.cs, pl.target, pl.haveTarget = cs, cs.remote, true
				return pl, nil
			default:
				small = cs
			}
		}
		if small != nil {
			// Too small for this value: bind a bigger one in its place.
			t.dropCachedLocked(l, small)
			pl.replace = small.remote.idx + 1
			pl.wantCache = true
		} else if len(l.cache[pl.ckey]) < t.cfg.CachedSlotsPerKey {
			pl.wantCache = true
		}
		return pl, nil
	}
	if !m.Control.Empty() {
		return pl, nil
	}
	rk := respKey{m.Recver, m.AppID, m.CustomerID, m.Timestamp}
	pe := t.pending[rk]
	if pe == nil {
		return pl, nil
	}
	delete(t.pending, rk)
	if g := pe.grant; g != nil && g.state == slotHeld {
		if g.link.dead {
			t.freeSlotLocked(g)
		} else {
			g.state = slotGranted
			pl.grant = g
			pl.hdr.flags |= flagGrant
			pl.hdr.grant = g.buf.remote(g.idx)
			pl.hdr.grantLink = g.link.id
		}
	}
	if pe.hasLanding && pe.landing.cap >= uint64(total) {
		pl.target, pl.haveTarget, pl.landed = pe.landing, true, true
	}
	return pl, nil
}

// offerLandingLocked reserves a landing slot for the response to request m,
// sized by the last response for the same key.
func (t *Transport) offerLandingLocked(l *link, m *message.Meta, pl *sendPlan) {
	if len(t.reqs) >= maxPending {
		return
	}
	s, err := t.allocSlotLocked(max(l.learned[pl.ckey], landingMin))
	if err != nil || s == nil {
		return
	}
	s.state, s.peer = slotLanding, m.Recver
	pl.reqKey = respKey{m.Recver, m.AppID, m.CustomerID, m.Timestamp}
	// A resend of the same request replaces the entry; the older landing
	// slot may still be written, so it stays until something lands in it
	// or the transport closes.
	t.reqs[pl.reqKey] = &outReq{landing: s, ckey: pl.ckey, link: l}
	pl.landing = s
	pl.hdr.flags |= flagLanding
	pl.hdr.landing = s.buf.remote(s.idx)
}

func (t *Transport) dropCachedLocked(l *link, cs *cachedSlot) {
	for k, list := range l.cache {
		for i, x := range list {
			if x == cs {
				l.cache[k] = append(list[:i], list[i+1:]...)
			}
		}
	}
	delete(l.byIdx, cs.remote.idx)
}

// failPlanLocked undoes what plan reserved for a message that was not sent.
func (t *Transport) failPlanLocked(pl *sendPlan) {
	if pl.landing != nil && pl.landing.state == slotLanding {
		if r := t.reqs[pl.reqKey]; r != nil && r.landing == pl.landing {
			delete(t.reqs, pl.reqKey)
		}
		t.freeSlotLocked(pl.landing)
	}
	if pl.cs != nil {
		pl.cs.busy = false
	}
	if g := pl.grant; g != nil && g.state == slotGranted {
		// The requester never learns of it: do not leave it bound.
		t.freeSlotLocked(g)
	}
}

// rendezvous asks the receiver for a slot of total bytes (ps-lite's
// RendezvousStart/RendezvousReply).
func (t *Transport) rendezvous(l *link, pl *sendPlan, total int) (remoteSlot, error) {
	ch := make(chan ctrlMsg, 1)
	t.mu.Lock()
	if l.dead {
		t.mu.Unlock()
		return remoteSlot{}, fmt.Errorf("van/rdma: connection to node %d: %w", l.peer, errLinkClosed)
	}
	t.nextToken++
	token := t.nextToken
	l.waiters[token] = ch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(l.waiters, token)
		t.mu.Unlock()
	}()

	m := ctrlMsg{typ: ctrlStart, link: l.remote, token: token, size: uint64(total), key: pl.ckey, replace: pl.replace}
	if pl.wantCache {
		m.flags |= startWantCache
	}
	var b [ctrlSize]byte
	m.put(&b)
	if err := t.sendCtrlWait(l, &b); err != nil {
		return remoteSlot{}, err
	}
	select {
	case r := <-ch:
		switch r.status {
		case replyOK:
		case replyTooBig:
			return remoteSlot{}, fmt.Errorf("van/rdma: node %d refuses a message of %d bytes: above its limit", l.peer, total)
		default:
			return remoteSlot{}, fmt.Errorf("van/rdma: node %d cannot register memory for a message of %d bytes", l.peer, total)
		}
		if r.flags&replyCached != 0 {
			t.mu.Lock()
			if !l.dead {
				cs := &cachedSlot{remote: r.slot, busy: true}
				l.cache[pl.ckey] = append(l.cache[pl.ckey], cs)
				l.byIdx[r.slot.idx] = cs
				pl.cs = cs
			}
			t.mu.Unlock()
		}
		return r.slot, nil
	case <-l.closed:
		return remoteSlot{}, fmt.Errorf("van/rdma: connection to node %d during rendezvous: %w", l.peer, errLinkClosed)
	case <-t.done:
		return remoteSlot{}, van.ErrClosed
	}
}

// sendCtrlWait sends a control message from a goroutine that may wait.
func (t *Transport) sendCtrlWait(l *link, b *[ctrlSize]byte) error {
	for {
		err := t.dev.sendCtrl(l.dl, b)
		if !errors.Is(err, errAgain) {
			if err != nil {
				if t.isDead(l) {
					err = errLinkClosed
				}
				return fmt.Errorf("van/rdma: control message to node %d: %w", l.peer, err)
			}
			return nil
		}
		if t.closed.Load() {
			return van.ErrClosed
		}
		if isClosed(l.closed) {
			return fmt.Errorf("van/rdma: control message to node %d: %w", l.peer, errLinkClosed)
		}
		time.Sleep(20 * time.Microsecond)
	}
}

func (t *Transport) isDead(l *link) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return l.dead
}

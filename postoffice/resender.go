package postoffice

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/message"
)

// resender is the PS_RESEND layer: every sent message but ACKs, TERMINATE
// and heartbeats is kept until the receiver acknowledges it, and resent
// once timeout·(1+retries) passed since it was first sent; duplicates are
// acknowledged and dropped on receipt.
//
// Differences from ps-lite, on purpose:
//   - it stops before the transport closes (ps-lite's monitor thread races
//     with shutdown and CHECK-fails), and giving up after maxRetry logs an
//     error instead of aborting the process;
//   - a registration sent before the node has an id (anonymous: the
//     scheduler cannot answer an id it does not know) is acknowledged by
//     the scheduler's node list, the reply it waits for; it is resent with
//     a capped interval until then and never given up, and never resent
//     once the node has an id (the scheduler would take it for a restarted
//     process). Its timestamp is a random nonce, so that the scheduler
//     tells its duplicates from the registration of a process restarted at
//     the same address;
//   - a message a node receives before it has an id (the node list) is
//     acknowledged once the node has it, with the signature its sender
//     computed;
//   - the signature is a hash that covers the customer id and the command
//     and full ids (ps-lite packs 8-bit ids and no customer id);
//   - the record of received signatures forgets an entry once its sender
//     can no longer resend it (horizon), and a restarted node's entries at
//     once (its timestamps start again from 0), with a hard cap;
//   - Stop waits, bounded, for the acknowledgement of the barrier releases
//     the scheduler sent, and a server or worker lingers to acknowledge a
//     release resent because its ACK was lost (settle).
type resender struct {
	p        *Postoffice
	timeout  time.Duration
	maxRetry int
	horizon  time.Duration // how long a received signature is remembered
	maxSeen  int           // cap on remembered signatures, whatever the horizon

	mu      sync.Mutex
	pending map[uint64]*outgoing
	seen    map[seenKey]time.Time // last receipt of each signature
	order   []seenAt              // receipts, oldest first, from head
	head    int
	done    chan struct{}
	wg      sync.WaitGroup

	heard     atomic.Int64 // when a message last arrived (UnixNano), dropped or not
	gaveUp    atomic.Int64 // messages given up after maxRetry resends
	unsettled atomic.Int64 // settle calls that stopped waiting with some unacknowledged
}

type outgoing struct {
	msg       *message.Message
	sent      time.Time // first sent; the retries are counted from it
	retries   int
	anonymous bool // sent before this node had an id
}

// seenKey is a received signature; sender keeps a restarted node's entries
// apart (forgetPeer) and anonymous ones under message.Empty.
type seenKey struct {
	sender int32
	sig    uint64
}

type seenAt struct {
	key seenKey
	at  time.Time
}

// maxSeen caps the record of received signatures whatever the horizon:
// beyond it the oldest entries go first.
const maxSeen = 1 << 20

func newResender(p *Postoffice, timeout time.Duration, maxRetry int) *resender {
	r := &resender{p: p, timeout: timeout, maxRetry: maxRetry,
		// A sender's resends of one message end (1+maxRetry) timeouts after
		// the first, an anonymous one's come every maxRetry timeouts; the
		// horizon covers either gap twice over.
		horizon: 2 * time.Duration(maxRetry+2) * timeout, maxSeen: maxSeen,
		pending: map[uint64]*outgoing{}, seen: map[seenKey]time.Time{}, done: make(chan struct{})}
	r.wg.Add(1)
	go r.monitorLoop()
	return r
}

// signature identifies a message by what both ends know of it: its meta
// fields on the wire, the sender's id and the receiver's id. Sender and
// receiver compute it alike; only the sender keeps it (in the ACK).
func signature(m *message.Meta) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, v := range [...]uint64{
		uint64(uint32(m.AppID))<<32 | uint64(uint32(m.CustomerID)),
		uint64(uint32(m.Sender))<<32 | uint64(uint32(m.Recver)),
		uint64(uint32(m.Timestamp))<<32 | uint64(uint32(m.Control.Cmd))<<1 | boolBit(m.Request),
	} {
		h = mix64(h ^ v)
	}
	return h
}

// anonymousSignature identifies a registration sent before its sender had
// an id: by the node it registers and its nonce timestamp.
func anonymousSignature(m *message.Meta) uint64 {
	h := signature(m)
	for _, n := range m.Control.Nodes {
		for i := 0; i < len(n.Hostname); i++ {
			h = mix64(h ^ uint64(n.Hostname[i]))
		}
		h = mix64(h ^ uint64(uint32(n.Port))<<32 ^ uint64(uint32(n.CustomerID)))
	}
	return h
}

func boolBit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// mix64 is splitmix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// tracked reports whether a message of this command is kept until
// acknowledged (and so acknowledged by its receiver): not ACKs, not
// TERMINATE (to oneself), not heartbeats (the next one replaces a lost one).
func tracked(cmd message.Command) bool {
	return cmd != message.CmdAck && cmd != message.CmdTerminate && cmd != message.CmdHeartbeat
}

// addOutgoing keeps m until acknowledged; it is called before m is sent, so
// that an ACK cannot overtake it. An anonymous message gets its nonce
// timestamp here.
func (r *resender) addOutgoing(m *message.Message) (sig uint64, ok bool) {
	if !tracked(m.Meta.Control.Cmd) {
		return 0, false
	}
	o := &outgoing{msg: m, sent: time.Now(), anonymous: m.Meta.Sender == message.Empty}
	if o.anonymous {
		m.Meta.Timestamp = rand.Int32N(math.MaxInt32)
		sig = anonymousSignature(&m.Meta)
	} else {
		sig = signature(&m.Meta)
	}
	r.mu.Lock()
	r.pending[sig] = o
	r.mu.Unlock()
	return sig, true
}

// removeOutgoing forgets the message addOutgoing kept as sig, which could
// not be sent at all.
func (r *resender) removeOutgoing(sig uint64) {
	r.mu.Lock()
	delete(r.pending, sig)
	r.mu.Unlock()
}

// addIncoming acknowledges m and reports whether it is a duplicate (or an
// ACK) that the caller must not process further. A message received before
// this node has an id is neither acknowledged nor recorded: registered does
// both once the node has one.
func (r *resender) addIncoming(m *message.Message) bool {
	cmd := m.Meta.Control.Cmd
	if cmd == message.CmdAck {
		r.mu.Lock()
		delete(r.pending, m.Meta.Control.MsgSig)
		r.mu.Unlock()
		return true
	}
	if !tracked(cmd) {
		return false
	}
	if m.Meta.Sender == message.Empty {
		// An anonymous registration: no id to answer, the node list is its
		// acknowledgement; its resends are dropped here.
		return r.record(seenKey{message.Empty, anonymousSignature(&m.Meta)}, m, time.Now())
	}
	me := r.p.myID.Load()
	if me == message.Empty {
		return false
	}
	return r.ack(m, me)
}

// ack acknowledges m, received by node me, and records it; it reports
// whether m is a duplicate.
func (r *resender) ack(m *message.Message, me int32) bool {
	// The signature is computed as the sender computed it: the van gives
	// Recver as this node's id when it received m, which may be older.
	meta := m.Meta
	meta.Recver = me
	sig := signature(&meta)
	a := &message.Message{Meta: message.NewMeta()}
	a.Meta.Recver = m.Meta.Sender
	a.Meta.Sender = me
	a.Meta.Control.Cmd = message.CmdAck
	a.Meta.Control.MsgSig = sig
	_, _ = r.p.tr.Send(a)
	return r.record(seenKey{m.Meta.Sender, sig}, m, time.Now())
}

// record notes the receipt of k (in m) at now and reports whether it was
// seen before.
func (r *resender) record(k seenKey, m *message.Message, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, dup := r.seen[k]
	r.seen[k] = now
	r.order = append(r.order, seenAt{k, now})
	r.pruneLocked(now)
	if dup {
		r.p.log.Warn("dropping a duplicated message", "msg", m.Meta.String())
	}
	return dup
}

// registered is called once this node has its id, with m the message
// (the node list) that gave it: the anonymous registrations are answered,
// and m is acknowledged as its sender computed it.
func (r *resender) registered(m *message.Message) {
	me := r.p.myID.Load()
	if me == message.Empty {
		return
	}
	r.mu.Lock()
	for sig, o := range r.pending {
		if o.anonymous {
			delete(r.pending, sig)
		}
	}
	r.mu.Unlock()
	r.ack(m, me)
}

// forgetPeer forgets what was exchanged with node id, which a restarted
// process took over: its signatures (it counts timestamps from 0 again, so
// its new messages would look like duplicates), and the messages for its
// predecessor (their operations failed with the death; the new process
// must not answer them).
func (r *resender) forgetPeer(id int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.seen {
		if k.sender == id {
			delete(r.seen, k)
		}
	}
	for sig, o := range r.pending {
		if o.msg.Meta.Recver == id {
			delete(r.pending, sig)
		}
	}
}

// pruneLocked forgets receipts older than the horizon at now, and the
// oldest beyond r.maxSeen. r.mu must be held.
func (r *resender) pruneLocked(now time.Time) {
	for r.head < len(r.order) {
		e := r.order[r.head]
		if now.Sub(e.at) < r.horizon && len(r.seen) <= r.maxSeen {
			break
		}
		// An entry refreshed by a later receipt has a later one in order.
		if at, ok := r.seen[e.key]; ok && at.Equal(e.at) {
			delete(r.seen, e.key)
		}
		r.order[r.head] = seenAt{}
		r.head++
	}
	if r.head > len(r.order)/2 {
		r.order = append(r.order[:0], r.order[r.head:]...)
		r.head = 0
	}
}

func (r *resender) monitorLoop() {
	defer r.wg.Done()
	t := time.NewTicker(max(r.timeout/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case now := <-t.C:
			r.resendDue(now)
		}
	}
}

// resendDue resends what is due at now and gives up on what was resent
// maxRetry times.
func (r *resender) resendDue(now time.Time) {
	var resend []*message.Message
	r.mu.Lock()
	for sig, o := range r.pending {
		if now.Sub(o.sent) < r.timeout*time.Duration(1+o.retries) {
			continue
		}
		if o.retries >= r.maxRetry {
			if !o.anonymous {
				r.gaveUp.Add(1)
				r.p.log.Error("giving up on a message after retries; the receiver is unreachable", "retries", o.retries, "msg", o.msg.Meta.String())
				delete(r.pending, sig)
				continue
			}
			// Registering is all such a node does: it goes on, every
			// maxRetry timeouts.
			o.sent, o.retries = now, r.maxRetry-1
		}
		o.retries++
		resend = append(resend, o.msg)
	}
	r.pruneLocked(now)
	r.mu.Unlock()
	for _, m := range resend {
		r.p.log.Warn("resending a message that was not acknowledged", "msg", m.Meta.String())
		_, _ = r.p.tr.Send(m)
	}
}

// endCritical reports whether the job's end depends on m's delivery: a
// barrier release (the final one lets the nodes finalize).
func endCritical(m *message.Message) bool {
	return isBarrierCmd(m.Meta.Control.Cmd) && !m.Meta.Request
}

// unackedCritical lists the end-critical messages not acknowledged yet.
func (r *resender) unackedCritical() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, o := range r.pending {
		if endCritical(o.msg) {
			out = append(out, o.msg.Meta.String())
		}
	}
	return out
}

// quietFor is how long a stopping node waits for a resend: resends of one
// message come a timeout apart (a quarter more with the monitor's tick),
// and a loaded host delays them some more.
func (r *resender) quietFor() time.Duration { return 2*r.timeout + 100*time.Millisecond }

// arrived notes that a message arrived (before PS_DROP_MSG may drop it).
func (r *resender) arrived() { r.heard.Store(time.Now().UnixNano()) }

// settle runs before the node stops, while it still receives. It waits
// until every end-critical message this node sent is acknowledged, for at
// most as long as their resends last, and logs what it gave up on.
//
// A server or worker then lingers until nothing arrived for quietFor: if
// its ACK of the final release was lost (or the resend itself), the
// scheduler resends the release about a timeout later, and the node must
// still be there to acknowledge it, or the scheduler waits in vain. The
// same bound applies.
func (r *resender) settle(scheduler bool) {
	poll := max(r.timeout/8, time.Millisecond)
	deadline := time.Now().Add(time.Duration(r.maxRetry+2) * r.timeout)
	for !scheduler && time.Now().Before(deadline) {
		quiet := time.Since(time.Unix(0, r.heard.Load()))
		if quiet >= r.quietFor() {
			break
		}
		time.Sleep(min(r.quietFor()-quiet, poll))
	}
	for {
		left := r.unackedCritical()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.unsettled.Add(1)
			r.p.log.Warn("stopping although messages the job's end depends on are not acknowledged; their receivers may wait for them", "unacknowledged", left)
			break
		}
		time.Sleep(poll)
	}
}

func (r *resender) stop() {
	close(r.done)
	r.wg.Wait()
}

package elastic

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/elasticps/elasticps/message"
)

// Under BSP (PS_SYNC_MODE=bsp) a replicated primary does not forward each
// push: it applies the pushes of a round at once and holds their
// acknowledgements (kv.ResponseHolder); when the round of an interval
// closes (every live worker pushed it: the sync gate's t_min reached the
// pushes' iteration) it copies the interval's state — the handler's
// values and optimizer state, the sync controller's clocks and the
// applied-push record — and ships that once to each backup (MsgShip);
// the held acknowledgements go out when every backup has installed it.
// With n workers the backups receive one state per round instead of n
// pushes. A primary that dies mid-round leaves backups with the previous
// round's state and no record of this round's pushes, none of which was
// acknowledged: the workers re-send them to the promoted backup, which
// applies each once.

// ivKey names an interval of the routing table.
type ivKey struct{ begin, end uint64 }

// round is a BSP primary's record of one of its replicated intervals.
// Guarded by the agent's mu.
type round struct {
	key      ivKey
	held     []*heldAck // applied, acknowledged once a state holding them reached the backups
	shipping bool       // a copy was asked for (marker queued) or is on its way
	copying  bool       // the copy is being taken: a seeding of the keys waits
	bodySize int        // the last copy's message body: the next one's size
}

// heldAck is one applied push whose acknowledgement waits.
type heldAck struct {
	keys []uint64 // nil for a duplicate: no round to wait for
	iter int64    // the push's iteration (kv.Iteration); 0: none stated
	send func(fail error) error
	left int   // intervals whose state must reach the backups first
	fail error // a backup could not install a state holding it
}

// holdInfo is what an admitted BSP push needs once applied.
type holdInfo struct {
	keys       []uint64
	iter       int64
	worker, ts int32
}

// shipment is a copy of an interval's state on its way to its backups.
type shipment struct {
	rd    *round
	waits []int32 // backups that have not installed it
	batch []*heldAck
	sent  time.Time
}

// shipRetry is how soon a copy that found the interval busy (a push in
// the handler, or let run by the sync controller and not applied yet)
// tries again.
const shipRetry = time.Millisecond

func (e *serverAgent) shipsRounds() bool { return e.rep != nil && e.rep.bsp && e.sync != nil }

// Hold implements kv.ResponseHolder: a BSP push on a replicated interval
// is applied; its acknowledgement waits for its round's state to reach
// the backups.
func (r *inflightReq) Hold(send func(fail error) error) bool {
	if r.held == nil {
		return false
	}
	e := r.agent
	e.mu.Lock()
	delete(e.inflight, r) // applied: a copy of the keys need not wait for it
	h := r.held
	e.rep.seen.Note(h.worker, r.lo, h.ts)
	held := e.holdAckLocked(r.lo, r.hi, h.keys, h.iter, send)
	e.mu.Unlock()
	if held {
		// At once, not on another goroutine: the round's copy is queued
		// ahead of what the customer goroutine is given next (the
		// round's released pulls), so its transfer and installation on
		// the backups overlap their answers. shipCheck takes e.mu, the
		// sync gate's lock and the customer's queue, none of which a
		// caller of Response holds.
		e.shipCheck()
	}
	return held
}

// holdAckLocked registers an acknowledgement with the rounds of the
// intervals holding [lo, hi] that have a seeded backup; false if there is
// none (the push is on no other server to wait for). The caller holds mu.
func (e *serverAgent) holdAckLocked(lo, hi uint64, keys []uint64, iter int64, send func(fail error) error) bool {
	h := &heldAck{keys: keys, iter: iter, send: send}
	r := e.routes
	me := e.me()
	for i := max(r.Find(lo), 0); i < len(r.Intervals) && r.Intervals[i].Begin <= hi; i++ {
		iv := &r.Intervals[i]
		if !replicatesHere(iv, me) || !slices.ContainsFunc(iv.Backups, func(b int32) bool { return e.rep.active[activeKey{iv.Begin, iv.End, b}] }) {
			continue
		}
		k := ivKey{iv.Begin, iv.End}
		rd := e.rep.rounds[k]
		if rd == nil {
			rd = &round{key: k}
			e.rep.rounds[k] = rd
		}
		rd.held = append(rd.held, h)
		h.left++
	}
	return h.left > 0
}

// shipCheck asks for a copy of every interval one of whose held pushes
// has its round closed, unless one is under way or the interval is being
// seeded (the seed holds the pushes; the copy follows it).
func (e *serverAgent) shipCheck() {
	e.mu.Lock()
	var start []*message.Message
	for k, rd := range e.rep.rounds {
		if rd.shipping || len(rd.held) == 0 ||
			slices.ContainsFunc(e.rep.seeds, func(sd *seeding) bool { return overlaps(sd.begin, sd.end, k.begin, k.end) }) ||
			!slices.ContainsFunc(rd.held, e.roundClosed) {
			continue
		}
		rd.shipping = true
		start = append(start, e.newMarker(rd))
	}
	e.mu.Unlock()
	for _, m := range start {
		e.s.Readmit(m)
	}
}

func (e *serverAgent) roundClosed(h *heldAck) bool {
	return h.keys == nil || h.iter <= 0 || e.sync.RoundClosed(h.keys, h.iter)
}

// newMarker makes the request that takes rd's copy on the server's
// customer goroutine, in order with the requests it handles: nothing is
// applied meanwhile.
func (e *serverAgent) newMarker(rd *round) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.AppID, m.Meta.CustomerID = int32(e.s.AppID()), int32(e.s.AppID())
	m.Meta.Sender, m.Meta.Recver = e.me(), e.me()
	m.Meta.Request = true
	m.Meta.Timestamp = -1
	e.rep.markers.Store(m, rd)
	return m
}

// shipMarker takes a round's copy when m is a marker (Admit's first
// step) and sends it to the interval's backups; false for any other
// request.
func (e *serverAgent) shipMarker(m *message.Message) bool {
	v, ok := e.rep.markers.Load(m)
	if !ok {
		return false
	}
	rd := v.(*round)
	k := rd.key
	e.mu.Lock()
	busy := e.sync.PushPending(k.begin, k.end)
	for r := range e.inflight {
		busy = busy || r.push && overlaps(r.lo, r.hi+1, k.begin, k.end)
	}
	seeding := slices.ContainsFunc(e.rep.seeds, func(sd *seeding) bool { return overlaps(sd.begin, sd.end, k.begin, k.end) })
	if busy && !seeding {
		e.mu.Unlock()
		time.AfterFunc(shipRetry, func() { e.s.Readmit(m) })
		return true
	}
	e.rep.markers.Delete(m)
	// The round's interval may have been split since (a move takes part
	// of it away): its state goes to the backups of every part this
	// server still replicates.
	var to []int32
	for i := max(e.routes.Find(k.begin), 0); i < len(e.routes.Intervals) && e.routes.Intervals[i].Begin < k.end; i++ {
		iv := &e.routes.Intervals[i]
		if iv.End <= k.begin || !replicatesHere(iv, e.me()) {
			continue
		}
		for _, b := range iv.Backups {
			if e.rep.active[activeKey{iv.Begin, iv.End, b}] && !slices.Contains(to, b) {
				to = append(to, b)
			}
		}
	}
	if seeding || e.rep.rounds[k] != rd {
		// The seed copies the pushes; the copy follows it (seed calls
		// shipCheck).
		rd.shipping = false
		e.mu.Unlock()
		return true
	}
	sh := &shipment{rd: rd, batch: rd.held, waits: to, sent: time.Now()}
	rd.held = nil
	rd.copying = true
	seen := e.rep.seen.Export(k.begin, k.end)
	epoch := e.routes.Epoch
	e.mu.Unlock()

	// On the customer goroutine: no request is handled meanwhile. The
	// copy goes straight into the message's body.
	mv := Move{Begin: k.begin, End: k.end, From: e.me(), Epoch: epoch}
	body, err := appendSeedBody(mv, seen, rd.bodySize, func(b []byte) ([]byte, error) { return e.appendState(b, k.begin, k.end) })
	e.mu.Lock()
	rd.copying = false
	rd.bodySize = len(body)
	if err != nil {
		e.po.Logger().Error("elastic: the round's state could not be copied for the backups; its pushes fail", "begin", k.begin, "end", k.end, "err", err)
		for _, h := range sh.batch {
			h.fail = fmt.Errorf("the round's state could not be copied for the backups: %w", err)
		}
		sh.waits = nil
	}
	e.rep.ships = append(e.rep.ships, sh)
	waits := slices.Clone(sh.waits)
	e.mu.Unlock()
	if len(waits) == 0 {
		go e.shipDone(sh, -1, nil)
		return true
	}
	for _, b := range waits {
		if err := e.node.link.Go(b, MsgShip, body, func(_ []byte, err error) { e.shipDone(sh, b, err) }); err != nil {
			e.po.Logger().Error("elastic: round state not sent to a backup; its pushes wait until the backup leaves the routing table", "backup", b, "err", err)
		}
	}
	return true
}

// shipDone records backup b's answer to a shipment (b < 0: none to wait
// for); once every backup answered, the batch's acknowledgements whose
// every interval shipped go out.
func (e *serverAgent) shipDone(sh *shipment, b int32, err error) {
	e.mu.Lock()
	if err != nil {
		// Not acknowledged: the pushes are on this server only (a backup
		// whose table names another primary refused them). Their workers'
		// Wait returns the error; applied here, they count at most once.
		e.po.Logger().Error("elastic: a backup failed to install a round's state; the round's pushes fail", "backup", b, "begin", sh.rd.key.begin, "end", sh.rd.key.end, "err", err)
		for _, h := range sh.batch {
			if h.fail == nil {
				h.fail = fmt.Errorf("backup server %d could not install the round's state: %w", b, err)
			}
		}
	}
	if b >= 0 {
		if !slices.Contains(sh.waits, b) {
			e.mu.Unlock()
			return
		}
		sh.waits = slices.DeleteFunc(sh.waits, func(x int32) bool { return x == b })
	}
	if len(sh.waits) > 0 || !slices.Contains(e.rep.ships, sh) {
		e.mu.Unlock()
		return
	}
	e.rep.ships = slices.DeleteFunc(e.rep.ships, func(x *shipment) bool { return x == sh })
	sh.rd.shipping = false
	var send []*heldAck
	for _, h := range sh.batch {
		if h.left--; h.left == 0 {
			send = append(send, h)
		}
	}
	e.mu.Unlock()
	for _, h := range send {
		if err := h.send(h.fail); err != nil {
			e.po.Logger().Error("elastic: acknowledgement of a replicated push not sent", "err", err)
		}
	}
	e.shipCheck()
}

// seedBody is a MsgSeed's or MsgShip's body: mv, then the state's length,
// the state and the applied-push record, copied once (a round's state is
// as large as the interval).
func seedBody(mv Move, state, seen []byte) []byte {
	b, _ := appendSeedBody(mv, seen, len(state), func(b []byte) ([]byte, error) { return append(b, state...), nil })
	return b
}

// appendSeedBody is seedBody with the state written into the body by
// appendState (sizeHint: the state's expected size).
func appendSeedBody(mv Move, seen []byte, sizeHint int, appendState func([]byte) ([]byte, error)) ([]byte, error) {
	b := MarshalMove(mv, nil)
	b = slices.Grow(b, 4+sizeHint+len(seen))
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b, err := appendState(b)
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return append(b, seen...), nil
}

// stateCopier is a Migrator that can also copy keys without handing them
// over (kv.DefaultHandler's and paramstore.Store's Snapshot, in Export's
// format).
type stateCopier interface {
	Snapshot(begin, end uint64) ([]byte, error)
}

// stateAppender is a Migrator that copies keys as Snapshot does, appended
// to a buffer: the copy is written once, into the message carrying it.
type stateAppender interface {
	AppendSnapshot(dst []byte, begin, end uint64) ([]byte, error)
}

// stateReplacer is a Migrator that installs a copy of [begin, end) in
// place of what it holds there (all or nothing), reusing its buffers: a
// backup installing a round's copy neither exports its old copy to drop
// it nor allocates the values again.
type stateReplacer interface {
	Replace(begin, end uint64, state []byte) error
}

// appendState appends a copy of [begin, end) — the handler's state
// through its Migrator and the sync gate's — to dst, in exportState's
// format, leaving the keys in place: with the handler's AppendSnapshot if
// it has one (written straight into dst), else its Snapshot, else by an
// Export imported back at once (which decodes and reallocates every value
// of the interval).
func (e *serverAgent) appendState(dst []byte, begin, end uint64) ([]byte, error) {
	var syncState []byte
	if e.sync != nil {
		syncState = e.sync.Snapshot(begin, end)
	}
	switch c := e.migrator().(type) {
	case stateAppender:
		b, err := c.AppendSnapshot(e.appendWrapHeader(dst, syncState, stateMigrator), begin, end)
		if err != nil {
			return nil, fmt.Errorf("the handler could not copy keys [%d, %d): %w", begin, end, err)
		}
		return b, nil
	case stateCopier:
		st, err := c.Snapshot(begin, end)
		if err != nil {
			return nil, fmt.Errorf("the handler could not copy keys [%d, %d): %w", begin, end, err)
		}
		return append(e.appendWrapHeader(dst, syncState, stateMigrator), st...), nil
	}
	state, err := e.exportState(begin, end, syncState)
	if err != nil {
		return nil, err
	}
	// Export hands the keys over; take them back at once: a copy.
	own := state
	if e.sync != nil {
		if _, own, err = splitSyncState(state); err != nil {
			return nil, err
		}
	}
	if err := e.importHandlerState(own); err != nil {
		return nil, err
	}
	return append(dst, state...), nil
}

// ReplicationReceived counts what the node's server received as a backup
// (PS_REPLICAS): pushes forwarded one by one (asynchronous, SSP and
// Fluent modes) and round states shipped (BSP).
func (n *Node) ReplicationReceived() (pushes, states int64) {
	if a := n.server.Load(); a != nil && a.rep != nil {
		return a.rep.forwardsIn.Load(), a.rep.shipsIn.Load()
	}
	return 0, 0
}

// ForwardsNotBackup counts the forwarded pushes the node's server refused
// because its routing table does not name it a backup of their keys.
func (n *Node) ForwardsNotBackup() int64 {
	if a := n.server.Load(); a != nil && a.rep != nil {
		return a.rep.forwardsNotBackup.Load()
	}
	return 0
}

// MarshalSeed is a MsgSeed's body for state, a Migrator's export of mv's
// keys with no applied-push record: the coordinator installs a moved
// interval on its new backups with it before the new owner serves it.
func MarshalSeed(mv Move, state []byte) []byte { return seedBody(mv, state, nil) }

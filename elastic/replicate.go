package elastic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/replica"
	"github.com/elasticps/elasticps/routing"
)

// replication is a server agent's part of PS_REPLICAS: as the primary of
// an interval it forwards each push to the interval's backups and lets
// the handler apply it only once every backup has (requests behind it on
// the same server wait in order); as a backup it applies forwarded pushes;
// on both it records applied pushes (replica.Seen) so a re-sent one is
// applied once. Its fields are guarded by the agent's mu.
type replication struct {
	seen   *replica.Seen
	active map[activeKey]bool              // interval (begin, end) -> backup seeded and forwarded to
	queue  []*forwarded                    // requests waiting for the backups, in admission order
	pass   map[*message.Message]*forwarded // released, not yet admitted again
	seeds  []*seeding
	// forwarded pushes being applied here as a backup: a seeding of
	// their keys waits for them
	applying map[*applying]struct{}
	// seeds installed here by a primary named in a newer routing table
	// than this server has yet: its forwards are taken meanwhile
	ahead []Move
	// copies are the keys this server holds a seeded copy of as a backup
	// (besides ahead), as the tables since named it: what it tells a
	// restarted scheduler (MsgCopies), which did not see the seedings
	copies routing.Spans

	// BSP: per interval this server is primary of, the pushes applied
	// and waiting for the round's state to reach the backups
	rounds  map[ivKey]*round
	ships   []*shipment // state copies on their way to backups
	markers sync.Map    // *message.Message -> *round: copy requests in the server's queue

	bsp bool // PS_SYNC_MODE=bsp: rounds are shipped, pushes not forwarded
	// seedHalt, for tests (ELASTICPS_TEST_SEED_HALT=PRIMARY:BACKUP): the
	// primary never seeds that backup, which stays placed but unseeded
	seedHalt [2]int32

	readmitMu sync.Mutex   // releases queued requests in order
	dupes     atomic.Int64 // duplicate pushes acknowledged without applying them
	// received as a backup: forwarded pushes and round states (MsgShip)
	forwardsIn, shipsIn atomic.Int64
	// forwarded pushes refused because this server's table does not name
	// it a backup of their keys (answered forwardNotBackup)
	forwardsNotBackup atomic.Int64
}

type applying struct{ lo, hi uint64 }

type activeKey struct {
	begin, end uint64
	backup     int32
}

// forwarded is a request waiting on the primary until every backup it was
// forwarded to has applied it (a request that is no push waits only for
// those before it).
type forwarded struct {
	m      *message.Message
	lo, hi uint64
	waits  []int32 // backups that have not answered
	dup    bool    // a push applied here before: answered without the handler
	failed error   // a backup could not apply it: answered with this error
	sent   time.Time
}

// seeding copies an interval to a new backup; the interval's requests are
// held meanwhile.
type seeding struct {
	begin, end uint64
	to         int32
	parked     []*message.Message
	cancel     chan struct{} // closed when the backup left the table
}

func newReplication() *replication {
	return &replication{seen: replica.NewSeen(), active: map[activeKey]bool{}, pass: map[*message.Message]*forwarded{},
		applying: map[*applying]struct{}{}, rounds: map[ivKey]*round{}}
}

// replicate is Admit's step for a request this server is the primary of,
// with e.mu held: handled false lets it through now; otherwise it is held
// (forwarded to the backups, behind earlier ones, or behind a seeding).
func (e *serverAgent) replicate(m *message.Message, lo, hi uint64, push bool) (handled bool) {
	rp := e.rep
	for _, sd := range rp.seeds {
		if overlaps(lo, hi+1, sd.begin, sd.end) {
			sd.parked = append(sd.parked, m)
			return true
		}
	}
	w := workerKey(&m.Meta)
	dup := push && rp.seen.Applied(w, lo, m.Meta.Timestamp)
	if e.shipsRounds() {
		// Applied here now; acknowledged with its round's state
		// (inflightReq.Hold), a duplicate with the next state shipped.
		if !dup {
			return false
		}
		f := &forwarded{m: m, lo: lo, hi: hi, dup: true}
		if !e.holdAckLocked(lo, hi, nil, 0, func(fail error) error {
			if fail != nil {
				e.answer(m, fail)
			} else {
				e.answerDup(f)
			}
			return nil
		}) {
			go e.answerDup(f)
		}
		return true
	}
	var to []int32
	if push {
		to = e.backupsOf(lo, hi)
	}
	if push && !dup {
		// Noted now: the handler applies it after the backups did, and
		// nothing re-sends it meanwhile (only a failover does, to another
		// server).
		rp.seen.Note(w, lo, m.Meta.Timestamp)
	}
	if len(rp.queue) == 0 && len(to) == 0 && !dup {
		return false
	}
	f := &forwarded{m: m, lo: lo, hi: hi, dup: dup, sent: time.Now()}
	rp.queue = append(rp.queue, f)
	if len(to) > 0 {
		body := encodeForward(m)
		for _, b := range to {
			f.waits = append(f.waits, b)
			if err := e.node.link.Go(b, MsgReplicate, body, func(ans []byte, err error) { e.forwardDone(f, b, ans, err) }); err != nil {
				e.po.Logger().Error("elastic: push not forwarded to a backup; it waits until the backup leaves the routing table", "backup", b, "err", err)
			}
		}
	}
	if len(f.waits) == 0 {
		go e.release()
	}
	return true
}

// released reports whether m is a request the queue released to the
// handler (it waited for its backups or for those before it), and forgets
// it. The caller holds mu.
func (rp *replication) released(m *message.Message) bool {
	_, ok := rp.pass[m]
	delete(rp.pass, m)
	return ok
}

// backupsOf lists the seeded backups of the intervals holding [lo, hi].
// The caller holds mu.
func (e *serverAgent) backupsOf(lo, hi uint64) []int32 {
	var out []int32
	r := e.routes
	for i := max(r.Find(lo), 0); i < len(r.Intervals) && r.Intervals[i].Begin <= hi; i++ {
		iv := &r.Intervals[i]
		for _, b := range iv.Backups {
			if e.rep.active[activeKey{iv.Begin, iv.End, b}] && !slices.Contains(out, b) {
				out = append(out, b)
			}
		}
	}
	return out
}

// forwardDone records a backup's answer to a forwarded push. A server
// whose (newer) table no longer names it a backup of the push's keys
// answers forwardNotBackup: the push does not wait for it, and does not
// fail, as the table that dropped it reaches this server too.
func (e *serverAgent) forwardDone(f *forwarded, b int32, ans []byte, err error) {
	e.mu.Lock()
	if err == nil && len(ans) == 1 && ans[0] == forwardNotBackup {
		e.po.Logger().Warn("elastic: a forwarded push was refused by a server whose routing table no longer names it a backup of the push's keys; not waiting for it",
			"server", b, "keys", fmt.Sprintf("[%d, %d]", f.lo, f.hi), "epoch", e.routes.Epoch)
	}
	if err != nil && f.failed == nil {
		// Not applied here either: the worker gets the error rather than
		// an acknowledgement the backup cannot back.
		e.po.Logger().Error("elastic: a backup failed to apply a forwarded push; the push fails", "backup", b, "err", err)
		f.failed = fmt.Errorf("backup server %d could not apply the push: %w", b, err)
	}
	f.waits = slices.DeleteFunc(f.waits, func(x int32) bool { return x == b })
	e.mu.Unlock()
	e.release()
}

// dropBackup stops waiting for backup b (dead, or no longer a backup):
// forwarded requests no longer wait for it. The caller holds mu.
func (e *serverAgent) dropBackup(b int32) {
	for _, f := range e.rep.queue {
		f.waits = slices.DeleteFunc(f.waits, func(x int32) bool { return x == b })
	}
	for k := range e.rep.active {
		if k.backup == b {
			delete(e.rep.active, k)
		}
	}
	for _, sd := range e.rep.seeds {
		if sd.to == b {
			sd.stop()
		}
	}
	for _, sh := range e.rep.ships {
		if slices.Contains(sh.waits, b) {
			go e.shipDone(sh, b, nil)
		}
	}
}

// release hands the queue's leading requests that no longer wait back to
// the server, in order.
func (e *serverAgent) release() {
	rp := e.rep
	rp.readmitMu.Lock()
	defer rp.readmitMu.Unlock()
	e.mu.Lock()
	var ready []*forwarded
	for len(rp.queue) > 0 && len(rp.queue[0].waits) == 0 {
		f := rp.queue[0]
		rp.queue = rp.queue[1:]
		ready = append(ready, f)
		if f.failed == nil && (!f.dup || f.m.Meta.Pull) {
			rp.pass[f.m] = f
		}
	}
	e.mu.Unlock()
	for _, f := range ready {
		switch {
		case f.failed != nil:
			e.answer(f.m, f.failed)
		case f.dup:
			e.answerDup(f)
		default:
			e.s.Readmit(f.m)
		}
	}
}

// answerDup acknowledges a push applied here before; a push-pull is
// served as the pull it also is.
func (e *serverAgent) answerDup(f *forwarded) {
	if !f.m.Meta.Pull {
		e.rep.dupes.Add(1)
		e.answer(f.m, nil)
		return
	}
	e.mu.Lock()
	e.rep.pass[f.m] = f
	e.mu.Unlock()
	f.m.Meta.Push = false
	f.m.Data = f.m.Data[:2:2]
	f.m.Data[1] = nil
	f.m.Meta.DataType = f.m.Meta.DataType[:2:2]
	e.s.Readmit(f.m)
}

// answer answers a push without the handler: an acknowledgement of one
// this server applied before (the worker re-sent it after a failover), or
// err (the elasticps error extension: the worker's Wait returns it).
func (e *serverAgent) answer(m *message.Message, err error) {
	r := replyTo(m)
	if err != nil {
		r.Meta.Body = []byte(err.Error())
	}
	if _, err := e.po.Send(r); err != nil {
		e.po.Logger().Error("elastic: answer to a replicated push not sent", "to", m.Meta.Sender, "err", err)
	}
}

// encodeForward encodes a push for MsgReplicate: worker, timestamp, cmd,
// the vals' data type, the push's iteration (kv.Iteration: a backup's
// sync gate counts it), then keys, vals and lens, each length-prefixed.
func encodeForward(m *message.Message) []byte {
	dt := message.Float
	if len(m.Meta.DataType) >= 2 {
		dt = m.Meta.DataType[1]
	}
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(workerKey(&m.Meta)))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Meta.Timestamp))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Meta.Head))
	b = binary.LittleEndian.AppendUint32(b, uint32(dt))
	b = binary.LittleEndian.AppendUint64(b, uint64(kv.Iteration(&m.Meta)))
	for i := range 3 {
		var f []byte
		if i < len(m.Data) {
			f = m.Data[i]
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

type forwardedPush struct {
	worker, ts int32
	iter       int64
	req        kv.LocalRequest
}

const forwardHeader = 24

func decodeForward(b []byte) (forwardedPush, error) {
	var p forwardedPush
	if len(b) < forwardHeader {
		return p, fmt.Errorf("elastic: forwarded push of %d bytes is shorter than its %d-byte header", len(b), forwardHeader)
	}
	p.worker, p.ts = int32(binary.LittleEndian.Uint32(b)), int32(binary.LittleEndian.Uint32(b[4:]))
	p.req = kv.LocalRequest{Push: true, Cmd: int32(binary.LittleEndian.Uint32(b[8:])), DataType: message.DataType(binary.LittleEndian.Uint32(b[12:]))}
	p.iter = int64(binary.LittleEndian.Uint64(b[16:]))
	b = b[forwardHeader:]
	var frames [3][]byte
	for i := range frames {
		if len(b) < 4 || int(binary.LittleEndian.Uint32(b)) > len(b)-4 {
			return p, fmt.Errorf("elastic: forwarded push: frame %d is truncated", i)
		}
		n := int(binary.LittleEndian.Uint32(b))
		frames[i], b = b[4:4+n], b[4+n:]
	}
	var err error
	if p.req.Data.Keys, err = kv.BytesToKeys(frames[0]); err != nil {
		return p, fmt.Errorf("elastic: forwarded push: keys: %w", err)
	}
	if len(p.req.Data.Keys) == 0 {
		return p, errors.New("elastic: forwarded push without keys")
	}
	p.req.Data.Vals = frames[1]
	if len(frames[2]) > 0 {
		if p.req.Data.Lens, err = kv.BytesToLens(frames[2]); err != nil {
			return p, fmt.Errorf("elastic: forwarded push: lens: %w", err)
		}
	}
	return p, nil
}

// applyForwarded applies a push that primary from forwarded to this
// backup, on the link's receive goroutine (so forwarded pushes apply in
// the order they were sent), unless it was applied before. A push from a
// node this server's table does not name as the keys' primary (one that
// died: a failover promoted another, perhaps this server) is refused: its
// worker re-sends it to the new primary, which forwards it to the new
// backups.
//
// A push whose keys this server's table does not name it a backup of (a
// primary with an older table forwards to a backup the scheduler since
// replaced) is not applied either: applying it could change keys this
// server is no backup of, or the primary of. It is answered
// forwardNotBackup, not an error, so that the push goes on without this
// server.
func (e *serverAgent) applyForwarded(from int32, body []byte) ([]byte, error) {
	e.rep.forwardsIn.Add(1)
	p, err := decodeForward(body)
	if err != nil {
		return nil, err
	}
	keys := p.req.Data.Keys
	first := keys[0]
	e.mu.Lock()
	if i := e.routes.Find(first); i >= 0 && !primaryOrLeaving(&e.routes.Intervals[i], from) && !e.rep.seededBy(from, first) {
		e.mu.Unlock()
		return nil, fmt.Errorf("routing epoch %d names node %d, not %d, as the primary of key %d: a forwarded push from %d is refused", e.routes.Epoch, e.routes.Intervals[i].Node, from, first, from)
	}
	if why := e.notBackupOf(from, first, keys[len(keys)-1]); why != "" {
		e.mu.Unlock()
		e.rep.forwardsNotBackup.Add(1)
		e.po.Logger().Warn("elastic: a forwarded push is refused: "+why, "primary", from, "worker", p.worker, "timestamp", p.ts)
		return []byte{forwardNotBackup}, nil
	}
	dup := e.rep.seen.Applied(p.worker, first, p.ts)
	var ap *applying
	if !dup {
		// Noted before it is applied: the worker may re-send it to this
		// server meanwhile (its primary died), and that copy must find it.
		e.rep.seen.Note(p.worker, first, p.ts)
		ap = &applying{lo: first, hi: keys[len(keys)-1]}
		e.rep.applying[ap] = struct{}{}
	}
	e.mu.Unlock()
	if dup {
		return nil, nil
	}
	_, err = e.s.HandleLocal(p.req, localTimeout)
	e.mu.Lock()
	delete(e.rep.applying, ap)
	e.mu.Unlock()
	if err != nil {
		// A handler that answers a push only once more pushes came (a
		// round of every worker's, as MXNet's dist_sync server merges)
		// never answers here: the next forwarded push waits behind this
		// one. Say so, as the timeout alone does not.
		return nil, fmt.Errorf("the handler did not apply a forwarded push: %w (a backup applies forwarded pushes one at a time, so a handler that answers a push only once other pushes arrived cannot be replicated: answer each push once applied and keep the round in the state, as paramstore's RoundSize does)", err)
	}
	if e.sync != nil {
		// Promoted, this server goes on with the push's clock (SSP's and
		// Fluent's staleness counts).
		e.sync.Observe(p.worker>>8, p.worker&0xff, keys, p.iter)
	}
	return nil, nil
}

// forwardNotBackup is a backup's answer to a forwarded push it did not
// apply because its table does not name it a backup of the push's keys.
const forwardNotBackup = 1

// notBackupOf says why this server must not apply a push of keys [lo, hi]
// forwarded by from, or returns "": every interval holding them must name
// this server a backup (or from the server a move takes it from, which
// forwards to the backups it had), unless from seeded them here with a
// newer table. The caller holds mu.
func (e *serverAgent) notBackupOf(from int32, lo, hi uint64) string {
	r, me := e.routes, e.me()
	i := r.Find(lo)
	if i < 0 {
		if e.rep.seededBy(from, lo) {
			return ""
		}
		return fmt.Sprintf("key %d is in no interval of routing epoch %d", lo, r.Epoch)
	}
	for ; i < len(r.Intervals) && r.Intervals[i].Begin <= hi; i++ {
		iv := &r.Intervals[i]
		if e.rep.seededBy(from, max(iv.Begin, lo)) || iv.Prev == from || (iv.Node == from && iv.HasBackup(me)) {
			continue
		}
		return fmt.Sprintf("routing epoch %d has keys [%d, %d) on primary %d with backups %v, not on primary %d with this server (node %d) as a backup",
			r.Epoch, iv.Begin, iv.End, iv.Node, iv.Backups, from, me)
	}
	return ""
}

// replicaRoutes updates replication for a new table r, with mu held (old
// is the table before it): forwarded requests stop waiting for servers
// that are no longer their backups, seedings to those stop, and it returns
// the seedings to start (backups of our intervals not yet copied to).
func (e *serverAgent) replicaRoutes(old, r *routing.Routes, me int32) []*seeding {
	rp := e.rep
	active := map[activeKey]bool{}
	var start []*seeding
	for _, iv := range r.Intervals {
		if !replicatesHere(&iv, me) {
			continue
		}
		for _, b := range iv.Backups {
			k := activeKey{iv.Begin, iv.End, b}
			if wasActive(old, rp.active, iv.Begin, iv.End, b, me) {
				active[k] = true
				continue
			}
			if iv.Prev == me {
				// Leaving this server: it forwards its last pushes to
				// the backups it had, and seeds none (the new owner
				// seeds its own once the move commits).
				continue
			}
			if slices.ContainsFunc(rp.seeds, func(sd *seeding) bool { return sd.begin == iv.Begin && sd.end == iv.End && sd.to == b }) {
				continue
			}
			sd := &seeding{begin: iv.Begin, end: iv.End, to: b, cancel: make(chan struct{})}
			rp.seeds = append(rp.seeds, sd)
			start = append(start, sd)
		}
	}
	rp.active = active
	for _, mv := range rp.ahead {
		if mv.Epoch <= r.Epoch {
			rp.copies = rp.copies.Add(mv.Begin, mv.End)
		}
	}
	rp.ahead = slices.DeleteFunc(rp.ahead, func(mv Move) bool { return mv.Epoch <= r.Epoch })
	// a server the table no longer names for keys stops getting their
	// pushes: its copy of them stops following
	rp.copies = rp.copies.Within(routing.Held(r)[me])
	for _, sd := range rp.seeds {
		if !slices.ContainsFunc(r.Intervals, func(iv routing.Interval) bool {
			return iv.Begin == sd.begin && iv.End == sd.end && iv.Node == me && iv.HasBackup(sd.to)
		}) {
			sd.stop()
		}
	}
	for _, f := range rp.queue {
		f.waits = slices.DeleteFunc(f.waits, func(b int32) bool { return !listedBackup(r, f.lo, f.hi, b) })
	}
	return start
}

// listedBackup reports whether r names b as a backup of an interval
// holding part of [lo, hi].
func listedBackup(r *routing.Routes, lo, hi uint64, b int32) bool {
	for i := max(r.Find(lo), 0); i < len(r.Intervals) && r.Intervals[i].Begin <= hi; i++ {
		if r.Intervals[i].HasBackup(b) {
			return true
		}
	}
	return false
}

func (sd *seeding) stop() {
	select {
	case <-sd.cancel:
	default:
		close(sd.cancel)
	}
}

// replicatesHere reports whether this server (me) applies and replicates
// the pushes of iv: it is its primary and no move brings iv here, or a
// move takes iv away and the pushes below the cut-over are still applied
// here (Interval.Dest).
func replicatesHere(iv *routing.Interval, me int32) bool {
	if iv.Prev != 0 {
		return iv.Prev == me
	}
	return iv.Node == me
}

// primaryOrLeaving reports whether id may forward iv's pushes and ship its
// rounds: its primary, or the server a move takes it from (it applies the
// pushes below the cut-over until it exports).
func primaryOrLeaving(iv *routing.Interval, id int32) bool { return iv.Node == id || iv.Prev == id }

// wasActive reports whether, in old, this server was the primary of all of
// [begin, end) and replicated it to b.
func wasActive(old *routing.Routes, active map[activeKey]bool, begin, end uint64, b, me int32) bool {
	i := old.Find(begin)
	if i < 0 {
		return false
	}
	for ; i < len(old.Intervals) && old.Intervals[i].Begin < end; i++ {
		iv := &old.Intervals[i]
		if !replicatesHere(iv, me) || !active[activeKey{iv.Begin, iv.End, b}] {
			return false
		}
	}
	return true
}

// seed copies [sd.begin, sd.end) to the new backup sd.to once nothing is in
// flight on it, then forwards to it and lets the held requests in.
func (e *serverAgent) seed(sd *seeding, epoch uint64) {
	ok := e.seedCopy(sd, epoch)
	rp := e.rep
	rp.readmitMu.Lock()
	defer rp.readmitMu.Unlock()
	e.mu.Lock()
	rp.seeds = slices.DeleteFunc(rp.seeds, func(x *seeding) bool { return x == sd })
	i := e.routes.Find(sd.begin)
	if ok && i >= 0 {
		iv := &e.routes.Intervals[i]
		if iv.Begin == sd.begin && iv.End == sd.end && iv.Node == e.me() && iv.HasBackup(sd.to) {
			rp.active[activeKey{sd.begin, sd.end, sd.to}] = true
		}
	}
	parked := sd.parked
	e.mu.Unlock()
	for _, m := range parked {
		e.s.Readmit(m)
	}
	if e.shipsRounds() {
		go e.shipCheck() // rounds that closed meanwhile
	}
}

// seedSlow is how long a seeding waits for the new backup's answer before
// it logs that it still waits (and again each time as long).
const seedSlow = 10 * time.Second

func (e *serverAgent) seedCopy(sd *seeding, epoch uint64) bool {
	log := e.po.Logger().With("begin", sd.begin, "end", sd.end, "backup", sd.to)
	if e.rep.seedHalt == [2]int32{e.me(), sd.to} {
		log.Warn("elastic: halted the seeding of a new backup, as ELASTICPS_TEST_SEED_HALT says: it stays unseeded")
		select {
		case <-sd.cancel:
		case <-e.po.Done():
		}
		return false
	}
	held, told := time.Now(), false
	for {
		e.mu.Lock()
		busy := slices.ContainsFunc(e.rep.queue, func(f *forwarded) bool { return overlaps(f.lo, f.hi+1, sd.begin, sd.end) })
		for _, f := range e.rep.pass {
			busy = busy || overlaps(f.lo, f.hi+1, sd.begin, sd.end)
		}
		for a := range e.rep.applying {
			busy = busy || overlaps(a.lo, a.hi+1, sd.begin, sd.end)
		}
		for r := range e.inflight {
			busy = busy || overlaps(r.lo, r.hi+1, sd.begin, sd.end)
		}
		for k, rd := range e.rep.rounds {
			busy = busy || rd.copying && overlaps(k.begin, k.end, sd.begin, sd.end)
		}
		e.mu.Unlock()
		if !busy {
			break
		}
		if !told && time.Since(held) > seedSlow {
			told = true
			log.Warn("elastic: the seeding of a new backup still waits for the requests in flight on the interval; its new requests are held meanwhile", "for", time.Since(held).Round(time.Second))
		}
		select {
		case <-sd.cancel:
			return false
		case <-e.po.Done():
			return false
		case <-time.After(2 * time.Millisecond):
		}
	}
	if e.migrator() == nil {
		log.Error("elastic: the interval is not replicated: its handler has no Migrator to copy it with (PS_REPLICAS needs one: kv.DefaultHandler, paramstore.Store, or a C++ migration handle)")
		return false
	}
	e.mu.Lock()
	seen := e.rep.seen.Export(sd.begin, sd.end)
	e.mu.Unlock()
	mv := Move{Begin: sd.begin, End: sd.end, From: e.me(), To: sd.to, Epoch: epoch}
	body, err := appendSeedBody(mv, seen, 0, func(b []byte) ([]byte, error) { return e.appendState(b, sd.begin, sd.end) })
	if err != nil {
		log.Error("elastic: the interval could not be copied to its new backup; it is not replicated there", "err", err)
		return false
	}
	done := make(chan error, 1)
	sent := time.Now()
	// A standby that just joined may not be connected yet: try again.
	for deadline := time.Now().Add(answerRetry); ; {
		err = e.node.link.Go(sd.to, MsgSeed, body, func(_ []byte, err error) { done <- err })
		if err == nil {
			break
		}
		if errors.Is(err, ErrNodeDead) || time.Now().After(deadline) {
			log.Error("elastic: seed not sent to the new backup", "err", err)
			return false
		}
		select {
		case <-sd.cancel:
			return false
		case <-e.po.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	// An answer lost in transit would leave the interval unreplicated
	// without a word: say so while waiting.
	slow := time.NewTicker(seedSlow)
	defer slow.Stop()
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-slow.C:
			log.Warn("elastic: the new backup has not answered its seed yet; the interval is not replicated there until it does", "sent", time.Since(sent).Round(time.Second), "bytes", len(body))
		case <-sd.cancel:
			return false
		case <-e.po.Done():
			return false
		}
	}
	if err != nil {
		log.Error("elastic: the new backup could not install its copy; the interval is not replicated there", "err", err)
		return false
	}
	if e.po.Verbose() >= 1 {
		log.Info("elastic: backup seeded", "bytes", len(body))
	}
	// the coordinator counts the backup as a copy from now on
	if err := e.node.link.Post(message.SchedulerID, MsgSeeded, MarshalMove(Move{Begin: sd.begin, End: sd.end, From: e.me(), To: sd.to, Epoch: epoch}, nil)); err != nil {
		log.Warn("elastic: the seeding was not reported to the scheduler: a failover will not count this backup as a copy", "err", err)
	}
	return true
}

// seededBy reports whether primary from seeded key here with a table newer
// than ours. The caller holds mu.
func (rp *replication) seededBy(from int32, key uint64) bool {
	return slices.ContainsFunc(rp.ahead, func(mv Move) bool { return mv.From == from && key >= mv.Begin && key < mv.End })
}

// installShip installs a round's state from the interval's primary
// (MsgShip); one from a node that is no longer the primary (it died and
// this server's table promoted another, perhaps this server) is refused,
// as it would undo what the new primary applied since.
func (e *serverAgent) installShip(from int32, body []byte) error {
	e.rep.shipsIn.Add(1)
	mv, _, err := UnmarshalMove(body)
	if err != nil {
		return err
	}
	e.mu.Lock()
	i := e.routes.Find(mv.Begin)
	stale := mv.Epoch <= e.routes.Epoch && i >= 0 && !primaryOrLeaving(&e.routes.Intervals[i], from)
	epoch := e.routes.Epoch
	e.mu.Unlock()
	if stale {
		return fmt.Errorf("routing epoch %d does not name node %d as the primary of key %d: its round state is refused", epoch, from, mv.Begin)
	}
	return e.installSeed(body)
}

// splitSeed decodes seedBody's output; state and seen alias body.
func splitSeed(body []byte) (mv Move, state, seen []byte, err error) {
	mv, rest, err := UnmarshalMove(body)
	if err != nil {
		return mv, nil, nil, err
	}
	if len(rest) < 4 || int(binary.LittleEndian.Uint32(rest)) > len(rest)-4 {
		return mv, nil, nil, fmt.Errorf("elastic: seed of %d bytes is truncated: its state's length prefix is missing or larger than the rest", len(body))
	}
	n := int(binary.LittleEndian.Uint32(rest))
	return mv, rest[4 : 4+n], rest[4+n:], nil
}

// installSeed replaces what this backup holds of the seed's interval with
// the primary's copy.
func (e *serverAgent) installSeed(body []byte) error {
	mv, state, seen, err := splitSeed(body)
	if err != nil {
		return err
	}
	if e.migrator() == nil {
		return errors.New("this server's handler has no Migrator: it cannot hold a backup (PS_REPLICAS needs one on every server)")
	}
	if err := e.replaceCopy(mv, state); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if mv.Epoch > e.routes.Epoch {
		e.rep.ahead = append(e.rep.ahead, mv)
	} else {
		e.rep.copies = e.rep.copies.Add(mv.Begin, mv.End).Within(routing.Held(e.routes)[e.me()])
	}
	return e.rep.seen.Import(seen)
}

// heldCopies are the keys this server holds a seeded copy of as a backup
// (MsgCopies).
func (e *serverAgent) heldCopies() routing.Spans {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.rep.copies
	for _, mv := range e.rep.ahead {
		s = s.Add(mv.Begin, mv.End)
	}
	return s
}

// replaceCopy installs state, a copy of mv's keys, in place of what this
// backup holds of them: with the handler's Replace when it has one and the
// copy is its snapshot (no export of the old copy, no new buffers), else
// by dropping the old copy and importing the new one.
func (e *serverAgent) replaceCopy(mv Move, state []byte) error {
	r, ok := e.migrator().(stateReplacer)
	syncState, own := []byte(nil), state
	if ok && len(state) > 0 && state[0] == stateSync {
		var err error
		if syncState, own, err = splitSyncState(state); err != nil {
			return err
		}
		if e.sync == nil {
			ok = false // importState says why
		}
	}
	if !ok || len(own) == 0 || own[0] != stateMigrator {
		if err := e.dropCopy(mv); err != nil {
			return err
		}
		return e.importState(mv.Begin, mv.End, state)
	}
	if e.sync != nil {
		e.dropSyncCopy(mv)
		if syncState != nil {
			if err := e.sync.Import(syncState); err != nil {
				return fmt.Errorf("the sync gate could not import the keys' sync state: %w", err)
			}
		}
	}
	if err := r.Replace(mv.Begin, mv.End, own[1:]); err != nil {
		// As after a failed import: nothing of the keys is held here.
		_ = e.dropCopy(mv)
		return fmt.Errorf("the handler's Migrator could not install the copy of keys [%d, %d): %w", mv.Begin, mv.End, err)
	}
	return nil
}

// dropCopy forgets what this server holds of mv's keys as their backup
// (the handler's keys and their sync state), before a newer copy is
// installed in its place: a seed, a round's state, or the keys themselves
// moving here.
func (e *serverAgent) dropCopy(mv Move) error {
	if e.migrator() != nil {
		// Export drops the keys it returns.
		if _, err := e.exportState(mv.Begin, mv.End, nil); err != nil {
			return err
		}
	}
	e.dropSyncCopy(mv)
	return nil
}

// dropSyncCopy forgets the sync state this server holds of mv's keys as
// their backup; requests parked for them go to their primary.
func (e *serverAgent) dropSyncCopy(mv Move) {
	if e.sync != nil {
		_, parked := e.sync.Export(mv.Begin, mv.End)
		for _, m := range parked { // not ours: the keys' primary is elsewhere
			go e.redirect(m, mv.Epoch)
		}
	}
}

// busy reports whether a push on [begin, end) waits for the backups here
// (forwarded and not yet answered, or applied and acknowledged only with
// its round's state): the keys cannot leave this server before it is
// answered, or it would be applied on the backups and not with the keys.
// The caller holds mu.
func (rp *replication) busy(begin, end uint64) bool {
	for _, f := range rp.queue {
		if overlaps(f.lo, f.hi+1, begin, end) {
			return true
		}
	}
	for _, f := range rp.pass {
		if overlaps(f.lo, f.hi+1, begin, end) {
			return true
		}
	}
	for k, rd := range rp.rounds {
		if (len(rd.held) > 0 || rd.shipping) && overlaps(k.begin, k.end, begin, end) {
			return true
		}
	}
	return false
}

// serverGone is the agent's postoffice.OnNodeGone subscriber: a dead
// backup is not waited for (the coordinator never promotes a dead server),
// and a dead worker's applied-push record goes (a restarted worker numbers
// its operations from the start).
func (e *serverAgent) serverGone(ev postoffice.NodeEvent) {
	if !ev.Dead {
		return
	}
	if ev.ID == message.SchedulerID {
		// Its loss is final: nobody will take a dead backup out of the
		// table, so waiting for one would never end.
		go e.expireBackupWaits()
		return
	}
	e.mu.Lock()
	switch ev.Role {
	case message.RoleServer:
		e.dropBackup(ev.ID)
	case message.RoleWorker:
		e.rep.seen.Forget(ev.ID)
	}
	e.mu.Unlock()
	e.release()
	if e.shipsRounds() {
		e.shipCheck() // a dead worker's leaving may close a round
	}
}

// expireBackupWaits runs once the scheduler's loss is final
// (PS_SCHEDULER_WAIT): from then on no routing table drops a dead backup,
// so a push (or a round's state) that a backup has not answered within
// PS_HEARTBEAT_TIMEOUT fails instead of waiting for ever. A forwarded push
// is not applied here then, a round's pushes were: at most once, as when
// a backup refuses them. Until the node stops.
func (e *serverAgent) expireBackupWaits() {
	timeout := e.po.Config().HeartbeatTimeout
	if timeout <= 0 {
		return // without heartbeats no scheduler loss is found
	}
	t := time.NewTicker(max(timeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-e.po.Done():
			return
		}
		e.expireBackupWaitsOnce(time.Now().Add(-timeout), timeout)
	}
}

// expireBackupWaitsOnce fails what has waited on backups since before.
func (e *serverAgent) expireBackupWaitsOnce(before time.Time, timeout time.Duration) {
	type late struct {
		sh *shipment
		b  int32
	}
	var ships []late
	expired := 0
	e.mu.Lock()
	for _, f := range e.rep.queue {
		if len(f.waits) > 0 && f.sent.Before(before) {
			if f.failed == nil {
				f.failed = fmt.Errorf("%s did not answer within PS_HEARTBEAT_TIMEOUT (%s), and the scheduler, which would take a dead backup out of the routing table, did not come back within PS_SCHEDULER_WAIT: the push fails; restart the job", backupServers(f.waits), timeout)
			}
			f.waits = nil
			expired++
		}
	}
	for _, sh := range e.rep.ships {
		if sh.sent.Before(before) {
			for _, b := range sh.waits {
				ships = append(ships, late{sh, b})
			}
		}
	}
	e.mu.Unlock()
	if expired > 0 || len(ships) > 0 {
		e.po.Logger().Error("elastic: pushes waited for backups that did not answer, with the scheduler gone for good; they fail", "pushes", expired, "round_states", len(ships), "timeout", timeout)
	}
	if expired > 0 {
		e.release()
	}
	for _, l := range ships {
		e.shipDone(l.sh, l.b, fmt.Errorf("it did not answer within PS_HEARTBEAT_TIMEOUT (%s), and the scheduler, which would take a dead backup out of the routing table, did not come back within PS_SCHEDULER_WAIT; restart the job", timeout))
	}
}

// backupServers names backups ids: "backup server 10", "backup servers 10, 12".
func backupServers(ids []int32) string {
	if len(ids) == 1 {
		return fmt.Sprintf("backup server %d", ids[0])
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return "backup servers " + strings.Join(parts, ", ")
}

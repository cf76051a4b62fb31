package elastic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
)

// serverAgent is a server's part of live migration. It decides, before
// the handler sees a request, whether this server may apply it now, must
// park it (its keys are arriving from another server), or must redirect it
// (its keys belong elsewhere). The invariant it keeps: a key range is
// applied on exactly one server at a time — the old owner until it exports
// the range, the new owner only after it has installed it — so no update is
// lost or applied twice.
type serverAgent struct {
	s          *kv.Server
	po         *postoffice.Postoffice
	node       *Node
	sync       *kv.SyncGate // chained after this gate (PS_SYNC_MODE); nil under ASP
	mig        atomic.Pointer[Migrator]
	redirected atomic.Int64

	mu       sync.Mutex
	routes   *routing.Routes
	hist     map[uint64]*keyState // by the first key of pushes received
	inflight map[*inflightReq]struct{}
	cuts     []*cut
	ins      []*incoming
	future   []*message.Message // requests routed with a newer table than ours

	exportTimeout time.Duration
	load          loadStats
	keys          map[uint64]keyMeta // fallback hand-over: cmd and type per pushed key
	rep           *replication       // PS_REPLICAS > 0; nil otherwise
	// installed are the moves this server installed as their new owner
	// whose commit table has not arrived yet (a restarted scheduler asks
	// for them: MsgMoves)
	installed []Move
}

type inflightReq struct {
	agent  *serverAgent
	lo, hi uint64 // first and last key
	start  time.Time
	bytes  int
	push   bool
	held   *holdInfo // a push acknowledged with its round's state (BSP with replicas)
}

// Answered implements kv.Admitted.
func (r *inflightReq) Answered() { r.agent.done(r) }

func (e *serverAgent) migrator() Migrator {
	if m := e.mig.Load(); m != nil {
		return *m
	}
	return nil
}

// me is this server's id (known once it has registered).
func (e *serverAgent) me() int32 { return e.po.MyNode().ID }

func workerKey(m *message.Meta) int32 { return m.Sender<<8 | (m.CustomerID & 0xff) }

// handle answers the scheduler's elastic messages.
func (e *serverAgent) handle(from int32, head int32, body []byte) ([]byte, error) {
	switch head {
	case MsgRoutes:
		r, err := routing.UnmarshalRoutes(body)
		if err != nil {
			return nil, err
		}
		e.setRoutes(r)
		return nil, nil
	case MsgPrepare:
		mv, _, err := UnmarshalMove(body)
		if err != nil {
			return nil, err
		}
		return encodeU64(e.prepare(mv)), nil
	case MsgImport:
		mv, state, err := UnmarshalMove(body)
		if err != nil {
			return nil, err
		}
		return nil, e.install(mv, state)
	case MsgAccept:
		mv, _, err := UnmarshalMove(body)
		if err != nil {
			return nil, err
		}
		return nil, e.accept(mv)
	case MsgLeave:
		// Answer first, then stop: the scheduler waits for the answer.
		go func() {
			time.Sleep(100 * time.Millisecond)
			e.po.LeaveJob()
		}()
		return nil, nil
	case MsgReplicate, MsgSeed, MsgShip:
		if e.rep == nil {
			return nil, fmt.Errorf("elastic message %s to a server without PS_REPLICAS", MessageName(head))
		}
		if head == MsgReplicate {
			return e.applyForwarded(from, body)
		}
		if head == MsgShip {
			return nil, e.installShip(from, body)
		}
		return nil, e.installSeed(body)
	case MsgMoves:
		return e.moveReports(), nil
	case MsgCopies:
		if e.rep == nil {
			return nil, fmt.Errorf("elastic message %s to a server without PS_REPLICAS", MessageName(head))
		}
		return MarshalSpans(e.heldCopies()), nil
	case MsgAbort:
		mv, _, err := UnmarshalMove(body)
		if err != nil {
			return nil, err
		}
		if e.abort(mv) {
			return []byte{1}, nil
		}
		return []byte{0}, nil
	}
	return nil, fmt.Errorf("unknown elastic message %d", head)
}

// setRoutes installs a newer table: intervals inherit push history,
// incoming migrations start parking, committed or aborted cuts end, and
// requests that waited for this table are re-admitted.
func (e *serverAgent) setRoutes(r *routing.Routes) {
	e.mu.Lock()
	if r.Epoch <= e.routes.Epoch {
		e.mu.Unlock()
		return
	}
	me := e.me()
	for _, iv := range r.Intervals {
		if iv.Node == me && iv.Prev != 0 && iv.Prev != me && !e.hasIncoming(iv.Begin, iv.End) {
			e.ins = append(e.ins, &incoming{mv: Move{Begin: iv.Begin, End: iv.End, From: iv.Prev, To: me, Epoch: r.Epoch}})
		}
	}
	var seeds []*seeding
	if e.rep != nil {
		seeds = e.replicaRoutes(e.routes, r, me)
	}
	e.routes = r
	e.pruneHist(r, me)
	// A cut ends when the table no longer migrates its range from us.
	kept := e.cuts[:0]
	for _, c := range e.cuts {
		if r.Epoch > c.mv.Epoch {
			continue
		}
		kept = append(kept, c)
	}
	e.cuts = kept
	e.installed = slices.DeleteFunc(e.installed, func(mv Move) bool { return r.Epoch > mv.Epoch })
	// An incoming range whose migration was aborted goes back; one
	// installed here and now committed lets its requests in (behind the
	// seedings of its backups, which replicaRoutes started).
	var bounce, committed []*message.Message
	keptIns := e.ins[:0]
	for _, in := range e.ins {
		i := r.Find(in.mv.Begin)
		if i >= 0 && r.Intervals[i].Node != me {
			bounce = append(bounce, in.parked...)
			continue
		}
		if in.installed && i >= 0 && r.Intervals[i].Prev == 0 {
			committed = append(committed, in.parked...)
			continue
		}
		keptIns = append(keptIns, in)
	}
	e.ins = keptIns
	future := append(committed, e.future...)
	e.future = nil
	e.mu.Unlock()
	e.node.table.Update(r)
	for _, m := range bounce {
		e.redirect(m, r.Epoch)
	}
	for _, m := range future {
		e.s.Readmit(m)
	}
	if e.rep != nil {
		for _, sd := range seeds {
			go e.seed(sd, r.Epoch)
		}
		e.release()
	}
}

// pruneHist forgets the push history of spans that r no longer sends here
// as one: keys that are not ours (nor leaving us), or that straddle an
// interval boundary (a range moved off the interval they were pushed on,
// or is moving). Such history is stale: it would only raise a later cut-over
// (prepare counts every span overlapping the moving range), and a range
// moving now took what it needed when it was prepared. The caller holds mu.
func (e *serverAgent) pruneHist(r *routing.Routes, me int32) {
	for lo, ks := range e.hist {
		i := r.Find(lo)
		if i < 0 || ks.hi >= r.Intervals[i].End || r.Intervals[i].Node != me && r.Intervals[i].Prev != me {
			delete(e.hist, lo)
		}
	}
}

func (e *serverAgent) hasIncoming(b, end uint64) bool {
	for _, in := range e.ins {
		if overlaps(b, end, in.mv.Begin, in.mv.End) {
			return true
		}
	}
	return false
}

// prepare starts an outgoing migration of mv's keys and returns the push
// sequence number from which pushes belong to the new owner: one past the
// highest this server has received for them, so no round of pushes is
// split between the two servers.
func (e *serverAgent) prepare(mv Move) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := &cut{mv: mv, pushers: map[int32]uint64{}, recv: map[int32]uint64{}, started: time.Now()}
	var top uint64
	for lo, ks := range e.hist {
		if !overlaps(lo, ks.hi+1, mv.Begin, mv.End) {
			continue
		}
		for w, s := range ks.pushers {
			c.pushers[w] = max(c.pushers[w], s)
			c.recv[w] = max(c.recv[w], s)
			top = max(top, s)
		}
	}
	c.seq = top + 1
	e.cuts = append(e.cuts, c)
	return c.seq
}

// install takes over mv's keys and lets parked requests through. With
// PS_REPLICAS it keeps them parked until the move's commit epoch names
// this server the keys' primary (setRoutes): it seeds its backups then,
// and nothing it applies before is acknowledged without them.
func (e *serverAgent) install(mv Move, state []byte) error {
	if e.rep != nil {
		if err := e.dropCopy(mv); err != nil {
			return err
		}
	}
	if err := e.importState(mv.Begin, mv.End, state); err != nil {
		return err
	}
	e.mu.Lock()
	if mv.From == e.me() {
		// The export came back (the move was undone): the keys are here
		// again, and the copy kept of them is stale from now on.
		for _, c := range e.cuts {
			if c.mv == mv && c.exported {
				c.returned, c.state = true, nil
			}
		}
	} else {
		e.installed = append(e.installed, mv)
	}
	var parked []*message.Message
	kept := e.ins[:0]
	for _, in := range e.ins {
		if overlaps(in.mv.Begin, in.mv.End, mv.Begin, mv.End) {
			if e.rep != nil {
				in.installed = true
				kept = append(kept, in)
				continue
			}
			parked = append(parked, in.parked...)
			continue
		}
		kept = append(kept, in)
	}
	e.ins = kept
	e.mu.Unlock()
	for _, m := range parked {
		e.s.Readmit(m)
	}
	return nil
}

// abort drops mv's cut unless it has exported already, and says whether it
// had: then the keys' state left (or is leaving) for the scheduler, which
// gives it back before the keys come back here.
func (e *serverAgent) abort(mv Move) (exported bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	kept := e.cuts[:0]
	for _, c := range e.cuts {
		if c.mv.Begin == mv.Begin && c.mv.End == mv.End {
			if !c.exported || c.returned {
				continue // dropped: the keys never left, or came back
			}
			exported = true
		}
		kept = append(kept, c)
	}
	e.cuts = kept
	return exported
}

// Admit implements kv.RequestGate: it decides what happens to a request
// before the handler sees it, and returns the in-flight record that is
// told when the request is answered, and whether the handler runs now.
//
// With a sync mode, what this gate lets run goes on to the sync gate. A
// request that one parks is not in flight here (it would hold the export
// of its keys forever); the sync gate hands it back later, and it passes
// this gate again: if its keys moved meanwhile, it is redirected, and the
// sync gate is told so (Withdraw) that its queue goes on.
func (e *serverAgent) Admit(m *message.Message, keys []uint64) (kv.Admitted, bool) {
	if e.rep != nil && e.shipMarker(m) {
		return nil, false // a round's state was copied (replicate_rounds.go)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	r, run := e.route(m, keys)
	if e.sync == nil {
		return r, run
	}
	if !run {
		if decided, ok := e.sync.Withdraw(m); ok && decided {
			e.po.Logger().Error("elastic: a request the sync controller had let run was diverted; its new owner decides about it again", "msg", m.Meta.String())
		}
		return nil, false
	}
	if _, run := e.sync.Admit(m, keys); !run {
		if r != nil {
			delete(e.inflight, r.(*inflightReq))
		}
		return nil, false
	}
	return r, true
}

// route is Admit's elastic part: apply here, park or redirect. The caller
// holds mu.
func (e *serverAgent) route(m *message.Message, keys []uint64) (kv.Admitted, bool) {
	// A request the replication queue released (replicate.go) is let
	// through replicate once; taken here, where it may also be parked or
	// redirected instead.
	released := e.rep != nil && e.rep.released(m)
	if m.Meta.Ext.Epoch > e.routes.Epoch {
		e.future = append(e.future, m)
		return nil, false
	}
	if len(keys) == 0 {
		return nil, true
	}
	lo, hi := keys[0], keys[len(keys)-1]
	seq, push := m.Meta.Ext.PushSeq, m.Meta.Push
	// A request the sync controller let run already was counted here (a
	// push's clock): it is applied here whatever cut-over came since. A
	// cut's export waits for it (SyncGate.Pending), and its push number
	// goes into the cut's received counts below. Redirected, its clock
	// would stay counted without its values, and another worker's pull of
	// the round would run without them.
	var readmitted, decided bool
	if e.sync != nil {
		readmitted, decided = e.sync.Readmitting(m)
	}
	for _, in := range e.ins {
		if overlaps(lo, hi+1, in.mv.Begin, in.mv.End) {
			in.parked = append(in.parked, m)
			return nil, false
		}
	}
	for _, c := range e.cuts {
		if !overlaps(lo, hi+1, c.mv.Begin, c.mv.End) {
			continue
		}
		if c.exported {
			// The keys left: only the commit epoch (e+2) routes a request
			// numbered below the cut to the new owner. Naming e+1, which
			// the worker may have, would send it straight back here.
			go e.redirect(m, c.mv.Epoch+1)
			return nil, false
		}
		if seq >= c.seq && !decided {
			go e.redirect(m, c.mv.Epoch)
			return nil, false
		}
	}
	i := e.routes.Find(lo)
	if i < 0 {
		return nil, true // outside every interval: the handler reports it
	}
	w := workerKey(&m.Meta)
	me := e.me()
	for ; i < len(e.routes.Intervals) && e.routes.Intervals[i].Begin <= hi; i++ {
		iv := &e.routes.Intervals[i]
		if iv.Dest(seq) != me && !decided {
			go e.redirect(m, e.routes.Epoch)
			return nil, false
		}
	}
	// Received before it is forwarded: a move's cut-over comes after
	// every push its backups may have applied.
	if push {
		ks := e.hist[lo]
		if ks == nil {
			ks = &keyState{pushers: map[int32]uint64{}}
			e.hist[lo] = ks
		}
		ks.hi = max(ks.hi, hi)
		ks.pushers[w] = max(ks.pushers[w], seq)
	}
	for _, c := range e.cuts {
		if push && overlaps(lo, hi+1, c.mv.Begin, c.mv.End) {
			c.recv[w] = max(c.recv[w], seq)
		}
	}
	// A request the sync gate re-admits passed replicate before it
	// reached the gate: forwarded, and noted as applied.
	if e.rep != nil && !released && !readmitted && e.replicate(m, lo, hi, push) {
		return nil, false // held until its backups applied it (replicate.go)
	}
	if push && e.migrator() == nil {
		e.noteKeys(m, keys)
	}
	r := &inflightReq{agent: e, lo: lo, hi: hi, start: time.Now(), bytes: messageBytes(m), push: push}
	if push && e.rep != nil && e.shipsRounds() {
		r.held = &holdInfo{keys: slices.Clone(keys), iter: kv.Iteration(&m.Meta), worker: w, ts: m.Meta.Timestamp}
	}
	e.inflight[r] = struct{}{}
	return r, true
}

// done closes an in-flight request when it is answered.
func (e *serverAgent) done(r *inflightReq) {
	now := time.Now()
	e.mu.Lock()
	delete(e.inflight, r)
	e.load.add(r, now.Sub(r.start))
	ready := e.readyCuts(false)
	e.mu.Unlock()
	for _, c := range ready {
		go e.export(c)
	}
}

// readyCuts marks and returns the cuts that may export now: nothing in
// flight on their keys, and every known pusher has delivered its pushes
// up to the cut (or, with force, waited long enough for one that stopped
// pushing). The caller holds mu.
func (e *serverAgent) readyCuts(force bool) []*cut {
	var ready []*cut
	for _, c := range e.cuts {
		if c.exported {
			continue
		}
		busy := false
		for r := range e.inflight {
			if overlaps(r.lo, r.hi+1, c.mv.Begin, c.mv.End) {
				busy = true
				break
			}
		}
		if busy || e.rep != nil && e.rep.busy(c.mv.Begin, c.mv.End) {
			continue
		}
		all := true
		for w := range c.pushers {
			if c.recv[w]+1 < c.seq {
				all = false
				break
			}
		}
		if force && !all && time.Since(c.started) > time.Second && !c.warned {
			c.warned = true
			e.po.Logger().Warn("elastic: a worker has not delivered its pushes up to the cut-over yet", "move", fmt.Sprintf("%+v", c.mv), "cut_seq", c.seq, "pushers", fmt.Sprint(c.pushers), "received", fmt.Sprint(c.recv), "future", len(e.future), "incoming", len(e.ins), "epoch", e.routes.Epoch)
		}
		if !all && (!force || time.Since(c.started) <= e.exportTimeout) {
			continue
		}
		if e.sync != nil {
			// Requests the controller let run on these keys must reach
			// the handler first. From here on, every request for the keys
			// is redirected before the sync gate, so its state is final:
			// taken now, it goes with the handler's.
			if e.sync.Pending(c.mv.Begin, c.mv.End) {
				continue
			}
			c.syncState, c.syncParked = e.sync.Export(c.mv.Begin, c.mv.End)
		}
		c.exported = true
		ready = append(ready, c)
	}
	return ready
}

func (e *serverAgent) tickLoop() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-e.po.Done():
			return
		case <-t.C:
			e.mu.Lock()
			ready := e.readyCuts(true)
			e.mu.Unlock()
			if e.rep != nil {
				e.shipCheck() // a round closed without a push here (a worker left)
			}
			for _, c := range ready {
				go e.export(c)
			}
		}
	}
}

// export hands the cut's keys to the scheduler, which installs them on the
// new owner.
//
// The requests the sync gate had parked for the keys are redirected once
// the state left, or, when the export failed, once the sync state is back
// in the gate: the worker re-sends each (with the commit epoch's table, or
// the abort's) and whichever server then owns the keys answers it, once.
func (e *serverAgent) export(c *cut) {
	defer func() {
		for _, m := range c.syncParked {
			e.redirect(m, c.mv.Epoch+1)
		}
	}()
	state, err := e.exportState(c.mv.Begin, c.mv.End, c.syncState)
	if err != nil {
		// The keys stay here (an export is all or nothing): the scheduler
		// aborts the move at once and routes them back to this server.
		if e.sync != nil {
			if serr := e.sync.Import(c.syncState); serr != nil {
				err = errors.Join(err, fmt.Errorf("the sync state could not be put back: %w", serr))
			}
		}
		e.po.Logger().Error("elastic: export failed; the move is aborted and the keys stay on this server", "move", fmt.Sprintf("%+v", c.mv), "err", err)
		if _, err := e.node.link.Call(message.SchedulerID, MsgExportFailed, MarshalMove(c.mv, []byte(err.Error())), time.Minute); err != nil {
			e.po.Logger().Error("elastic: export failure not delivered; the scheduler aborts the move after its timeout", "err", err)
		}
		return
	}
	// Kept until the move's next table: should the scheduler die before
	// the new owner installed it, a restarted one finds it here (MsgMoves).
	e.mu.Lock()
	c.state = state
	e.mu.Unlock()
	if _, err := e.node.link.Call(message.SchedulerID, MsgExport, MarshalMove(c.mv, state), time.Minute); err != nil {
		e.po.Logger().Error("elastic: export not delivered", "err", err)
	}
}

// The first byte of an exported state names the path that produced it, so
// that an importer never feeds a Migrator's snapshot to the generic
// hand-over or the reverse (servers of one job may differ: a C++ server
// without a migration handle beside one with it).
//
// A server with a sync mode wraps that state: stateSync, the wrapper's
// version (stateSyncVersion), the uvarint length of the sync gate's state
// (kv.SyncGate.Export), that state, then the 'F' or 'M' state.
const (
	stateFallback    byte = 'F'
	stateMigrator    byte = 'M'
	stateSync        byte = 'S'
	stateSyncVersion byte = 1
)

// exportState snapshots [begin, end) through the Migrator, or the generic
// hand-over without one, with the keys' sync state when the server has a
// sync mode (syncState, taken from the sync gate already).
func (e *serverAgent) exportState(begin, end uint64, syncState []byte) ([]byte, error) {
	if mig := e.migrator(); mig != nil {
		st, err := mig.Export(begin, end)
		if err != nil {
			return nil, fmt.Errorf("the handler's Migrator could not export keys [%d, %d): %w", begin, end, err)
		}
		return e.wrapState(syncState, stateMigrator, st), nil
	}
	st, err := e.fallbackExport(begin, end)
	if err != nil {
		return nil, err
	}
	return e.wrapState(syncState, stateFallback, st), nil
}

// wrapState is exportState's output for the handler's state st in format
// format: the sync state first when the server has a sync gate.
func (e *serverAgent) wrapState(syncState []byte, format byte, st []byte) []byte {
	out := make([]byte, 0, 2+binary.MaxVarintLen64+len(syncState)+1+len(st))
	return append(e.appendWrapHeader(out, syncState, format), st...)
}

// appendWrapHeader appends what wrapState puts before the handler's state.
func (e *serverAgent) appendWrapHeader(dst, syncState []byte, format byte) []byte {
	if e.sync != nil {
		dst = binary.AppendUvarint(append(dst, stateSync, stateSyncVersion), uint64(len(syncState)))
		dst = append(dst, syncState...)
	}
	return append(dst, format)
}

// importState installs exportState's output for keys [begin, end): the
// sync state first (before any request for the keys reaches the sync
// gate), then the handler's; when the handler's fails, the sync state is
// taken out again, so nothing is installed.
func (e *serverAgent) importState(begin, end uint64, state []byte) error {
	if len(state) > 0 && state[0] == stateSync {
		syncState, rest, err := splitSyncState(state)
		if err != nil {
			return err
		}
		if e.sync == nil {
			return errors.New("the keys come with sync state (their old owner has a PS_SYNC_MODE), but this server has none: give every server of the job the same PS_SYNC_MODE")
		}
		if err := e.sync.Import(syncState); err != nil {
			return fmt.Errorf("the sync gate could not import the keys' sync state: %w", err)
		}
		if err := e.importHandlerState(rest); err != nil {
			e.sync.Export(begin, end) // nothing for these keys is parked here yet
			return err
		}
		return nil
	}
	return e.importHandlerState(state)
}

// splitSyncState splits a stateSync state into the sync gate's part and the
// handler's.
func splitSyncState(state []byte) (syncState, rest []byte, err error) {
	if len(state) < 2 {
		return nil, nil, errors.New("the exported state's sync wrapper is truncated (no version byte)")
	}
	if state[1] != stateSyncVersion {
		return nil, nil, fmt.Errorf("the exported state's sync wrapper has version %d, this server reads %d: run one version of elasticps on every server", state[1], stateSyncVersion)
	}
	n, w := binary.Uvarint(state[2:])
	if w <= 0 || n > uint64(len(state)-2-w) {
		return nil, nil, fmt.Errorf("the exported state's sync part is truncated (%d bytes after the wrapper's header)", len(state)-2)
	}
	at := 2 + w
	rest = state[at+int(n):]
	if len(rest) > 0 && rest[0] == stateSync {
		return nil, nil, errors.New("the exported state's sync wrapper holds another sync wrapper instead of the handler's state")
	}
	return state[at : at+int(n)], rest, nil
}

// importHandlerState installs the handler's part of exportState's output.
func (e *serverAgent) importHandlerState(state []byte) error {
	if len(state) == 0 {
		return errors.New("the exported state is empty (no format byte)")
	}
	switch state[0] {
	case stateMigrator:
		mig := e.migrator()
		if mig == nil {
			return errors.New("the keys come as a Migrator's snapshot, but this server's handler has no Migrator (a C++ KVServer without set_migration_handle?): give every server of the job the same hand-over")
		}
		if err := mig.Import(state[1:]); err != nil {
			return fmt.Errorf("the handler's Migrator could not import the keys: %w", err)
		}
		return nil
	case stateFallback:
		// Values captured by a pull install by an initializing push,
		// which any handler takes, with or without a Migrator.
		return e.fallbackImport(state[1:])
	}
	return fmt.Errorf("the exported state has an unknown format byte %#x", state[0])
}

// replyTo starts the answer to request m that the server sends without
// its handler (a redirect, an acknowledgement of a duplicate, an error).
func replyTo(m *message.Message) *message.Message {
	r := &message.Message{Meta: message.NewMeta()}
	r.Meta.AppID = m.Meta.AppID
	r.Meta.CustomerID = m.Meta.CustomerID
	r.Meta.Push, r.Meta.Pull = m.Meta.Push, m.Meta.Pull
	r.Meta.Head = m.Meta.Head
	r.Meta.Timestamp = m.Meta.Timestamp
	r.Meta.Recver = m.Meta.Sender
	return r
}

// redirect answers a request with "not applied here; re-route with a table
// of at least epoch", echoing its keys so the worker knows which part.
func (e *serverAgent) redirect(m *message.Message, epoch uint64) {
	r := replyTo(m)
	r.Meta.Ext.Redirect = true
	r.Meta.Ext.Epoch = epoch
	if len(m.Data) > 0 {
		r.AddData(message.Uint64, m.Data[0])
		r.AddData(message.Other, nil)
	}
	e.redirected.Add(1)
	if _, err := e.po.Send(r); err != nil {
		e.po.Logger().Error("elastic: redirect not sent", "to", m.Meta.Sender, "err", err)
	}
}

// accept says whether this server can take mv's keys. Without a Migrator,
// keys arrive by an initializing push, which the handler adds to whatever
// it still holds for them; a handler that held them before (they moved
// away and would come back) would double them, so such a move is refused
// before anything changes.
func (e *serverAgent) accept(mv Move) error {
	if e.migrator() != nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range e.keys {
		if k >= mv.Begin && k < mv.End {
			return fmt.Errorf("this server held key %d before and its handler has no Migrator: the generic hand-over would add the moved value to the one it still holds; move the keys to another server", k)
		}
	}
	return nil
}

// keyState is what a server remembers about the pushes it received whose
// first key is the same: the highest last key among them (a push of keys
// [lo, hi] counts for every range it overlaps, not only for the one holding
// lo: a routing interval may hold several ranges that move apart later),
// who pushed them and up to which push sequence number.
type keyState struct {
	hi      uint64
	pushers map[int32]uint64 // worker (see workerKey) -> highest push seq received
}

// cut is an outgoing migration on the old owner.
type cut struct {
	mv       Move
	seq      uint64           // pushes from this seq on belong to the new owner
	pushers  map[int32]uint64 // workers expected to push up to seq-1
	recv     map[int32]uint64
	exported bool
	state    []byte // the export, kept until the cut ends (MsgMoves)
	returned bool   // the export was installed back here: the keys are here again
	warned   bool
	started  time.Time
	// the sync gate's state of the keys and the requests it had parked
	// for them, taken when the cut became ready (nil without a sync mode)
	syncState  []byte
	syncParked []*message.Message
}

// incoming is a migration on the new owner, until installed (with
// PS_REPLICAS, until the table that commits it).
type incoming struct {
	mv        Move
	parked    []*message.Message
	installed bool // the state is here; waiting for the commit epoch (PS_REPLICAS)
}

func overlaps(b1, e1, b2, e2 uint64) bool { return b1 < e2 && b2 < e1 }

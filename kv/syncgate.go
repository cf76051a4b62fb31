package kv

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/metrics"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/syncctl"
)

// SyncGate applies a server's synchronization model (package syncctl) to
// the requests it receives: a RequestGate that asks the controller about
// each push and pull, parks the ones it holds, and re-admits them
// (Server.Readmit) when the controller releases them. It only delays
// requests; the handler and its state never know it is there.
//
// NewServerWith installs one by itself when the node's sync mode
// (postoffice.Config.Sync, PS_SYNC_MODE) is not ASP and no other gate is
// given; with ASP there is none, and the server behaves as ps-lite's.
//
// Order. The controller counts a released push as applied at once, so
// nothing may be decided until every request it released has run: the
// gate keeps one queue of requests in the order they must meet the
// handler — released ones first (they run without asking the controller
// again), then arrivals it deferred meanwhile (asked when their turn
// comes) — and re-admits one at a time, recognising it when it comes back
// (so it is never counted twice). The customer's queue orders by priority;
// this queue does not let priorities overtake a decision.
//
// A worker is (Meta.Sender, Meta.CustomerID); its iteration for the keys
// of a request is Meta.Ext.Iteration when > 0 (kv.Options.Iteration), else
// the worker's count of its pushes of those keys when it numbers them
// (Meta.Ext.PushSeq, elastic mode: a redirected push may arrive after the
// worker's next pull, which must still wait for it), else the count of its
// pushes this gate saw.
type SyncGate struct {
	s       *Server
	met     *metrics.SyncMetrics
	log     func(msg string, args ...any)
	readmit func(*message.Message) // s.Readmit

	mu         sync.Mutex
	ctl        *syncctl.Controller
	nextID     uint64
	parked     map[uint64]*syncEntry
	order      []*syncEntry // to run (decided) then to decide, in that order
	sent       *syncEntry   // re-admitted and not back yet
	last       syncctl.Stats
	parkedTime time.Duration
	joined     bool           // joinMembers ran
	left       map[int32]bool // workers that left before joinMembers ran
	closed     bool           // Close: nothing is parked any more
	final      bool           // Close gave up waiting: what is left was answered with an error
	drained    chan struct{}  // closed once, after Close, when order and sent are empty
}

// syncEntry is one request the gate holds or will re-admit.
type syncEntry struct {
	m       *message.Message
	pull    bool // a pull (not a push-pull), for the metrics
	decided bool // the controller let it run: it runs without asking again
	since   time.Time
	lo, hi  uint64 // its first and last key, once decided about
}

// syncCloseWait bounds how long Close waits for the requests it releases
// to be handled before it answers the rest with an error.
const syncCloseWait = 5 * time.Second

var _ RequestGate = (*SyncGate)(nil)

// NewSyncGate builds the sync gate of s from its node's Config.Sync and
// joins every worker node of the job. It is for gates that apply their own
// decisions first (elastic mode's) and chain this one after them: such a
// gate calls NewSyncGate from its ServerOptions.Gate function and passes
// the requests it lets through to SyncGate.Admit. Server.Close closes it,
// and Server.SyncStats reads it.
func NewSyncGate(s *Server) (*SyncGate, error) {
	if s.sync != nil {
		return nil, errors.New("kv: the server has a sync gate already")
	}
	po := s.po
	sc := po.Config().Sync
	var src *rand.Rand
	cfg := syncctl.Config{Mode: sc.Mode, Staleness: sc.Staleness, PauseProb: sc.PauseProb, Sigmoid: sc.Sigmoid,
		// Called under g.mu only. The node id is known by the first
		// request, not necessarily when the server is created.
		Rand: func() float64 {
			if src == nil {
				src = rand.New(rand.NewPCG(uint64(sc.Seed), uint64(po.MyNode().ID)))
			}
			return src.Float64()
		}}
	ctl, err := syncctl.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("kv: sync mode %v: %w", sc.Mode, err)
	}
	met, err := metrics.NewSyncMetrics(po.Metrics())
	if err != nil {
		return nil, fmt.Errorf("kv: sync metrics: %w", err)
	}
	g := &SyncGate{s: s, met: met, ctl: ctl, parked: map[uint64]*syncEntry{}, drained: make(chan struct{}),
		log: po.Logger().Error, readmit: s.Readmit}
	s.sync = g
	// A worker that left or died must not hold the others.
	po.OnNodeGone(func(ev postoffice.NodeEvent) {
		if ev.Role == message.RoleWorker {
			g.WorkerLeft(ev.ID)
		}
	})
	return g, nil
}

// joinMembers joins every worker node of the job, at the first decision:
// by then the node is connected, so Members knows which ids are aliases of
// multi-customer processes (they never send; joined, they would hold every
// round). The caller holds g.mu.
func (g *SyncGate) joinMembers() {
	if g.joined {
		return
	}
	g.joined = true
	for _, id := range g.s.po.Members(message.WorkerGroup) {
		if !g.left[id] {
			g.ctl.Join(id) // nothing is parked yet: nothing to release
		}
	}
}

// Admit implements RequestGate; it runs on the server's customer goroutine.
func (g *SyncGate) Admit(m *message.Message, keys []uint64) (Admitted, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var e *syncEntry
	if g.sent != nil && g.sent.m == m {
		e, g.sent = g.sent, nil
		if g.final {
			return nil, false // answered by Close already
		}
		if !e.decided && len(g.order) > 0 && g.order[0].decided {
			// released meanwhile (WorkerLeft): those run first
			g.order = slices.Insert(g.order, g.decidedPrefix(), e)
			g.kick()
			return nil, false
		}
	} else {
		if g.final {
			return nil, true
		}
		e = &syncEntry{m: m, pull: m.Meta.Pull && !m.Meta.Push}
		if g.sent != nil || len(g.order) > 0 {
			g.order = append(g.order, e)
			return nil, false
		}
	}
	run := e.decided || g.closed || g.decide(e, keys)
	if run && !e.since.IsZero() {
		d := time.Since(e.since)
		g.parkedTime += d
		g.met.ObserveParked(e.pull, d)
	}
	g.kick()
	return nil, run
}

// decide asks the controller about e (g.mu held): true if it runs now; else
// it is parked.
func (g *SyncGate) decide(e *syncEntry, keys []uint64) bool {
	if !slices.IsSorted(keys) { // ps-lite's slicer sends them sorted; a hand-made request may not
		keys = slices.Clone(keys)
		slices.Sort(keys)
	}
	g.joinMembers()
	g.nextID++
	if len(keys) > 0 {
		e.lo, e.hi = keys[0], keys[len(keys)-1]
	}
	m := &e.m.Meta
	r := syncctl.Request{ID: g.nextID, Worker: syncctl.Worker{Node: m.Sender, Customer: m.CustomerID},
		Push: m.Push, Pull: m.Pull, Keys: keys, Iteration: Iteration(m)}
	run, released := g.ctl.Admit(r)
	if !run {
		e.since = time.Now()
		g.parked[r.ID] = e
	}
	g.release(released)
	return run
}

// release moves the controller's released requests, in its order, behind
// those released before and ahead of every undecided one (g.mu held).
func (g *SyncGate) release(ids []uint64) {
	if len(ids) > 0 {
		at := g.decidedPrefix()
		run := make([]*syncEntry, 0, len(ids))
		for _, id := range ids {
			e := g.unpark(id, "released")
			if e == nil {
				continue
			}
			e.decided = true
			run = append(run, e)
		}
		g.order = slices.Insert(g.order, at, run...)
	}
	g.observe()
}

// unpark takes the request the controller handed back (how: released or
// exported) out of the parked set (g.mu held); nil if it was never parked.
func (g *SyncGate) unpark(id uint64, how string) *syncEntry {
	e, ok := g.parked[id]
	if !ok {
		g.log("kv: the sync controller "+how+" a request it never parked; ignored", "id", id)
		return nil
	}
	delete(g.parked, id)
	return e
}

func (g *SyncGate) decidedPrefix() int {
	n := 0
	for n < len(g.order) && g.order[n].decided {
		n++
	}
	return n
}

// kick re-admits the next request in order unless one is on its way
// (g.mu held).
func (g *SyncGate) kick() {
	if g.sent != nil {
		return
	}
	if len(g.order) == 0 {
		if g.closed {
			select {
			case <-g.drained:
			default:
				close(g.drained)
			}
		}
		return
	}
	g.sent = g.order[0]
	g.order[0] = nil
	g.order = g.order[1:]
	g.readmit(g.sent.m)
}

// Withdraw tells the gate that m, which it handed back (Server.Readmit),
// did not reach it: the gate chained before it (elastic mode's) redirected
// or parked m instead, so the gate's queue goes on without it. A request it
// had not decided about yet is forgotten (if it comes back, it is a new
// arrival); decided says whether the controller had let m run already (a
// push it counted: the outer gate must not have diverted it). ok is false
// when m is not the request on its way.
func (g *SyncGate) Withdraw(m *message.Message) (decided, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sent == nil || g.sent.m != m {
		return false, false
	}
	e := g.sent
	g.sent = nil
	g.kick()
	return e.decided, true
}

// Pending reports whether a request that touches keys [begin, end) was let
// run by the controller and has not reached the handler yet. While one
// has, the keys' sync state must not move: the controller counted it
// (a push's clock) and the handler's state does not have it yet.
func (g *SyncGate) Pending(begin, end uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	touches := func(e *syncEntry) bool { return e.decided && e.lo < end && begin <= e.hi }
	if g.sent != nil && touches(g.sent) {
		return true
	}
	return slices.ContainsFunc(g.order[:g.decidedPrefix()], touches)
}

// Readmitting reports whether m is the request the gate handed back to
// the server (Server.Readmit) and has not seen again: a gate chained
// before it that replicates pushes (elastic mode's) did so when m first
// passed it. decided says whether the controller already let it run: it
// counted m (a push's clock), so m must reach the handler here; diverting
// it would leave the count without the values (a pull of another worker
// would be let run without them).
func (g *SyncGate) Readmitting(m *message.Message) (readmitting, decided bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sent == nil || g.sent.m != m {
		return false, false
	}
	return true, g.sent.decided
}

// PushPending is Pending for pushes only: a push that touches keys
// [begin, end) was let run and has not reached the handler yet.
func (g *SyncGate) PushPending(begin, end uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	touches := func(e *syncEntry) bool { return e.decided && e.m.Meta.Push && e.lo < end && begin <= e.hi }
	if g.sent != nil && touches(g.sent) {
		return true
	}
	return slices.ContainsFunc(g.order[:g.decidedPrefix()], touches)
}

// Export removes the sync state of keys [begin, end), which move to
// another server (syncctl.Controller.Export), and returns its encoding for
// Import there, with the requests the controller had parked that touch
// those keys, in the order they were parked: they are no longer this
// gate's, and the caller hands them on (elastic mode redirects them to the
// keys' new owner, whose gate decides and answers each once). Call it only
// when Pending is false for the keys and no request for them can reach
// this gate any more.
func (g *SyncGate) Export(begin, end uint64) (state []byte, parked []*message.Message) {
	g.mu.Lock()
	defer g.mu.Unlock()
	state, ids, released := g.ctl.Export(begin, end)
	for _, id := range ids {
		e := g.unpark(id, "exported")
		if e == nil {
			continue
		}
		d := time.Since(e.since)
		g.parkedTime += d
		g.met.ObserveParked(e.pull, d)
		parked = append(parked, e.m)
	}
	g.release(released)
	g.kick()
	g.observe()
	return state, parked
}

// Import installs the sync state of keys another server's gate exported,
// all or nothing (syncctl.Controller.Import): call it before any request
// for those keys reaches this gate. What it releases runs in order.
func (g *SyncGate) Import(state []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	released, err := g.ctl.Import(state)
	if err != nil {
		return err
	}
	g.release(released)
	g.kick()
	return nil
}

// observe brings the metrics up to the controller's counts (g.mu held).
func (g *SyncGate) observe() {
	st := g.ctl.Stats()
	g.met.AddDelayed(true, st.DelayedPulls-g.last.DelayedPulls)
	g.met.AddDelayed(false, st.DelayedPushes-g.last.DelayedPushes)
	g.met.Releases.Add(float64(st.Releases - g.last.Releases))
	g.met.Pauses.Add(float64(st.Pauses - g.last.Pauses))
	g.met.Parked.Set(float64(st.Parked))
	g.last = st
}

// WorkerJoined tells the controller that worker node joined the job (a
// worker that sends a request joins implicitly anyway).
func (g *SyncGate) WorkerJoined(node int32) { g.membership(g.ctl.Join, node, false) }

// WorkerLeft tells the controller that worker node left the job or was
// declared dead: it no longer holds the others, and its own parked
// requests are released (answering a dead node just fails to send). Any
// goroutine may call it.
func (g *SyncGate) WorkerLeft(node int32) { g.membership(g.ctl.Leave, node, true) }

// membership applies a Join or Leave of the controller and runs what it
// releases.
func (g *SyncGate) membership(change func(int32) []uint64, node int32, leave bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.left == nil {
		g.left = map[int32]bool{}
	}
	if leave {
		g.left[node] = true
	} else {
		delete(g.left, node)
	}
	if !g.closed {
		g.release(change(node))
		g.kick()
	}
}

// Close releases every parked request and waits (a few seconds at most)
// until each has been handled, so that each is answered exactly once;
// what could not run by then is answered with an error. Requests arriving
// afterwards run at once. Server.Close calls it before the server stops
// handling requests; it must not be called from the customer goroutine.
func (g *SyncGate) Close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	g.release(g.ctl.Close())
	g.kick()
	g.mu.Unlock()
	t := time.NewTimer(syncCloseWait)
	defer t.Stop()
	select {
	case <-g.drained:
		return
	case <-t.C:
	case <-g.s.c.Closed():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.final = true
	left := g.order
	if g.sent != nil {
		left = append(left, g.sent) // g.sent stays: Admit drops it if it comes back
	}
	g.order = nil
	err := errors.New("the server shut down before this request's turn came (sync gate)")
	for _, e := range left {
		if rerr := g.s.ResponseError(requestMeta(e.m), err); rerr != nil {
			g.log("kv: sync gate: cannot answer a request at shutdown", "err", rerr)
		}
	}
}

// requestMeta is the ReqMeta a response to request m needs.
func requestMeta(m *message.Message) ReqMeta {
	return ReqMeta{Cmd: m.Meta.Head, Push: m.Meta.Push, Pull: m.Meta.Pull, Sender: m.Meta.Sender,
		Timestamp: m.Meta.Timestamp, CustomerID: m.Meta.CustomerID, Priority: m.Meta.Priority, Raw: m.Meta.Raw}
}

// Stats returns the controller's counts and the total time requests
// spent parked (counted when they run).
func (g *SyncGate) Stats() (syncctl.Stats, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctl.Stats(), g.parkedTime
}

// SyncStats is the server's synchronization record: the sync controller's
// counts (pulls delayed, ...) and the total time requests spent parked.
// Zero without a sync gate (ASP).
func (s *Server) SyncStats() (syncctl.Stats, time.Duration) {
	if s.sync == nil {
		return syncctl.Stats{}, 0
	}
	return s.sync.Stats()
}

// Iteration is the iteration the gate's controller takes request m for:
// Meta.Ext.Iteration when > 0, else its push sequence number, else 0
// (counted from the worker's pushes).
func Iteration(m *message.Meta) int64 {
	iter := max(m.Ext.Iteration, 0)
	if iter == 0 && m.Ext.PushSeq > 0 && m.Ext.PushSeq <= math.MaxInt64 {
		iter = int64(m.Ext.PushSeq)
	}
	return iter
}

// The methods below are for replicated servers (PS_REPLICAS, package
// elastic): a primary copies its keys' sync state to their backups, and a
// backup installs it so that, promoted, it goes on with the same clocks.

// Snapshot copies the sync state of keys [begin, end) without taking it
// (syncctl.Controller.Snapshot), for Replace on a backup.
func (g *SyncGate) Snapshot(begin, end uint64) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctl.Snapshot(begin, end)
}

// RoundClosed reports whether every worker pushed round iter of keys.
func (g *SyncGate) RoundClosed(keys []uint64, iter int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctl.RoundClosed(keys, iter)
}

// Replace installs a Snapshot of keys [begin, end) in place of the state
// the gate holds for them, and returns the requests it had parked on those
// keys (the caller redirects them: the keys' primary is elsewhere).
func (g *SyncGate) Replace(begin, end uint64, state []byte) ([]*message.Message, error) {
	_, parked := g.Export(begin, end)
	return parked, g.Import(state)
}

// Observe counts a push of keys at iteration iter by worker (node,
// customer) that was applied here without passing the gate: a backup
// applying a push its primary forwarded. Only for modes whose pushes
// never wait (SSP, Fluent); under BSP a primary ships its state instead.
func (g *SyncGate) Observe(node, customer int32, keys []uint64, iter int64) {
	if !slices.IsSorted(keys) {
		keys = slices.Sorted(slices.Values(keys))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.ctl.Config().Mode == syncctl.BSP {
		return
	}
	g.joinMembers()
	g.nextID++
	_, released := g.ctl.Admit(syncctl.Request{ID: g.nextID, Worker: syncctl.Worker{Node: node, Customer: customer},
		Push: true, Keys: keys, Iteration: iter})
	g.release(released)
	g.kick()
}

package syncctl

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Controller decides, for one server, when each request may run. It is
// not safe for concurrent use: the caller admits one request at a time and,
// before the next call, runs what the call let run in the order given.
type Controller struct {
	cfg    Config
	keys   map[uint64]*keyState
	nodes  map[int32]struct{} // joined worker nodes
	left   map[int32]struct{} // nodes that left: an Import does not bring them back
	parked map[uint64]*parkedReq
	seq    uint64 // park order
	closed bool
	stats  Stats

	work  []*keyState  // keys whose waiting requests must be looked at again
	spare []*parkedReq // a waiting list's second buffer, swapped while one is looked at
	out   []uint64     // what the current call released
}

// keyState is the sync state of one key.
type keyState struct {
	key     uint64
	tmin    int64
	entries []entry
	// waiting holds parked requests: under BSP and SSP the ones this key
	// blocked when last looked at; under Fluent the pulls held until this
	// key's t_min advances. Entries are dropped lazily (parkedReq.done).
	waiting []*parkedReq
	dirty   bool // queued in Controller.work
}

// entry is one worker's clock for a key. A placeholder stands for a joined
// node none of whose customers touched the key yet: it counts with the
// node's join offset, and the node's first customer to touch the key takes
// it over.
type entry struct {
	w           Worker
	placeholder bool
	owes        bool // BSP: pushed and did not pull since
	clock       int64
	pushes      []*parkedReq // BSP: this worker's parked pushes of the key, oldest first
}

type parkedReq struct {
	id    uint64
	seq   uint64
	r     Request // Keys is the controller's copy
	iters []int64 // per key: the pull's iteration, or the clock the push sets
	done  bool    // released or handed on
}

// New returns a controller for cfg, or cfg.Validate's error.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Controller{
		cfg:    cfg,
		keys:   map[uint64]*keyState{},
		nodes:  map[int32]struct{}{},
		left:   map[int32]struct{}{},
		parked: map[uint64]*parkedReq{},
	}, nil
}

// Validate reports the first thing wrong with c, naming the allowed values.
func (c Config) Validate() error {
	if int(c.Mode) >= len(modeNames) {
		return fmt.Errorf("sync mode %v unknown: use asp, bsp, ssp or fluent", c.Mode)
	}
	if c.Staleness < 0 {
		return fmt.Errorf("staleness %d is negative: use a bound >= 0 (iterations a worker may run ahead of the slowest)", c.Staleness)
	}
	if math.IsNaN(c.PauseProb) || c.PauseProb < 0 || c.PauseProb > 1 {
		return fmt.Errorf("pause probability %v is outside [0, 1]: use a number in [0, 1] or the sigmoid", c.PauseProb)
	}
	if c.Mode == Fluent {
		if c.Rand == nil {
			return errors.New("fluent mode needs Config.Rand (uniform numbers in [0, 1)) for its pause draws")
		}
		if c.Staleness < 1 {
			return errors.New("fluent mode needs staleness >= 1: with 0 workers at the same iteration are all the fastest, and holding them all would stop t_min for good")
		}
	}
	return nil
}

// Config returns the controller's configuration.
func (c *Controller) Config() Config { return c.cfg }

// Stats returns the decision counters.
func (c *Controller) Stats() Stats {
	s := c.stats
	s.Parked = len(c.parked)
	return s
}

// Admit decides about r. run: the caller runs r now (a push is applied
// now). released: requests parked earlier that may run now, in the order
// they must run, after r if r runs. A released request is decided: the
// caller runs it and does not admit it again. r.Keys is not retained.
func (c *Controller) Admit(r Request) (run bool, released []uint64) {
	c.stats.Requests++
	if c.cfg.Mode == ASP || c.closed || len(r.Keys) == 0 {
		return true, nil
	}
	c.out = nil
	c.joinImplicitly(r.Worker.Node)
	if r.Push {
		run = c.admitPush(r)
	} else if r.Pull {
		run = c.admitPull(r)
	} else {
		run = true
	}
	c.settle()
	return run, c.take()
}

func (c *Controller) admitPush(r Request) bool {
	if c.cfg.Mode == BSP {
		var blocker *keyState
		for _, k := range r.Keys {
			ks := c.key(k)
			e := c.entryOf(ks, r.Worker)
			if len(e.pushes) > 0 || ks.holdsPush(r.Worker, c.pushIter(e, r)) {
				blocker = ks
				break
			}
		}
		if blocker != nil {
			p := c.park(r, blocker)
			for i, k := range p.r.Keys {
				e := c.entryOf(c.key(k), r.Worker)
				p.iters[i] = c.pushIter(e, r)
				e.pushes = append(e.pushes, p)
			}
			c.stats.DelayedPushes++
			return false
		}
	}
	for _, k := range r.Keys {
		ks := c.key(k)
		e := c.entryOf(ks, r.Worker)
		c.applyPush(ks, e, c.pushIter(e, r))
	}
	return true
}

// pushIter is the clock a push of r sets: the stated iteration, or one more
// than the worker's clock and its parked pushes.
func (c *Controller) pushIter(e *entry, r Request) int64 {
	if r.Iteration > 0 {
		return r.Iteration
	}
	return e.clock + int64(len(e.pushes)) + 1
}

// pullIter is the iteration a pull of r is for: the stated one, or the
// worker's clock counting its parked pushes (a pull after a parked push
// waits for that push's round).
func pullIter(e *entry, r Request) int64 {
	if r.Iteration > 0 {
		return r.Iteration
	}
	return e.clock + int64(len(e.pushes))
}

func (c *Controller) admitPull(r Request) bool {
	switch c.cfg.Mode {
	case BSP, SSP:
		for _, k := range r.Keys {
			ks := c.key(k)
			e := c.entryOf(ks, r.Worker)
			if pullIter(e, r)-ks.tmin > c.bound() {
				p := c.park(r, ks)
				for i, k := range p.r.Keys {
					p.iters[i] = pullIter(c.entryOf(c.key(k), r.Worker), r)
				}
				c.stats.DelayedPulls++
				return false
			}
		}
	case Fluent:
		// One pause decision per request (a server's pull of its shard),
		// not one per key: a request of n blocks would otherwise be held
		// with probability 1-(1-p)^n. It is taken at the key where the
		// worker is fastest with the largest gap, and that key's next
		// t_min advance releases it.
		s := c.cfg.Staleness
		var at *keyState
		var gap int64
		for _, k := range r.Keys {
			ks := c.key(k)
			e := c.entryOf(ks, r.Worker)
			g := pullIter(e, r) - ks.tmin
			if g >= s && e.clock == ks.tmax() && (at == nil || g > gap) {
				at, gap = ks, g
			}
		}
		if at != nil {
			p := c.cfg.PauseProb
			if c.cfg.Sigmoid {
				p = 1 / (1 + math.Exp(float64(s-gap)))
			}
			if c.cfg.Rand() < p {
				c.park(r, at)
				c.stats.DelayedPulls++
				c.stats.Pauses++
				return false
			}
		}
	}
	c.ranPull(r)
	return true
}

// bound is the largest gap a BSP or SSP pull runs at.
func (c *Controller) bound() int64 {
	if c.cfg.Mode == BSP {
		return 0
	}
	return c.cfg.Staleness
}

// ranPull records that a pull of r ran: under BSP its worker no longer
// owes the pull, which may let held pushes go.
func (c *Controller) ranPull(r Request) {
	if c.cfg.Mode != BSP {
		return
	}
	for _, k := range r.Keys {
		ks := c.keys[k]
		if ks == nil {
			continue
		}
		if e := ks.find(r.Worker); e != nil && e.owes {
			e.owes = false
			c.touch(ks)
		}
	}
}

// applyPush counts a push that runs: the worker's clock becomes iter.
func (c *Controller) applyPush(ks *keyState, e *entry, iter int64) {
	old := e.clock
	e.clock = iter
	if c.cfg.Mode == BSP {
		e.owes = true
		c.touch(ks)
	}
	if old == ks.tmin || iter < ks.tmin {
		c.retmin(ks)
	}
}

// retmin recomputes t_min; an advance lets waiting requests be looked at
// (BSP, SSP) or releases them all (Fluent).
func (c *Controller) retmin(ks *keyState) {
	if len(ks.entries) == 0 {
		return
	}
	old := ks.tmin
	ks.tmin = ks.entries[0].clock
	for _, e := range ks.entries[1:] {
		ks.tmin = min(ks.tmin, e.clock)
	}
	if ks.tmin <= old {
		return
	}
	if c.cfg.Mode == Fluent {
		for _, p := range ks.waiting {
			if !p.done {
				c.release(p)
			}
		}
		clear(ks.waiting)
		ks.waiting = ks.waiting[:0]
		return
	}
	c.touch(ks)
}

// touch queues ks's waiting requests to be looked at again (BSP, SSP).
func (c *Controller) touch(ks *keyState) {
	if c.cfg.Mode == Fluent || ks.dirty || len(ks.waiting) == 0 {
		return
	}
	ks.dirty = true
	c.work = append(c.work, ks)
}

// settle looks at the queued keys' waiting requests until nothing changes:
// a request no key blocks is released (and its effects may queue more
// keys); one still blocked waits on the key that blocks it now.
func (c *Controller) settle() {
	for len(c.work) > 0 {
		ks := c.work[0]
		c.work = c.work[1:]
		ks.dirty = false
		list := ks.waiting
		ks.waiting = c.spare[:0]
		for _, p := range list {
			if p.done {
				continue
			}
			if b := c.blocker(p); b != nil {
				b.waiting = append(b.waiting, p)
				continue
			}
			c.release(p)
			if p.r.Push {
				c.applyParkedPush(p)
			} else {
				c.ranPull(p.r)
			}
		}
		clear(list)
		c.spare = list[:0]
	}
	c.work = c.work[:0]
}

// blocker returns a key that keeps parked request p from running, or nil.
func (c *Controller) blocker(p *parkedReq) *keyState {
	for i, k := range p.r.Keys {
		ks := c.keys[k]
		e := ks.find(p.r.Worker)
		if p.r.Push {
			if e.pushes[0] != p || ks.holdsPush(p.r.Worker, p.iters[i]) {
				return ks
			}
		} else if p.iters[i]-ks.tmin > c.bound() {
			return ks
		}
	}
	return nil
}

func (c *Controller) applyParkedPush(p *parkedReq) {
	for i, k := range p.r.Keys {
		ks := c.keys[k]
		e := ks.find(p.r.Worker)
		e.pushes[0] = nil
		e.pushes = e.pushes[1:]
		c.applyPush(ks, e, p.iters[i])
		c.touch(ks) // the worker's next parked push may go now
	}
}

// holdsPush tells whether BSP's push hold keeps w's push of iteration iter
// on ks: another worker that reached iter-1 still owes the pull of that
// round, which must not see this round's values.
func (ks *keyState) holdsPush(w Worker, iter int64) bool {
	for i := range ks.entries {
		e := &ks.entries[i]
		if e.owes && e.clock == iter-1 && e.w != w {
			return true
		}
	}
	return false
}

func (ks *keyState) tmax() int64 {
	m := ks.tmin
	for _, e := range ks.entries {
		m = max(m, e.clock)
	}
	return m
}

func (ks *keyState) find(w Worker) *entry {
	for i := range ks.entries {
		if e := &ks.entries[i]; e.w == w && !e.placeholder {
			return e
		}
	}
	return nil
}

// key returns k's state, made on first sight: every joined node starts
// there at 0.
func (c *Controller) key(k uint64) *keyState {
	if ks := c.keys[k]; ks != nil {
		return ks
	}
	ks := &keyState{key: k, entries: make([]entry, 0, len(c.nodes))}
	for n := range c.nodes {
		ks.entries = append(ks.entries, entry{w: Worker{Node: n}, placeholder: true})
	}
	c.keys[k] = ks
	return ks
}

// entryOf returns w's entry for ks: its own, else its node's placeholder
// taken over, else a new one at t_min (a newcomer does not drag t_min
// back). The pointer is valid until ks gets another entry.
func (c *Controller) entryOf(ks *keyState, w Worker) *entry {
	ph := -1
	for i := range ks.entries {
		e := &ks.entries[i]
		if e.w.Node != w.Node {
			continue
		}
		if !e.placeholder && e.w.Customer == w.Customer {
			return e
		}
		if e.placeholder {
			ph = i
		}
	}
	if ph >= 0 {
		e := &ks.entries[ph]
		e.w, e.placeholder = w, false
		return e
	}
	ks.entries = append(ks.entries, entry{w: w, clock: ks.tmin})
	return &ks.entries[len(ks.entries)-1]
}

// park records r as parked, waiting on ks.
func (c *Controller) park(r Request, ks *keyState) *parkedReq {
	c.seq++
	p := &parkedReq{id: r.ID, seq: c.seq, r: r, iters: make([]int64, len(r.Keys))}
	p.r.Keys = slices.Clone(r.Keys)
	c.parked[p.seq] = p
	ks.waiting = append(ks.waiting, p)
	return p
}

// release takes p out of the parked set and hands its ID out.
func (c *Controller) release(p *parkedReq) {
	p.done = true
	delete(c.parked, p.seq)
	c.out = append(c.out, p.id)
}

// take returns what the current call released, counting it as one release
// event.
func (c *Controller) take() []uint64 {
	out := c.out
	c.out = nil
	if len(out) > 0 {
		c.stats.Releases++
	}
	return out
}

func (c *Controller) joinImplicitly(node int32) {
	if _, ok := c.nodes[node]; !ok {
		c.Join(node)
	}
}

// Join makes node part of the worker set. For every key already known, it
// counts at that key's t_min until one of its customers touches the key.
// Joining a joined node changes nothing. Join releases nothing (t_min never
// moves back or forward by a join); the result is there for symmetry.
func (c *Controller) Join(node int32) (released []uint64) {
	if c.cfg.Mode == ASP || c.closed {
		return nil
	}
	if _, ok := c.nodes[node]; ok {
		return nil
	}
	delete(c.left, node)
	c.nodes[node] = struct{}{}
	for _, ks := range c.keys {
		if !ks.hasNode(node) {
			ks.entries = append(ks.entries, entry{w: Worker{Node: node}, placeholder: true, clock: ks.tmin})
		}
	}
	return nil
}

func (ks *keyState) hasNode(node int32) bool {
	for _, e := range ks.entries {
		if e.w.Node == node {
			return true
		}
	}
	return false
}

// Leave takes node out of the worker set: its clocks hold nobody any more
// (t_min may advance and release requests), and its own parked requests
// are released too, after those, in the order they were parked.
func (c *Controller) Leave(node int32) (released []uint64) {
	if c.cfg.Mode == ASP || c.closed {
		return nil
	}
	delete(c.nodes, node)
	c.left[node] = struct{}{}
	c.out = nil
	own := c.parkedWhere(func(p *parkedReq) bool { return p.r.Worker.Node == node })
	for _, p := range own {
		p.done = true
		delete(c.parked, p.seq)
	}
	for _, ks := range c.sortedKeys(0, math.MaxUint64) {
		n := len(ks.entries)
		ks.entries = slices.DeleteFunc(ks.entries, func(e entry) bool { return e.w.Node == node })
		if len(ks.entries) == n {
			continue
		}
		clear(ks.entries[len(ks.entries):n])
		c.touch(ks) // BSP: an owed pull of the node held pushes
		c.retmin(ks)
	}
	c.settle()
	for _, p := range own {
		c.out = append(c.out, p.id)
	}
	return c.take()
}

// sortedKeys returns the states of the keys in [begin, end), ascending
// (Leave and Export go in key order, so their results are deterministic).
func (c *Controller) sortedKeys(begin, end uint64) []*keyState {
	var ks []*keyState
	for k, s := range c.keys {
		if k >= begin && k < end {
			ks = append(ks, s)
		}
	}
	slices.SortFunc(ks, func(a, b *keyState) int { return cmpUint(a.key, b.key) })
	return ks
}

// parkedWhere returns the parked requests f selects, in park order.
func (c *Controller) parkedWhere(f func(*parkedReq) bool) []*parkedReq {
	var ps []*parkedReq
	for _, p := range c.parked {
		if f(p) {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b *parkedReq) int { return cmpUint(a.seq, b.seq) })
	return ps
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Close releases every parked request, in the order they were parked, and
// turns the controller off: later requests run at once.
func (c *Controller) Close() (released []uint64) {
	if c.closed {
		return nil
	}
	c.out = nil
	for _, p := range c.parkedWhere(func(*parkedReq) bool { return true }) {
		c.release(p)
	}
	c.closed = true
	c.keys = map[uint64]*keyState{}
	c.work = nil
	return c.take()
}

// Export removes the sync state of keys [begin, end) and returns its
// encoding for Import, with the IDs of the parked requests that touch those
// keys, in park order: they are no longer this controller's, the caller
// hands them on to the keys' new owner. released are requests that waited
// only behind a parked one that left and may run now, in order.
func (c *Controller) Export(begin, end uint64) (state []byte, parked, released []uint64) {
	ks := c.sortedKeys(begin, end)
	c.out = nil
	moved := c.parkedWhere(func(p *parkedReq) bool {
		return slices.ContainsFunc(p.r.Keys, func(k uint64) bool { return k >= begin && k < end })
	})
	for _, p := range moved {
		p.done = true
		delete(c.parked, p.seq)
		parked = append(parked, p.id)
		if !p.r.Push {
			continue
		}
		// Its place in the push queues of keys that stay here is freed:
		// the next settle looks at what waited behind it.
		for _, k := range p.r.Keys {
			s := c.keys[k]
			if k >= begin && k < end {
				continue
			}
			e := s.find(p.r.Worker)
			e.pushes = slices.DeleteFunc(e.pushes, func(q *parkedReq) bool { return q == p })
			c.touch(s)
		}
	}
	for _, s := range ks {
		delete(c.keys, s.key)
	}
	// A push that waited only behind an exported one may run now.
	c.settle()
	return encodeState(ks), parked, c.take()
}

// Import installs the sync state an Export made, all or nothing. A worker
// node it names joins, unless it left this controller; a node joined here
// that it does not name counts at the key's t_min.
func (c *Controller) Import(state []byte) (released []uint64, err error) {
	ks, err := decodeState(state)
	if err != nil {
		return nil, err
	}
	if c.closed {
		return nil, errors.New("sync state import: the controller is closed")
	}
	for _, s := range ks {
		if _, ok := c.keys[s.key]; ok {
			return nil, fmt.Errorf("sync state import: key %d already has sync state here: import a block before serving it", s.key)
		}
	}
	if c.cfg.Mode == ASP {
		return nil, nil
	}
	c.out = nil
	for _, s := range ks {
		s.entries = slices.DeleteFunc(s.entries, func(e entry) bool {
			_, gone := c.left[e.w.Node]
			return gone
		})
		for _, e := range s.entries {
			c.joinImplicitly(e.w.Node)
		}
	}
	for _, s := range ks {
		c.retmin(s) // a node that left here may have been the slowest
		for n := range c.nodes {
			if !s.hasNode(n) {
				s.entries = append(s.entries, entry{w: Worker{Node: n}, placeholder: true, clock: s.tmin})
			}
		}
		c.keys[s.key] = s
	}
	c.settle()
	return c.take(), nil
}

//go:build rdma && cgo

package rdma

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

const (
	// maxOps bounds writes in flight per transport (all links): the
	// backends keep one completion context per op id.
	maxOps = 8192

	// landingMin is the smallest landing slot offered with a request: room
	// for a meta-only response (a push acknowledgement) with a body.
	landingMin = 4096

	// maxPending bounds the request/response bookkeeping of each side; past
	// it, requests go without landing slot and cached slots are not handed
	// back, which costs a rendezvous but never correctness.
	maxPending = 1 << 16

	// retireWait is how long a link replaced by Connect may keep finishing
	// the writes already posted on it before it is torn down.
	retireWait = time.Second

	// redialTimeout bounds the one attempt to dial again a peer whose link
	// died. Short, unlike ConnectTimeout (which covers nodes that start in
	// any order): the Send waiting on it may be a node's receive loop, and
	// a peer that is gone must not stall it.
	redialTimeout = time.Second

	// drainWait bounds how long an incoming link whose peer closed it is
	// kept for the writes that peer posted before closing. The device
	// reports the closing (the bootstrap connection, an rdma_cm event) on
	// another path than the completions, and may report it first.
	drainWait = time.Second
)

// Stats counts how messages travelled; tests and benchmarks read them.
type Stats struct {
	Rendezvous atomic.Int64 // messages that needed START/REPLY first
	Cached     atomic.Int64 // requests written into a cached slot
	Landed     atomic.Int64 // responses written into the requester's landing slot
	ZeroCopy   atomic.Int64 // frames written straight from a registered buffer
	BadWrites  atomic.Int64 // images or control messages rejected on arrival
	Garbage    atomic.Int64 // bootstrap connections rejected (fabric)
}

// Transport is a van.Transport over RDMA. Create it with New; Close must be
// called to release the device and its registered memory.
type Transport struct {
	cfg   Config
	log   *slog.Logger
	dev   device
	stats Stats

	myID   atomic.Int32
	closed atomic.Bool
	done   chan struct{} // closed first thing in Close
	// devDone is closed once the device can no longer touch memory: a Send
	// waiting on a zero-copy write may return only then.
	devDone      chan struct{}
	progressDone chan struct{}

	// mu guards everything below and the per-link state documented as
	// such. The progress goroutine holds it while it handles a batch of
	// completions, so no code holding it may block on the network.
	mu          sync.Mutex
	cond        *sync.Cond // Recv waits on it for inbox
	bound       bool
	peers       map[int32]*peer // Connect targets by node id
	links       map[uint32]*link
	nextLink    uint32
	slots       []*slot
	freeSlots   []uint32
	recvBytes   int64 // registered bytes in live receive slots
	cachedBytes int64 // of which bound to cached channels
	pool        *bufPool
	mrs         mrCache
	inbox       []inItem
	ops         []*op
	freeOps     []uint64
	opWait      chan struct{} // signalled when an op id is freed
	deferCtrl   []deferredCtrl
	deferStart  []deferredStart
	draining    []*link                  // in links whose peer closed them (peerGone)
	pending     map[respKey]*pendingResp // responder: requests awaiting our response
	reqs        map[respKey]*outReq      // requester: our requests awaiting a response
	nextToken   uint64

	// memMu is held (read) by Recv while it copies out of a slot and
	// (write) by Close while it frees registered memory.
	memMu sync.RWMutex

	closeOnce sync.Once

	// afterBatch, if set (by tests), is called by the progress goroutine
	// after it handled each batch of events, without mu held.
	afterBatch atomic.Pointer[func([]event)]
}

// peer is what Connect asked for: a node id at an address under an
// identity, and the link that serves it once dialled.
type peer struct {
	id          int32
	host        string
	port        int
	ident       int32         // our id as announced on the link (Empty: anonymous)
	ready       chan struct{} // closed once link or err is set
	stop        chan struct{} // closed when replaced or the transport closes
	dialTimeout time.Duration
	link        *link // guarded by Transport.mu
	err         error // guarded by Transport.mu
}

// link is one connection. Messages flow from the dialler (out) to the
// acceptor (in); control messages flow both ways.
type link struct {
	id     uint32
	remote uint32 // the peer's id for this link
	out    bool
	peer   int32 // out: node id dialled; in: id the dialler announced
	dl     devLink
	closed chan struct{}
	dead   bool // guarded by Transport.mu

	// out links
	sendMu  sync.Mutex    // orders sequence numbers with posting
	seq     uint32        // guarded by sendMu
	depth   chan struct{} // one token per write in flight
	waiters map[uint64]chan ctrlMsg
	cache   map[chanKey][]*cachedSlot
	byIdx   map[uint32]*cachedSlot
	learned map[chanKey]int // image size of the last response, for landing slots

	// in links (guarded by Transport.mu)
	next    uint32           // next sequence number to deliver
	held    map[uint32]*slot // arrived ahead of next
	inCache map[chanKey]int  // slots bound per channel

	// peerGone: the peer closed the link but writes it posted before may
	// still be in the completion queue (in links, guarded by
	// Transport.mu); the link is dropped at drainBy or once nothing is
	// outstanding on it.
	peerGone bool
	drainBy  time.Time
}

// cachedSlot is a receiver slot a sender may write a request into without
// rendezvous while it is not busy.
type cachedSlot struct {
	remote remoteSlot
	busy   bool
}

type inItem struct {
	s   *slot
	err error
}

type op struct {
	link  *link
	buf   *regBuf    // staging, back to the pool on completion
	users []*userReg // registered buffers written from
	done  chan error // non-nil if Send waits for completion
}

type deferredCtrl struct {
	l   *link
	msg [ctrlSize]byte
}

type deferredStart struct {
	l *link
	m ctrlMsg
}

// respKey matches a response to its request: the requester's node id and
// the request's app, customer and timestamp, which responses echo.
type respKey struct{ node, app, customer, ts int32 }

type pendingResp struct {
	landing    remoteSlot
	hasLanding bool
	grant      *slot // cached slot to hand back, or nil
}

type outReq struct {
	landing *slot
	ckey    chanKey
	link    *link
}

// New opens the device of cfg.Backend. The ibverbs backend fails at once,
// with ErrNoDevice, on a host without an RDMA device.
func New(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:          cfg,
		log:          cfg.Logger,
		done:         make(chan struct{}),
		devDone:      make(chan struct{}),
		progressDone: make(chan struct{}),
		peers:        map[int32]*peer{},
		links:        map[uint32]*link{},
		opWait:       make(chan struct{}, 1),
		pending:      map[respKey]*pendingResp{},
		reqs:         map[respKey]*outReq{},
		nextLink:     1,
	}
	t.cond = sync.NewCond(&t.mu)
	t.myID.Store(message.Empty)
	switch cfg.Backend {
	case Fabric:
		t.dev, err = openFabric(cfg, t)
	case Verbs:
		t.dev, err = openVerbs(cfg, t)
	}
	if err != nil {
		return nil, err
	}
	t.log.Info("van/rdma: device opened", "backend", string(cfg.Backend), "device", t.dev.describe())
	t.pool = newBufPool(t.dev, 256<<20)
	t.ops = make([]*op, maxOps)
	for i := maxOps - 1; i >= 0; i-- {
		t.freeOps = append(t.freeOps, uint64(i))
	}
	go t.progressLoop()
	return t, nil
}

// Stats returns the transport's counters.
func (t *Transport) Stats() *Stats { return &t.stats }

// Bind implements van.Transport: it listens at node.Hostname:node.Port (for
// the fabric backend a TCP bootstrap listener; for ibverbs an rdma_cm
// listener), 0.0.0.0 with Config.BindAll or an empty hostname.
func (t *Transport) Bind(node message.Node, maxRetry int) (int, error) {
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return 0, van.ErrClosed
	}
	if t.bound {
		t.mu.Unlock()
		return 0, errors.New("van/rdma: Bind called twice")
	}
	t.bound = true
	t.mu.Unlock()
	host := node.Hostname
	if t.cfg.BindAll || host == "" {
		host = "0.0.0.0"
	}
	port := int(node.Port)
	if node.Port == message.Empty || port < 0 {
		port = 0
	}
	p, err := t.dev.listen(host, port, maxRetry)
	if err != nil {
		t.mu.Lock()
		t.bound = false
		t.mu.Unlock()
		return 0, err
	}
	t.log.Debug("van/rdma: bound", "host", host, "port", p)
	return p, nil
}

// Connect implements van.Transport. The link is dialled in the background
// (the peer may not listen yet); Send waits for it up to
// Config.ConnectTimeout. A previous link for node.ID with the same address
// and identity is kept; one with another is torn down once the writes
// already posted on it complete.
func (t *Transport) Connect(node message.Node, myID int32) error {
	if node.ID == message.Empty {
		return fmt.Errorf("van/rdma: connect to %s: node has no id", node)
	}
	if node.Port <= 0 || node.Port == message.Empty || node.Port > 65535 {
		return fmt.Errorf("van/rdma: connect to %s: invalid port", node)
	}
	if node.Hostname == "" {
		return fmt.Errorf("van/rdma: connect to %s: empty hostname", node)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return van.ErrClosed
	}
	if myID != message.Empty {
		t.myID.Store(myID)
	}
	old := t.peers[node.ID]
	if old != nil && old.host == node.Hostname && old.port == int(node.Port) && old.ident == myID &&
		old.err == nil && (old.link == nil || !old.link.dead) {
		return nil
	}
	p := &peer{id: node.ID, host: node.Hostname, port: int(node.Port), ident: myID,
		ready: make(chan struct{}), stop: make(chan struct{}), dialTimeout: t.cfg.ConnectTimeout}
	t.peers[node.ID] = p
	if old != nil {
		t.retireLocked(old)
	}
	go t.dialLoop(p)
	return nil
}

// retireLocked stops old's dialling and tears its link down after the
// writes in flight on it are done (bounded by retireWait).
func (t *Transport) retireLocked(old *peer) {
	close(old.stop)
	l := old.link
	if l == nil || l.dead {
		return
	}
	go func() {
		deadline := time.Now().Add(retireWait)
		for len(l.depth) > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		t.closeLink(l)
	}()
}

func (t *Transport) newLinkLocked(out bool, peerID int32) *link {
	for t.links[t.nextLink] != nil || t.nextLink == 0 {
		t.nextLink++
	}
	l := &link{id: t.nextLink, out: out, peer: peerID, closed: make(chan struct{})}
	t.nextLink++
	if out {
		l.depth = make(chan struct{}, t.cfg.SendDepth)
		l.waiters = map[uint64]chan ctrlMsg{}
		l.cache = map[chanKey][]*cachedSlot{}
		l.byIdx = map[uint32]*cachedSlot{}
		l.learned = map[chanKey]int{}
	} else {
		l.held = map[uint32]*slot{}
		l.inCache = map[chanKey]int{}
	}
	t.links[l.id] = l
	return l
}

// dialLoop dials p until it succeeds, p is replaced or closed, or
// p.dialTimeout passes.
func (t *Transport) dialLoop(p *peer) {
	deadline := time.Now().Add(p.dialTimeout)
	backoff := 5 * time.Millisecond
	for {
		t.mu.Lock()
		if t.closed.Load() {
			p.err = van.ErrClosed
			close(p.ready)
			t.mu.Unlock()
			return
		}
		l := t.newLinkLocked(true, p.id)
		t.mu.Unlock()
		dl, h, err := t.dev.dial(p.host, p.port, hello{node: p.ident, link: l.id}, deadline, p.stop)
		t.mu.Lock()
		stopped := isClosed(p.stop)
		if err == nil && !stopped {
			l.dl, l.remote = dl, h.link
			p.link = l
			close(p.ready)
			t.mu.Unlock()
			t.log.Debug("van/rdma: connected", "node", p.id, "host", p.host, "port", p.port, "identity", p.ident)
			return
		}
		// Close may have dropped l already while it was being dialled.
		t.dropLinkLocked(l)
		if err == nil {
			// Replaced while dialling: whoever waits on p looks again.
			p.err = errReplaced
			close(p.ready)
			t.mu.Unlock()
			t.dev.closeLink(dl)
			return
		}
		if stopped || time.Now().After(deadline) {
			switch {
			case t.closed.Load():
				err = van.ErrClosed
			case stopped:
				err = errReplaced
			default:
				err = fmt.Errorf("van/rdma: connect to node %d at %s:%d: %w", p.id, p.host, p.port, err)
			}
			p.err = err
			close(p.ready)
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		select {
		case <-time.After(backoff):
		case <-p.stop:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// errReplaced marks a peer that Connect replaced while it was dialled.
var errReplaced = errors.New("van/rdma: connection replaced")

// errLinkClosed is wrapped by the errors of a message that was not posted
// because its link closed first; Send retries it on the link that replaced
// it, if any.
var errLinkClosed = errors.New("connection closed")

// linkTo returns the established link to node id, waiting for the dial
// that Connect started, following replacements, and dialling again once if
// the link died since (as a ZeroMQ DEALER reconnects by itself).
func (t *Transport) linkTo(id int32) (*link, error) {
	redialed := false
	for {
		t.mu.Lock()
		p := t.peers[id]
		t.mu.Unlock()
		if p == nil {
			if t.closed.Load() {
				return nil, van.ErrClosed
			}
			return nil, fmt.Errorf("van/rdma: no connection to node %d; was it connected?", id)
		}
		select {
		case <-p.ready:
		case <-t.done:
			return nil, van.ErrClosed
		}
		t.mu.Lock()
		if t.peers[id] != p {
			t.mu.Unlock()
			continue
		}
		l, err := p.link, p.err
		dead := err == nil && l.dead // l.dead is guarded by t.mu
		if dead && !redialed {
			redialed = true
			np := &peer{id: p.id, host: p.host, port: p.port, ident: p.ident,
				ready: make(chan struct{}), stop: make(chan struct{}), dialTimeout: min(redialTimeout, t.cfg.ConnectTimeout)}
			t.peers[id] = np
			t.retireLocked(p)
			go t.dialLoop(np)
			t.mu.Unlock()
			continue
		}
		t.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if dead {
			return nil, fmt.Errorf("van/rdma: connection to node %d at %s:%d: %w", id, p.host, p.port, errLinkClosed)
		}
		return l, nil
	}
}

// linkAccepted implements linkSink.
func (t *Transport) linkAccepted(dl devLink, h hello) (hello, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return hello{}, van.ErrClosed
	}
	l := t.newLinkLocked(false, h.node)
	l.dl, l.remote = dl, h.link
	return hello{node: t.myID.Load(), link: l.id}, nil
}

// garbage implements linkSink.
func (t *Transport) garbage(from string, err error) {
	n := t.stats.Garbage.Add(1)
	t.log.Warn("van/rdma: rejected a bootstrap connection", "from", from, "err", err, "rejected_total", n)
}

// linkClosed implements linkSink. An incoming link that may still have
// writes in the completion queue (a slot granted to it, a message held
// behind a gap) is not dropped yet: its peer posted those writes before it
// closed the link, and the device may report the closing before their
// completions. The progress goroutine drops it once they arrived, or after
// drainWait.
func (t *Transport) linkClosed(dl devLink) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var l *link
	for _, x := range t.links {
		if x.dl == dl {
			l = x
			break
		}
	}
	switch {
	case l == nil || l.peerGone:
	case l.out || t.closed.Load() || !t.awaitsWritesLocked(l):
		t.dropLinkLocked(l)
	default:
		l.peerGone = true
		l.drainBy = time.Now().Add(drainWait)
		t.draining = append(t.draining, l)
	}
}

// awaitsWritesLocked reports whether an incoming link may still receive a
// write: a slot is granted to it, or a message waits for an earlier one.
func (t *Transport) awaitsWritesLocked(l *link) bool {
	if len(l.held) > 0 {
		return true
	}
	for _, s := range t.slots {
		if s != nil && s.link == l && s.state == slotGranted {
			return true
		}
	}
	return false
}

// reapDrainingLocked drops the links of t.draining that received what they
// awaited or whose time is up.
func (t *Transport) reapDrainingLocked() {
	if len(t.draining) == 0 {
		return
	}
	now := time.Now()
	keep := t.draining[:0]
	for _, l := range t.draining {
		switch {
		case l.dead:
		case now.After(l.drainBy) || !t.awaitsWritesLocked(l):
			t.dropLinkLocked(l)
		default:
			keep = append(keep, l)
		}
	}
	clear(t.draining[len(keep):])
	t.draining = keep
}

// closeLink tears l down on both ends.
func (t *Transport) closeLink(l *link) {
	t.mu.Lock()
	wasDead := l.dead
	t.dropLinkLocked(l)
	t.mu.Unlock()
	if wasDead || l.dl == nil {
		return
	}
	if l.out {
		// A write being posted on l is posted before the peer learns that
		// l closed (post checks l.closed under sendMu): the peer keeps
		// the link for the writes posted before, not for ones after.
		l.sendMu.Lock()
		//lint:ignore SA2001 the empty critical section orders posting with closing
		l.sendMu.Unlock()
	}
	t.dev.closeLink(l.dl)
}

// dropLinkLocked forgets l: waiters fail, messages that arrived on it are
// delivered in order (a gap left by a write that never came is skipped),
// and slots granted to it are freed.
func (t *Transport) dropLinkLocked(l *link) {
	if l.dead {
		return
	}
	l.dead = true
	close(l.closed)
	delete(t.links, l.id)
	if l.out {
		l.cache, l.byIdx = map[chanKey][]*cachedSlot{}, map[uint32]*cachedSlot{}
		return
	}
	for len(l.held) > 0 {
		if s, ok := l.held[l.next]; ok {
			delete(l.held, l.next)
			t.inbox = append(t.inbox, inItem{s: s})
		}
		l.next++
	}
	t.cond.Broadcast()
	for _, s := range t.slots {
		if s != nil && s.link == l && (s.state == slotGranted || s.state == slotHeld) {
			t.freeSlotLocked(s)
		}
	}
}

// allocSlotLocked takes a slot of at least n bytes from the address pool,
// or returns nil if the pool or the memory budget is exhausted.
func (t *Transport) allocSlotLocked(n int) (*slot, error) {
	size := int64(classSize(n))
	if t.recvBytes+size > t.cfg.MaxRecvMemory {
		return nil, nil
	}
	var idx uint32
	switch {
	case len(t.freeSlots) > 0:
		idx = t.freeSlots[len(t.freeSlots)-1]
		t.freeSlots = t.freeSlots[:len(t.freeSlots)-1]
	case len(t.slots) < t.cfg.AddressPoolSize:
		idx = uint32(len(t.slots))
		t.slots = append(t.slots, &slot{idx: idx})
	default:
		return nil, nil
	}
	b, err := t.pool.get(n)
	if err != nil {
		t.freeSlots = append(t.freeSlots, idx)
		return nil, err
	}
	s := t.slots[idx]
	*s = slot{idx: idx, buf: b}
	t.recvBytes += int64(b.size)
	return s, nil
}

func (t *Transport) freeSlotLocked(s *slot) {
	if s.state == slotFree {
		return
	}
	if s.cached {
		if s.link != nil && s.link.inCache != nil {
			s.link.inCache[s.ckey]--
		}
		t.cachedBytes -= int64(s.buf.size)
	}
	t.recvBytes -= int64(s.buf.size)
	t.pool.put(s.buf)
	*s = slot{idx: s.idx}
	t.freeSlots = append(t.freeSlots, s.idx)
	t.retryStartsLocked()
}

// getOp reserves an op id, waiting while all are in flight.
func (t *Transport) getOp(o *op) (uint64, error) {
	for {
		t.mu.Lock()
		if n := len(t.freeOps); n > 0 {
			id := t.freeOps[n-1]
			t.freeOps = t.freeOps[:n-1]
			t.ops[id] = o
			t.mu.Unlock()
			return id, nil
		}
		t.mu.Unlock()
		select {
		case <-t.opWait:
		case <-t.done:
			return 0, van.ErrClosed
		}
	}
}

// finishOpLocked returns everything op id held.
func (t *Transport) finishOpLocked(id uint64, err error) {
	o := t.ops[id]
	if o == nil {
		return
	}
	t.ops[id] = nil
	t.freeOps = append(t.freeOps, id)
	select {
	case t.opWait <- struct{}{}:
	default:
	}
	if o.buf != nil {
		t.pool.put(o.buf)
	}
	for _, r := range o.users {
		r.refs--
		if r.dropped && r.refs == 0 {
			t.releaseUserLocked(r)
		}
	}
	<-o.link.depth
	if o.done != nil {
		o.done <- err
	}
}

// RegisterBuffer registers b with the device and pins it, so that frames
// lying inside b are written to peers straight from it (zero-copy) instead
// of being copied into staging first. Send then returns only once such a
// write has completed. Register long-lived buffers (a server's value store,
// a worker's gradient buffers): registration is slow and pins the pages
// until UnregisterBuffer or Close. Go and C memory are both fine; C memory
// must stay allocated until UnregisterBuffer.
func (t *Transport) RegisterBuffer(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	r := &userReg{base: uintptr(unsafe.Pointer(unsafe.SliceData(b)))}
	r.end = r.base + uintptr(len(b))
	// Pin first: the device keeps the address, which the cgo rules allow
	// for pinned Go memory only (pinning C memory does nothing).
	r.pin.Pin(unsafe.SliceData(b))
	mr, err := t.dev.reg(unsafe.Pointer(unsafe.SliceData(b)), len(b))
	if err != nil {
		r.pin.Unpin()
		return err
	}
	r.mr = mr
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		t.dev.dereg(mr)
		r.pin.Unpin()
		return van.ErrClosed
	}
	if err := t.mrs.insert(r); err != nil {
		t.dev.dereg(mr)
		r.pin.Unpin()
		return err
	}
	return nil
}

// UnregisterBuffer undoes RegisterBuffer(b). Writes in flight from b finish
// first.
func (t *Transport) UnregisterBuffer(b []byte) {
	if len(b) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.mrs.find(uintptr(unsafe.Pointer(unsafe.SliceData(b))), len(b))
	if r == nil || t.closed.Load() {
		return
	}
	t.mrs.remove(r)
	r.dropped = true
	if r.refs == 0 {
		t.releaseUserLocked(r)
	}
}

func (t *Transport) releaseUserLocked(r *userReg) {
	t.dev.dereg(r.mr)
	r.pin.Unpin()
}

// Close implements van.Transport. Writes already posted get up to
// retireWait to complete first; then a Recv or Send in progress returns
// van.ErrClosed. Close returns once the device is released.
func (t *Transport) Close() error {
	t.closeOnce.Do(t.close)
	return nil
}

func (t *Transport) close() {
	// Writes already posted (a Send returns once its write is posted) get
	// a moment to leave: shutting the device down drops them, and a peer
	// would never see the last messages a node sent before closing, such
	// as a scheduler's final barrier release.
	deadline := time.Now().Add(retireWait)
	for {
		t.mu.Lock()
		inFlight := len(t.freeOps) < len(t.ops)
		t.mu.Unlock()
		if !inFlight || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	t.mu.Lock()
	t.closed.Store(true)
	close(t.done)
	for _, p := range t.peers {
		if !isClosed(p.stop) {
			close(p.stop)
		}
	}
	links := make([]*link, 0, len(t.links))
	for _, l := range t.links {
		links = append(links, l)
	}
	t.cond.Broadcast()
	t.mu.Unlock()

	t.dev.wake()
	<-t.progressDone
	for _, l := range links {
		if l.dl != nil {
			t.dev.closeLink(l.dl)
		}
	}
	// The device drops whatever is posted; after this nothing reads or
	// writes registered memory.
	t.dev.shutdown()
	close(t.devDone)

	t.memMu.Lock()
	t.mu.Lock()
	for _, l := range links {
		t.dropLinkLocked(l)
	}
	t.inbox = nil
	for id, o := range t.ops {
		if o == nil {
			continue
		}
		t.ops[id] = nil
		for _, r := range o.users {
			if r.refs--; r.dropped && r.refs == 0 {
				t.releaseUserLocked(r)
			}
		}
	}
	for _, r := range t.mrs.regs {
		t.releaseUserLocked(r)
	}
	t.mrs.regs = nil
	t.pool.close()
	t.slots, t.freeSlots = nil, nil
	t.mu.Unlock()
	t.memMu.Unlock()
	t.dev.close()
	runtime.KeepAlive(t)
}

func peerName(id int32) string {
	if id == message.Empty {
		return "anonymous"
	}
	return "ps" + strconv.Itoa(int(id))
}

// Built reports whether this build has the RDMA van (the rdma tag and cgo).
const Built = true

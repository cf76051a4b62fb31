package kv

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// ErrClosed is returned by operations on a closed Customer (and the apps
// built on it).
var ErrClosed = errors.New("kv: customer is closed")

// maxFailed bounds how many failed requests keep their error for a later
// Wait. Successful requests are forgotten as soon as they complete; failed
// ones are kept so that the usual pattern (issue, do other work, Wait) still
// sees the error, but a program that never waits must not grow without limit.
const maxFailed = 4096

// handler processes one message in the customer goroutine. localErr is
// non-nil for a response synthesised locally because the request could not
// be sent. The result says whether the message counts as a response for the
// tracker (a duplicate or unexpected response does not).
type handler func(m *message.Message, localErr error) bool

// Customer is one (app id, customer id) endpoint of a node, as ps::Customer:
// it receives the node's data messages for that pair in a queue drained by
// one goroutine that calls the owner's handler, and it tracks outstanding
// requests by timestamp.
//
// The queue is ordered by Meta.Priority (higher first) and, unlike ps-lite,
// is FIFO among equal priorities, so messages from one sender are handled in
// the order they were sent unless priorities say otherwise.
//
// The Worker's and the Server's customers also handle a message on the
// node's receive goroutine when nothing of theirs is queued or running
// (postoffice.InlineCustomer), which saves a goroutine hand-over per
// message. Either way the handler sees one message at a time, in queue
// order.
type Customer struct {
	po         *postoffice.Postoffice
	appID      int32
	customerID int32
	handle     handler
	releases   bool // handle Releases or Detaches every message (see ReleasesMessages)
	inline     bool // messages may be handled on the receive goroutine (AcceptInline); guarded by qmu after start
	slowRuns   int  // consecutive inline handlers slower than inlineSlow; guarded by qmu

	qmu    sync.Mutex
	idle   sync.Cond // on qmu: signalled when an inline handler returns
	active bool      // a handler runs (this customer's goroutine or inline)
	closed bool      // Close has emptied the queue: nothing more is handled
	queue  msgQueue
	wake   chan struct{} // capacity 1: "the queue may be non-empty"
	quit   chan struct{} // closed by Close
	exited chan struct{} // closed when the goroutine returns
	once   sync.Once

	tmu     sync.Mutex
	pending map[int32]*request // outstanding requests only
	failed  map[int32]error    // completed with an error, until evicted
	order   []int32            // failed keys, oldest first (eviction order)
	next    int32              // next timestamp
	wrapped bool               // next has wrapped around at least once
}

// request is the tracker entry of one outstanding request.
type request struct {
	expected, got int
	done          chan struct{} // made on the first Wait; closed on completion
	notify        Notifier      // set by OnDone; called once on completion
	err           error
	state         any // owner's per-request state (the Worker's op)
}

// NewCustomer registers a customer for (appID, customerID) with po and
// starts its goroutine, which calls handle for every message, one at a time.
// For every response (Meta.Request false) the tracker entry of
// Meta.Timestamp is incremented after handle returns, so that whatever
// handle does (callbacks, copying pulled data) happens before Wait returns.
func NewCustomer(po *postoffice.Postoffice, appID, customerID int, handle func(*message.Message)) (*Customer, error) {
	if handle == nil {
		return nil, errors.New("kv: NewCustomer needs a handler")
	}
	return newCustomer(po, appID, customerID, func(m *message.Message, localErr error) bool {
		if localErr == nil {
			handle(m)
		}
		return true
	})
}

// bind, when set, runs before the customer is registered (and so before
// any message can reach h): owners set their customer field there.
func newCustomer(po *postoffice.Postoffice, appID, customerID int, h handler, bind ...func(*Customer)) (*Customer, error) {
	if po == nil {
		return nil, errors.New("kv: nil postoffice")
	}
	if appID < 0 || appID > math.MaxInt32-1 || customerID < 0 || customerID > math.MaxInt32-1 {
		return nil, fmt.Errorf("kv: app id %d / customer id %d out of range", appID, customerID)
	}
	c := &Customer{
		po:         po,
		appID:      int32(appID),
		customerID: int32(customerID),
		handle:     h,
		wake:       make(chan struct{}, 1),
		quit:       make(chan struct{}),
		exited:     make(chan struct{}),
		pending:    map[int32]*request{},
		failed:     map[int32]error{},
	}
	c.idle.L = &c.qmu
	for _, b := range bind {
		b(c)
	}
	// The goroutine must run before AddCustomer, which hands over the
	// messages that arrived early.
	go c.run()
	if err := po.AddCustomer(appID, customerID, c); err != nil {
		close(c.quit)
		<-c.exited
		return nil, err
	}
	return c, nil
}

// AppID is the customer's app id.
func (c *Customer) AppID() int { return int(c.appID) }

// CustomerID is the customer's id within its app.
func (c *Customer) CustomerID() int { return int(c.customerID) }

// Closed is closed when the customer is (Close).
func (c *Customer) Closed() <-chan struct{} { return c.quit }

// ReleasesMessages implements postoffice.ReleasingCustomer: true for the
// Worker and the Server, whose handlers Release or Detach every message;
// user handlers (NewCustomer) and SimpleApp get messages already detached.
func (c *Customer) ReleasesMessages() bool { return c.releases }

// Accept queues msg for the customer goroutine. It never blocks; it is
// called by the postoffice's receive loop.
func (c *Customer) Accept(msg *message.Message) { c.enqueue(msg, nil) }

// A customer stops handling messages on the receive goroutine after
// inlineSlowRuns handlers in a row took longer than inlineSlow there (more
// than one: a quick handler may be descheduled once on a busy machine).
const (
	inlineSlow     = 500 * time.Microsecond
	inlineSlowRuns = 3
)

// AcceptInline implements postoffice.InlineCustomer for the Worker and the
// Server: when nothing of this customer is queued or being handled, msg is
// handled at once on the calling (receive) goroutine; otherwise it is queued
// behind the others, so that the order of handling does not change. After
// inlineSlowRuns slow handlers in a row, the customer queues everything.
func (c *Customer) AcceptInline(msg *message.Message) {
	c.qmu.Lock()
	if !c.inline || c.active || c.closed || len(c.queue.items) > 0 {
		c.qmu.Unlock()
		c.enqueue(msg, nil)
		return
	}
	c.active = true
	c.qmu.Unlock()
	start := time.Now()
	c.handleOne(msg, nil)
	slow := time.Since(start) > inlineSlow
	c.qmu.Lock()
	c.active = false
	if !slow {
		c.slowRuns = 0
	} else if c.slowRuns++; c.slowRuns >= inlineSlowRuns {
		// This handler does real work or waits: let it do so on
		// the customer's goroutine from now on, as in ps-lite, rather
		// than hold up everything else the node receives.
		c.inline = false
	}
	more := len(c.queue.items) > 0
	c.idle.Broadcast()
	c.qmu.Unlock()
	if more {
		c.signal()
	}
}

func (c *Customer) enqueue(m *message.Message, localErr error) {
	c.qmu.Lock()
	if c.closed {
		c.qmu.Unlock()
		c.po.Detach(m) // as Close does with what it finds queued
		return
	}
	c.queue.push(m, localErr)
	c.qmu.Unlock()
	c.signal()
}

// signal tells the customer goroutine that the queue may be non-empty.
func (c *Customer) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Customer) handleOne(m *message.Message, localErr error) {
	// Read before handle: a handler that releases m gives the Message
	// itself back to the transport, whose next Recv may reuse it.
	request, ts := m.Meta.Request, m.Meta.Timestamp
	if c.handle(m, localErr) && !request {
		c.AddResponse(ts, 1)
	}
}

// Close unregisters the customer and stops its goroutine after the message
// being handled, if any; queued messages are dropped and blocked Waits
// return ErrClosed. It must not be called from the customer's own handler.
func (c *Customer) Close() {
	c.once.Do(func() {
		c.po.RemoveCustomer(int(c.appID), int(c.customerID))
		close(c.quit)
		<-c.exited
		c.qmu.Lock()
		for c.active { // an inline handler
			c.idle.Wait()
		}
		c.closed = true
		q := c.queue
		c.queue = msgQueue{}
		c.qmu.Unlock()
		c.notifyAll()
		// Dropped unhandled: free the transport memory they view.
		// Detach, not Release: local messages (HandleLocal) are
		// not the transport's buffers to recycle.
		for _, it := range q.items {
			c.po.Detach(it.m)
		}
	})
}

// notifyAll calls every notify still registered by OnDone: the requests
// will not complete, and their waiters must go and see why.
func (c *Customer) notifyAll() {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	for _, r := range c.pending {
		if n := r.notify; n != nil {
			r.notify = nil
			n.Notify(Abandoned)
		}
	}
}

func (c *Customer) run() {
	defer close(c.exited)
	for {
		c.qmu.Lock()
		var it queued
		ok := false
		if !c.active { // else the inline handler signals when it is done
			it, ok = c.queue.pop()
			c.active = ok
		}
		c.qmu.Unlock()
		if !ok {
			select {
			case <-c.wake:
				continue
			case <-c.quit:
				return
			}
		}
		select {
		case <-c.quit:
			c.po.Detach(it.m) // as in Close
			c.qmu.Lock()
			c.active = false
			c.qmu.Unlock()
			return
		default:
		}
		c.handleOne(it.m, it.localErr)
		c.qmu.Lock()
		c.active = false
		c.qmu.Unlock()
	}
}

// NewRequest starts tracking a request sent to every node of group (a group
// id 1-7 or a node id) and returns its timestamp: 0, 1, 2, ... per customer.
// With instance groups it waits for one response per process of the group
// (see groupReplies).
func (c *Customer) NewRequest(group int) int32 {
	return c.newRequest(groupReplies(c.po, group, c.po.NodeIDs(group)), 0, nil)
}

// groupReplies is how many responses a request sent to ids, the members
// of group, waits for. Without instance groups (GroupSize 1), or for a
// single node id, that is one per node. With GroupSize n > 1 a group
// (1-7) holds n instances of every server and worker process, and, as in
// the BytePS fork, the request completes after one response per process:
// the group's servers and workers divided by n, plus the scheduler if it
// is a member. Responses after that still reach the response handler.
func groupReplies(po *postoffice.Postoffice, group int, ids []int32) int {
	n := po.GroupSize()
	if n <= 1 || group < 1 || group > message.AllGroup {
		return len(ids)
	}
	sched := 0
	if slices.Contains(ids, message.SchedulerID) {
		sched = 1
	}
	return (len(ids)-sched)/n + sched
}

// newRequest tracks a request that expects `expected` responses of which
// `got` are already accounted for (servers that were skipped). A request
// that needs nothing more is complete at once.
func (c *Customer) newRequest(expected, got int, state any) int32 {
	return c.track(&request{expected: expected, got: got, state: state})
}

// track starts tracking r (with expected, got and state set) and returns
// its timestamp. Owners embed r in their own per-request state to save an
// allocation.
func (c *Customer) track(r *request) int32 {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	ts := c.next
	for {
		// Skip Meta's kEmpty (MaxInt32) and, after wrap-around, any
		// timestamp that is somehow still outstanding.
		c.next++
		if c.next == message.Empty {
			c.next = 0
			c.wrapped = true
		}
		if _, busy := c.pending[ts]; !busy {
			break
		}
		ts = c.next
	}
	delete(c.failed, ts) // a stale error from a previous lap
	if r.got < r.expected {
		c.pending[ts] = r
	}
	return ts
}

// newCompleted returns the timestamp of a request that completed without
// sending anything, with its outcome.
func (c *Customer) newCompleted(err error) int32 {
	ts := c.newRequest(0, 0, nil)
	if err != nil {
		c.tmu.Lock()
		c.recordFailure(ts, err)
		c.tmu.Unlock()
	}
	return ts
}

// lookup returns the owner state of an outstanding request and whether the
// next counted response is its last one.
func (c *Customer) lookup(ts int32) (state any, last, ok bool) {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	r, ok := c.pending[ts]
	if !ok {
		return nil, false, false
	}
	return r.state, r.got+1 >= r.expected, true
}

// expect changes the number of responses request ts waits for by delta
// (a redirected span re-sent as several).
func (c *Customer) expect(ts int32, delta int) {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	if r, ok := c.pending[ts]; ok {
		r.expected += delta
	}
}

// fail records err as the outcome of request ts (the first error wins).
func (c *Customer) fail(ts int32, err error) {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	if r, ok := c.pending[ts]; ok && r.err == nil {
		r.err = err
	}
}

// AddResponse counts n responses for request ts (ps-lite uses it for
// servers a request skipped). Unknown or completed timestamps are ignored.
func (c *Customer) AddResponse(ts int32, n int) {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	r, ok := c.pending[ts]
	if !ok {
		return
	}
	r.got += n
	if r.got < r.expected {
		return
	}
	delete(c.pending, ts)
	if r.err != nil {
		c.recordFailure(ts, r.err)
	}
	if r.done != nil {
		close(r.done)
	}
	if n := r.notify; n != nil {
		r.notify = nil
		n.Notify(outcome(r.err))
	}
}

// Outcome is how a request ended, as OnDone reports it.
type Outcome int

const (
	// Succeeded: Wait returns nil.
	Succeeded Outcome = iota
	// Failed: Wait returns the request's error.
	Failed
	// Abandoned: the customer closed before the request completed; Wait
	// returns ErrClosed.
	Abandoned
)

func outcome(err error) Outcome {
	if err != nil {
		return Failed
	}
	return Succeeded
}

// Notifier is told the outcome of a request it was registered for with
// OnDone. It is an interface rather than a func so that a caller with
// nothing more than a pointer to pass (the C++ bridge: a thread's waiter
// word) registers without allocating a closure per request.
type Notifier interface {
	Notify(Outcome)
}

// OnDone arranges for notify to be called once, with the request's
// Outcome, on the goroutine that completes request ts, right after the
// request counts as done (a Wait then returns at once), or when the
// customer closes. It reports false, and never calls notify, if ts is not
// outstanding (completed, or never issued); Wait then tells which. notify
// runs under the customer's request lock: it must not block or call back
// into the customer. At most one notify per request; a second OnDone
// replaces the first.
//
// With alone set, OnDone registers nothing (and reports false) unless ts
// is the customer's only outstanding request.
//
// OnDone is for callers that wait outside Go (the C++ bridge's Wait spins
// in C); Go code calls Wait.
func (c *Customer) OnDone(ts int32, notify Notifier, alone bool) bool {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	r, ok := c.pending[ts]
	if !ok || (alone && len(c.pending) > 1) {
		return false
	}
	select {
	case <-c.quit: // closing: notifyAll may have run already
		return false
	default:
	}
	r.notify = notify
	return true
}

// CancelOnDone withdraws the notify registered for ts by OnDone. It
// reports false if there was none any more: the notify has been called
// (and has returned).
func (c *Customer) CancelOnDone(ts int32) bool {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	r, ok := c.pending[ts]
	if !ok || r.notify == nil {
		return false
	}
	r.notify = nil
	return true
}

// recordFailure keeps err for a later Wait(ts); c.tmu must be held.
func (c *Customer) recordFailure(ts int32, err error) {
	if len(c.order) >= maxFailed {
		delete(c.failed, c.order[0])
		c.order = c.order[1:]
	}
	c.failed[ts] = err
	c.order = append(c.order, ts)
}

// NumResponse returns how many responses request ts has received so far,
// or -1 once it has completed (completed requests are not kept).
func (c *Customer) NumResponse(ts int32) int {
	c.tmu.Lock()
	defer c.tmu.Unlock()
	if r, ok := c.pending[ts]; ok {
		return r.got
	}
	return -1
}

// Wait blocks until request ts has received all its responses and the
// handler has run for each of them. It returns the request's error, if any,
// postoffice.ErrStopped if the node stops first, or ErrClosed if the
// customer is closed. Waiting on a completed request returns at once.
func (c *Customer) Wait(ts int32) error {
	c.tmu.Lock()
	r, ok := c.pending[ts]
	if !ok {
		err, failed := c.failed[ts]
		never := ts < 0 || ts == message.Empty || (!c.wrapped && ts >= c.next)
		c.tmu.Unlock()
		if failed {
			return err
		}
		if never {
			return fmt.Errorf("kv: Wait(%d): no request with this timestamp was issued", ts)
		}
		return nil
	}
	if r.done == nil {
		r.done = make(chan struct{})
	}
	done := r.done
	c.tmu.Unlock()
	select {
	case <-done:
		// r.err was written before done was closed, under tmu.
		return r.err
	case <-c.po.Done():
		return postoffice.ErrStopped
	case <-c.quit:
		return ErrClosed
	}
}

// msgQueue is a binary heap of messages: higher Meta.Priority first, FIFO
// (by arrival sequence) among equal priorities.
type msgQueue struct {
	items []queued
	seq   uint64
}

type queued struct {
	m        *message.Message
	localErr error
	prio     int32
	seq      uint64
}

func (a *queued) before(b *queued) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	return a.seq < b.seq
}

func (q *msgQueue) push(m *message.Message, localErr error) {
	q.items = append(q.items, queued{m: m, localErr: localErr, prio: m.Meta.Priority, seq: q.seq})
	q.seq++
	// sift up
	i := len(q.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.items[i].before(&q.items[p]) {
			break
		}
		q.items[i], q.items[p] = q.items[p], q.items[i]
		i = p
	}
}

func (q *msgQueue) pop() (queued, bool) {
	n := len(q.items)
	if n == 0 {
		return queued{}, false
	}
	top := q.items[0]
	n--
	q.items[0] = q.items[n]
	q.items[n] = queued{} // drop the reference for the GC
	q.items = q.items[:n]
	// sift down
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && q.items[r].before(&q.items[l]) {
			c = r
		}
		if !q.items[c].before(&q.items[i]) {
			break
		}
		q.items[i], q.items[c] = q.items[c], q.items[i]
		i = c
	}
	return top, true
}

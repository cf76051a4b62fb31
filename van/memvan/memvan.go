// Package memvan is an in-memory van.Transport for fast, deterministic
// tests: the transports of one Network deliver to each other through
// queues, with no socket, no goroutine and no timer.
//
//	net := memvan.NewNetwork()
//	tr, err := net.NewTransport(van.Options{})
//
// It keeps the whole contract of van.Transport, as the shared conformance
// suite (van/vantest) checks: FIFO per pair, anonymous connections, Bind's
// port picking, Send queueing up to the water mark for a peer nobody listens
// for yet, Close unblocking Recv and Send with van.ErrClosed, Limits and
// *van.FrameError. Meta travels encoded (message.EncodeMeta), so a test on
// memvan also exercises the codec, and frames are copied once, by Send,
// into one buffer the receiver owns.
//
// A Network is one host: Bind and Connect use only the node's port (the
// hostname and van.Options.Local, BindAll and Host are ignored).
package memvan

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

const (
	// defaultWaterMark is van.Options.WaterMark's default (libzmq's).
	defaultWaterMark = 1000

	// firstPort is where Bind starts looking for a free port when asked
	// for port 0 (the start of Linux's ephemeral range).
	firstPort = 32768

	// retryPortMin and retryPortMax bound the random ports Bind falls back
	// to when the requested one is taken, as in the socket vans.
	retryPortMin, retryPortMax = 10000, 50000
)

var errNotBound = errors.New("van/memvan: Recv before Bind")

// Network connects the Transports created from it. Its zero value is not
// usable; create it with NewNetwork. It is safe for concurrent use.
type Network struct {
	// mu guards everything below and every Transport's state: one lock
	// keeps delivery order trivially FIFO and the van easy to check.
	mu        sync.Mutex
	sendCond  *sync.Cond // Broadcast whenever a blocked Send may proceed
	listeners map[int32]*Transport
	members   map[*Transport]struct{}
	nextPort  int32
	rng       *rand.Rand // retry ports; seeded, so runs repeat
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	n := &Network{
		listeners: map[int32]*Transport{},
		members:   map[*Transport]struct{}{},
		nextPort:  firstPort,
		rng:       rand.New(rand.NewPCG(1, 2)),
	}
	n.sendCond = sync.NewCond(&n.mu)
	return n
}

// envelope is one message in flight: the sender's identity and its frames,
// frame 0 the encoded meta.
type envelope struct {
	sender int32
	frames [][]byte
}

// link is the sending path Connect opened to one peer id.
type link struct {
	port    int32
	ident   int32      // announced identity; message.Empty: anonymous
	pending []envelope // sent while nobody listened at port
}

// Transport is a van.Transport on a Network.
type Transport struct {
	net  *Network
	opts van.Options

	// Guarded by net.mu.
	recvCond *sync.Cond // signalled when inbox grows or the transport closes
	inbox    []envelope
	port     int32
	bound    bool
	closed   bool
	myID     int32
	links    map[int32]*link
}

var _ van.Transport = (*Transport)(nil)

// NewTransport returns an unbound transport on n. Of opts it reads
// WaterMark (default 1000), Limits and Logger.
func (n *Network) NewTransport(opts van.Options) (*Transport, error) {
	opts, err := opts.WithDefaults("van/memvan")
	if err != nil {
		return nil, err
	}
	if opts.WaterMark == 0 {
		opts.WaterMark = defaultWaterMark
	}
	t := &Transport{net: n, opts: opts, myID: message.Empty, links: map[int32]*link{}}
	t.recvCond = sync.NewCond(&n.mu)
	n.mu.Lock()
	n.members[t] = struct{}{}
	n.mu.Unlock()
	return t, nil
}

// Bind implements van.Transport. Port 0 or message.Empty takes the lowest
// free port from 32768 up; a taken port is retried on up to maxRetry
// random ports in [10000, 50000). Bind may be called once. Messages that
// links of this network had queued for the port are delivered now.
func (t *Transport) Bind(node message.Node, maxRetry int) (int, error) {
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if t.closed {
		return 0, van.ErrClosed
	}
	if t.bound {
		return 0, errors.New("van/memvan: Bind called twice")
	}
	port := node.Port
	if port == message.Empty || port <= 0 {
		for n.listeners[n.nextPort] != nil {
			n.nextPort++
		}
		port = n.nextPort
		n.nextPort++
	}
	for attempt := 0; n.listeners[port] != nil; attempt++ {
		if attempt >= maxRetry {
			return 0, fmt.Errorf("van/memvan: bind port %d: address in use (gave up after %d random retries)", node.Port, maxRetry)
		}
		port = retryPortMin + n.rng.Int32N(retryPortMax-retryPortMin)
	}
	t.port, t.bound = port, true
	n.listeners[port] = t
	for m := range n.members {
		for _, l := range m.links {
			if l.port == port {
				t.inbox = append(t.inbox, l.pending...)
				l.pending = nil
			}
		}
	}
	t.recvCond.Signal()
	n.sendCond.Broadcast()
	t.opts.Logger.Debug("van/memvan: bound", "port", port)
	return int(port), nil
}

// Connect implements van.Transport. Nobody needs to listen at node's port
// yet: Send queues until someone binds it. A previous link to node.ID with
// the same port and identity is kept; one with another identity is
// replaced and its queued messages go out first, under the identity they
// were sent with; one with another port is replaced and its queue dropped
// (the peer moved, as a closed socket would lose them).
func (t *Transport) Connect(node message.Node, myID int32) error {
	if node.ID == message.Empty {
		return fmt.Errorf("van/memvan: connect to %s: node has no id", node)
	}
	if node.Port <= 0 || node.Port == message.Empty || node.Port > math.MaxUint16 {
		return fmt.Errorf("van/memvan: connect to %s: invalid port", node)
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if t.closed {
		return van.ErrClosed
	}
	if myID != message.Empty {
		t.myID = myID
	}
	old := t.links[node.ID]
	if old != nil && old.port == node.Port && old.ident == myID {
		return nil
	}
	l := &link{port: node.Port, ident: myID}
	if old != nil && old.port == l.port {
		l.pending = old.pending
	}
	t.links[node.ID] = l
	n.sendCond.Broadcast() // a Send blocked on the old link looks again
	t.opts.Logger.Debug("van/memvan: connecting", "node", node.ID, "port", node.Port, "identity", myID)
	return nil
}

// Send implements van.Transport. It copies msg (meta encoded) before it
// returns, so the caller may reuse the frames at once. It delivers to the
// transport bound at the peer's port, or queues while there is none and
// blocks once WaterMark messages are queued, until the port is bound, the
// link replaced or the transport closed.
func (t *Transport) Send(msg *message.Message) (int, error) {
	n := t.net
	n.mu.Lock()
	closed := t.closed
	n.mu.Unlock()
	if closed {
		return 0, van.ErrClosed
	}
	if err := message.CheckFrames(&msg.Meta, len(msg.Data)); err != nil {
		return 0, fmt.Errorf("van/memvan: %w", err)
	}
	frames := make([][]byte, 0, 1+len(msg.Data))
	frames = append(frames, message.EncodeMeta(&msg.Meta))
	frames = appendCopies(frames, msg.Data)
	size := 0
	for _, f := range frames {
		size += len(f)
	}

	to := msg.Meta.Recver
	n.mu.Lock()
	defer n.mu.Unlock()
	for {
		if t.closed {
			return 0, van.ErrClosed
		}
		l := t.links[to]
		if l == nil {
			return 0, fmt.Errorf("van/memvan: no connection to node %d", to)
		}
		env := envelope{sender: l.ident, frames: frames}
		if dst := n.listeners[l.port]; dst != nil {
			dst.inbox = append(dst.inbox, env)
			dst.recvCond.Signal()
			return size, nil
		}
		if len(l.pending) < t.opts.WaterMark {
			l.pending = append(l.pending, env)
			return size, nil
		}
		n.sendCond.Wait()
	}
}

// emptyFrame is what an empty frame is delivered as: non-nil, so that "an
// empty vals frame" and "no frame" stay distinguishable.
var emptyFrame = make([]byte, 0)

// appendCopies appends copies of data to out, all in one allocation, each
// frame starting 8-byte aligned (Go aligns an allocation whose size is a
// multiple of 8 to 8).
func appendCopies(out, data [][]byte) [][]byte {
	total := 0
	for _, d := range data {
		total += (len(d) + 7) &^ 7
	}
	buf := make([]byte, total)
	off := 0
	for _, d := range data {
		if len(d) == 0 {
			out = append(out, emptyFrame)
			continue
		}
		f := buf[off : off+len(d) : off+len(d)]
		copy(f, d)
		out = append(out, f)
		off += (len(f) + 7) &^ 7
	}
	return out
}

// Recv implements van.Transport. Meta.Sender is the identity of the link
// the message came on (message.Empty: anonymous) and Meta.Recver this
// node's id as last given to Connect. The frames are Go memory the caller
// owns, each non-empty one 8-byte aligned.
func (t *Transport) Recv() (*message.Message, error) {
	n := t.net
	n.mu.Lock()
	for !t.closed && t.bound && len(t.inbox) == 0 {
		t.recvCond.Wait()
	}
	switch {
	case t.closed:
		n.mu.Unlock()
		return nil, van.ErrClosed
	case !t.bound:
		n.mu.Unlock()
		return nil, errNotBound
	}
	env := t.inbox[0]
	t.inbox[0] = envelope{}
	if len(t.inbox) == 1 {
		t.inbox = t.inbox[:0] // keep the array: no allocation per message
	} else {
		t.inbox = t.inbox[1:]
	}
	myID := t.myID
	n.mu.Unlock()

	msg, err := decode(env, t.opts.Limits)
	if err != nil {
		return nil, &van.FrameError{Peer: identity(env.sender), Err: err}
	}
	msg.Meta.Sender, msg.Meta.Recver = env.sender, myID
	return msg, nil
}

// decode checks env against lim, in the order the socket vans do.
func decode(env envelope, lim van.Limits) (*message.Message, error) {
	if len(env.frames) == 0 || len(env.frames)-1 > lim.MaxFrames {
		return nil, fmt.Errorf("%d frames; the limit is a meta frame and %d data frames", len(env.frames), lim.MaxFrames)
	}
	var total int64
	for _, f := range env.frames {
		total += int64(len(f))
	}
	if total > lim.MaxMessageBytes {
		return nil, fmt.Errorf("message of %d bytes exceeds the %d-byte limit", total, lim.MaxMessageBytes)
	}
	meta := env.frames[0]
	msg := &message.Message{}
	if err := message.DecodeMeta(meta, &msg.Meta); err != nil {
		return nil, fmt.Errorf("bad meta frame (%d bytes): %w", len(meta), err)
	}
	if k := len(msg.Meta.DataType); k > lim.MaxFrames {
		return nil, fmt.Errorf("meta announces %d data frames, limit is %d", k, lim.MaxFrames)
	}
	if err := message.CheckFrames(&msg.Meta, len(env.frames)-1); err != nil {
		return nil, err
	}
	msg.Data = env.frames[1:]
	msg.Meta.DataSize = int32(min(total-int64(len(meta)), math.MaxInt32))
	return msg, nil
}

// Release implements van.Transport. The frames are Go memory, so there is
// nothing to give back; Release clears the message instead, so that a
// consumer reading it afterwards sees nothing rather than stale data that
// a pooling transport would meanwhile have reused.
func (t *Transport) Release(msg *message.Message) { *msg = message.Message{} }

// Detach implements van.Transport: it does nothing, since no frame is a
// view of transport memory.
func (t *Transport) Detach(*message.Message) {}

// Close implements van.Transport: it frees the port, drops what is queued
// to and from this transport, and makes a blocked Recv or Send return
// van.ErrClosed.
func (t *Transport) Close() error {
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	if t.bound && n.listeners[t.port] == t {
		delete(n.listeners, t.port)
	}
	delete(n.members, t)
	t.inbox, t.links = nil, nil
	t.recvCond.Broadcast()
	n.sendCond.Broadcast()
	return nil
}

// inject delivers frames as one message from identity sender to the
// transport bound at port, bypassing every check of Send (for the
// conformance suite's malformed messages).
func (n *Network) inject(port, sender int32, frames [][]byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	dst := n.listeners[port]
	if dst == nil {
		return fmt.Errorf("van/memvan: nobody listens at port %d", port)
	}
	dst.inbox = append(dst.inbox, envelope{sender: sender, frames: frames})
	dst.recvCond.Signal()
	return nil
}

// identity renders a node id the way FrameError.Peer reports it.
func identity(id int32) string {
	if id == message.Empty {
		return "anonymous"
	}
	return "ps" + strconv.Itoa(int(id))
}

// Package tcp implements van.Transport in pure Go over TCP (or Unix
// sockets), for jobs whose nodes are all elasticps (DMLC_PS_VAN_TYPE=tcp).
// It is not wire-compatible with ZeroMQ; use van/zmq to mix with C++
// ps-lite nodes.
//
// # Topology
//
// As in ps-lite's ZMQ van, connections are one-way: Connect dials the peer
// (one outgoing connection per peer id) and only ever writes to it; Bind
// accepts connections and only ever reads from them. A request and its
// response therefore travel on two connections, each written by exactly one
// goroutine at a time, so FIFO per (sender, receiver) pair follows from TCP
// and no connection needs a duplicate-resolution rule for simultaneous
// dials. The cost is two sockets per communicating pair, which ps-lite
// jobs already pay.
//
// # Wire format
//
// A connection starts with a 12-byte hello from the dialer:
//
//	"EPSV" | version u8 (1) | tagged u8 | 2 reserved bytes (0) | node id i32 LE
//
// then, if tagged is 1 (a job with a token), the 16-byte tag of the id
// (identity.go).
// The id is the dialer's own node id (message.Empty, 2147483647, before it
// has one): the listener reports it as Meta.Sender of every message on the
// connection, as the ZMQ van does with the "ps<id>" identity. Then come
// messages, each
//
//	count u32 LE | count × length u32 LE | frame 0 (meta) | frames 1..count-1
//
// where frame 0 is the meta in the same protobuf encoding as the ZMQ van
// (message.Meta.MarshalTo) and frames 1.. are the data frames. Empty frames
// are legal and preserved.
//
// # Data path
//
// Send encodes header and meta into a per-peer buffer and writes them with
// the data frames in one writev (net.Buffers), straight from the caller's
// slices: nothing is copied in user space and a steady-state Send does not
// allocate. While a peer is not connected yet, messages wait in a bounded
// queue (Config.WaterMark) and are written once the dial succeeds.
//
// Each accepted connection has a read goroutine with a buffer that grows
// when reads fill it and shrinks after a run of short reads, as in
// nats-server's client read loop. Frames below directReadMin are copied out
// of that buffer (one allocation per message holds them all); larger frames
// are read from the socket directly into a buffer from a pool, so their
// bytes are copied only once, by the kernel. Transport.Release returns those
// pooled buffers; a message that is never released is simply collected by
// the GC.
package tcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// Config configures a Transport. The zero value is usable.
//
// Of the shared van.Options: Local listens and dials on Unix sockets
// /tmp/elasticps-tcp-<port> instead of TCP. WaterMark bounds, in messages,
// the queue of a peer that is not connected (yet, or again after a drop);
// Send blocks when it is full. A connected peer has no queue: Send writes
// to the socket and blocks while the kernel's buffer is full. A message
// above Limits is rejected (a *van.FrameError) and its connection closed,
// since the sender is broken. Host and KeepMalloc are unused.
type Config struct {
	van.Options

	// HandshakeTimeout bounds how long an accepted connection may take to
	// send its hello. Default 10 s.
	HandshakeTimeout time.Duration
}

const (
	defaultWaterMark        = 1000
	defaultHandshakeTimeout = 10 * time.Second

	// retryPortMin and retryPortMax bound the random ports Bind falls back
	// to when the requested one is taken, as in the ZMQ van.
	retryPortMin, retryPortMax = 10000, 50000

	// redialMin and redialMax bound the back-off between dial attempts.
	redialMin, redialMax = 10 * time.Millisecond, time.Second

	// shortLived: a connection the peer drops sooner than this makes the
	// next redial back off (peer.watch).
	shortLived = time.Second

	// replacedLinger is how long a peer replaced by Connect may keep trying
	// to deliver the messages it had queued (the ZMQ van's linger).
	replacedLinger = time.Second

	// inboxSize is the capacity of the channel between the read loops and
	// Recv. Beyond it, read loops stop reading and TCP pushes back.
	inboxSize = 256
)

func (cfg Config) withDefaults() (Config, error) {
	var err error
	if cfg.Options, err = cfg.Options.WithDefaults("van/tcp"); err != nil {
		return cfg, err
	}
	if cfg.Limits.MaxFrames > maxFramesLimit {
		return cfg, fmt.Errorf("van/tcp: Config.Limits.MaxFrames above %d", maxFramesLimit)
	}
	if cfg.WaterMark == 0 {
		cfg.WaterMark = defaultWaterMark
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = defaultHandshakeTimeout
	}
	return cfg, nil
}

// Transport is a van.Transport over TCP. Create it with New and release it
// with Close.
//
// Send and Connect may be called concurrently. Recv must be called from one
// goroutine at a time and only after Bind.
type Transport struct {
	cfg Config
	log *slog.Logger

	myID   atomic.Int32 // latest own id given to Connect; Meta.Recver
	closed atomic.Bool
	bound  atomic.Bool
	done   chan struct{}   // closed by Close
	ctx    context.Context // cancelled by Close; aborts dials
	cancel context.CancelFunc
	inbox  chan inItem // read loops -> Recv
	wg     sync.WaitGroup

	// mu guards peers, conns, ln and ipcPath. A peer is removed from peers
	// before it is retired. Lock order: a peer's mu before t.mu is never
	// needed; t.mu is held only briefly and never while doing IO.
	mu      sync.RWMutex
	peers   map[int32]*peer
	conns   map[net.Conn]struct{} // every open connection, closed by Close
	ln      net.Listener
	ipcPath string // socket file Bind created in Local mode

	zmtpPeers sync.Map // address -> true: peers reported as speaking ZeroMQ

	tls *jobTLS // nil without encryption (tls.go)

	closeOnce sync.Once
}

var _ van.Transport = (*Transport)(nil)

// inItem is what a read loop hands to Recv: a message or an error.
type inItem struct {
	msg *message.Message
	err error
	// pending is the counter of msg's connection, which Recv lowers by
	// size: the bytes Limits.MaxPendingBytes bounds.
	pending *atomic.Int64
	size    int64
}

// New creates a Transport. It opens no socket until Bind or Connect.
func New(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:   cfg,
		log:   cfg.Logger,
		done:  make(chan struct{}),
		inbox: make(chan inItem, inboxSize),
		peers: map[int32]*peer{},
		conns: map[net.Conn]struct{}{},
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.myID.Store(message.Empty)
	if cfg.Encryption != nil {
		if t.tls, err = newJobTLS(cfg.Encryption, cfg.Logger); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// track registers c so that Close closes it; it reports false (and closes
// c) if the transport is already closed.
func (t *Transport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		_ = c.Close()
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *Transport) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	_ = c.Close()
}

// Bind implements van.Transport. It listens on host:port, where host is
// node.Hostname, 0.0.0.0 with Config.BindAll, or every interface when the
// hostname is empty; port 0 or message.Empty lets the kernel pick. Only an
// address already in use is retried, on up to maxRetry random ports. Bind
// may be called once.
func (t *Transport) Bind(node message.Node, maxRetry int) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return 0, van.ErrClosed
	}
	if t.ln != nil {
		return 0, errors.New("van/tcp: Bind called twice")
	}
	host := node.Hostname
	if t.cfg.BindAll {
		host = "0.0.0.0"
	}
	port := int(node.Port)
	if node.Port == message.Empty || port < 0 {
		port = 0
	}
	for attempt := 0; ; attempt++ {
		ln, bound, addr, err := t.listen(host, port)
		if err == nil {
			t.ln = ln
			t.bound.Store(true)
			t.log.Debug("van/tcp: bound", "addr", addr)
			t.wg.Add(1)
			go t.acceptLoop(ln)
			return bound, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return 0, fmt.Errorf("van/tcp: bind %s: %w", addr, err)
		}
		if attempt >= maxRetry {
			return 0, fmt.Errorf("van/tcp: bind %s: %w (gave up after %d random retries)", addr, err, maxRetry)
		}
		t.log.Debug("van/tcp: address in use, retrying on a random port", "addr", addr)
		port = retryPortMin + rand.IntN(retryPortMax-retryPortMin)
	}
}

// listen opens the listener; caller holds t.mu.
func (t *Transport) listen(host string, port int) (net.Listener, int, string, error) {
	if t.cfg.Local {
		pick := port == 0
		for range 100 {
			if pick {
				port = retryPortMin + rand.IntN(retryPortMax-retryPortMin)
			}
			path := unixPath(port)
			if unixInUse(path) {
				if pick {
					continue
				}
				return nil, 0, path, syscall.EADDRINUSE
			}
			_ = os.Remove(path) // a stale file of a dead process
			ln, err := net.Listen("unix", path)
			if err != nil {
				return nil, 0, path, err
			}
			t.ipcPath = path
			return ln, port, path, nil
		}
		return nil, 0, unixPath(0), syscall.EADDRINUSE
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, 0, addr, err
	}
	bound := ln.Addr().(*net.TCPAddr).Port
	return ln, bound, net.JoinHostPort(host, strconv.Itoa(bound)), nil
}

func unixPath(port int) string { return "/tmp/elasticps-tcp-" + strconv.Itoa(port) }

// unixInUse reports whether a process accepts connections at path.
func unixInUse(path string) bool {
	c, err := net.DialTimeout("unix", path, 100*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// acceptLoop accepts connections until the listener is closed, backing
// off on errors such as running out of file descriptors.
func (t *Transport) acceptLoop(ln net.Listener) {
	defer t.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if t.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn("van/tcp: accept failed; retrying", "err", err, "in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-t.done:
				return
			}
		}
		delay = 0
		if !t.track(c) {
			return
		}
		t.wg.Add(1)
		go t.readLoop(c)
	}
}

// endpoint is the network and address Connect dials for a peer.
func (t *Transport) endpoint(node message.Node) (string, string, error) {
	if node.Port <= 0 || node.Port == message.Empty || node.Port > 65535 {
		return "", "", fmt.Errorf("van/tcp: connect to %s: invalid port", node)
	}
	if t.cfg.Local {
		return "unix", unixPath(int(node.Port)), nil
	}
	if node.Hostname == "" {
		return "", "", fmt.Errorf("van/tcp: connect to %s: empty hostname", node)
	}
	return "tcp", net.JoinHostPort(node.Hostname, strconv.Itoa(int(node.Port))), nil
}

// Connect implements van.Transport. The connection announces myID (or
// message.Empty: anonymous) and is dialled in the background, retried with
// back-off until it succeeds; Send queues messages meanwhile. Connecting to
// the node's own address is allowed.
//
// A previous connection to node.ID with another address or identity is
// replaced: messages already written on it are delivered, messages still
// queued on it get up to one second to be, and neither are ordered with
// respect to messages sent on the new one. A previous connection with the
// same address and identity is kept.
func (t *Transport) Connect(node message.Node, myID int32) error {
	if node.ID == message.Empty {
		return fmt.Errorf("van/tcp: connect to %s: node has no id", node)
	}
	network, addr, err := t.endpoint(node)
	if err != nil {
		return err
	}
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return van.ErrClosed
	}
	if myID != message.Empty {
		t.myID.Store(myID)
	}
	old := t.peers[node.ID]
	if old != nil && old.network == network && old.addr == addr && old.ident == myID {
		t.mu.Unlock()
		return nil
	}
	p := newPeer(t, node.ID, network, addr, myID)
	t.peers[node.ID] = p
	t.mu.Unlock()
	p.startDial()
	if old != nil {
		old.retire(time.Now().Add(replacedLinger))
	}
	t.log.Debug("van/tcp: connecting", "node", node.ID, "addr", addr, "identity", myID)
	return nil
}

// Close implements van.Transport: it closes the listener and every
// connection (messages not yet written are dropped), makes a blocked Recv or
// Send return van.ErrClosed, and waits for the transport's goroutines.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed.Store(true)
		close(t.done)
		t.cancel()
		if t.ln != nil {
			_ = t.ln.Close()
		}
		for c := range t.conns {
			_ = c.Close()
		}
		peers := t.peers
		t.peers = map[int32]*peer{}
		path := t.ipcPath
		t.mu.Unlock()
		for _, p := range peers {
			p.retire(time.Time{})
		}
		t.wg.Wait()
		if path != "" {
			_ = os.Remove(path)
		}
	})
	return nil
}

// identity renders a node id the way FrameError.Peer reports it.
func identity(id int32) string {
	if id == message.Empty {
		return "anonymous"
	}
	return "ps" + strconv.Itoa(int(id))
}

func isClosedErr(err error) bool {
	return errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "use of closed")
}

//go:build linux

// Package shm implements van.Transport for nodes on one host
// (DMLC_PS_VAN_TYPE=shm): messages go through shared memory; the Unix
// socket carries the hello, wake-ups and the end of a connection. Like
// van/tcp it speaks only to elasticps nodes, and only to those on the same
// host.
//
// # Topology
//
// As in van/tcp, connections are one-way: Connect dials the peer and writes
// messages; Bind accepts and reads. Bind listens on the abstract Unix socket
// "@elasticps-shm-<port>" (the hostname is not used: every peer is on this
// host), so a node that dies leaves no socket file behind.
//
// # Shared memory
//
// The dialer of a connection creates its segment: an anonymous memfd,
// sealed against resizing, whose descriptor travels with the hello
// (SCM_RIGHTS). Both sides map it and the descriptor is closed, so the
// segment has no name and vanishes with the last mapping: a node that dies
// mid-message leaves nothing behind. Each connection has its own segment,
// shared by exactly two processes, so a node can only ever scribble on
// memory of its own connections. The receiver checks every offset and
// counter the sender wrote against the segment's geometry, and the sender
// those the receiver wrote.
//
// A segment holds a page of control words, the message stream
// (Config.StreamBytes, a byte ring from dialer to listener), a ring of
// 4096 release notes (listener to dialer), and the data area
// (Config.RingBytes) for large frames.
//
// # Wire format
//
// The dialer's hello: "EPSM" | version u8 (2) | 3 zero bytes | node id i32
// LE | segment size u64 LE | stream bytes u32 LE | note slots u32 LE, with
// the memfd as ancillary data. The listener answers "EPSM" | its version
// u8 | 3 zero bytes, also when it refuses a hello of another version, and
// then sends nothing more. Messages follow on the stream:
//
//	count u32 | flags u32 | offset u64 | count × length u32 | meta | inline frames
//
// all little endian; frame 0 is the meta (message.Meta.MarshalTo). With
// flags bit 0 set, data frames 1.. are not on the stream but in the data
// area, from offset on, each starting 8-byte aligned; otherwise they
// follow the meta. A release note is a u64 offset in the data area: the
// region there may be reused.
//
// # Data path
//
// A message whose data frames total at least Config.InlineMax bytes is
// copied once, by Send, into the data area, at the lowest offset where it
// fits (so that the pages in use stay few: each costs a fault when first
// written). Recv returns views of it, and Release (or Detach, which copies
// them out) writes its release note, which the sender reads at its next
// large Send. Smaller messages, and messages
// that find the data area full (a receiver holding on to many), are copied
// into the stream with their header, so a slow consumer never blocks a
// sender on the data area.
//
// The receiver copies messages out of the stream as they come. Having
// emptied it, it polls for Config.Spin (PS_SHM_SPIN_US), then sets the
// "asleep" flag and blocks reading the socket; a sender that finds the
// flag set after publishing takes it back and writes one byte. A reply
// within the spin costs no system call on either side. A sender that finds
// the stream full (the receiver is not taking messages) waits, yielding,
// then sleeping up to a millisecond at a time, until the receiver takes
// bytes or the socket ends.
package shm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

const (
	defaultWaterMark        = 1000
	defaultRingBytes        = 64 << 20
	defaultInlineMax        = 32 << 10
	defaultStreamBytes      = 1 << 20
	defaultSpin             = 100 * time.Microsecond
	defaultHandshakeTimeout = 10 * time.Second
	maxFramesLimit          = 1 << 16

	retryPortMin, retryPortMax = 10000, 50000
	redialMin, redialMax       = 10 * time.Millisecond, time.Second
	replacedLinger             = time.Second
	inboxSize                  = 256
)

func (cfg Config) withDefaults() (Config, error) {
	var err error
	if cfg.Options, err = cfg.Options.WithDefaults("van/shm"); err != nil {
		return cfg, err
	}
	if cfg.Limits.MaxFrames > maxFramesLimit {
		return cfg, fmt.Errorf("van/shm: Config.Limits.MaxFrames above %d", maxFramesLimit)
	}
	if cfg.RingBytes < 0 || cfg.InlineMax < 0 || cfg.StreamBytes < 0 {
		return cfg, errors.New("van/shm: Config.RingBytes, InlineMax and StreamBytes must not be negative")
	}
	if cfg.StreamBytes > maxStreamBytes {
		return cfg, fmt.Errorf("van/shm: Config.StreamBytes above %d", maxStreamBytes)
	}
	if cfg.StreamBytes == 0 {
		cfg.StreamBytes = defaultStreamBytes
	}
	cfg.StreamBytes = max(minStreamBytes, 1<<bits.Len(uint(cfg.StreamBytes-1)))
	if cfg.Spin == 0 {
		cfg.Spin = defaultSpin
	}
	if cfg.WaterMark == 0 {
		cfg.WaterMark = defaultWaterMark
	}
	if cfg.RingBytes == 0 {
		cfg.RingBytes = defaultRingBytes
	}
	cfg.RingBytes = (cfg.RingBytes + 4095) &^ 4095
	if cfg.InlineMax == 0 {
		cfg.InlineMax = defaultInlineMax
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = defaultHandshakeTimeout
	}
	return cfg, nil
}

// layout is the geometry of the segments this transport creates.
func (cfg Config) layout() layout {
	l := layout{stream: uint64(cfg.StreamBytes), notes: noteSlots}
	l.size = l.dataOff() + uint64(cfg.RingBytes)
	return l
}

// Transport is a van.Transport over shared memory. Create it with New and
// release it with Close.
type Transport struct {
	cfg Config
	log *slog.Logger

	myID   atomic.Int32
	closed atomic.Bool
	bound  atomic.Bool
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	inbox  chan inItem
	wg     sync.WaitGroup

	// mu guards peers, conns and ln; held briefly, never during IO.
	mu    sync.RWMutex
	peers map[int32]*peer
	conns map[*net.UnixConn]struct{}
	ln    *net.UnixListener

	// views maps each received message whose frames are views of a
	// segment to that region, until Release or Detach.
	viewsMu sync.Mutex
	views   map[*message.Message]view

	closeOnce sync.Once
}

var _ van.Transport = (*Transport)(nil)

type inItem struct {
	msg *message.Message
	err error
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
		conns: map[*net.UnixConn]struct{}{},
		views: map[*message.Message]view{},
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.myID.Store(message.Empty)
	return t, nil
}

// Addr is the abstract Unix socket a transport bound to port listens on.
func Addr(port int) string { return "@elasticps-shm-" + strconv.Itoa(port) }

func (t *Transport) track(c *net.UnixConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		_ = c.Close()
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *Transport) untrack(c *net.UnixConn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	_ = c.Close()
}

// Bind implements van.Transport. It listens on Addr(port); port 0 or
// message.Empty picks a random free one in [10000, 50000), a taken port is
// retried on up to maxRetry random ones. node.Hostname is not used. Bind
// may be called once.
func (t *Transport) Bind(node message.Node, maxRetry int) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return 0, van.ErrClosed
	}
	if t.ln != nil {
		return 0, errors.New("van/shm: Bind called twice")
	}
	port := int(node.Port)
	if node.Port == message.Empty || port <= 0 {
		port, maxRetry = 0, max(maxRetry, 100)
	}
	for attempt := 0; ; attempt++ {
		p := port
		if p == 0 || attempt > 0 {
			p = retryPortMin + rand.IntN(retryPortMax-retryPortMin)
		}
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: Addr(p), Net: "unix"})
		if err == nil {
			t.ln = ln
			t.bound.Store(true)
			t.log.Debug("van/shm: bound", "addr", Addr(p))
			t.wg.Add(1)
			go t.acceptLoop(ln)
			return p, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return 0, fmt.Errorf("van/shm: bind %s: %w", Addr(p), err)
		}
		if attempt >= maxRetry {
			return 0, fmt.Errorf("van/shm: bind port %d: %w (gave up after %d random retries)", port, err, maxRetry)
		}
	}
}

func (t *Transport) acceptLoop(ln *net.UnixListener) {
	defer t.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if t.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn("van/shm: accept failed; retrying", "err", err, "in", delay)
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

// Connect implements van.Transport, with van/tcp's semantics: the
// connection announces myID and is dialled in the background, retried with
// back-off; Send queues meanwhile. A previous connection to node.ID with
// another port or identity is replaced (its queued messages get a second to
// go out); one with the same port and identity is kept. node.Hostname must
// be this host (it is checked when it is an IP address).
func (t *Transport) Connect(node message.Node, myID int32) error {
	if node.ID == message.Empty {
		return fmt.Errorf("van/shm: connect to %s: node has no id", node)
	}
	if node.Port <= 0 || node.Port == message.Empty || node.Port > 65535 {
		return fmt.Errorf("van/shm: connect to %s: invalid port", node)
	}
	if !localHost(node.Hostname) {
		return fmt.Errorf("van/shm: connect to %s: %s is not an address of this host; the shm van connects only nodes on one host (use DMLC_PS_VAN_TYPE=tcp or zmq across hosts)", node, node.Hostname)
	}
	addr := Addr(int(node.Port))
	t.mu.Lock()
	if t.closed.Load() {
		t.mu.Unlock()
		return van.ErrClosed
	}
	if myID != message.Empty {
		t.myID.Store(myID)
	}
	old := t.peers[node.ID]
	if old != nil && old.addr == addr && old.ident == myID {
		t.mu.Unlock()
		return nil
	}
	p := newPeer(t, node.ID, addr, myID)
	t.peers[node.ID] = p
	t.mu.Unlock()
	p.startDial()
	if old != nil {
		old.retire(time.Now().Add(replacedLinger))
	}
	t.log.Debug("van/shm: connecting", "node", node.ID, "addr", addr, "identity", myID)
	return nil
}

// localHost reports whether host may be this host: an IP address must be
// this host's (van.LocalIP); names are trusted.
func localHost(host string) bool {
	ip := net.ParseIP(host)
	return ip == nil || van.LocalIP(ip)
}

// Close implements van.Transport: it closes the listener and every
// connection (messages not yet written are dropped), makes a blocked Recv or
// Send return van.ErrClosed and waits for the transport's goroutines.
// Messages Recv returned stay valid until released.
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
		t.mu.Unlock()
		for _, p := range peers {
			p.retire(time.Time{})
		}
		t.wg.Wait()
		for {
			select {
			case it := <-t.inbox:
				if it.msg != nil {
					t.Release(it.msg)
				}
				continue
			default:
			}
			break
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

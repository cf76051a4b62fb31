package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

const (
	// helloLen is the size of the hello a dialer sends first.
	helloLen = 12
	// protoVersion is the wire version in the hello.
	protoVersion = 1
	// coalesceMax: data frames shorter than this are copied into the
	// header buffer rather than given their own iovec, since the kernel's
	// per-iovec cost exceeds copying a few hundred bytes (keys and lens
	// frames of KV messages are 4 to 8 bytes per key).
	coalesceMax = 512
)

var helloMagic = [4]byte{'E', 'P', 'S', 'V'}

// peer is the sending side of one outgoing connection.
type peer struct {
	t       *Transport
	id      int32  // the peer's node id
	network string // "tcp" or "unix"; immutable
	addr    string // immutable
	ident   int32  // the id announced in the hello; immutable

	// mu serialises writers: the message stream of a connection must not
	// interleave. It is held during the write syscall(s); cond (on mu)
	// signals that conn, queue or retired changed.
	mu      sync.Mutex
	cond    sync.Cond
	conn    net.Conn // nil while not connected
	dialing bool     // a dialLoop runs
	retired bool     // replaced or closed: no new messages
	linger  time.Time
	queue   []queued      // messages accepted while not connected
	wait    time.Duration // delay before the next dial: the last connection was short-lived

	// Reused for every direct write; guarded by mu.
	scratch []byte      // header + meta + coalesced small frames
	iov     [][]byte    // backing array of bufs
	bufs    net.Buffers // the writev argument; WriteTo consumes it
}

// queued is a message waiting for its connection, encoded into one buffer
// of its own: Send never keeps references to the caller's memory once it
// has returned, queued or not. (Queueing happens only before a connection
// is up or after it dropped, so the copy is off the hot path.)
type queued struct {
	wire []byte
}

func newPeer(t *Transport, id int32, network, addr string, ident int32) *peer {
	p := &peer{t: t, id: id, network: network, addr: addr, ident: ident}
	p.cond.L = &p.mu
	return p
}

// Send implements van.Transport: it writes msg to the connection to
// msg.Meta.Recver in one writev, straight from msg.Data, and returns the
// number of meta and data bytes. Nothing of msg is referenced after Send
// returns, so the caller may reuse it at once: either the kernel has copied
// everything, or — while the peer is not connected — the message was copied
// into the peer's queue, to be written once the connection is up.
//
// A write error (the peer went away) drops the connection, which is
// redialled in the background, and returns the error; the message may or
// may not have arrived. Sends to one peer are serialised; sends to
// different peers run in parallel.
func (t *Transport) Send(msg *message.Message) (int, error) {
	id := msg.Meta.Recver
	if err := message.CheckFrames(&msg.Meta, len(msg.Data)); err != nil {
		return 0, fmt.Errorf("van/tcp: send to node %d: %w", id, err)
	}
	for {
		t.mu.RLock()
		p := t.peers[id]
		t.mu.RUnlock()
		if p == nil {
			if t.closed.Load() {
				return 0, van.ErrClosed
			}
			return 0, fmt.Errorf("van/tcp: no connection to node %d; was it connected?", id)
		}
		n, replaced, err := p.send(msg)
		if replaced {
			continue // Connect replaced p after the lookup: look again
		}
		return n, err
	}
}

func (p *peer) send(msg *message.Message) (n int, replaced bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.t.closed.Load() {
			return 0, false, van.ErrClosed
		}
		if p.retired {
			return 0, true, nil
		}
		if p.conn != nil {
			break
		}
		if len(p.queue) < p.t.cfg.WaterMark {
			_, iov, n, err := encode(nil, nil, msg)
			if err != nil {
				return 0, false, err
			}
			size := 0
			for _, b := range iov {
				size += len(b)
			}
			wire := make([]byte, 0, size)
			for _, b := range iov {
				wire = append(wire, b...)
			}
			p.queue = append(p.queue, queued{wire: wire})
			return n, false, nil
		}
		p.cond.Wait()
	}
	var size int
	p.scratch, p.iov, size, err = encode(p.scratch[:0], p.iov[:0], msg)
	if err != nil {
		return 0, false, err
	}
	p.bufs = p.iov
	_, err = p.bufs.WriteTo(p.conn)
	clear(p.iov) // drop references to the caller's frames
	if cap(p.scratch) > maxKeptScratch {
		p.scratch = nil
	}
	if err != nil {
		return 0, false, p.broken(err)
	}
	return size, false, nil
}

// maxKeptScratch caps the header buffer kept between sends, so that one
// message with a huge Body does not hold that much memory for the peer's
// lifetime.
const maxKeptScratch = 64 << 10

// encode lays msg out for writev: iov holds the header and meta (in
// scratch, which is grown as needed) interleaved with the data frames, small
// frames copied into scratch as well. It returns the meta + data byte count.
func encode(scratch []byte, iov [][]byte, msg *message.Message) ([]byte, [][]byte, int, error) {
	count := 1 + len(msg.Data)
	metaLen := msg.Meta.EncodedLen()
	need := 4 + 4*count + metaLen
	size := metaLen
	for _, d := range msg.Data {
		if uint64(len(d)) > math.MaxUint32 {
			return scratch, iov, 0, fmt.Errorf("van/tcp: a data frame of %d bytes exceeds the 4 GiB frame limit", len(d))
		}
		size += len(d)
		if len(d) < coalesceMax {
			need += len(d)
		}
	}
	if cap(scratch) < need {
		scratch = make([]byte, 0, need)
	}
	h := binary.LittleEndian.AppendUint32(scratch[:0], uint32(count))
	h = binary.LittleEndian.AppendUint32(h, uint32(metaLen))
	for _, d := range msg.Data {
		h = binary.LittleEndian.AppendUint32(h, uint32(len(d)))
	}
	lenAt := len(h) - 4*count
	h = msg.Meta.MarshalTo(h)
	if got := len(h) - lenAt - 4*count; got != metaLen {
		// EncodedLen and MarshalTo disagree (a codec bug): trust what was
		// written.
		binary.LittleEndian.PutUint32(h[lenAt:], uint32(got))
		size += got - metaLen
	}
	start := 0
	for _, d := range msg.Data {
		if len(d) < coalesceMax {
			h = append(h, d...)
			continue
		}
		if len(h) > start {
			iov = append(iov, h[start:len(h):len(h)])
			start = len(h)
		}
		iov = append(iov, d)
	}
	if len(h) > start {
		iov = append(iov, h[start:])
	}
	return h, iov, size, nil
}

// broken drops the connection after a write error and starts redialling.
// Caller holds p.mu.
func (p *peer) broken(err error) error {
	p.t.untrack(p.conn)
	p.conn = nil
	if p.t.closed.Load() {
		return van.ErrClosed
	}
	p.t.log.Debug("van/tcp: connection lost; redialling", "node", p.id, "addr", p.addr, "err", err)
	p.startDialLocked()
	return fmt.Errorf("van/tcp: send to node %d at %s: %w", p.id, p.addr, err)
}

func (p *peer) startDial() {
	p.mu.Lock()
	p.startDialLocked()
	p.mu.Unlock()
}

// startDialLocked starts a dialLoop unless one runs. Caller holds p.mu.
func (p *peer) startDialLocked() {
	if p.dialing || p.retired || p.t.closed.Load() {
		return
	}
	p.dialing = true
	p.t.wg.Add(1)
	go p.dialLoop()
}

// dialLoop dials until it gets a connection, writes the hello and the
// queued messages, and installs the connection. A retired peer dials only
// to deliver its queue, until its linger deadline.
func (p *peer) dialLoop() {
	defer p.t.wg.Done()
	t := p.t
	backoff := redialMin
	d := net.Dialer{Timeout: 2 * time.Second}
	p.mu.Lock()
	wait := p.wait
	p.mu.Unlock()
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-t.done:
		}
	}
	for {
		p.mu.Lock()
		if t.closed.Load() || p.retired && (len(p.queue) == 0 || time.Now().After(p.linger)) {
			p.dialing = false
			p.queue = nil
			p.cond.Broadcast()
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()

		c, err := d.DialContext(t.ctx, p.network, p.addr)
		if err == nil && t.tls != nil {
			c, err = t.dialTLS(c, p.addr)
		}
		if err == nil {
			err = writeHello(c, p.ident, t.helloTag(p.ident))
			if err != nil {
				_ = c.Close()
			}
		}
		if err == nil && t.track(c) {
			if p.install(c) {
				return
			}
		} else if err != nil {
			t.log.Debug("van/tcp: dial failed; retrying", "node", p.id, "addr", p.addr, "err", err, "in", backoff)
		}
		select {
		case <-time.After(backoff):
		case <-t.done:
		}
		backoff = min(2*backoff, redialMax)
	}
}

// install writes the queued messages to the new connection c and makes it
// the peer's connection. It reports false if c failed, so that the caller
// dials again.
func (p *peer) install(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) > 0 {
		if _, err := c.Write(p.queue[0].wire); err != nil {
			p.t.untrack(c)
			return false
		}
		p.queue[0] = queued{}
		p.queue = p.queue[1:]
	}
	p.queue = nil
	p.dialing = false
	p.cond.Broadcast()
	if p.retired || p.t.closed.Load() {
		// Everything queued is written; closing gracefully delivers it.
		p.t.untrack(c)
		return true
	}
	p.conn = c
	p.t.wg.Add(1)
	go p.watch(c)
	return true
}

// watch notices that the peer closed an otherwise idle connection (the
// peer never writes on it, so any read return means it is gone) and
// redials. Bytes arriving mean the listener is not an elasticps tcp van: a
// ZeroMQ greeting is reported (Transport.mismatch). A connection that the
// peer drops soon after it was made makes the next redial wait, doubling
// up to redialMax, so that a peer that accepts and drops (or greets in
// another protocol) is not redialled in a busy loop.
func (p *peer) watch(c net.Conn) {
	defer p.t.wg.Done()
	since := time.Now()
	var b [zmtpSignatureLen]byte
	n, _ := io.ReadFull(c, b[:])
	if isZMTPSignature(b[:n]) {
		p.t.mismatch(p.addr)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != c {
		return
	}
	p.t.untrack(c)
	p.conn = nil
	if time.Since(since) < shortLived {
		p.wait = min(max(2*p.wait, redialMin), redialMax)
	} else {
		p.wait = 0
	}
	if !p.retired && !p.t.closed.Load() {
		p.t.log.Debug("van/tcp: peer closed the connection; redialling", "node", p.id, "addr", p.addr, "in", p.wait)
		p.startDialLocked()
	}
}

// retire stops the peer after Connect replaced it (linger: until when its
// queued messages may still be delivered) or Close (zero linger).
// Messages already written are delivered: the connection is closed
// gracefully. It does not wait for a Send blocked in a write.
func (p *peer) retire(linger time.Time) {
	do := func() {
		p.mu.Lock()
		p.retired = true
		p.linger = linger
		if p.conn != nil {
			p.t.untrack(p.conn)
			p.conn = nil
		}
		if !p.dialing {
			p.queue = nil
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	}
	if p.mu.TryLock() {
		p.mu.Unlock()
		do()
		return
	}
	// A Send holds mu inside a write to a peer that does not read; Close
	// (which closes every connection) or the peer will end it.
	p.t.wg.Add(1)
	go func() {
		defer p.t.wg.Done()
		do()
	}()
}

// writeHello writes the hello for id, followed by tag if it is not nil
// (identity.go).
func writeHello(c net.Conn, id int32, tag []byte) error {
	h := make([]byte, helloLen, helloLen+len(tag))
	copy(h[:4], helloMagic[:])
	h[4] = protoVersion
	if tag != nil {
		h[5] = helloTagged
	}
	binary.LittleEndian.PutUint32(h[8:], uint32(id))
	if err := c.SetWriteDeadline(time.Now().Add(defaultHandshakeTimeout)); err != nil {
		return err
	}
	if _, err := c.Write(append(h, tag...)); err != nil {
		return err
	}
	return c.SetWriteDeadline(time.Time{})
}

// readHello reads and checks the hello on an accepted connection. It
// reads the first zmtpSignatureLen bytes on their own, since a ZeroMQ
// dialer sends just its signature and waits for ours: errZMTP says so at
// once, rather than after the timeout. It returns the announced id and
// the tag that followed the hello (nil if none).
func readHello(c net.Conn, timeout time.Duration) (int32, []byte, error) {
	var h [helloLen]byte
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, nil, err
	}
	if _, err := io.ReadFull(c, h[:zmtpSignatureLen]); err != nil {
		return 0, nil, err
	}
	if isZMTPSignature(h[:zmtpSignatureLen]) {
		return 0, nil, errZMTP
	}
	if _, err := io.ReadFull(c, h[zmtpSignatureLen:]); err != nil {
		return 0, nil, err
	}
	if [4]byte(h[:4]) != helloMagic {
		return 0, nil, errBadHello
	}
	if h[4] != protoVersion {
		return 0, nil, fmt.Errorf("%w: version %d, this node speaks %d", errBadHello, h[4], protoVersion)
	}
	var tag []byte
	if h[5] == helloTagged {
		var err error
		if tag, err = readTag(c); err != nil {
			return 0, nil, err
		}
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return 0, nil, err
	}
	return int32(binary.LittleEndian.Uint32(h[8:])), tag, nil
}

var (
	errBadHello = errors.New("not an elasticps tcp van connection (bad hello)")
	// errZMTP: the peer opened with a ZeroMQ greeting (van/zmq, C++
	// ps-lite): the job mixes van types.
	errZMTP = errors.New("the peer speaks ZeroMQ (ZMTP)")
)

// zmtpSignatureLen is the length of the signature that opens every ZMTP
// 2.0/3.x greeting: 0xFF, 8 bytes (a length), 0x7F.
const zmtpSignatureLen = 10

// isZMTPSignature reports whether b starts with a ZMTP signature.
func isZMTPSignature(b []byte) bool {
	return len(b) >= zmtpSignatureLen && b[0] == 0xFF && b[zmtpSignatureLen-1] == 0x7F
}

// mismatch logs, once per peer address, that the peer at addr speaks
// ZeroMQ: the job's nodes do not agree on the van type, and no message
// will ever pass between these two.
func (t *Transport) mismatch(addr string) {
	if _, seen := t.zmtpPeers.LoadOrStore(addr, true); seen {
		return
	}
	t.log.Error("a peer at " + addr + " speaks ZeroMQ (ZMTP); this node uses DMLC_PS_VAN_TYPE=tcp: set the same van type on every node")
}

//go:build linux

package shm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

const (
	helloLen     = 20
	protoVersion = 1
	headerLen    = 16 // count, flags, offset
	flagInRing   = 1
	noteLen      = 8
)

var helloMagic = [4]byte{'E', 'P', 'S', 'M'}

// peer is the sending side of one outgoing connection (van/tcp's peer,
// with a segment per connection).
type peer struct {
	t     *Transport
	id    int32
	addr  string
	ident int32

	// mu serialises writers and guards everything below; cond (on mu)
	// signals that conn, queue or retired changed.
	mu      sync.Mutex
	cond    sync.Cond
	conn    *net.UnixConn
	ring    *ring // conn's segment
	dialing bool
	retired bool
	linger  time.Time
	queue   [][]byte // inline-encoded messages waiting for a connection

	scratch []byte
	iov     [][]byte
	bufs    net.Buffers
}

func newPeer(t *Transport, id int32, addr string, ident int32) *peer {
	p := &peer{t: t, id: id, addr: addr, ident: ident}
	p.cond.L = &p.mu
	return p
}

// Send implements van.Transport. Data frames totalling at least
// Config.InlineMax bytes are copied into the connection's segment (the one
// copy of their bytes), smaller ones written to the socket from msg.Data.
// Nothing of msg is referenced after Send returns. While the peer is not
// connected, messages are copied into a queue of up to WaterMark messages,
// after which Send blocks.
func (t *Transport) Send(msg *message.Message) (int, error) {
	id := msg.Meta.Recver
	if err := message.CheckFrames(&msg.Meta, len(msg.Data)); err != nil {
		return 0, fmt.Errorf("van/shm: send to node %d: %w", id, err)
	}
	for _, d := range msg.Data {
		if uint64(len(d)) > math.MaxUint32 {
			return 0, fmt.Errorf("van/shm: send to node %d: a data frame of %d bytes exceeds the 4 GiB frame limit", id, len(d))
		}
	}
	for {
		t.mu.RLock()
		p := t.peers[id]
		t.mu.RUnlock()
		if p == nil {
			if t.closed.Load() {
				return 0, van.ErrClosed
			}
			return 0, fmt.Errorf("van/shm: no connection to node %d; was it connected?", id)
		}
		n, replaced, err := p.send(msg)
		if replaced {
			continue
		}
		return n, err
	}
}

func (p *peer) send(msg *message.Message) (int, bool, error) {
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
			h, iov, n := encode(nil, nil, msg, nil, 0)
			wire := h[:0:0]
			for _, b := range iov {
				wire = append(wire, b...)
			}
			p.queue = append(p.queue, wire)
			return n, false, nil
		}
		p.cond.Wait()
	}
	var mem []byte
	var off uint64
	if span := spanOf(msg.Data); span >= uint64(p.t.cfg.InlineMax) && span > 0 {
		if o, ok := p.ring.alloc(span); ok {
			mem, off = p.ring.mem, o
		}
	}
	var size int
	p.scratch, p.iov, size = encode(p.scratch[:0], p.iov[:0], msg, mem, off)
	p.bufs = p.iov
	_, err := p.bufs.WriteTo(p.conn)
	clear(p.iov)
	if cap(p.scratch) > 64<<10 {
		p.scratch = nil
	}
	if err != nil {
		return 0, false, p.broken(err)
	}
	return size, false, nil
}

// spanOf is the segment space data frames take, each 8-byte aligned.
func spanOf(data [][]byte) uint64 {
	var n uint64
	for _, d := range data {
		n += uint64(len(d)+7) &^ 7
	}
	return n
}

// encode lays msg out for writev: header and meta in scratch, followed
// (inline) by the data frames, or, when mem is not nil, copies the data
// frames into mem from off on. It returns the meta + data byte count.
func encode(scratch []byte, iov [][]byte, msg *message.Message, mem []byte, off uint64) ([]byte, [][]byte, int) {
	count := 1 + len(msg.Data)
	metaLen := msg.Meta.EncodedLen()
	if need := headerLen + 4*count + metaLen; cap(scratch) < need {
		scratch = make([]byte, 0, need)
	}
	flags := uint32(0)
	if mem != nil {
		flags = flagInRing
	}
	h := binary.LittleEndian.AppendUint32(scratch[:0], uint32(count))
	h = binary.LittleEndian.AppendUint32(h, flags)
	h = binary.LittleEndian.AppendUint64(h, off)
	lenAt := len(h)
	h = binary.LittleEndian.AppendUint32(h, uint32(metaLen))
	size := 0
	for _, d := range msg.Data {
		h = binary.LittleEndian.AppendUint32(h, uint32(len(d)))
		size += len(d)
	}
	metaAt := len(h)
	h = msg.Meta.MarshalTo(h)
	got := len(h) - metaAt
	binary.LittleEndian.PutUint32(h[lenAt:], uint32(got)) // trust what was written
	size += got
	iov = append(iov, h)
	for _, d := range msg.Data {
		if mem != nil {
			off += uint64(copy(mem[off:], d)+7) &^ 7
		} else if len(d) > 0 {
			iov = append(iov, d)
		}
	}
	return h, iov, size
}

// broken drops the connection after a write error and redials. Caller
// holds p.mu.
func (p *peer) broken(err error) error {
	p.dropLocked()
	if p.t.closed.Load() {
		return van.ErrClosed
	}
	p.t.log.Debug("van/shm: connection lost; redialling", "node", p.id, "addr", p.addr, "err", err)
	p.startDialLocked()
	return fmt.Errorf("van/shm: send to node %d at %s: %w", p.id, p.addr, err)
}

// dropLocked closes the connection and unmaps its segment. Caller holds
// p.mu, so no Send is copying into it.
func (p *peer) dropLocked() {
	if p.conn != nil {
		p.t.untrack(p.conn)
		p.conn = nil
	}
	if p.ring != nil {
		p.ring.unmap()
		p.ring = nil
	}
}

func (p *peer) startDial() {
	p.mu.Lock()
	p.startDialLocked()
	p.mu.Unlock()
}

func (p *peer) startDialLocked() {
	if p.dialing || p.retired || p.t.closed.Load() {
		return
	}
	p.dialing = true
	p.t.wg.Add(1)
	go p.dialLoop()
}

// dialLoop dials until it gets a connection, sends the hello with a new
// segment and the queued messages, and installs the connection. A retired
// peer dials only to deliver its queue, until its linger deadline.
func (p *peer) dialLoop() {
	defer p.t.wg.Done()
	t := p.t
	backoff := redialMin
	d := net.Dialer{Timeout: 2 * time.Second}
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

		c, err := d.DialContext(t.ctx, "unix", p.addr)
		var r *ring
		if err == nil {
			r, err = sendHello(c.(*net.UnixConn), p.ident, t.cfg.RingBytes)
			if err != nil {
				_ = c.Close()
			}
		}
		if err == nil && t.track(c.(*net.UnixConn)) {
			if p.install(c.(*net.UnixConn), r) {
				return
			}
		} else if err != nil {
			t.log.Debug("van/shm: dial failed; retrying", "node", p.id, "addr", p.addr, "err", err, "in", backoff)
		} else {
			r.unmap()
		}
		select {
		case <-time.After(backoff):
		case <-t.done:
		}
		backoff = min(2*backoff, redialMax)
	}
}

// sendHello creates the connection's segment and sends it with the hello.
func sendHello(c *net.UnixConn, id int32, size int) (*ring, error) {
	mem, fd, err := newSegment(size)
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(fd) }()
	var h [helloLen]byte
	copy(h[:4], helloMagic[:])
	h[4] = protoVersion
	binary.LittleEndian.PutUint32(h[8:], uint32(id))
	binary.LittleEndian.PutUint64(h[12:], uint64(size))
	if err = c.SetWriteDeadline(time.Now().Add(defaultHandshakeTimeout)); err == nil {
		_, _, err = c.WriteMsgUnix(h[:], unix.UnixRights(fd), nil)
		if err == nil {
			err = c.SetWriteDeadline(time.Time{})
		}
	}
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, err
	}
	return &ring{mem: mem}, nil
}

// install writes the queued messages to c and makes it the connection.
// It reports false if c failed, so that the caller dials again.
func (p *peer) install(c *net.UnixConn, r *ring) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) > 0 {
		if _, err := c.Write(p.queue[0]); err != nil {
			p.t.untrack(c)
			r.unmap()
			return false
		}
		p.queue[0] = nil
		p.queue = p.queue[1:]
	}
	p.queue = nil
	p.dialing = false
	p.cond.Broadcast()
	if p.retired || p.t.closed.Load() {
		p.t.untrack(c)
		r.unmap()
		return true
	}
	p.conn, p.ring = c, r
	p.t.wg.Add(1)
	go p.notes(c, r)
	return true
}

// notes reads the receiver's release notes until the connection ends, and
// then redials (the peer went away) unless the connection was replaced.
func (p *peer) notes(c *net.UnixConn, r *ring) {
	defer p.t.wg.Done()
	br := bufio.NewReaderSize(c, 4096)
	var b [noteLen]byte
	for {
		if _, err := io.ReadFull(br, b[:]); err != nil {
			break
		}
		if !r.free(binary.LittleEndian.Uint64(b[:])) {
			p.t.log.Warn("van/shm: release note for a region not in use; dropping the connection", "node", p.id)
			break
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != c {
		return
	}
	p.dropLocked()
	if !p.retired && !p.t.closed.Load() {
		p.t.log.Debug("van/shm: peer closed the connection; redialling", "node", p.id, "addr", p.addr)
		p.startDialLocked()
	}
}

// retire stops the peer after Connect replaced it (linger: until when its
// queued messages may still be delivered) or Close (zero linger).
func (p *peer) retire(linger time.Time) {
	do := func() {
		p.mu.Lock()
		p.retired = true
		p.linger = linger
		p.dropLocked()
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

var errBadHello = errors.New("not an elasticps shm van connection (bad hello)")

//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

const (
	helloLen     = 28
	ackLen       = 8
	protoVersion = 2
	headerLen    = 16 // count, flags, offset
	flagInRing   = 1
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
	out     *outConn
	dialing bool
	retired bool
	linger  time.Time
	queue   [][]byte // inline-encoded messages waiting for a connection

	scratch []byte
	iov     [][]byte
}

// outConn is a dialled connection and its segment.
type outConn struct {
	c     *net.UnixConn
	seg   []byte // the whole mapping; nil once unmapped
	ring  *ring  // the data area
	w     streamWriter
	notes noteReader
	dead  atomic.Bool // the socket ended
}

// unmap drops the dialer's mapping; the caller holds the peer's lock (or
// owns o alone), so no Send is copying into it.
func (o *outConn) unmap() {
	if o.seg != nil {
		_ = unix.Munmap(o.seg)
		o.seg, o.ring.mem, o.w.buf, o.notes.slots = nil, nil, nil, nil
	}
}

func newPeer(t *Transport, id int32, addr string, ident int32) *peer {
	p := &peer{t: t, id: id, addr: addr, ident: ident}
	p.cond.L = &p.mu
	return p
}

// Send implements van.Transport. Data frames totalling at least
// Config.InlineMax bytes are copied into the connection's segment (the one
// copy of their bytes), smaller ones into its message stream.
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
		if p.out != nil {
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
	o := p.out
	var mem []byte
	var off uint64
	if span := spanOf(msg.Data); span >= uint64(p.t.cfg.InlineMax) && span > 0 {
		if err := o.notes.drain(o.ring); err != nil {
			return 0, false, p.broken(err)
		}
		if at, ok := o.ring.alloc(span); ok {
			mem, off = o.ring.mem, at
		}
	}
	var size int
	p.scratch, p.iov, size = encode(p.scratch[:0], p.iov[:0], msg, mem, off)
	err := o.w.write(p.iov...)
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

// encode lays msg out for the stream: header and meta in scratch, followed
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
	if p.out != nil {
		p.t.untrack(p.out.c)
		p.out.unmap()
		p.out = nil
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
		var o *outConn
		if err == nil {
			o, err = sendHello(c.(*net.UnixConn), p.ident, t.cfg.layout())
			if err != nil {
				_ = c.Close()
			}
		}
		var vErr *versionError
		switch {
		case errors.As(err, &vErr):
			t.log.Warn("van/shm: peer refused the connection; retrying", "node", p.id, "addr", p.addr, "err", err, "in", redialMax)
			backoff = redialMax
		case err != nil:
			t.log.Debug("van/shm: dial failed; retrying", "node", p.id, "addr", p.addr, "err", err, "in", backoff)
		case t.track(o.c):
			if p.install(o) {
				return
			}
		default:
			o.unmap()
		}
		select {
		case <-time.After(backoff):
		case <-t.done:
		}
		backoff = min(2*backoff, redialMax)
	}
}

// versionError is a listener's answer that it speaks another protocol
// version.
type versionError struct{ theirs byte }

func (e *versionError) Error() string {
	return fmt.Sprintf("the peer speaks shm van protocol version %d, this node %d: run the same elasticps release on every node of the job", e.theirs, protoVersion)
}

// sendHello creates the connection's segment, sends it with the hello and
// waits for the listener's answer.
func sendHello(c *net.UnixConn, id int32, lay layout) (*outConn, error) {
	seg, fd, err := newSegment(int(lay.size))
	if err != nil {
		return nil, err
	}
	defer func() { _ = unix.Close(fd) }()
	var h [helloLen]byte
	copy(h[:4], helloMagic[:])
	h[4] = protoVersion
	binary.LittleEndian.PutUint32(h[8:], uint32(id))
	binary.LittleEndian.PutUint64(h[12:], lay.size)
	binary.LittleEndian.PutUint32(h[20:], uint32(lay.stream))
	binary.LittleEndian.PutUint32(h[24:], uint32(lay.notes))
	var ack [ackLen]byte
	if err = c.SetDeadline(time.Now().Add(defaultHandshakeTimeout)); err == nil {
		if _, _, err = c.WriteMsgUnix(h[:], unix.UnixRights(fd), nil); err == nil {
			if _, err = io.ReadFull(c, ack[:]); err != nil {
				err = fmt.Errorf("no answer to the hello (a node of an older elasticps release?): %w", err)
			}
		}
	}
	if err == nil {
		switch {
		case [4]byte(ack[:4]) != helloMagic:
			err = errBadAck
		case ack[4] != protoVersion:
			err = &versionError{theirs: ack[4]}
		default:
			err = c.SetDeadline(time.Time{})
		}
	}
	if err != nil {
		_ = unix.Munmap(seg)
		return nil, err
	}
	return newOutConn(c, seg, lay), nil
}

func newOutConn(c *net.UnixConn, seg []byte, lay layout) *outConn {
	ctl := ctlOf(seg)
	notesAt := ctlBytes + lay.stream
	o := &outConn{c: c, seg: seg,
		ring:  &ring{mem: seg[lay.dataOff():], maxLive: int(lay.notes)},
		notes: noteReader{ctl: ctl, slots: seg[notesAt:lay.dataOff()]},
	}
	o.w = streamWriter{ctl: ctl, buf: seg[ctlBytes:notesAt], conn: c, dead: &o.dead}
	return o
}

// install writes the queued messages to o and makes it the connection.
// It reports false if o failed, so that the caller dials again.
func (p *peer) install(o *outConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.t.wg.Add(1)
	go p.watch(o)
	for len(p.queue) > 0 {
		if err := o.w.write(p.queue[0]); err != nil {
			p.t.untrack(o.c)
			o.unmap()
			return false
		}
		p.queue[0] = nil
		p.queue = p.queue[1:]
	}
	p.queue = nil
	p.dialing = false
	p.cond.Broadcast()
	if p.retired || p.t.closed.Load() {
		p.t.untrack(o.c)
		o.unmap()
		return true
	}
	p.out = o
	return true
}

// watch waits for the connection's socket to end (the listener sends
// nothing after its answer to the hello), and then redials (the peer went
// away) unless the connection was replaced.
func (p *peer) watch(o *outConn) {
	defer p.t.wg.Done()
	var b [64]byte
	for {
		if _, err := o.c.Read(b[:]); err != nil {
			break
		}
	}
	o.dead.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out != o {
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

var (
	errBadHello = errors.New("not an elasticps shm van connection (bad hello)")
	errBadAck   = errors.New("the listener's answer to the hello is not an elasticps shm van's")
)

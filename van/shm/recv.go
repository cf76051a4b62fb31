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

var (
	errNotBound = errors.New("van/shm: Recv before Bind")
	// errFatal marks a FrameError after which the connection is closed.
	errFatal = errors.New("connection closed")
)

// inConn is the receiving side of one accepted connection.
type inConn struct {
	seg *mapping

	wmu   sync.Mutex // serialises release notes
	notes noteWriter
}

// note tells the sender, through the segment's note ring, that the region
// at off may be reused. After the connection closed, nobody reads it.
func (in *inConn) note(off uint64) {
	in.wmu.Lock()
	in.notes.put(off) // full only if the sender broke its limit of live regions
	in.wmu.Unlock()
}

// view is a received message's region of a segment.
type view struct {
	in  *inConn
	off uint64
}

// end gives the region back: a release note, and the message's reference
// to the mapping.
func (v view) end() {
	v.in.note(v.off)
	v.in.seg.unref()
}

// Recv implements van.Transport. Meta.Sender is the identity the
// connection announced (message.Empty: anonymous), Meta.Recver this node's
// id as last given to Connect; messages of one connection arrive in order.
// Non-empty data frames start 8-byte aligned. Frames of large messages are
// views of shared memory: Release or Detach must follow (van.Transport),
// or the sender's data area fills and it falls back to the stream.
func (t *Transport) Recv() (*message.Message, error) {
	if t.closed.Load() {
		return nil, van.ErrClosed
	}
	if !t.bound.Load() {
		return nil, errNotBound
	}
	select {
	case it := <-t.inbox:
		return it.msg, it.err
	case <-t.done:
		return nil, van.ErrClosed
	}
}

func (t *Transport) takeView(msg *message.Message) (view, bool) {
	t.viewsMu.Lock()
	v, ok := t.views[msg]
	delete(t.views, msg)
	t.viewsMu.Unlock()
	return v, ok
}

// Release implements van.Transport: the segment region of msg's frames, if
// any, goes back to its sender. It may be called after Close.
func (t *Transport) Release(msg *message.Message) {
	if v, ok := t.takeView(msg); ok {
		clear(msg.Data)
		msg.Data = nil
		v.end()
	}
}

// Detach implements van.Transport: frames that are views of shared memory
// are copied into one Go allocation and the region released.
func (t *Transport) Detach(msg *message.Message) {
	v, ok := t.takeView(msg)
	if !ok {
		return
	}
	msg.Data = copyFrames(msg.Data)
	v.end()
}

// emptyFrame is what an empty frame is delivered as: non-nil, so that "an
// empty vals frame" and "no frame" stay distinguishable.
var emptyFrame = make([]byte, 0)

// copyFrames returns copies of data in one allocation, each frame 8-byte
// aligned.
func copyFrames(data [][]byte) [][]byte {
	buf := make([]byte, spanOf(data))
	out := make([][]byte, len(data))
	off := 0
	for i, d := range data {
		if len(d) == 0 {
			out[i] = emptyFrame
			continue
		}
		out[i] = buf[off : off+len(d) : off+len(d)]
		copy(out[i], d)
		off += (len(d) + 7) &^ 7
	}
	return out
}

func (t *Transport) deliver(it inItem) bool {
	select {
	case t.inbox <- it:
		return true
	case <-t.done:
		if it.msg != nil {
			t.Release(it.msg)
		}
		return false
	}
}

// readLoop reads the messages of one accepted connection.
func (t *Transport) readLoop(c *net.UnixConn) {
	defer t.wg.Done()
	defer t.untrack(c)
	sender, seg, lay, err := readHello(c, t.cfg.HandshakeTimeout)
	if err != nil {
		if errors.Is(err, errBadHello) {
			t.deliver(inItem{err: &van.FrameError{Peer: "unknown (unix socket)", Err: err}})
		} else if !t.closed.Load() {
			t.log.Debug("van/shm: connection closed before its hello", "err", err)
		}
		return
	}
	ctl := ctlOf(seg)
	notesAt := ctlBytes + lay.stream
	in := &inConn{seg: &mapping{mem: seg},
		notes: noteWriter{ctl: ctl, slots: seg[notesAt:lay.dataOff()]}}
	in.seg.refs.Store(1)
	defer in.seg.unref()
	stream := &streamReader{ctl: ctl, buf: seg[ctlBytes:notesAt], conn: c, spin: t.cfg.Spin}
	rd := &reader{br: bufio.NewReaderSize(stream, 64<<10), in: in, data: seg[lay.dataOff():],
		lim: t.cfg.Limits, lens: make([]uint32, t.cfg.Limits.MaxFrames+1)}
	for {
		msg, err := rd.next()
		if err != nil {
			var fe *van.FrameError
			if errors.As(err, &fe) {
				fe.Peer = identity(sender)
				if !t.deliver(inItem{err: fe}) || errors.Is(fe.Err, errFatal) {
					return
				}
				continue
			}
			if !t.closed.Load() && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.log.Debug("van/shm: connection dropped", "peer", identity(sender), "err", err)
			}
			return
		}
		msg.Meta.Sender = sender
		msg.Meta.Recver = t.myID.Load()
		if rd.inRing {
			in.seg.refs.Add(1)
			t.viewsMu.Lock()
			t.views[msg] = view{in: in, off: rd.off}
			t.viewsMu.Unlock()
		}
		if !t.deliver(inItem{msg: msg}) {
			return
		}
	}
}

// readHello reads the hello, maps the segment that came with it and
// answers with this node's protocol version (also when it refuses the
// hello's, so that the dialer can say why).
func readHello(c *net.UnixConn, timeout time.Duration) (int32, []byte, layout, error) {
	var lay layout
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, nil, lay, err
	}
	var h [helloLen]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(h[:], oob)
	fds := receivedFDs(oob[:oobn])
	closeAll := func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}
	defer closeAll()
	if err != nil {
		return 0, nil, lay, err
	}
	if n >= 5 && [4]byte(h[:4]) == helloMagic && h[4] != protoVersion {
		// Hellos of other versions may be shorter: refuse before reading on.
		_ = writeAck(c)
		return 0, nil, lay, fmt.Errorf("%w: the peer speaks shm van protocol version %d, this node %d: run the same elasticps release on every node of the job", errBadHello, h[4], protoVersion)
	}
	if _, err := io.ReadFull(c, h[n:]); err != nil {
		return 0, nil, lay, err
	}
	if [4]byte(h[:4]) != helloMagic || len(fds) != 1 {
		return 0, nil, lay, errBadHello
	}
	lay = layout{size: binary.LittleEndian.Uint64(h[12:]),
		stream: uint64(binary.LittleEndian.Uint32(h[20:])), notes: uint64(binary.LittleEndian.Uint32(h[24:]))}
	fd := fds[0]
	fds = nil
	mem, err := mapSegment(fd, lay.size)
	if err == nil {
		err = lay.check()
		if err != nil {
			_ = unix.Munmap(mem)
		}
	}
	if err != nil {
		return 0, nil, lay, fmt.Errorf("%w: %v", errBadHello, err)
	}
	if err := writeAck(c); err != nil {
		_ = unix.Munmap(mem)
		return 0, nil, lay, err
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		_ = unix.Munmap(mem)
		return 0, nil, lay, err
	}
	return int32(binary.LittleEndian.Uint32(h[8:])), mem, lay, nil
}

func writeAck(c *net.UnixConn) error {
	var a [ackLen]byte
	copy(a[:], helloMagic[:])
	a[4] = protoVersion
	_, err := c.Write(a[:])
	return err
}

// receivedFDs returns the descriptors in a control message, all of which
// the caller must close or keep.
func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// reader parses the messages of one connection.
type reader struct {
	br   *bufio.Reader
	in   *inConn
	data []byte // the segment's data area
	lim  van.Limits
	lens []uint32
	hdr  [headerLen]byte

	// Of the last message: whether its frames are views, and where.
	inRing bool
	off    uint64
}

// next reads one message. A *van.FrameError rejects one message; if it
// wraps errFatal the connection must be closed.
func (rd *reader) next() (*message.Message, error) {
	rd.inRing = false
	if _, err := io.ReadFull(rd.br, rd.hdr[:]); err != nil {
		return nil, err
	}
	count := binary.LittleEndian.Uint32(rd.hdr[:])
	flags := binary.LittleEndian.Uint32(rd.hdr[4:])
	off := binary.LittleEndian.Uint64(rd.hdr[8:])
	if count == 0 || count-1 > uint32(rd.lim.MaxFrames) {
		return nil, &van.FrameError{Err: fmt.Errorf("%w: header announces %d frames; the limit is a meta frame and %d data frames", errFatal, count, rd.lim.MaxFrames)}
	}
	if flags&^flagInRing != 0 {
		return nil, &van.FrameError{Err: fmt.Errorf("%w: unknown header flags %#x", errFatal, flags)}
	}
	lens := rd.lens[:count]
	var lb [4]byte
	var total uint64
	for i := range lens {
		if _, err := io.ReadFull(rd.br, lb[:]); err != nil {
			return nil, unexpected(err)
		}
		lens[i] = binary.LittleEndian.Uint32(lb[:])
		total += uint64(lens[i])
	}
	if total > uint64(rd.lim.MaxMessageBytes) {
		return nil, &van.FrameError{Err: fmt.Errorf("%w: message of %d bytes exceeds the %d-byte limit", errFatal, total, rd.lim.MaxMessageBytes)}
	}
	inRing := flags&flagInRing != 0
	mem := rd.data
	var span uint64
	for _, l := range lens[1:] {
		span += (uint64(l) + 7) &^ 7
	}
	if inRing && (off%8 != 0 || off > uint64(len(mem)) || span > uint64(len(mem))-off) {
		return nil, &van.FrameError{Err: fmt.Errorf("%w: frames at [%d, %d+%d) are outside the %d-byte data area", errFatal, off, off, span, len(mem))}
	}

	meta := make([]byte, lens[0])
	if _, err := io.ReadFull(rd.br, meta); err != nil {
		return nil, unexpected(err)
	}
	msg := &message.Message{}
	bad := message.DecodeMeta(meta, &msg.Meta)
	if bad != nil {
		bad = fmt.Errorf("bad meta frame (%d bytes): %w", lens[0], bad)
	} else if k := len(msg.Meta.DataType); k > rd.lim.MaxFrames {
		bad = fmt.Errorf("meta announces %d data frames, limit is %d", k, rd.lim.MaxFrames)
	} else {
		bad = message.CheckFrames(&msg.Meta, int(count)-1)
	}
	if bad != nil {
		if inRing {
			rd.in.note(off)
		} else if _, err := rd.br.Discard(int(total - uint64(lens[0]))); err != nil {
			return nil, unexpected(err)
		}
		return nil, &van.FrameError{Err: bad}
	}

	msg.Data = make([][]byte, count-1)
	var buf []byte
	if !inRing {
		buf = make([]byte, span)
		mem, off = buf, 0
	}
	for i, l := range lens[1:] {
		size := uint64(l)
		if size == 0 {
			msg.Data[i] = emptyFrame
			continue
		}
		msg.Data[i] = mem[off : off+size : off+size]
		off += (size + 7) &^ 7
	}
	if !inRing {
		for _, d := range msg.Data {
			if _, err := io.ReadFull(rd.br, d); err != nil {
				return nil, unexpected(err)
			}
		}
	} else {
		rd.inRing, rd.off = true, binary.LittleEndian.Uint64(rd.hdr[8:])
	}
	msg.Meta.DataSize = int32(min(total-uint64(lens[0]), math.MaxInt32))
	return msg, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

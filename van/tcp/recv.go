package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/internal/recvmsg"
)

const (
	// maxFramesLimit bounds Config.Limits.MaxFrames, so that a header's
	// length table always fits a small per-connection array.
	maxFramesLimit = 1 << 16

	// Read buffer sizes of a connection (nats-server's readLoop scheme):
	// the buffer doubles when a read fills it, up to maxBufSize, and halves
	// after shortsToShrink reads in a row that used less than half of it,
	// down to minBufSize. Frames of directReadMin bytes or more never go
	// through it.
	minBufSize     = 4 << 10
	startBufSize   = 16 << 10
	maxBufSize     = 256 << 10
	shortsToShrink = 4

	// leanRead bounds the reads of a connection whose last message had a
	// frame read directly: enough for the next message's header, meta and
	// small frames, so that little of its large frame lands in the read
	// buffer only to be copied out again.
	leanRead = 4 << 10
)

var (
	errNotBound = errors.New("van/tcp: Recv before Bind")
	// errFatal marks a FrameError after which the connection is closed:
	// the header itself was out of bounds, so the stream cannot be trusted.
	errFatal = errors.New("connection closed")
)

// Recv implements van.Transport. It returns the next message from any
// connection, with Meta.Sender set to the id the connection announced
// (message.Empty for an anonymous one) and Meta.Recver to this node's id as
// last given to Connect. Messages from one connection arrive in order.
//
// Data frames are owned by the caller and each non-empty one starts 8-byte
// aligned. Frames of at least directReadMin bytes come from a buffer pool,
// the others share one buffer per message: giving the message to Release
// once done with it lets the next messages reuse them, and the Message
// itself, instead of allocating (and zeroing) new ones.
//
// A *van.FrameError reports one rejected message (or a connection that
// did not start with a valid hello); the transport keeps serving.
func (t *Transport) Recv() (*message.Message, error) {
	if t.closed.Load() {
		return nil, van.ErrClosed
	}
	if !t.bound.Load() {
		return nil, errNotBound
	}
	select {
	case it := <-t.inbox:
		if it.pending != nil {
			it.pending.Add(-it.size)
		}
		return it.msg, it.err
	case <-t.done:
		return nil, van.ErrClosed
	}
}

// Release gives msg, which Recv returned, back for reuse: its pooled
// receive buffers, its small frames and the Message itself, which a later
// Recv may return again. Nothing of msg may be used afterwards (including
// slices of its frames kept elsewhere), and it must be released at most
// once. Calling Release is optional: an unreleased message is
// garbage-collected as usual.
func (t *Transport) Release(msg *message.Message) {
	for _, d := range msg.Data {
		putBuf(d)
	}
	clear(msg.Data)
	msg.Data = nil
	if im := recvmsg.Of(msg); im != nil {
		recvmsg.Put(im)
	}
}

// Detach implements van.Transport: it does nothing, since every frame Recv
// delivers is Go memory already.
func (t *Transport) Detach(*message.Message) {}

// deliver hands an item to Recv; false once the transport is closed.
func (t *Transport) deliver(it inItem) bool {
	select {
	case t.inbox <- it:
		return true
	case <-t.done:
		return false
	}
}

// readLoop reads the messages of one accepted connection. It cuts the
// connection off when the peer has more than Limits.MaxPendingBytes
// waiting for Recv, or stays anonymous longer than Limits.RegisterTimeout.
func (t *Transport) readLoop(c net.Conn) {
	defer t.wg.Done()
	defer t.untrack(c)
	opened := time.Now()
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	if host == "" {
		host = c.RemoteAddr().String()
	}
	if t.tls != nil {
		var err error
		if c, err = t.tls.accept(c, t.cfg.HandshakeTimeout); err != nil {
			if !t.closed.Load() {
				t.deliver(inItem{err: &van.FrameError{Peer: host, Reason: van.ReasonEncrypt,
					Err: fmt.Errorf("%w: TLS handshake failed, a peer without the job's key (PS_ENCRYPT=on): %v", errFatal, err)}})
			}
			return
		}
	}
	sender, tag, err := readHello(c, t.cfg.HandshakeTimeout)
	if err != nil {
		if errors.Is(err, errZMTP) {
			// Once per host: a ZeroMQ dialer reconnects from a new port
			// every time.
			t.mismatch(host)
			return
		}
		if errors.Is(err, errBadHello) {
			t.deliver(inItem{err: &van.FrameError{Peer: host, Reason: van.ReasonHello, Err: err}})
		} else if !t.closed.Load() {
			t.log.Debug("van/tcp: connection closed before its hello", "remote", c.RemoteAddr().String(), "err", err)
		}
		return
	}
	peer := identity(sender)
	unverified := t.unverified(sender, tag)
	if sender == message.Empty {
		// Half-open until it registers: an anonymous dialer sends its
		// ADD_NODE and then reconnects under its id.
		if err := c.SetReadDeadline(opened.Add(t.cfg.Limits.RegisterTimeout)); err != nil {
			return
		}
	}
	var pending atomic.Int64
	rd := newReader(c, t.cfg.Limits)
	for {
		msg, err := rd.next()
		if err != nil {
			var fe *van.FrameError
			if errors.As(err, &fe) {
				fe.Peer = peer
				if !t.deliver(inItem{err: fe}) || errors.Is(fe.Err, errFatal) {
					return
				}
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && !t.closed.Load() {
				t.deliver(inItem{err: &van.FrameError{Peer: peer, Reason: van.ReasonRegister,
					Err: fmt.Errorf("%w: the connection from %s stayed anonymous for %v without registering (PS_REGISTER_TIMEOUT)", errFatal, host, t.cfg.Limits.RegisterTimeout)}})
				return
			}
			if !t.closed.Load() && !errors.Is(err, io.EOF) && !isClosedErr(err) {
				t.log.Debug("van/tcp: connection dropped", "peer", peer, "err", err)
			}
			return
		}
		size := int64(msgBytes(msg))
		if p := pending.Load(); p > 0 && p+size > t.cfg.Limits.MaxPendingBytes {
			t.Release(msg)
			t.deliver(inItem{err: &van.FrameError{Peer: peer, Reason: van.ReasonPending,
				Err: fmt.Errorf("%w: %d bytes received and not yet taken, the limit is %d (PS_MAX_PENDING_BYTES)", errFatal, p+size, t.cfg.Limits.MaxPendingBytes)}})
			return
		}
		pending.Add(size)
		msg.Meta.Sender = sender
		msg.UnverifiedSender = unverified
		msg.Meta.Recver = t.myID.Load()
		if !t.deliver(inItem{msg: msg, pending: &pending, size: size}) {
			return
		}
	}
}

func msgBytes(m *message.Message) int {
	n := 0
	for _, d := range m.Data {
		n += len(d)
	}
	return n
}

// reader parses messages from one connection.
type reader struct {
	c      net.Conn
	buf    []byte
	r, w   int // unread bytes are buf[r:w]
	want   int // buffer size to switch to when it is next empty
	shorts int // consecutive short reads
	// lean: the last message had a frame of directReadMin bytes or more,
	// so the stream carries large frames; reads stop at leanRead bytes.
	lean bool
	lens []uint32
	lim  van.Limits
}

// newReader returns a reader of c's messages within lim.
func newReader(c net.Conn, lim van.Limits) *reader {
	if o, err := (van.Options{Limits: lim}).WithDefaults("van/tcp"); err == nil {
		lim = o.Limits // zero fields: the defaults
	}
	return &reader{c: c, buf: make([]byte, startBufSize), want: startBufSize,
		lens: make([]uint32, lim.MaxFrames+1), lim: lim}
}

// fill makes at least n bytes readable in buf[r:w].
func (rd *reader) fill(n int) error {
	if rd.w-rd.r >= n {
		return nil
	}
	if rd.r == rd.w {
		rd.r, rd.w = 0, 0
		if len(rd.buf) != rd.want && rd.want >= n {
			rd.buf = make([]byte, rd.want)
		}
	}
	if len(rd.buf)-rd.r < n {
		if n > len(rd.buf) {
			nb := make([]byte, max(n, 2*len(rd.buf)))
			rd.w = copy(nb, rd.buf[rd.r:rd.w])
			rd.buf = nb
		} else {
			rd.w = copy(rd.buf, rd.buf[rd.r:rd.w])
		}
		rd.r = 0
	}
	for rd.w-rd.r < n {
		end := len(rd.buf)
		if rd.lean {
			end = min(end, rd.r+max(n, leanRead))
		}
		free := end - rd.w
		m, err := rd.c.Read(rd.buf[rd.w:end])
		rd.w += m
		if !rd.lean {
			rd.adapt(m, free)
		}
		if err != nil {
			if rd.w-rd.r >= n {
				return nil
			}
			if err == io.EOF && rd.w > rd.r {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// adapt sizes the buffer to the traffic: a read that filled the buffer
// means more was waiting, a run of short reads means it is too big.
func (rd *reader) adapt(m, free int) {
	switch {
	case m == free && free > 0:
		rd.want = min(2*len(rd.buf), maxBufSize)
		rd.shorts = 0
	case m < len(rd.buf)/2:
		rd.shorts++
		if rd.shorts >= shortsToShrink {
			rd.want = max(len(rd.buf)/2, minBufSize)
			rd.shorts = 0
		}
	default:
		rd.shorts = 0
	}
}

// skip discards n bytes of the stream.
func (rd *reader) skip(n uint64) error {
	for n > 0 {
		if rd.r == rd.w {
			if err := rd.fill(1); err != nil {
				return err
			}
		}
		k := min(uint64(rd.w-rd.r), n)
		rd.r += int(k)
		n -= k
	}
	return nil
}

// emptyFrame is what an empty data frame is delivered as: non-nil, so that
// "an empty vals frame" and "no frame" stay distinguishable.
var emptyFrame = make([]byte, 0)

// next reads one message. A *van.FrameError reports a rejected message;
// if it wraps errFatal the connection must be closed, otherwise the stream
// is positioned at the next message. Other errors are connection errors.
func (rd *reader) next() (*message.Message, error) {
	if err := rd.fill(4); err != nil {
		return nil, err
	}
	count := binary.LittleEndian.Uint32(rd.buf[rd.r:])
	rd.r += 4
	if count == 0 || uint64(count) > uint64(rd.lim.MaxFrames)+1 {
		return nil, &van.FrameError{Reason: van.ReasonFrames, Err: fmt.Errorf("%w: header announces %d frames; the limit is a meta frame and %d data frames (PS_MAX_FRAMES)", errFatal, count, rd.lim.MaxFrames)}
	}
	n := int(count)
	if err := rd.fill(4 * n); err != nil {
		return nil, err
	}
	var total uint64
	lens := rd.lens[:n]
	for i := range lens {
		lens[i] = binary.LittleEndian.Uint32(rd.buf[rd.r+4*i:])
		total += uint64(lens[i])
	}
	rd.r += 4 * n
	if total > uint64(rd.lim.MaxMessageBytes) {
		return nil, &van.FrameError{Reason: van.ReasonSize, Err: fmt.Errorf("%w: message of %d bytes exceeds the %d-byte limit (PS_MAX_MESSAGE_BYTES)", errFatal, total, rd.lim.MaxMessageBytes)}
	}
	if int64(lens[0]) > rd.lim.MaxMetaBytes {
		return nil, &van.FrameError{Reason: van.ReasonMeta, Err: fmt.Errorf("%w: meta frame of %d bytes exceeds the %d-byte limit (PS_MAX_META_BYTES)", errFatal, lens[0], rd.lim.MaxMetaBytes)}
	}
	metaLen := int(lens[0])
	if err := rd.fill(metaLen); err != nil {
		return nil, err
	}
	im := recvmsg.Get()
	msg := im.Message()
	bad := message.DecodeMeta(rd.buf[rd.r:rd.r+metaLen], &msg.Meta)
	rd.r += metaLen
	reason := van.ReasonMalformed
	if bad != nil {
		bad = fmt.Errorf("bad meta frame (%d bytes): %w", metaLen, bad)
	} else if k := len(msg.Meta.DataType); k > rd.lim.MaxFrames {
		bad, reason = fmt.Errorf("meta announces %d data frames, limit is %d (PS_MAX_FRAMES)", k, rd.lim.MaxFrames), van.ReasonFrames
	} else {
		bad = message.CheckFrames(&msg.Meta, n-1)
	}
	if bad != nil {
		recvmsg.Put(im)
		if err := rd.skip(total - uint64(metaLen)); err != nil {
			return nil, err
		}
		return nil, &van.FrameError{Reason: reason, Err: bad}
	}

	small := 0
	for _, l := range lens[1:] {
		if l < directReadMin {
			small += (int(l) + 7) &^ 7
		}
	}
	var sbuf []byte
	if small > 0 {
		sbuf = im.Small(small)
	}
	msg.Data = im.Frames(n - 1)
	off := 0
	rd.lean = false
	for _, l := range lens[1:] {
		size := int(l)
		switch {
		case size == 0:
			msg.Data = append(msg.Data, emptyFrame)
		case size < directReadMin:
			if err := rd.fill(size); err != nil {
				return nil, err
			}
			f := sbuf[off : off+size : off+size]
			copy(f, rd.buf[rd.r:rd.r+size])
			rd.r += size
			off += (size + 7) &^ 7
			msg.Data = append(msg.Data, f)
		default:
			// Straight from the socket into the frame's own buffer: the
			// kernel's copy is the only one.
			rd.lean = true
			f := getBuf(size)
			k := copy(f, rd.buf[rd.r:rd.w])
			rd.r += k
			if _, err := io.ReadFull(rd.c, f[k:]); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, err
			}
			msg.Data = append(msg.Data, f)
		}
	}
	msg.Meta.DataSize = int32(min(total-uint64(metaLen), math.MaxInt32))
	return msg, nil
}

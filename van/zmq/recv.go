//go:build cgo

package zmq

/*
#include <errno.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/internal/recvmsg"
)

var (
	errNotBound = errors.New("van/zmq: Recv before Bind")
	errNoMeta   = errors.New("no meta frame")
)

// inBuf is the receive side's C state: the zmq_msg_t frames of the message
// being delivered, which stay open until the next Recv (or Close), and Go
// views of the C arrays eps_recv fills.
type inBuf struct {
	c    *C.eps_in
	data []unsafe.Pointer // C pointers to each frame's bytes
	size []C.size_t
}

func newInBuf(maxFrames int) (*inBuf, error) {
	limit := maxFrames + 2 // identity, meta, data...
	c := C.eps_in_new(C.int(limit))
	if c == nil {
		return nil, errors.New("van/zmq: out of C memory for the receive buffer")
	}
	return &inBuf{
		c:    c,
		data: unsafe.Slice((*unsafe.Pointer)(unsafe.Pointer(c.data)), limit),
		size: unsafe.Slice(c.size, limit),
	}, nil
}

// view returns frame i as a []byte over C memory, valid until the next
// eps_recv or eps_in_free.
func (b *inBuf) view(i int) []byte {
	n := int(b.size[i])
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(b.data[i]), n)
}

func (b *inBuf) free() { C.eps_in_free(b.c) }

// Recv implements van.Transport. It blocks until a message arrives on the
// ROUTER, then sets Meta.Sender from the peer identity ("ps<id>", otherwise
// message.Empty; with a token see identity.go) and Meta.Recver to this node's id as last given to
// Connect. Meta.DataSize is the total length of the data frames.
//
// Data frames of at least Config.ZeroCopyRecvMin bytes are views of
// libzmq's buffers (C memory), valid until Release or Detach, one of which
// the caller must call for such a message. The others are copied out of
// libzmq's buffers into Go memory owned by the caller: frames of at least
// directReadMin bytes into buffers from a pool, the others into one buffer
// per message; Release recycles both, and the Message itself. Every
// non-empty frame starts at an 8-byte-aligned address, so it may be viewed
// as a []uint64 or []float64 in place. Empty frames are non-nil empty
// slices.
//
// Recv must not be called concurrently with itself, and returns an error if
// called before Bind.
func (t *Transport) Recv() (*message.Message, error) {
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	drainReleases()
	if t.closed.Load() {
		return nil, van.ErrClosed
	}
	if t.router == nil {
		return nil, errNotBound
	}
	if t.curve != nil {
		return t.recvEncrypted()
	}
	return t.recvLocked()
}

// recvLocked reads one whole multipart message from the ROUTER. eps_recv
// always consumes the message to its last frame, even a malformed one, so
// that the next call starts at a message boundary. Caller holds t.recvMu.
func (t *Transport) recvLocked() (*message.Message, error) {
	in := t.in
	rc := t.recvInto(in, true)
	if rc == C.EAGAIN {
		// Nothing queued: before this goroutine blocks in libzmq, holding
		// its thread and its P, let the goroutines it readied with the
		// previous message (the handler, a waiting caller) run on this
		// thread. Blocking straight away would leave them to another
		// thread, woken for them, a hand-over that costs more than
		// everything else a small message needs on a machine with few
		// cores. (Waiting in Go's netpoller on ZMQ_FD instead does the
		// same for one message at a time, but loses when messages
		// stream in: while the goroutines it woke run, nothing watches
		// the descriptor.)
		runtime.Gosched()
		rc = t.recvInto(in, false)
	}
	if rc != 0 {
		return nil, t.recvErr(errno(rc))
	}
	n := int(in.c.nframes)
	ident := in.view(0)
	sender, unverified := t.idents.sender(t.cfg.AuthKey, ident)
	if n < 2 {
		return nil, frameError(ident, sender, van.ReasonMalformed, errNoMeta)
	}
	lim := t.cfg.Limits
	held := min(n, len(in.size))
	total := int64(in.c.dropped_bytes)
	for i := 1; i < held; i++ {
		total += int64(in.size[i])
	}
	ndata := n - 2
	metaBuf := in.view(1)
	switch {
	case ndata > lim.MaxFrames:
		return nil, frameError(ident, sender, van.ReasonFrames, fmt.Errorf("more than %d data frames (PS_MAX_FRAMES)", lim.MaxFrames))
	case int64(len(metaBuf)) > lim.MaxMetaBytes:
		return nil, frameError(ident, sender, van.ReasonMeta, fmt.Errorf("meta frame of %d bytes exceeds the %d-byte limit (PS_MAX_META_BYTES)", len(metaBuf), lim.MaxMetaBytes))
	case total > lim.MaxMessageBytes:
		return nil, frameError(ident, sender, van.ReasonSize, fmt.Errorf("message of %d bytes exceeds the %d-byte limit (PS_MAX_MESSAGE_BYTES)", total, lim.MaxMessageBytes))
	}
	im := recvmsg.Get()
	msg := im.Message()
	var bad error
	reason := van.ReasonMalformed
	if err := t.cfg.Wire.Decode(metaBuf, &msg.Meta); err != nil {
		bad = fmt.Errorf("bad meta frame (%d bytes): %w", len(metaBuf), err)
	} else if k := len(msg.Meta.DataType); k > lim.MaxFrames {
		bad, reason = fmt.Errorf("meta announces %d data frames, limit is %d (PS_MAX_FRAMES)", k, lim.MaxFrames), van.ReasonFrames
	} else {
		bad = message.CheckFrames(&msg.Meta, ndata)
	}
	if bad != nil {
		recvmsg.Put(im)
		return nil, frameError(ident, sender, reason, bad)
	}
	var views viewSet
	msg.Data = copyFrames(im, &views, in, 2, n, t.cfg.ZeroCopyRecvMin)
	if views.n > 0 {
		keepViews(msg, &views)
	}
	msg.Meta.Sender = sender
	msg.UnverifiedSender = unverified
	msg.Meta.Recver = t.myID.Load()
	// data_size is not on the wire (ps-lite's ZMQ van omits it); derive it
	// as Message.AddData would have, saturating where int32 ends.
	msg.Meta.DataSize = int32(min(total-int64(len(metaBuf)), int64(math.MaxInt32)))
	return msg, nil
}

// emptyFrame is what an empty data frame is delivered as: non-nil, so that
// "an empty vals frame" and "no frame" stay distinguishable, and with no
// capacity, so that appending to it cannot touch anything shared.
var emptyFrame = make([]byte, 0)

// copyFrames returns frames [from, to) of in as im's frame list: frames of
// at least zcMin bytes (zcMin > 0) as views of libzmq's buffers, whose kept
// messages it adds to views; other frames of directReadMin bytes or more as a
// buffer from the pool each; the rest in im's small-frame buffer, in which
// each frame starts 8-byte aligned.
func copyFrames(im *recvmsg.Msg, views *viewSet, in *inBuf, from, to, zcMin int) [][]byte {
	dst := im.Frames(to - from)
	total := 0
	for i := from; i < to; i++ {
		if n := int(in.size[i]); n < directReadMin {
			total += (n + 7) &^ 7
		}
	}
	var buf []byte
	if total > 0 {
		buf = im.Small(total)
	}
	off := 0
	for i := from; i < to; i++ {
		n := int(in.size[i])
		if n == 0 {
			dst = append(dst, emptyFrame)
			continue
		}
		// libzmq's large frames are malloc'd with a header before the
		// data; the alignment the transport promises is checked, not
		// assumed.
		if zcMin > 0 && n >= zcMin && uintptr(in.data[i])%8 == 0 {
			if m := C.eps_in_keep(in.c, C.int(i)); m != nil && uintptr(in.data[i])%8 == 0 {
				openViews.Add(1)
				views.add(keptFrame{idx: len(dst), msg: m})
				dst = append(dst, in.view(i))
				continue
			} else if m != nil {
				// Moved but no longer aligned (not seen in practice): copy.
				f := getBuf(n)
				copy(f, in.view(i))
				C.eps_kept_close(m)
				dst = append(dst, f)
				continue
			}
		}
		if n >= directReadMin {
			f := getBuf(n)
			copy(f, in.view(i))
			dst = append(dst, f)
			continue
		}
		f := buf[off : off+n : off+n]
		copy(f, in.view(i))
		dst = append(dst, f)
		off += (n + 7) &^ 7
	}
	return dst
}

// Release gives msg, which Recv returned, back for reuse: its pooled
// receive buffers, its small frames and the Message itself, which a later
// Recv may return again; it closes msg's zero-copy views. Nothing of msg may
// be used afterwards (including slices of its frames kept elsewhere), and
// it must be released at most once. Calling Release is optional only for
// messages without views (see Config.ZeroCopyRecvMin): an unreleased
// message is garbage-collected. A buffer that a zero-copy Send still
// references (a frame echoed back) is left to the GC instead of being
// reused under libzmq's feet.
func (t *Transport) Release(msg *message.Message) {
	views := takeViews(msg)
	for i := range views.n {
		k := views.at(i)
		closeView(k, msg.Data[k.idx])
		msg.Data[k.idx] = nil // not Go memory: never pooled
	}
	for _, d := range msg.Data {
		if cap(d) >= directReadMin && !pinnedWithin(d[:cap(d)]) {
			putBuf(d)
		}
	}
	clear(msg.Data)
	msg.Data = nil
	if im := recvmsg.Of(msg); im != nil {
		if pinnedWithin(im.SmallBuf()) {
			im.DropSmall()
		}
		recvmsg.Put(im)
	}
}

func (t *Transport) recvErr(err error) error {
	if err == errTerm || t.closed.Load() {
		return van.ErrClosed
	}
	return fmt.Errorf("van/zmq: recv: %w", err)
}

func frameError(ident []byte, sender int32, reason string, err error) *van.FrameError {
	peer := "anonymous"
	if sender != message.Empty {
		peer = string(idPart(ident))
	}
	return &van.FrameError{Peer: peer, Reason: reason, Err: err}
}

// parseIdentity maps a ROUTER identity frame to a node id: "ps<decimal>"
// (what ps-lite and Connect use) gives the id; anything else, including the
// random 5-byte identity libzmq assigns to anonymous peers, gives
// message.Empty.
func parseIdentity(b []byte) int32 {
	if len(b) < 3 || b[0] != 'p' || b[1] != 's' || len(b) > 2+10 {
		return message.Empty
	}
	var v int64
	for _, c := range b[2:] {
		if c < '0' || c > '9' {
			return message.Empty
		}
		v = v*10 + int64(c-'0')
	}
	if v > int64(message.Empty) {
		return message.Empty
	}
	return int32(v)
}

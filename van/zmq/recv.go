//go:build cgo

package zmq

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	zmq4 "github.com/pebbe/zmq4"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

var (
	errNotBound = errors.New("van/zmq: Recv before Bind")
	errNoMeta   = errors.New("no meta frame")
)

// Recv implements van.Transport. It blocks until a message arrives on the
// ROUTER, then sets Meta.Sender from the peer identity ("ps<id>", otherwise
// message.Empty) and Meta.Recver to this node's id as last given to
// Connect. Meta.DataSize is the total length of the data frames.
//
// Every data frame is a fresh allocation owned by the caller, and every
// non-empty frame starts at an 8-byte-aligned address, so it may be viewed
// as a []uint64 or []float64 in place. (Go allocates 8-byte-aligned blocks
// for sizes that are multiples of 8 or at least 16 bytes; the rare shorter
// odd-sized frame is copied into such a block.)
//
// Recv must not be called concurrently with itself, and returns an error if
// called before Bind.
func (t *Transport) Recv() (*message.Message, error) {
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	if t.closed.Load() {
		return nil, van.ErrClosed
	}
	if t.router == nil {
		return nil, errNotBound
	}
	return t.recvLocked(t.router)
}

// recvLocked reads one whole multipart message from the ROUTER r. It always
// consumes the message to its last frame, even a malformed one, so that the
// next call starts at a message boundary. Caller holds t.recvMu.
func (t *Transport) recvLocked(r *zmq4.Socket) (*message.Message, error) {
	ident, more, err := recvFrame(r)
	if err != nil {
		return nil, t.recvErr(err)
	}
	sender := parseIdentity(ident)
	if !more {
		return nil, frameError(ident, sender, errNoMeta)
	}

	metaBuf, more, err := recvFrame(r)
	if err != nil {
		return nil, t.recvErr(err)
	}
	lim := t.cfg.Limits
	msg := &message.Message{}
	total := int64(len(metaBuf))
	var bad error // first reason to reject; remaining frames are then drained
	switch {
	case total > lim.MaxMessageBytes:
		bad = fmt.Errorf("meta frame of %d bytes exceeds the %d-byte message limit", total, lim.MaxMessageBytes)
	default:
		if err := message.DecodeMeta(metaBuf, &msg.Meta); err != nil {
			bad = fmt.Errorf("bad meta frame (%d bytes): %w", len(metaBuf), err)
		} else if n := len(msg.Meta.DataType); n > lim.MaxFrames {
			bad = fmt.Errorf("meta announces %d data frames, limit is %d", n, lim.MaxFrames)
		} else if n > 0 {
			msg.Data = make([][]byte, 0, n)
		}
	}

	nframes := 0
	for more {
		var b []byte
		b, more, err = recvFrame(r)
		if err != nil {
			return nil, t.recvErr(err)
		}
		nframes++
		total += int64(len(b))
		if bad != nil {
			continue
		}
		switch {
		case nframes > lim.MaxFrames:
			bad = fmt.Errorf("more than %d data frames", lim.MaxFrames)
		case total > lim.MaxMessageBytes:
			bad = fmt.Errorf("message exceeds %d bytes", lim.MaxMessageBytes)
		default:
			msg.Data = append(msg.Data, aligned(b))
		}
	}
	if bad == nil {
		bad = message.CheckFrames(&msg.Meta, nframes)
	}
	if bad != nil {
		return nil, frameError(ident, sender, bad)
	}
	msg.Meta.Sender = sender
	msg.Meta.Recver = t.myID.Load()
	// data_size is not on the wire (ps-lite's ZMQ van omits it); derive it
	// as Message.AddData would have, saturating where int32 ends.
	msg.Meta.DataSize = int32(min(total-int64(len(metaBuf)), int64(math.MaxInt32)))
	return msg, nil
}

// recvFrame receives one frame and reports whether more frames of the same
// message follow. pebbe/zmq4 copies the frame out of libzmq's buffer into a
// new Go slice; an empty frame comes back as a non-nil empty slice.
func recvFrame(r *zmq4.Socket) ([]byte, bool, error) {
	b, err := r.RecvBytes(0)
	if err != nil {
		return nil, false, err
	}
	more, err := r.GetRcvmore()
	if err != nil {
		return nil, false, err
	}
	return b, more, nil
}

func (t *Transport) recvErr(err error) error {
	if zmq4.AsErrno(err) == zmq4.ETERM || t.closed.Load() {
		return van.ErrClosed
	}
	return fmt.Errorf("van/zmq: recv: %w", err)
}

func frameError(ident []byte, sender int32, err error) *van.FrameError {
	peer := "anonymous"
	if sender != message.Empty {
		peer = string(ident)
	}
	return &van.FrameError{Peer: peer, Err: err}
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

// aligned returns b if it is empty or starts at an 8-byte-aligned address,
// and otherwise an aligned copy. Rounding the capacity up to a multiple of 8
// is what makes Go's allocator align the copy.
func aligned(b []byte) []byte {
	if len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 == 0 {
		return b
	}
	c := make([]byte, len(b), (len(b)+7)&^7)
	copy(c, b)
	return c
}

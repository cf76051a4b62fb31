//go:build rdma && cgo

package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

var errNotBound = errors.New("van/rdma: Recv before Bind")

// Recv implements van.Transport. It returns the next message in arrival
// order (in sending order per link), with Meta.Sender set to the identity
// the sending link announced (message.Empty for an anonymous one) and
// Meta.Recver to this node's id as last given to Connect. The frames are one
// Go allocation owned by the caller, each 8-byte aligned; the slot they were
// written into is reused as soon as Recv returns.
//
// A malformed image yields a *van.FrameError and Recv may be called again.
// Recv must not be called concurrently with itself.
func (t *Transport) Recv() (*message.Message, error) {
	t.mu.Lock()
	if !t.bound && !t.closed.Load() {
		t.mu.Unlock()
		return nil, errNotBound
	}
	for len(t.inbox) == 0 && !t.closed.Load() {
		t.cond.Wait()
	}
	if t.closed.Load() {
		t.mu.Unlock()
		return nil, van.ErrClosed
	}
	it := t.inbox[0]
	t.inbox[0] = inItem{}
	t.inbox = t.inbox[1:]
	t.mu.Unlock()
	if it.err != nil {
		return nil, it.err
	}
	s := it.s
	peer := s.link.peer

	t.memMu.RLock()
	if t.closed.Load() {
		t.memMu.RUnlock()
		return nil, van.ErrClosed
	}
	msg, err := t.decode(s)
	t.memMu.RUnlock()

	t.mu.Lock()
	if !t.closed.Load() {
		t.releaseLocked(s, msg)
	}
	t.mu.Unlock()
	if err != nil {
		t.stats.BadWrites.Add(1)
		return nil, &van.FrameError{Peer: peerName(peer), Err: err}
	}
	msg.Meta.Sender = peer
	msg.Meta.Recver = t.myID.Load()
	return msg, nil
}

// decode copies the image in s out into a Message. Caller holds memMu.
func (t *Transport) decode(s *slot) (*message.Message, error) {
	return decodeImage(s.buf.bytes()[:s.hdr.total], s.hdr, t.cfg.Limits)
}

// decodeImage decodes image b (h.total bytes, header first) within lim,
// copying its frames out.
func decodeImage(b []byte, h header, lim van.Limits) (*message.Message, error) {
	n := int(h.nframes)
	if n > lim.MaxFrames {
		return nil, fmt.Errorf("image announces %d data frames, limit is %d", n, lim.MaxFrames)
	}
	lensEnd := hdrSize + 8*n
	metaEnd := uint64(lensEnd) + uint64(h.metaLen)
	if metaEnd > h.total {
		return nil, fmt.Errorf("image of %d bytes cannot hold %d frame lengths and a %d-byte meta", h.total, n, h.metaLen)
	}
	var sum, block uint64
	for i := range n {
		f := binary.LittleEndian.Uint64(b[hdrSize+8*i:])
		if f > h.total {
			return nil, fmt.Errorf("frame %d of %d bytes exceeds the image", i, f)
		}
		sum += f
		block += (f + 7) &^ 7
	}
	if metaEnd+sum != h.total {
		return nil, fmt.Errorf("frames of %d bytes and a %d-byte meta do not fill the %d-byte image", sum, h.metaLen, h.total)
	}
	if int64(sum)+int64(h.metaLen) > lim.MaxMessageBytes {
		return nil, fmt.Errorf("message of %d bytes exceeds the %d-byte limit", sum+uint64(h.metaLen), lim.MaxMessageBytes)
	}
	msg := &message.Message{}
	if err := message.DecodeMeta(b[lensEnd:metaEnd], &msg.Meta); err != nil {
		return nil, fmt.Errorf("bad meta frame (%d bytes): %w", h.metaLen, err)
	}
	if len(msg.Meta.DataType) > lim.MaxFrames {
		return nil, fmt.Errorf("meta announces %d data frames, limit is %d", len(msg.Meta.DataType), lim.MaxFrames)
	}
	if err := message.CheckFrames(&msg.Meta, n); err != nil {
		return nil, err
	}
	if n > 0 {
		// One allocation for all frames; a capacity that is a multiple of
		// 8 makes Go's allocator align it to 8, and each frame starts at a
		// multiple of 8 inside it.
		all := make([]byte, block)
		msg.Data = make([][]byte, n)
		src, dst := metaEnd, uint64(0)
		for i := range n {
			f := binary.LittleEndian.Uint64(b[hdrSize+8*i:])
			copy(all[dst:dst+f], b[src:src+f])
			msg.Data[i] = all[dst : dst+f : dst+f]
			src += f
			dst += (f + 7) &^ 7
		}
	}
	// data_size is not on the wire (ps-lite's ZMQ van omits it too).
	msg.Meta.DataSize = int32(min(sum, math.MaxInt32))
	return msg, nil
}

// releaseLocked recycles s after Recv copied it out, and does the
// request/response bookkeeping: a response frees the landing slot its
// request offered and teaches the landing size; a request remembers its
// landing slot and the cached slot to hand back with our response.
func (t *Transport) releaseLocked(s *slot, msg *message.Message) {
	l, h := s.link, s.hdr
	if msg != nil && msg.Meta.Control.Empty() && l.peer != message.Empty {
		m := &msg.Meta
		rk := respKey{l.peer, m.AppID, m.CustomerID, m.Timestamp}
		if !m.Request {
			if r := t.reqs[rk]; r != nil {
				delete(t.reqs, rk)
				if r.landing != s && r.landing.state == slotLanding {
					t.freeSlotLocked(r.landing)
				}
				if !r.link.dead {
					r.link.learned[r.ckey] = int(h.total)
				}
			}
		} else if !l.dead && (s.cached || h.flags&flagLanding != 0) && len(t.pending) < maxPending {
			if old := t.pending[rk]; old != nil && old.grant != nil && old.grant.state == slotHeld {
				t.freeSlotLocked(old.grant)
			}
			pe := &pendingResp{landing: h.landing, hasLanding: h.flags&flagLanding != 0}
			if s.cached {
				s.state = slotHeld
				pe.grant = s
			}
			t.pending[rk] = pe
			if s.cached {
				return
			}
		}
	}
	t.freeSlotLocked(s)
}

//go:build cgo

package zmq

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// outBuf is a peer's reusable send state, in C memory: the frame table
// eps_send reads, and a scratch area holding the encoded meta and every
// frame below the zero-copy threshold, which libzmq copies during the call.
// Keeping both in C memory makes a steady-state Send allocation-free; the
// zero-copy frames' addresses go into the table as integers (see eps_frame
// in shim.h for why) while their Pinners keep them in place.
type outBuf struct {
	frames   *C.eps_frame
	nframes  int // capacity of frames
	scratch  unsafe.Pointer
	nscratch int // capacity of scratch
}

// maxKeptScratch caps the scratch kept between sends, so that one message
// with a huge Body or many small frames does not pin that much C memory for
// the peer's lifetime.
const maxKeptScratch = 64 << 10

func (o *outBuf) grow(frames, scratch int) {
	if frames > o.nframes {
		n := max(frames, 8)
		// Zeroed slots: see eps_frame in shim.h.
		p := C.eps_frames_grow(o.frames, C.int(o.nframes), C.int(n))
		if p == nil {
			panic("van/zmq: out of C memory")
		}
		o.frames, o.nframes = p, n
	}
	if scratch > o.nscratch {
		n := max(scratch, 512, 2*o.nscratch)
		p := C.realloc(o.scratch, C.size_t(n))
		if p == nil {
			panic("van/zmq: out of C memory")
		}
		o.scratch, o.nscratch = p, n
	}
}

// dirtyFrameSlots reports how many slots of a frame table hold something
// other than NULL where a release record goes, before Send has written
// them, when the memory the table gets was left dirty (eps_debris): the
// table's first 8 slots, then its growth to 16. Tests expect 0 (see
// eps_frame in shim.h). The thread is locked so that the debris and the
// table come from the same per-thread malloc cache.
func dirtyFrameSlots() int {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	slot := C.size_t(unsafe.Sizeof(C.eps_frame{}))
	var o outBuf
	defer o.free()
	dirty := 0
	for _, n := range []int{8, 16} {
		C.eps_debris(C.size_t(n)*slot, 0xab)
		o.grow(n, 0)
		for i := range n {
			// Read as an integer: the point is that it may not be a pointer.
			if *(*uintptr)(unsafe.Pointer(&unsafe.Slice(o.frames, n)[i].node)) != 0 {
				dirty++
			}
		}
	}
	return dirty
}

// trim gives back an oversized scratch area after a send.
func (o *outBuf) trim() {
	if o.nscratch > maxKeptScratch {
		C.free(o.scratch)
		o.scratch, o.nscratch = nil, 0
	}
}

func (o *outBuf) free() {
	C.free(unsafe.Pointer(o.frames))
	C.free(o.scratch)
	*o = outBuf{}
}

// Send implements van.Transport: it sends msg to the DEALER connected to
// msg.Meta.Recver as one multipart message [meta, data...] and returns the
// number of bytes in all frames.
//
// Frames shorter than Config.ZeroCopySendMin are copied during the call.
// Longer ones are not copied at all: libzmq writes them to the socket
// straight from msg.Data, after Send has returned, so the caller must leave
// them unchanged until the message has surely been sent — for a request,
// until its response arrives, as ps-lite requires of KVWorker buffers. The
// memory stays pinned (and alive) until libzmq releases it, so Go memory is
// always safe; memory from C must not be freed before the response either.
//
// Sends to the same peer are serialised; sends to different peers proceed
// in parallel. Send blocks while the peer's queue is at the high-water mark
// (Config.WaterMark). A steady-state Send does not allocate.
func (t *Transport) Send(msg *message.Message) (int, error) {
	id := msg.Meta.Recver
	// Reject here what the receiver would reject, so the bug shows up at
	// its source instead of as a FrameError on another node.
	if err := message.CheckFrames(&msg.Meta, len(msg.Data)); err != nil {
		return 0, fmt.Errorf("van/zmq: send to node %d: %w", id, err)
	}
	defer drainReleases()
	for {
		t.mu.RLock()
		p := t.peers[id]
		t.mu.RUnlock()
		if p == nil {
			if t.closed.Load() {
				return 0, van.ErrClosed
			}
			return 0, fmt.Errorf("van/zmq: no connection to node %d; was it connected?", id)
		}
		p.mu.Lock()
		if p.sock == nil {
			// Connect replaced this peer (or a failed send dropped it)
			// after the lookup, so it is no longer in peers: look again.
			p.mu.Unlock()
			continue
		}
		n, err := t.sendLocked(p, id, msg)
		p.mu.Unlock()
		return n, err
	}
}

// sendLocked writes msg's frames to p's DEALER. Caller holds p.mu.
func (t *Transport) sendLocked(p *peer, id int32, msg *message.Message) (int, error) {
	o := &p.out
	zc := t.cfg.ZeroCopySendMin
	wire := t.cfg.Wire
	metaLen := wire.EncodedLen(&msg.Meta)
	need := metaLen
	for _, d := range msg.Data {
		if zc <= 0 || len(d) < zc {
			need += len(d)
		}
	}
	n := 1 + len(msg.Data)
	o.grow(n, need)
	defer o.trim()

	scratch := unsafe.Slice((*byte)(o.scratch), o.nscratch)
	meta, err := wire.Append(scratch[:0], &msg.Meta)
	if err != nil {
		return 0, fmt.Errorf("van/zmq: send to node %d: %w", id, err)
	}
	if len(meta) != metaLen || unsafe.SliceData(meta) != unsafe.SliceData(scratch) {
		// EncodedLen and MarshalTo disagree: a codec bug, but the message
		// can still go out correctly.
		o.grow(n, len(meta)+need-metaLen)
		scratch = unsafe.Slice((*byte)(o.scratch), o.nscratch)
		copy(scratch, meta)
	}
	frames := unsafe.Slice(o.frames, n)
	frames[0] = C.eps_frame{addr: C.uintptr_t(uintptr(o.scratch)), len: C.size_t(len(meta))}
	off := len(meta)
	total := len(meta)
	pinned := false
	for i, d := range msg.Data {
		total += len(d)
		f := &frames[i+1]
		if zc > 0 && len(d) >= zc {
			if !pinned {
				releases.mu.Lock()
				drainReleasesLocked()
				pinned = true
			}
			ptr := unsafe.Pointer(unsafe.SliceData(d))
			*f = C.eps_frame{addr: C.uintptr_t(uintptr(ptr)), len: C.size_t(len(d)), node: pinFrameLocked(ptr)}
			continue
		}
		copy(scratch[off:], d)
		*f = C.eps_frame{addr: C.uintptr_t(uintptr(o.scratch) + uintptr(off)), len: C.size_t(len(d))}
		off += len(d)
	}
	if pinned {
		releases.mu.Unlock()
	}

	res := C.eps_send(p.sock.p, o.frames, C.int(n))
	if res.err == 0 {
		if p.fwd != nil {
			// The send may have taken the wakeup of an answer (dealerin.go).
			_, _ = t.forwardLocked(p, id)
		}
		return total, nil
	}
	handed := res.handed
	if pinned && int(handed) < n {
		// Frames libzmq never took: release them here.
		releases.mu.Lock()
		for i := int(handed); i < n; i++ {
			if frames[i].node != nil {
				releaseLocked(frames[i].node)
			}
		}
		releases.mu.Unlock()
	}
	err = errno(res.err)
	if res.failed_at == 0 {
		// Nothing was queued: the socket is still usable.
		return 0, t.sendErr(id, p, err)
	}
	// Part of a multipart message is queued and the next send would be
	// appended to it: the socket cannot be reused.
	t.dropPeer(id, p)
	return 0, t.sendErr(id, p, err)
}

func (t *Transport) sendErr(id int32, p *peer, err error) error {
	if err == errTerm || t.closed.Load() {
		return van.ErrClosed
	}
	return fmt.Errorf("van/zmq: send to node %d at %s: %w", id, p.addr, err)
}

// dropPeer forgets p (unless Connect already replaced it) and closes it, in
// that order so that peers never holds a closed socket. Caller holds p.mu.
func (t *Transport) dropPeer(id int32, p *peer) {
	t.mu.Lock()
	if t.peers[id] == p {
		delete(t.peers, id)
	}
	t.mu.Unlock()
	p.close(0)
}

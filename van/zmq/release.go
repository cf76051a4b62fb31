//go:build cgo

package zmq

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Zero-copy send and how its buffers are given back.
//
// A data frame of at least Config.ZeroCopySendMin bytes is handed to libzmq
// with zmq_msg_init_data: libzmq keeps a pointer to the caller's Go memory
// and writes it to the socket from its IO thread, possibly long after Send
// returned. Two things must then hold until libzmq is done with the bytes:
// the memory must stay allocated (the Go GC must not free it) and, by the
// cgo pointer rules, C may keep the pointer only while it is pinned. So
// every such frame is pinned with its own runtime.Pinner, and unpinned once
// libzmq calls the frame's free function.
//
// That free function runs on a libzmq IO thread. Calling into Go from there
// would be legal but costly and risky: a cgo callback on a foreign thread
// has to acquire an M and a P, so when both Ps of a small machine are busy
// (or the GC is stopping the world) libzmq's IO thread — which moves the
// bytes of every socket of the context — would stall until Go lets it in.
// Instead the free function (eps_free, in C) only pushes the frame's
// release record onto a lock-free stack, and Go takes the whole stack at
// once (an atomic exchange) whenever it passes by: on every Send and Recv,
// and when a Transport closes. Until then the frame stays pinned, which
// only delays the reuse of memory that is no longer needed; it never
// exposes memory that is still in use.
//
// Release records live in C memory (libzmq holds pointers to them), in
// chunks that are never freed, so a record's address stays valid for
// whatever libzmq thread still has it. The Pinners live in Go memory,
// indexed by the record's id. The registry is process-wide: several
// Transports in one process (tests run whole jobs in-process) share it.

// relRecord is a release record as libzmq holds it.
type relRecord = C.eps_relnode

// relChunk is the number of release records allocated at a time.
const relChunk = 256

type relSlot struct {
	pin     runtime.Pinner
	ptr     uintptr      // start of the pinned frame, for pinnedWithin
	pos     int          // index in releases.inFlight while in flight
	waiters []*afterSent // AfterSent calls counting on this frame
}

var releases struct {
	mu    sync.Mutex
	nodes []*C.eps_relnode     // chunk bases, C memory, never freed
	slots []*[relChunk]relSlot // parallel to nodes
	free  []uint32             // ids of idle records
	// inFlight lists the ids of the records handed out and not yet
	// released (in no order), so that AfterSent looks at the few frames
	// in flight, not at every record.
	inFlight []uint32
	due      []func() // AfterSent functions to run outside the lock
	// spareDue is a due list drainReleases has run, kept for reuse.
	spareDue []func()
	// idleWaiters are afterSent records to reuse.
	idleWaiters []*afterSent
}

// afterSent is one AfterSent call: fn runs when its last frame is released.
type afterSent struct {
	frames int
	fn     func()
}

// releasedTop is eps_released, the C stack's top pointer, read and swapped
// with Go's atomics (the same hardware atomics C's __atomic builtins use).
var releasedTop = (*unsafe.Pointer)(unsafe.Pointer(&C.eps_released))

func relNode(id uint32) *C.eps_relnode {
	base := releases.nodes[id/relChunk]
	return (*C.eps_relnode)(unsafe.Add(unsafe.Pointer(base), uintptr(id%relChunk)*unsafe.Sizeof(C.eps_relnode{})))
}

func relSlotOf(id uint32) *relSlot { return &releases.slots[id/relChunk][id%relChunk] }

// pinFrame pins the Go memory at p and returns the release record libzmq
// must get as the free-callback hint. Caller holds releases.mu.
func pinFrameLocked(p unsafe.Pointer) *C.eps_relnode {
	if len(releases.free) == 0 {
		base := (*C.eps_relnode)(C.calloc(relChunk, C.size_t(unsafe.Sizeof(C.eps_relnode{}))))
		if base == nil {
			panic("van/zmq: out of C memory for release records")
		}
		first := uint32(len(releases.nodes)) * relChunk
		releases.nodes = append(releases.nodes, base)
		releases.slots = append(releases.slots, new([relChunk]relSlot))
		for i := uint32(relChunk); i > 0; i-- {
			id := first + i - 1
			relNode(id).id = C.uint32_t(id)
			releases.free = append(releases.free, id)
		}
	}
	id := releases.free[len(releases.free)-1]
	releases.free = releases.free[:len(releases.free)-1]
	s := relSlotOf(id)
	s.pin.Pin(p)
	s.ptr = uintptr(p)
	s.pos = len(releases.inFlight)
	releases.inFlight = append(releases.inFlight, id)
	return relNode(id)
}

// releaseLocked unpins the frame of record n and makes n idle. Caller holds
// releases.mu.
func releaseLocked(n *C.eps_relnode) {
	id := uint32(n.id)
	s := relSlotOf(id)
	s.pin.Unpin()
	s.ptr = 0
	last := releases.inFlight[len(releases.inFlight)-1]
	releases.inFlight[s.pos] = last
	relSlotOf(last).pos = s.pos
	releases.inFlight = releases.inFlight[:len(releases.inFlight)-1]
	for _, w := range s.waiters {
		if w.frames--; w.frames == 0 {
			releases.due = append(releases.due, w.fn)
			dueCount.Add(1)
			*w = afterSent{}
			releases.idleWaiters = append(releases.idleWaiters, w)
		}
	}
	clear(s.waiters)
	s.waiters = s.waiters[:0]
	releases.free = append(releases.free, id)
}

// drainReleasesLocked unpins every frame libzmq has released since the last
// drain. Caller holds releases.mu.
func drainReleasesLocked() {
	top := atomic.SwapPointer(releasedTop, nil)
	for n := (*C.eps_relnode)(top); n != nil; {
		next := n.next
		releaseLocked(n)
		n = next
	}
}

// drainReleases is drainReleasesLocked for callers without the lock, and
// runs the AfterSent functions that became due. The common case, nothing
// released, costs two atomic loads.
func drainReleases() {
	if atomic.LoadPointer(releasedTop) == nil && dueCount.Load() == 0 {
		return
	}
	releases.mu.Lock()
	drainReleasesLocked()
	var due []func()
	if len(releases.due) > 0 {
		// Take the list and leave the spare (or nothing) in its place.
		due = releases.due
		releases.due, releases.spareDue = releases.spareDue[:0], nil
	}
	dueCount.Store(0)
	releases.mu.Unlock()
	if len(due) == 0 {
		return
	}
	for _, fn := range due {
		fn()
	}
	clear(due)
	releases.mu.Lock()
	if releases.spareDue == nil {
		releases.spareDue = due[:0]
	}
	releases.mu.Unlock()
}

// dueCount is len(releases.due) for the lock-free check in drainReleases
// (functions may become due under another caller's lock, e.g. in Send).
var dueCount atomic.Int32

// AfterSent runs fn once libzmq has released every zero-copy frame in
// flight that starts within one of bufs, or at once when there is none
// (they were copied during Send, or are out already). A caller that sends
// memory it must keep alive until then — the C++ bridge lends C++ arrays,
// as ps-lite's ZeroMQ van does — frees it in fn. Frames of earlier sends
// of the same memory count too, which can only delay fn.
//
// fn runs on a goroutine passing through a transport (a Send, Recv or
// Close of any Transport of the process), outside the transport's locks;
// it must not block.
func AfterSent(fn func(), bufs ...[]byte) {
	releases.mu.Lock()
	drainReleasesLocked()
	var w *afterSent
	for _, b := range bufs {
		for _, id := range releases.inFlight {
			s := relSlotOf(id)
			if !startsWithin(s, b) {
				continue
			}
			if w == nil {
				w = newAfterSentLocked(fn)
			}
			w.frames++
			s.waiters = append(s.waiters, w)
		}
	}
	releases.mu.Unlock()
	if w == nil {
		fn()
	}
}

// pinnedWithin reports whether a frame libzmq still holds starts inside b.
// It looks at the records in flight only.
func pinnedWithin(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	releases.mu.Lock()
	defer releases.mu.Unlock()
	drainReleasesLocked()
	for _, id := range releases.inFlight {
		if startsWithin(relSlotOf(id), b) {
			return true
		}
	}
	return false
}

// startsWithin reports whether the frame of in-flight record s starts
// inside b.
func startsWithin(s *relSlot, b []byte) bool {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return len(b) > 0 && s.ptr >= lo && s.ptr < lo+uintptr(len(b))
}

// newAfterSentLocked returns an afterSent record for fn, reusing an idle
// one. Caller holds releases.mu.
func newAfterSentLocked(fn func()) *afterSent {
	n := len(releases.idleWaiters)
	if n == 0 {
		return &afterSent{fn: fn}
	}
	w := releases.idleWaiters[n-1]
	releases.idleWaiters = releases.idleWaiters[:n-1]
	w.fn = fn
	return w
}

// pinnedFrames reports how many zero-copy frames libzmq still holds (after
// a drain); tests use it to check that nothing leaks.
func pinnedFrames() int {
	releases.mu.Lock()
	defer releases.mu.Unlock()
	drainReleasesLocked()
	return len(releases.inFlight)
}

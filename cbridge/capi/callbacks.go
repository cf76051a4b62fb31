package main

/*
#include "shims.h"
*/
import "C"

import (
	"runtime"
	"runtime/cgo"
	"unsafe"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// Completion status for on_kv_done (PS_DONE_* in c_api.h).
const (
	doneOK        = C.PS_DONE_OK
	doneError     = C.PS_DONE_ERROR
	doneCancelled = C.PS_DONE_CANCELLED
)

// Calls into C pass Go memory (received frames, assembled pull results) as
// plain pointer arguments: cgo allows that for memory without Go pointers,
// for the duration of the call, and the C side copies what it keeps.

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}

func callSimple(ctx unsafe.Pointer, request bool, d kv.SimpleData) {
	req := C.int(0)
	if request {
		req = 1
	}
	C.psb_on_simple(ctx, req, C.int(d.Head), (*C.ps_cchar)(bytesPtr(d.Body)), C.size_t(len(d.Body)),
		C.int(d.Sender), C.int(d.Timestamp), C.int(d.CustomerID))
}

// handOverMin is the request size (bytes of keys, values and lens) from which
// a KV request's frames are handed over to C++ instead of being copied by
// it. Handing over costs a pin, a handle and a later call back into Go;
// copying costs a malloc and a memcpy, and beyond glibc's mmap threshold
// (128 KiB) also a page fault per 4 KiB of fresh memory, which dominated
// large requests.
const handOverMin = 32 << 10

// heldFrames keeps the frames of a handed-over request pinned (so that C
// may keep pointers to them) until C++ releases them with ps_release, which
// also gives them back to the transport for reuse.
type heldFrames struct {
	pin     runtime.Pinner
	release func()
	po      *postoffice.Postoffice
}

func callKVRequest(po *postoffice.Postoffice, ctx unsafe.Pointer, meta kv.ReqMeta, data kv.KVPairs) {
	var keys *C.ps_ckey
	if len(data.Keys) > 0 {
		keys = (*C.ps_ckey)(unsafe.Pointer(unsafe.SliceData(data.Keys)))
	}
	var lens *C.ps_cint
	if len(data.Lens) > 0 {
		lens = (*C.ps_cint)(unsafe.Pointer(unsafe.SliceData(data.Lens)))
	}
	var release C.uint64_t
	if len(data.Keys)*8+len(data.Vals)+len(data.Lens)*4 >= handOverMin {
		// The frames are views of the received message, which nothing in
		// Go reads after the handler: C++ may keep (and modify) them.
		h := &heldFrames{release: meta.Retain(), po: po}
		for _, p := range []unsafe.Pointer{unsafe.Pointer(keys), bytesPtr(data.Vals), unsafe.Pointer(lens)} {
			if p != nil {
				h.pin.Pin(p)
			}
		}
		release = C.uint64_t(cgo.NewHandle(h))
	}
	C.psb_kv_request(ctx, C.int(meta.Cmd), cbool(meta.Push), cbool(meta.Pull), C.int(meta.Sender),
		C.int(meta.Timestamp), C.int(meta.CustomerID), C.int(meta.DataType), C.int(meta.Priority),
		C.uint64_t(firstKey(data.Keys)), C.uint64_t(meta.Raw.Addr), C.int(meta.Raw.ValLen), C.int(meta.Raw.Option),
		keys, C.size_t(len(data.Keys)),
		bytesPtr(data.Vals), C.size_t(len(data.Vals)), lens, C.size_t(len(data.Lens)), release)
}

// releaseFrames unpins the frames of a handed-over request.
func releaseFrames(release uint64) {
	h := cgo.Handle(release)
	held := h.Value().(*heldFrames)
	fromHostThread(held.po, "KVPairs release")
	held.pin.Unpin()
	held.release()
	h.Delete()
}

// keptFree returns the call that ends C++'s loan of kept (nil for none).
func keptFree(free C.ps_kept_free, kept unsafe.Pointer) func() {
	if free == nil {
		return nil
	}
	return func() { C.psb_free_kept(free, kept) }
}

func callKVDone(ctx unsafe.Pointer, status C.int, err error, vals []byte, lens []int32) {
	var msg string
	if err != nil {
		msg = err.Error()
	}
	var cmsg *C.ps_cchar
	if msg != "" {
		cmsg = (*C.ps_cchar)(unsafe.Pointer(unsafe.StringData(msg)))
	}
	var clens *C.ps_cint
	if len(lens) > 0 {
		clens = (*C.ps_cint)(unsafe.Pointer(unsafe.SliceData(lens)))
	}
	C.psb_on_kv_done(ctx, status, cmsg, C.size_t(len(msg)),
		bytesPtr(vals), C.size_t(len(vals)), clens, C.size_t(len(lens)))
}

// deliverMessage hands a raw message to a C++ Customer. ps_message holds
// pointers to the body and frames; Go memory handed to C inside another
// Go value must be pinned for the call.
func (a *app) deliverMessage(m *message.Message) {
	var pin runtime.Pinner
	defer pin.Unpin()
	cm := C.ps_message{
		head:        C.int(m.Meta.Head),
		app_id:      C.int(m.Meta.AppID),
		customer_id: C.int(m.Meta.CustomerID),
		timestamp:   C.int(m.Meta.Timestamp),
		sender:      C.int(m.Meta.Sender),
		recver:      C.int(m.Meta.Recver),
		request:     cbool(m.Meta.Request),
		push:        cbool(m.Meta.Push),
		pull:        cbool(m.Meta.Pull),
		simple_app:  cbool(m.Meta.SimpleApp),
		priority:    C.int(m.Meta.Priority),
		body_len:    C.size_t(len(m.Meta.Body)),
	}
	if p := bytesPtr(m.Meta.Body); p != nil {
		pin.Pin(p)
		cm.body = (*C.ps_cchar)(p)
	}
	n := min(len(m.Data), C.PS_MAX_FRAMES)
	cm.num_frames = C.int(n)
	for i := range n {
		if p := bytesPtr(m.Data[i]); p != nil {
			pin.Pin(p)
			cm.frame_data[i] = p
		}
		cm.frame_size[i] = C.size_t(len(m.Data[i]))
		if i < len(m.Meta.DataType) {
			cm.frame_type[i] = C.int(m.Meta.DataType[i])
		}
	}
	C.psb_on_message(a.custCtx, &cm)
}

// waiterWord is the completion notice of a request that a C++ thread waits
// for in ps_app_wait (wait.c): it sets the thread's waiter word. A struct
// of one pointer is stored in an interface as is, so registering it
// allocates nothing.
type waiterWord struct{ w unsafe.Pointer }

// Notify implements kv.Notifier.
func (n waiterWord) Notify(o kv.Outcome) {
	s := C.PSB_WAIT_FAILED
	switch o {
	case kv.Succeeded:
		s = C.PSB_WAIT_DONE
	case kv.Abandoned:
		s = C.PSB_WAIT_CLOSED
	}
	C.psb_waiter_wake(n.w, C.uint32_t(s))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

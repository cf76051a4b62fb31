package main

// Every function of the C ABI (../include/ps/internal/c_api.h) that Go
// implements. The preamble includes that header, so the C compiler checks
// these definitions against its prototypes. Per cgo's rules this file only
// declares C; definitions live in shims.c.

/*
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include "ps/internal/c_api.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"time"
	"unsafe"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
)

// cerr converts err into the C convention: NULL, or a malloc'd message that
// the caller releases with ps_free.
func cerr(err error) *C.char {
	if err == nil {
		return nil
	}
	return C.CString(err.Error())
}

func gostr(p *C.ps_cchar, n C.size_t) string {
	if p == nil || n == 0 {
		return ""
	}
	return C.GoStringN((*C.char)(unsafe.Pointer(p)), C.int(n))
}

// cslice views n elements of C memory at p as a Go slice (no copy).
func cslice[T any](p unsafe.Pointer, n C.size_t) []T {
	if p == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(p), int(n))
}

// lookup returns the app of a handle. A stale handle is a bug in the C++
// side; cgo.Handle.Value panics on it, which is the right outcome.
func lookup(h C.uint64_t) *app { return cgo.Handle(h).Value().(*app) }

//export ps_env_set
func ps_env_set(key, value *C.ps_cchar) {
	if key == nil {
		return
	}
	k := C.GoString((*C.char)(unsafe.Pointer(key)))
	if value == nil {
		setEnvOverride(k, nil)
		return
	}
	v := C.GoString((*C.char)(unsafe.Pointer(value)))
	setEnvOverride(k, &v)
}

//export ps_env_clear
func ps_env_clear() { clearEnvOverrides() }

//export ps_log
func ps_log(severity C.int, file *C.ps_cchar, line C.int, msg *C.ps_cchar, n C.size_t) {
	logCPP(int(severity), C.GoString((*C.char)(unsafe.Pointer(file))), int(line),
		string(cslice[byte](unsafe.Pointer(msg), n)))
}

//export ps_release
func ps_release(release C.uint64_t) {
	if release != 0 {
		releaseFrames(uint64(release))
	}
}

//export ps_node_init
func ps_node_init(role C.int) *C.char {
	_, err := ensureNode(int(role))
	return cerr(err)
}

//export ps_node_start
func ps_node_start(customerID, role, doBarrier C.int) *C.char {
	return cerr(startNode(int(customerID), int(role), -1, doBarrier != 0))
}

//export ps_node_start_rank
func ps_node_start_rank(customerID, role, rank, doBarrier C.int) *C.char {
	return cerr(startNode(int(customerID), int(role), int(rank), doBarrier != 0))
}

//export ps_node_group_size
func ps_node_group_size() C.int {
	po, err := ensureNode(-1)
	if err != nil {
		return 1
	}
	return C.int(po.GroupSize())
}

//export ps_node_finalize
func ps_node_finalize(customerID, doBarrier C.int) *C.char {
	return cerr(finalizeNode(int(customerID), doBarrier != 0))
}

//export ps_node_barrier
func ps_node_barrier(slot, customerID, group C.int) *C.char {
	po, err := slotNode(int(slot))
	if err != nil {
		return cerr(fmt.Errorf("elasticps: Barrier before Start: %w", err))
	}
	return cerr(po.Barrier(int(customerID), int(group)))
}

//export ps_node_info_get
func ps_node_info_get(slot C.int, out *C.ps_node_info) *C.char {
	po, err := nodeFor(int(slot))
	if err != nil {
		return cerr(err)
	}
	me := po.MyNode()
	out.role = C.int(po.Role())
	out.id = C.int(me.ID)
	out.customer_id = C.int(me.CustomerID)
	out.port = C.int(me.Port)
	out.is_recovery = cbool(me.IsRecovery)
	out.ready = cbool(isReady(po))
	out.num_workers = C.int(po.NumWorkers())
	out.num_servers = C.int(po.NumServers())
	out.verbose = C.int(po.Verbose())
	host := me.Hostname
	if len(host) >= len(out.hostname) {
		host = host[:len(out.hostname)-1]
	}
	for i := range len(host) {
		out.hostname[i] = C.char(host[i])
	}
	out.hostname[len(host)] = 0
	return nil
}

//export ps_node_is_joint
func ps_node_is_joint() C.int {
	node.mu.Lock()
	exists, joint := node.po != nil, node.worker != nil
	node.mu.Unlock()
	if !exists {
		joint = processRole(-1) == roleJoint
	}
	return cbool(joint)
}

//export ps_node_group
func ps_node_group(slot, group C.int, ids *C.int, capacity C.int, count *C.int) *C.char {
	po, err := nodeFor(int(slot))
	if err != nil {
		return cerr(err)
	}
	list := po.NodeIDs(int(group))
	if list == nil {
		*count = -1
		return nil
	}
	dst := cslice[C.int](unsafe.Pointer(ids), C.size_t(max(capacity, 0)))
	for i := range min(len(list), len(dst)) {
		dst[i] = C.int(list[i])
	}
	*count = C.int(len(list))
	return nil
}

//export ps_node_key_ranges
func ps_node_key_ranges(begins, ends *C.uint64_t, capacity C.int, count *C.int) *C.char {
	po, err := ensureNode(-1)
	if err != nil {
		return cerr(err)
	}
	rs := po.ServerKeyRanges()
	b := cslice[C.uint64_t](unsafe.Pointer(begins), C.size_t(max(capacity, 0)))
	e := cslice[C.uint64_t](unsafe.Pointer(ends), C.size_t(max(capacity, 0)))
	for i := range min(len(rs), len(b), len(e)) {
		b[i], e[i] = C.uint64_t(rs[i].Begin), C.uint64_t(rs[i].End)
	}
	*count = C.int(len(rs))
	return nil
}

//export ps_node_dead_nodes
func ps_node_dead_nodes(timeoutSec C.int, ids *C.int, capacity C.int) C.int {
	po := currentNode()
	if po == nil {
		return 0
	}
	dead := po.DeadNodes(time.Duration(timeoutSec) * time.Second)
	dst := cslice[C.int](unsafe.Pointer(ids), C.size_t(max(capacity, 0)))
	for i := range min(len(dead), len(dst)) {
		dst[i] = C.int(dead[i])
	}
	return C.int(len(dead))
}

//export ps_node_next_timestamp
func ps_node_next_timestamp() C.int {
	po, err := ensureNode(-1)
	if err != nil {
		return 0
	}
	return C.int(po.NextTimestamp())
}

//export ps_van_send
func ps_van_send(cm *C.ps_cmessage, bytes *C.int) *C.char {
	*bytes = 0
	po := currentNode()
	if po == nil || !isReady(po) {
		return cerr(errors.New("elasticps: Van::Send before Start: the node is not running"))
	}
	n := int(cm.num_frames)
	if n < 0 || n > C.PS_MAX_FRAMES {
		return cerr(errors.New("elasticps: Van::Send: a message carries 0 to 16 data frames"))
	}
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Head = int32(cm.head)
	m.Meta.AppID = int32(cm.app_id)
	m.Meta.CustomerID = int32(cm.customer_id)
	m.Meta.Timestamp = int32(cm.timestamp)
	m.Meta.Recver = int32(cm.recver)
	m.Meta.Request = cm.request != 0
	m.Meta.Push = cm.push != 0
	m.Meta.Pull = cm.pull != 0
	m.Meta.SimpleApp = cm.simple_app != 0
	m.Meta.Priority = int32(cm.priority)
	// Raw sends are rare (custom apps): copy, so nothing of C is retained
	// whatever the transport does.
	if cm.body_len > 0 {
		m.Meta.Body = C.GoBytes(unsafe.Pointer(cm.body), C.int(cm.body_len))
	}
	for i := range n {
		m.AddData(message.DataType(cm.frame_type[i]), C.GoBytes(unsafe.Pointer(cm.frame_data[i]), C.int(cm.frame_size[i])))
	}
	fromHostThread(po, "Van::Send")
	sent, err := po.Send(m)
	*bytes = C.int(min(sent, int(C.INT_MAX)))
	return cerr(err)
}

func newHandle(a *app, err error, handle *C.uint64_t) *C.char {
	if err != nil {
		*handle = 0
		return cerr(err)
	}
	*handle = C.uint64_t(cgo.NewHandle(a))
	return nil
}

//export ps_app_new_simple
func ps_app_new_simple(appID, customerID C.int, ctx unsafe.Pointer, handle *C.uint64_t) *C.char {
	a, err := newSimpleApp(int(appID), int(customerID), ctx)
	return newHandle(a, err, handle)
}

//export ps_app_new_kv_worker
func ps_app_new_kv_worker(appID, customerID C.int, ctx unsafe.Pointer, handle *C.uint64_t) *C.char {
	a, err := newWorkerApp(int(appID), int(customerID), 0, ctx)
	return newHandle(a, err, handle)
}

//export ps_app_new_kv_worker_instance
func ps_app_new_kv_worker_instance(appID, customerID, instance C.int, ctx unsafe.Pointer, handle *C.uint64_t) *C.char {
	a, err := newWorkerApp(int(appID), int(customerID), int(instance), ctx)
	return newHandle(a, err, handle)
}

//export ps_app_new_kv_server
func ps_app_new_kv_server(appID C.int, ctx, server unsafe.Pointer, handle *C.uint64_t) *C.char {
	a, err := newServerApp(int(appID), 0, ctx, server)
	return newHandle(a, err, handle)
}

//export ps_app_new_kv_server_instance
func ps_app_new_kv_server_instance(appID, instance C.int, ctx, server unsafe.Pointer, handle *C.uint64_t) *C.char {
	a, err := newServerApp(int(appID), int(instance), ctx, server)
	return newHandle(a, err, handle)
}

//export ps_app_new_customer
func ps_app_new_customer(appID, customerID C.int, ctx unsafe.Pointer, handle *C.uint64_t) *C.char {
	a, err := newCustomerApp(int(appID), int(customerID), ctx)
	return newHandle(a, err, handle)
}

//export ps_app_close
func ps_app_close(handle C.uint64_t) {
	if handle == 0 {
		return
	}
	h := cgo.Handle(handle)
	h.Value().(*app).close()
	h.Delete()
}

// ps_app_wait is in wait.c: it spins in C or waits in Go (see there) with
// the three calls below.

// psgo_app_wait waits in Go and returns the outcome of request ts.
//
//export psgo_app_wait
func psgo_app_wait(handle C.uint64_t, ts C.int) *C.char {
	a := lookup(handle)
	fromHostThread(a.po, "Wait")
	return cerr(a.wait(int32(ts)))
}

// psgo_app_wait_begin registers w, a waiter word in C memory, to be set
// (psb_waiter_wake) when request ts completes, if ts is the app's only
// outstanding request, and returns 1. Otherwise it waits for ts in Go,
// stores the outcome in *errOut and returns 0.
//
//export psgo_app_wait_begin
func psgo_app_wait_begin(handle C.uint64_t, ts C.int, w unsafe.Pointer, errOut **C.char) C.int {
	a := lookup(handle)
	fromHostThread(a.po, "Wait")
	if a.cust.OnDone(int32(ts), waiterWord{w}, true) {
		return 1
	}
	*errOut = cerr(a.wait(int32(ts)))
	return 0
}

// psgo_app_wait_disarm withdraws the waiter word of ts; 0: it has been set
// (or the app is closed, which sets it).
//
//export psgo_app_wait_disarm
func psgo_app_wait_disarm(handle C.uint64_t, ts C.int) C.int {
	a := lookupOpen(handle)
	return cbool(a != nil && a.cust.CancelOnDone(int32(ts)))
}

// lookupOpen is lookup for a spinning thread, which may hold the handle of
// an app another thread closes (ps_app_close deletes the handle after
// setting its waiter word): nil then, instead of a panic.
func lookupOpen(h C.uint64_t) (a *app) {
	defer func() {
		if recover() != nil {
			a = nil
		}
	}()
	return lookup(h)
}

//export ps_app_new_request
func ps_app_new_request(handle C.uint64_t, group C.int) C.int {
	return C.int(lookup(handle).cust.NewRequest(int(group)))
}

//export ps_app_num_response
func ps_app_num_response(handle C.uint64_t, ts C.int) C.int {
	return C.int(lookup(handle).cust.NumResponse(int32(ts)))
}

//export ps_app_add_response
func ps_app_add_response(handle C.uint64_t, ts, num C.int) {
	lookup(handle).cust.AddResponse(int32(ts), int(num))
}

//export ps_simple_request
func ps_simple_request(handle C.uint64_t, head C.int, body *C.ps_cchar, bodyLen C.size_t, group C.int, ts *C.int) *C.char {
	a := lookup(handle)
	if a.kind == kindCustomer {
		*ts = -1
		return cerr(errors.New("elasticps: SimpleApp::Request on a raw Customer"))
	}
	fromHostThread(a.po, "SimpleApp::Request")
	// The body is copied: the message may outlive the call (resend layer).
	var b []byte
	if bodyLen > 0 {
		b = C.GoBytes(unsafe.Pointer(body), C.int(bodyLen))
	}
	t, err := a.simpleRequest(int32(head), b, int(group))
	*ts = C.int(t)
	return cerr(err)
}

//export ps_simple_response
func ps_simple_response(handle C.uint64_t, head C.int, body *C.ps_cchar, bodyLen C.size_t, recver, ts, customerID C.int) *C.char {
	a := lookup(handle)
	if a.kind == kindCustomer {
		return cerr(errors.New("elasticps: SimpleApp::Response on a raw Customer"))
	}
	fromHostThread(a.po, "SimpleApp::Response")
	var b []byte
	if bodyLen > 0 {
		b = C.GoBytes(unsafe.Pointer(body), C.int(bodyLen))
	}
	return cerr(a.sendSimpleResponse(kv.SimpleData{Head: int32(head), Sender: int32(recver), Timestamp: int32(ts), CustomerID: int32(customerID)}, b))
}

//export ps_kv_worker_request
func ps_kv_worker_request(handle C.uint64_t, r *C.ps_ckv_request, ts *C.int) *C.char {
	*ts = -1
	a := lookup(handle)
	fromHostThread(a.po, "KVWorker::Push/Pull")
	keys := cslice[uint64](unsafe.Pointer(r.keys), r.num_keys)
	vals := cslice[byte](unsafe.Pointer(r.vals), r.vals_bytes)
	lens := cslice[int32](unsafe.Pointer(r.lens), r.num_lens)
	opts := kv.Options{Cmd: int32(r.cmd), Priority: int32(r.priority), DataType: message.DataType(r.data_type)}
	if r.use_parts != 0 {
		opts.Parts = make([]kv.Part, 0, int(r.num_parts))
		for _, p := range cslice[C.ps_kv_part](unsafe.Pointer(r.parts), r.num_parts) {
			opts.Parts = append(opts.Parts, kv.Part{
				Server: int(p.server),
				Keys:   cslice[uint64](unsafe.Pointer(p.keys), p.num_keys),
				Vals:   cslice[byte](unsafe.Pointer(p.vals), p.vals_bytes),
				Lens:   cslice[int32](unsafe.Pointer(p.lens), p.num_lens),
			})
		}
	}
	dst := cslice[byte](r.pull_dst, r.pull_dst_bytes)
	t, err := a.kvRequest(r.push != 0, r.pull != 0, keys, vals, lens, dst, r.want_lens != 0, opts, r.done_ctx)
	*ts = C.int(t)
	return cerr(err)
}

//export ps_kv_worker_slicer_allowed
func ps_kv_worker_slicer_allowed(handle C.uint64_t) *C.char {
	a := lookup(handle)
	if a.kind != kindWorker {
		return cerr(fmt.Errorf("elasticps: set_slicer on a %s; only a KVWorker slices requests", a.kind))
	}
	return cerr(a.worker.SlicerAllowed())
}

//export ps_kv_server_response
func ps_kv_server_response(handle C.uint64_t, req *C.ps_ckv_meta, keys *C.ps_ckey, numKeys C.size_t, vals *C.ps_cvoid, valsBytes C.size_t, lens *C.ps_cint, numLens C.size_t, freeKept C.ps_kept_free, kept unsafe.Pointer) *C.char {
	a := lookup(handle)
	fromHostThread(a.po, "KVServer::Response")
	meta := kv.ReqMeta{
		Cmd:        int32(req.cmd),
		Push:       req.push != 0,
		Pull:       req.pull != 0,
		Sender:     int32(req.sender),
		Timestamp:  int32(req.timestamp),
		CustomerID: int32(req.customer_id),
		// what a hand-made KVMeta's response echoes (a request's own
		// meta, found by kvResponse, echoes what the worker sent)
		Raw: message.RawFields{Key: uint64(req.key), Addr: uint64(req.addr), ValLen: int32(req.val_len), Option: int32(req.option)},
	}
	res := kv.KVPairs{
		Keys: cslice[uint64](unsafe.Pointer(keys), numKeys),
		Vals: cslice[byte](unsafe.Pointer(vals), valsBytes),
		Lens: cslice[int32](unsafe.Pointer(lens), numLens),
	}
	return cerr(a.kvResponse(meta, uint64(req.key), message.DataType(req.data_type), res, keptFree(freeKept, kept)))
}

//export ps_kv_server_set_migration
func ps_kv_server_set_migration(handle C.uint64_t, enable C.int) *C.char {
	return cerr(lookup(handle).setMigration(enable != 0))
}

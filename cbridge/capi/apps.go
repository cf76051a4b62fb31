package main

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van/zmq"
)

type appKind int

const (
	kindSimple appKind = iota
	kindWorker
	kindServer
	kindCustomer
)

func (k appKind) String() string {
	return [...]string{"SimpleApp", "KVWorker", "KVServer", "Customer"}[k]
}

// reqKey names a KV request at a server: a worker's customer numbers its
// operations, and one operation sends a server one request per key
// interval it holds (several in elastic mode), so (sender, customer,
// timestamp, first key) is unique among the requests awaiting a Response.
type reqKey struct {
	sender, customer, timestamp int32
	key                         uint64
}

func firstKey(keys []uint64) uint64 {
	if len(keys) == 0 {
		return 0
	}
	return keys[0]
}

// maxReported and maxFailed bound app.reported and app.failed.
const (
	maxReported = 4096
	maxFailed   = 256
)

// app is the Go side of one C++ SimpleApp, KVWorker, KVServer or Customer.
// C++ holds it through a cgo.Handle; it holds the C++ object only as opaque
// contexts handed back to the callbacks.
//
// A KVWorker is a kv.Worker. SimpleApps and KVServers are kv.Customers
// with the bridge's own message handler (messages.go), because their
// handler must be in place when the customer registers: messages that
// reached the node before the app existed are delivered right then, and
// C++ programs commonly create the app after Start (test_simple_app,
// test_kv_app), when requests are already arriving. kv.NewSimpleApp and
// kv.NewServer install their handlers only after registering.
type app struct {
	kind appKind
	po   *postoffice.Postoffice
	// appID and customerID are set before the app registers; cust only
	// after, while the handler may already run.
	appID, customerID int32
	cust              *kv.Customer
	worker            *kv.Worker
	simple            *kv.SimpleApp // the worker's SimpleApp (its commands); nil otherwise

	appCtx  unsafe.Pointer // C++ SimpleApp, for on_simple
	srvCtx  unsafe.Pointer // C++ KVServer request sink, for on_kv_request
	server  *kv.Server     // KVServer apps
	elastic *elastic.Node  // KVServer apps of an elastic job: hands key ranges over
	custCtx unsafe.Pointer // C++ Customer, for on_message

	// copyOnSend: the resend layer keeps sent messages for retransmission,
	// possibly beyond the completion of the operation that sent them, so
	// worker buffers from C are copied too.
	copyOnSend bool

	mu sync.Mutex
	// ops are the worker operations whose on_kv_done is still due.
	ops map[unsafe.Pointer]struct{}
	// reqs are the server requests awaiting Response (for a warning about
	// answers that match none).
	reqs map[reqKey]kv.ReqMeta
	// reported and failed hold errors already reported (returned by
	// Request, by timestamp; logged when an operation failed, in arrival
	// order), so that Wait does not report them a second time. Both are
	// bounded; forgetting an entry at worst logs an error twice.
	reported map[int32]error
	failed   []error

	// migMu is held (read) during a call into C++'s migration handles and
	// (write) by close, after which migClosed refuses new ones.
	migMu     sync.RWMutex
	migClosed bool
	// hook is what the C++ side last told setMigration (hookUnset until
	// the program set a request handler or a state hook), hookChecked
	// that the server's first request checked it (stateHookWarning).
	hook        atomic.Int32
	hookChecked atomic.Bool
}

func newApp(kind appKind, po *postoffice.Postoffice, appID, customerID int) *app {
	cfg := po.Config()
	return &app{
		kind:       kind,
		po:         po,
		appID:      int32(appID),
		customerID: int32(customerID),
		copyOnSend: cfg.Resend,
		ops:        map[unsafe.Pointer]struct{}{},
		reqs:       map[reqKey]kv.ReqMeta{},
		reported:   map[int32]error{},
	}
}

func newSimpleApp(appID, customerID int, ctx unsafe.Pointer) (*app, error) {
	po, err := ensureNode(-1)
	if err != nil {
		return nil, err
	}
	a := newApp(kindSimple, po, appID, customerID)
	a.appCtx = ctx
	c, err := kv.NewCustomer(po, appID, customerID, a.handleSimpleAppMessage)
	if err != nil {
		return nil, err
	}
	a.cust = c
	return a, nil
}

func newWorkerApp(appID, customerID, instance int, ctx unsafe.Pointer) (*app, error) {
	po, err := nodeFor(instanceSlot(instance, true)) // a JOINT process's worker node
	if err != nil {
		return nil, err
	}
	a := newApp(kindWorker, po, appID, customerID)
	a.appCtx = ctx
	var w *kv.Worker
	if en := nodeElastic(po); en != nil {
		w, err = en.NewWorker(appID, customerID)
	} else {
		w, err = kv.NewWorker(po, appID, customerID)
	}
	if err != nil {
		return nil, err
	}
	a.worker, a.simple, a.cust = w, w.Simple(), w.Customer()
	a.installSimpleHandlers()
	return a, nil
}

func newServerApp(appID, instance int, ctx, srvCtx unsafe.Pointer) (*app, error) {
	po, err := nodeFor(instanceSlot(instance, false))
	if err != nil {
		return nil, err
	}
	a := newApp(kindServer, po, appID, appID)
	a.appCtx, a.srvCtx = ctx, srvCtx
	// A kv.Server (customer (app id, app id)), with the C++ handlers in
	// place before it can receive anything; in elastic mode (PS_ELASTIC)
	// it takes part in migrations, handing state over through the C++
	// migration handle once one is set (setMigration), by the generic
	// capture-and-install path until then.
	opts := kv.ServerOptions{
		Handler:        a.onKVRequest,
		SimpleRequest:  func(d kv.SimpleData, _ *kv.SimpleApp) { callSimple(a.appCtx, true, d) },
		SimpleResponse: func(d kv.SimpleData, _ *kv.SimpleApp) { callSimple(a.appCtx, false, d) },
		// C++ copies small requests during the call and keeps large ones
		// until ps_release (ReqMeta.Retain, in callKVRequest).
		ReleaseRequests: true,
	}
	var srv *kv.Server
	if en := nodeElastic(po); en != nil {
		a.elastic = en
		srv, err = en.NewServer(appID, opts, nil)
	} else {
		srv, err = kv.NewServerWith(po, appID, opts)
	}
	if err != nil {
		return nil, err
	}
	a.server, a.cust = srv, srv.Customer()
	return a, nil
}

func newCustomerApp(appID, customerID int, ctx unsafe.Pointer) (*app, error) {
	po, err := ensureNode(-1)
	if err != nil {
		return nil, err
	}
	a := newApp(kindCustomer, po, appID, customerID)
	a.custCtx = ctx
	c, err := kv.NewCustomer(po, appID, customerID, a.deliverMessage)
	if err != nil {
		return nil, err
	}
	a.cust = c
	return a, nil
}

func (a *app) installSimpleHandlers() {
	a.simple.SetRequestHandler(func(d kv.SimpleData, _ *kv.SimpleApp) { callSimple(a.appCtx, true, d) })
	a.simple.SetResponseHandler(func(d kv.SimpleData, _ *kv.SimpleApp) { callSimple(a.appCtx, false, d) })
}

// close unregisters the app; when it returns no callback for it runs any
// more. Operations that never completed are reported as cancelled so that
// C++ can release their state.
func (a *app) close() {
	if a.kind == kindWorker {
		a.worker.Close()
	} else {
		a.cust.Close()
	}
	if a.kind == kindServer {
		a.closeMigration()
	}
	a.mu.Lock()
	orphans := make([]unsafe.Pointer, 0, len(a.ops))
	for ctx := range a.ops {
		orphans = append(orphans, ctx)
	}
	a.ops = map[unsafe.Pointer]struct{}{}
	a.reqs = map[reqKey]kv.ReqMeta{}
	a.mu.Unlock()
	for _, ctx := range orphans {
		callKVDone(ctx, doneCancelled, nil, nil, nil)
	}
}

func (a *app) markReported(ts int32, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.reported) >= maxReported {
		a.reported = map[int32]error{}
	}
	a.reported[ts] = err
}

// wait is Customer::WaitRequest. An error that C++ already received for
// this request is not returned again.
func (a *app) wait(ts int32) error {
	err := a.cust.Wait(ts)
	if err == nil {
		return nil
	}
	a.mu.Lock()
	prev, ok := a.reported[ts]
	delete(a.reported, ts)
	a.mu.Unlock()
	if ok && sameError(prev, err) {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, e := range a.failed {
		if sameError(e, err) {
			a.failed = slices.Delete(a.failed, i, i+1)
			return nil
		}
	}
	return err
}

// sameError reports whether a and b are the same error value. Errors are
// compared with == only when their dynamic type allows it (== on an
// interface panics for, e.g., a struct type holding a slice).
func sameError(a, b error) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}

func (a *app) simpleRequest(head int32, body []byte, group int) (int32, error) {
	var (
		ts  int32
		err error
	)
	if a.simple != nil {
		ts, err = a.simple.Request(head, body, group)
	} else {
		ts, err = a.sendSimpleRequest(head, body, group)
	}
	if err != nil && ts >= 0 {
		// Some messages were sent: the request completes with err, which
		// Wait would report again.
		a.markReported(ts, err)
	}
	return ts, err
}

// workerOp is one KVWorker operation that reports its completion. They
// are recycled (workerOps), each with its kv callbacks bound once, so that
// an operation allocates none of them.
type workerOp struct {
	a    *app
	ctx  unsafe.Pointer
	vals []byte
	// inPlace: vals is the C++ destination and the reply its first n bytes
	inPlace    bool
	n          int
	lens       []int32
	err        error
	push, pull bool
	nkeys      int
	// done and failed are kv.Options.Callback and OnError: op.finish and
	// op.fail, bound when the op was made.
	done   func()
	failed func(error)
}

var workerOps sync.Pool

// newWorkerOp returns a cleared op for an operation of a with completion
// context ctx.
func newWorkerOp(a *app, ctx unsafe.Pointer, push, pull bool, nkeys int) *workerOp {
	op, _ := workerOps.Get().(*workerOp)
	if op == nil {
		op = &workerOp{}
		op.done, op.failed = op.finish, op.fail
	}
	op.a, op.ctx, op.push, op.pull, op.nkeys = a, ctx, push, pull, nkeys
	return op
}

// recycle clears op and pools it. Only once kv is done with the operation:
// after its Callback, the last call kv makes for it (OnError comes before).
func (op *workerOp) recycle() {
	done, failed := op.done, op.failed
	*op = workerOp{done: done, failed: failed}
	workerOps.Put(op)
}

func (op *workerOp) finish() {
	op.a.finishOp(op)
	op.recycle()
}

// fail is OnError. Failures are logged here, once, whoever waits: MXNet
// and BytePS use callbacks and never Wait, and ps-lite has no error
// channel at all.
func (op *workerOp) fail(err error) {
	op.err = err
	op.a.recordFailure(err, op.push, op.pull, op.nkeys)
}

func (a *app) recordFailure(err error, push, pull bool, nkeys int) {
	a.mu.Lock()
	if len(a.failed) >= maxFailed {
		a.failed = slices.Delete(a.failed, 0, 1)
	}
	a.failed = append(a.failed, err)
	a.mu.Unlock()
	slog.Error("elasticps: KV operation failed", "app", a.appID, "customer", a.customerID, "push", push, "pull", pull, "keys", nkeys, "err", err)
}

// kvRequest issues a KVWorker operation. keys, vals and lens are views of C
// memory (see ps_kv_worker_request for their lifetimes); so is dst, the
// C++ destination of a pull when it is sized, which the reply is then
// written into directly (C++ keeps it until the operation completes).
func (a *app) kvRequest(push, pull bool, keys []uint64, vals []byte, lens []int32, dst []byte, wantLens bool, opts kv.Options, ctx unsafe.Pointer) (int32, error) {
	if a.kind != kindWorker {
		return -1, fmt.Errorf("elasticps: push/pull on a %s; only a KVWorker sends KV requests", a.kind)
	}
	if !push && !pull {
		return -1, errors.New("elasticps: a KV request must push, pull or both")
	}
	if pull && ctx == nil {
		return -1, errors.New("elasticps: a pull needs a completion context to deliver its values")
	}
	// Buffers sent by reference must outlive the call (see sendsLater):
	// C++ keeps those of an operation with a completion context until it
	// completes; the others are copied.
	if a.copyOnSend || (sendMode(nodeSendMode.Load()) != readsDuringSend && ctx == nil) {
		keys, vals, lens = slices.Clone(keys), slices.Clone(vals), slices.Clone(lens)
		for i, p := range opts.Parts {
			opts.Parts[i] = kv.Part{Server: p.Server, Keys: slices.Clone(p.Keys), Vals: slices.Clone(p.Vals), Lens: slices.Clone(p.Lens)}
		}
	}
	var op *workerOp
	if ctx != nil {
		op = newWorkerOp(a, ctx, push, pull, len(keys))
		a.mu.Lock()
		a.ops[ctx] = struct{}{}
		a.mu.Unlock()
		opts.Callback, opts.OnError = op.done, op.failed
	} else {
		nkeys := len(keys)
		opts.OnError = func(err error) { a.recordFailure(err, push, pull, nkeys) }
	}
	var (
		ts  int32
		err error
	)
	var lensOut *[]int32
	if wantLens && op != nil {
		op.lens = slices.Clone(lens) // sent with a push-pull, then overwritten by the reply
		lensOut = &op.lens
	}
	switch {
	case push && pull && dst != nil:
		op.vals, op.inPlace = dst, true
		ts, err = a.worker.PushPullInto(keys, vals, dst, &op.n, lensOut, opts)
	case push && pull:
		ts, err = a.worker.PushPull(keys, vals, &op.vals, lensOut, opts)
	case pull && dst != nil:
		op.vals, op.inPlace = dst, true
		ts, err = a.worker.PullInto(keys, dst, &op.n, lensOut, opts)
	case pull:
		ts, err = a.worker.Pull(keys, &op.vals, lensOut, opts)
	default:
		ts, err = a.worker.Push(keys, vals, lens, opts)
	}
	if ts < 0 {
		if ctx != nil {
			a.mu.Lock()
			delete(a.ops, ctx)
			a.mu.Unlock()
			op.recycle() // kv calls neither callback of an operation it did not issue
		}
		if err == nil {
			err = errors.New("elasticps: the request was not issued")
		}
		return -1, err
	}
	// A non-nil err with a valid ts means some slices were not sent: the
	// operation completes with that error, reported by OnError.
	return ts, nil
}

// finishOp reports a completed operation to C++, at most once. It runs in
// the worker's customer goroutine (or the issuing thread when there was
// nothing to send) and before the request counts as done, so Wait returns
// after the C++ callback.
func (a *app) finishOp(op *workerOp) {
	a.mu.Lock()
	_, pending := a.ops[op.ctx]
	delete(a.ops, op.ctx)
	a.mu.Unlock()
	if !pending {
		return
	}
	if op.err != nil {
		callKVDone(op.ctx, doneError, op.err, nil, nil)
		return
	}
	vals := op.vals
	if op.inPlace {
		vals = vals[:op.n]
	}
	callKVDone(op.ctx, doneOK, nil, vals, op.lens)
}

// kvResponse answers a request (whose first key is key); keys, vals and
// lens are views of C memory. With lent nil they are valid during the call
// only. Otherwise C++ keeps them until lent is called, which kvResponse
// does exactly once, as soon as the transport reads them no more.
func (a *app) kvResponse(cm kv.ReqMeta, key uint64, dt message.DataType, res kv.KVPairs, lent func()) error {
	freeNow := lent != nil
	defer func() {
		if freeNow {
			lent()
		}
	}()
	if a.kind != kindServer {
		return fmt.Errorf("elasticps: Response on a %s; only a KVServer answers KV requests", a.kind)
	}
	k := reqKey{cm.Sender, cm.CustomerID, cm.Timestamp, key}
	a.mu.Lock()
	meta, ok := a.reqs[k]
	delete(a.reqs, k)
	a.mu.Unlock()
	if !ok {
		meta = cm
		meta.Sender = instanceSender(a.po, cm.Sender)
	}
	meta.DataType = dt
	if !ok {
		// A KVMeta the handler built, or a second answer: ps-lite sends
		// whatever it is given, and so does the bridge, but says so.
		slog.Warn("elasticps: KVServer::Response to a request that is not awaiting one (answered already, or a hand-made KVMeta)",
			"sender", cm.Sender, "customer", cm.CustomerID, "timestamp", cm.Timestamp)
	}
	if len(res.Lens) != 0 && len(res.Lens) != len(res.Keys) {
		err := fmt.Errorf("elasticps: KVServer::Response with %d lens for %d keys; the worker gets an error instead", len(res.Lens), len(res.Keys))
		if sendErr := a.server.ResponseError(meta, err); sendErr != nil {
			return errors.Join(err, sendErr)
		}
		return err
	}
	mode := sendMode(nodeSendMode.Load())
	if a.copyOnSend || mode == readsLater || (mode == readsLaterZMQ && lent == nil && !copiedBySend(res)) {
		// The transport (or the resend layer, which keeps messages for
		// retransmission) may read res after Send, and nothing tells when
		// it is done: send a Go copy.
		res.Keys, res.Vals, res.Lens = slices.Clone(res.Keys), slices.Clone(res.Vals), slices.Clone(res.Lens)
		return a.server.Response(meta, res)
	}
	err := a.server.Response(meta, res)
	if mode == readsLaterZMQ && lent != nil {
		// Sent by reference: C++ keeps res until libzmq is done with it.
		freeNow = false
		zmq.AfterSent(lent, kv.KeysToBytes(res.Keys), res.Vals, kv.LensToBytes(res.Lens))
	}
	return err
}

// copiedBySend reports whether the ZeroMQ van copies every array of res
// during Send (each is shorter than its by-reference threshold).
func copiedBySend(res kv.KVPairs) bool {
	return max(8*len(res.Keys), len(res.Vals), 4*len(res.Lens)) < zmq.DefaultZeroCopySendMin
}

// onKVRequest is the kv.Server handler: it remembers the request for
// Response and hands it to the C++ KVServer.
func (a *app) onKVRequest(meta kv.ReqMeta, data kv.KVPairs, _ *kv.Server) {
	if !a.hookChecked.Load() {
		a.checkStateHook()
	}
	// With instance groups C++ sees the worker's process (its instance
	// 0's id), as the BytePS fork's KVServer reports it.
	cm := meta
	cm.Sender = a.po.GroupID(meta.Sender)
	a.mu.Lock()
	a.reqs[reqKey{cm.Sender, meta.CustomerID, meta.Timestamp, firstKey(data.Keys)}] = meta
	a.mu.Unlock()
	callKVRequest(a.po, a.srvCtx, cm, data)
}

package kv

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
)

// Options are the optional parameters of a Worker operation (the trailing
// arguments of ps-lite's KVWorker calls).
type Options struct {
	// Cmd is sent as Meta.Head; ps-lite gives it no meaning, server
	// handlers do (MXNet encodes the request type and dtype in it).
	Cmd int32
	// Priority orders this operation's requests in the servers' queues
	// (higher first).
	Priority int32
	// DataType tags the vals frame and gives the element size used for
	// slicing and for lens (which count elements). The zero value (Char)
	// means Float; C++ char values are message.Other, bytes Int8/Uint8.
	// The generic helpers (Push, Pull, PushPull) set it from T.
	DataType message.DataType
	// Callback runs once the operation has completed — for pulls, after the
	// values have been copied into the destination — and before Wait
	// returns for it. It runs where the worker handles responses: on the
	// node's receive goroutine when the worker is idle, else in its
	// customer goroutine (in the caller's when no server was involved,
	// i.e. for empty keys), so it must not block on other operations of
	// the same worker, and should not block at all (one that does for more
	// than postoffice.Config.InlineHandOver moves receiving to a new
	// goroutine). It runs also when the operation failed, after OnError,
	// so that nothing waiting on it is stranded.
	Callback func()
	// OnError, if set, receives the operation's error, in the same place
	// and just before Callback.
	OnError func(error)
	// Iteration, when > 0, states the training iteration this operation
	// belongs to (Meta.Ext.Iteration, sent to every server it touches).
	// Servers with a sync mode (PS_SYNC_MODE) then use it as the worker's
	// clock for these keys instead of counting its pushes. 0 sends nothing.
	Iteration int64
	// Parts, when non-nil, is this operation's slicing: what each server
	// gets (a Slicer's output; see Slicer for the rules). It overrides the
	// worker's slicer and the key ranges; an empty list sends nothing.
	Parts []Part
}

func (o *Options) dataType() message.DataType {
	if o.DataType == message.Char {
		return message.Float
	}
	return o.DataType
}

// ServerError is a failure reported by a server in its response (the
// elasticps error extension: a KV response whose Meta.Body is non-empty
// carries the server's UTF-8 error message and no data).
type ServerError struct {
	Node int32 // server node id
	Msg  string
}

func (e *ServerError) Error() string { return fmt.Sprintf("kv: server %d: %s", e.Node, e.Msg) }

// Worker pushes values to and pulls them from the servers (ps::KVWorker).
// Keys are partitioned by the job's server key ranges
// (Postoffice.ServerKeyRanges) and the slice for range i goes to the server
// that the routing table names for it.
//
// Values are raw little-endian bytes of elements of Options.DataType; the
// generic functions Push, Pull and PushPull wrap them for typed slices.
// Buffers are not copied: keys, vals and lens passed to an operation are
// sent as they are and must not be modified until the operation completes,
// and pulled values are copied once, from the received messages straight
// into the destination.
//
// All methods are safe for concurrent use; several operations, even on the
// same keys, may be outstanding at once.
type Worker struct {
	po      *postoffice.Postoffice
	c       *Customer
	simple  *SimpleApp
	ranges  []routing.Range
	router  Router
	table   *routing.Table
	counted bool // the router wants pushes numbered (Meta.Ext.PushSeq)
	seqs    pushSeqs
	// failover: PS_REPLICAS > 0 in an elastic job: what waits on a dead
	// server is re-sent to the backup promoted in its place (see
	// awaitFailover) instead of failing.
	failover bool
	watching atomic.Bool // watchStale runs (schedloss.go)
	// silentSaid are the servers whose operations wait for a failover
	// while the scheduler is lost, once said in the log; used by sweep
	// only, on the customer goroutine
	silentSaid map[int32]bool

	slicerMu sync.Mutex
	slicer   Slicer // SetSlicer; nil: slice by the key ranges

	dropped   atomic.Int64 // responses that matched no outstanding operation
	redirects atomic.Int64 // spans re-routed after a server redirected them
}

// Redirects counts request spans re-routed because a server no longer (or
// not yet) served their keys during a migration.
func (w *Worker) Redirects() int64 { return w.redirects.Load() }

// NewWorker registers a worker as customer (appID, customerID) of po,
// routing by ps-lite's static key ranges. Each worker object of a process
// needs its own customer id.
func NewWorker(po *postoffice.Postoffice, appID, customerID int) (*Worker, error) {
	return NewWorkerWith(po, appID, customerID, WorkerOptions{})
}

// WorkerOptions are the hooks of a Worker.
type WorkerOptions struct {
	// Router routes the worker's requests; nil: ps-lite's static ranges.
	// A job with PS_ELASTIC=1 needs elastic mode's router (package
	// elastic creates its workers with it).
	Router Router
}

// NewWorkerWith is NewWorker with hooks.
func NewWorkerWith(po *postoffice.Postoffice, appID, customerID int, opts WorkerOptions) (*Worker, error) {
	if po == nil {
		return nil, errors.New("kv: nil postoffice")
	}
	r := opts.Router
	if r == nil {
		if po.Config().Elastic {
			return nil, errors.New("kv: PS_ELASTIC=1 but the worker has no elastic router: open the node's elastic side with elastic.Open(po) and create the worker with its NewWorker")
		}
		r = staticRouter{routing.NewInstanceTable(po.NumServers(), po.GroupSize(), po.Instance())}
	}
	w := &Worker{po: po, simple: embeddedSimpleApp(po), ranges: po.ServerKeyRanges(), router: r, table: r.Table(), counted: r.NumbersPushes()}
	w.failover = w.counted && po.Config().Replicas > 0
	_, err := newCustomer(po, appID, customerID, w.process, func(c *Customer) { w.c, w.simple.c, c.releases, c.inline = c, c, true, true })
	if err != nil {
		return nil, err
	}
	po.OnNodeGone(w.nodeGone)
	go w.watchStale()
	return w, nil
}

// Simple returns the worker's SimpleApp, which shares its customer (and so
// its timestamps).
func (w *Worker) Simple() *SimpleApp { return w.simple }

// Customer returns the worker's customer.
func (w *Worker) Customer() *Customer { return w.c }

// Dropped counts responses that matched no outstanding operation (unknown
// timestamp, or a server that was not asked or had already answered).
func (w *Worker) Dropped() int64 { return w.dropped.Load() }

// Close unregisters the worker; outstanding Waits return ErrClosed.
func (w *Worker) Close() { w.c.Close() }

// Wait blocks until operation ts has completed and its callback has run, and
// returns its error: a server's ServerError, a DeadServerError when a
// server it waited on died, a malformed or mismatched reply, a destination
// of the wrong size, or postoffice.ErrStopped.
func (w *Worker) Wait(ts int32) error { return w.c.Wait(ts) }

// Push sends vals for keys to the servers (ps::KVWorker::ZPush). keys must
// be sorted ascending (repeats are allowed, for MXNet's row-sparse
// requests). Without lens every key has len(vals)/len(keys) bytes of values;
// with lens, key i has lens[i] elements. It returns the operation's
// timestamp for Wait, or an error and no timestamp if the arguments are
// invalid.
func (w *Worker) Push(keys []uint64, vals []byte, lens []int32, opts Options) (int32, error) {
	return w.issue(true, false, keys, vals, lens, nil, nil, opts)
}

// Pull fetches the values of keys into *dst (ps::KVWorker::ZPull). If *dst is
// empty it is allocated to the size the servers return; otherwise that size
// must equal len(*dst) exactly, or the operation fails without writing. If
// lens is non-nil it receives the number of elements of each key (allocated
// when empty, else it must have len(keys) entries). The pull request carries
// no lens, as in ps-lite: servers decide the value lengths.
func (w *Worker) Pull(keys []uint64, dst *[]byte, lens *[]int32, opts Options) (int32, error) {
	if dst == nil {
		return -1, errors.New("kv: Pull needs a destination (dst is nil)")
	}
	return w.issue(false, true, keys, nil, nil, byteDst{dst}, lens, opts)
}

// PushPull pushes vals and pulls the result into *dst in one round trip
// (ps::KVWorker::ZPushPull). When *lens is non-empty it is sent with the
// push, as dmlc ps-lite does, and then overwritten with the reply's lens.
func (w *Worker) PushPull(keys []uint64, vals []byte, dst *[]byte, lens *[]int32, opts Options) (int32, error) {
	if dst == nil {
		return -1, errors.New("kv: PushPull needs a destination (dst is nil)")
	}
	var sendLens []int32
	if lens != nil {
		sendLens = *lens
	}
	return w.issue(true, true, keys, vals, sendLens, byteDst{dst}, lens, opts)
}

// PullInto fetches the values of keys into dst, a buffer the caller owns
// that may be larger than the reply (ps-lite's ZPull into a pre-sized
// SArray, which BytePS's compressed pulls rely on): the reply's bytes land
// in dst[:*n], and *n is set before the operation completes. A reply larger
// than dst fails the operation without writing. lens as for Pull.
func (w *Worker) PullInto(keys []uint64, dst []byte, n *int, lens *[]int32, opts Options) (int32, error) {
	if n == nil {
		return -1, errors.New("kv: PullInto needs n for the reply's size (n is nil)")
	}
	return w.issue(false, true, keys, nil, nil, &prefixDst{buf: dst, n: n}, lens, opts)
}

// PushPullInto is PushPull into a caller-owned buffer, as PullInto.
func (w *Worker) PushPullInto(keys []uint64, vals []byte, dst []byte, n *int, lens *[]int32, opts Options) (int32, error) {
	if n == nil {
		return -1, errors.New("kv: PushPullInto needs n for the reply's size (n is nil)")
	}
	var sendLens []int32
	if lens != nil {
		sendLens = *lens
	}
	return w.issue(true, true, keys, vals, sendLens, &prefixDst{buf: dst, n: n}, lens, opts)
}

// Push is Worker.Push for typed values; it sets opts.DataType from T.
func Push[T Number](w *Worker, keys []uint64, vals []T, lens []int32, opts Options) (int32, error) {
	opts.DataType = DataTypeOf[T]()
	return w.issue(true, false, keys, AsBytes(vals), lens, nil, nil, opts)
}

// Pull is Worker.Pull for typed values; it sets opts.DataType from T.
func Pull[T Number](w *Worker, keys []uint64, dst *[]T, lens *[]int32, opts Options) (int32, error) {
	if dst == nil {
		return -1, errors.New("kv: Pull needs a destination (dst is nil)")
	}
	opts.DataType = DataTypeOf[T]()
	return w.issue(false, true, keys, nil, nil, typedDst[T]{dst}, lens, opts)
}

// PushPull is Worker.PushPull for typed values; it sets opts.DataType from T.
func PushPull[T Number](w *Worker, keys []uint64, vals []T, dst *[]T, lens *[]int32, opts Options) (int32, error) {
	if dst == nil {
		return -1, errors.New("kv: PushPull needs a destination (dst is nil)")
	}
	opts.DataType = DataTypeOf[T]()
	var sendLens []int32
	if lens != nil {
		sendLens = *lens
	}
	return w.issue(true, true, keys, AsBytes(vals), sendLens, typedDst[T]{dst}, lens, opts)
}

// destination hands out the pull buffer once its total size n (bytes) is
// known. Implementations are single-pointer structs, so storing them in the
// interface does not allocate.
type destination interface {
	buffer(n int) ([]byte, error)
	// size is the destination's length in bytes when the pull is issued
	// (0: allocated to the reply's size).
	size() int
	// hostOrder reports whether the buffer holds typed elements in host
	// byte order, which differs from the wire's on big-endian hosts.
	hostOrder() bool
}

type byteDst struct{ p *[]byte }

func (d byteDst) hostOrder() bool { return false }

func (d byteDst) size() int { return len(*d.p) }

func (d byteDst) buffer(n int) ([]byte, error) {
	if len(*d.p) == 0 {
		*d.p = alignedBytes(n)
	} else if len(*d.p) != n {
		return nil, fmt.Errorf("kv: pull destination holds %d bytes but the servers returned %d", len(*d.p), n)
	}
	return *d.p, nil
}

// prefixDst is PullInto's destination: the reply fills a prefix of buf.
type prefixDst struct {
	buf []byte
	n   *int
}

func (d *prefixDst) hostOrder() bool { return false }

func (d *prefixDst) size() int { return len(d.buf) }

func (d *prefixDst) buffer(n int) ([]byte, error) {
	if n > len(d.buf) {
		return nil, fmt.Errorf("kv: pull destination holds %d bytes but the servers returned %d; give a destination at least that large", len(d.buf), n)
	}
	*d.n = n
	return d.buf[:n], nil
}

type typedDst[T Number] struct{ p *[]T }

func (d typedDst[T]) hostOrder() bool { return true }

func (d typedDst[T]) size() int { return len(*d.p) * int(unsafe.Sizeof(T(0))) }

func (d typedDst[T]) buffer(n int) ([]byte, error) {
	size := int(unsafe.Sizeof(T(0)))
	if n%size != 0 {
		return nil, fmt.Errorf("kv: the servers returned %d bytes, not a whole number of %d-byte values", n, size)
	}
	if len(*d.p) == 0 {
		*d.p = make([]T, n/size)
	} else if len(*d.p) != n/size {
		return nil, fmt.Errorf("kv: pull destination holds %d values but the servers returned %d", len(*d.p), n/size)
	}
	if n == 0 {
		return nil, nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(*d.p))), n), nil
}

// op is the state of one outstanding operation, kept in its tracker entry.
// After issue it is touched only by the response handler, which handles
// one message at a time (see Customer).
type op struct {
	tr      request // the tracker entry, embedded to save an allocation
	push    bool
	pull    bool
	keys    []uint64
	vals    []byte  // push values, kept to re-send redirected spans
	lensIn  []int32 // push lens, likewise
	dt      message.DataType
	cmd     int32
	prio    int32
	iter    int64 // Options.Iteration
	esize   int
	waiting []int32 // servers that have not answered yet (one entry per span sent)
	spans   []span  // what was sent (kept until completion), to re-route a span a server redirects; a span is known by its first key
	replies []reply // pull: one per answering server
	dst     destination
	lens    *[]int32
	cb      func()
	onErr   func(error)
	err     error

	redirects int
	// seqs: with a router that numbers pushes, each key's push count when the operation was
	// issued, so that a redirected span re-sliced later is numbered as the
	// same keys were at issue (see pushSeqs).
	seqs []uint64
	// sending is held while issue sends the spans. The customer goroutine
	// takes it before writing pulled values, which may land in the very
	// buffer being sent (MXNet's ZPushPull passes vals as the destination):
	// the network orders the two, but the race detector cannot see that.
	sending  sync.Mutex
	issued   bool      // every span sent; guarded by sending
	start    time.Time // when issued
	handling int64     // the slowest server's handling time (ns)
	waitBuf  [8]int32  // backs waiting for up to 8 servers

	// parts: a custom slicing (Slicer, Options.Parts); spans then index
	// it, and partPos[i] (pulls) holds where part i's keys are in keys.
	parts   []Part
	partPos [][]int
}

// reply is one server's part of a pull result: views of its frames.
type reply struct {
	msg  *message.Message // handed back to the transport after assembly
	from int32
	pos  int // index of keys[0] in the request
	keys []uint64
	vals []byte
	lens []int32
}

// span is the part of a request for one routing interval.
type span struct {
	ka, kb     int // keys[ka:kb]
	va, vb     int // vals[va:vb]
	node       int32
	routeEpoch uint64
	seq        uint64 // push sequence number of the span (see pushSeqs)
	part       int    // with op.parts: the part sent (ka..vb unused)
}

// outMsg is a request or response with room for its three frames in one
// object, recycled once sent.
type outMsg struct {
	msg   message.Message
	data  [3][]byte
	types [3]message.DataType
}

var outMsgs = sync.Pool{New: func() any { return new(outMsg) }}

// newOutMsg returns an empty message (ps-lite's Meta defaults) whose frame
// and data_type lists append into the outMsg.
func newOutMsg() *outMsg {
	out := outMsgs.Get().(*outMsg)
	out.msg.Meta = message.NewMeta()
	out.msg.Data = out.data[:0]
	out.msg.Meta.DataType = out.types[:0]
	return out
}

// sent recycles out after po.Send returned without error, unless the
// postoffice keeps sent messages (PS_RESEND). The transports read a
// Message during Send (only its frames' bytes may be read later), so
// nothing else refers to it; its frames belong to the caller and are
// merely forgotten.
func (out *outMsg) sent(po *postoffice.Postoffice) {
	if po.KeepsSent() {
		return
	}
	clear(out.data[:])
	out.msg = message.Message{}
	outMsgs.Put(out)
}

// pushSeqs counts this worker's pushes per key (when its Router
// NumbersPushes).
// A request for a span of keys carries the highest count among them
// (Ext.PushSeq), so that a migrating key range switches owners at the same
// push number on every worker: a span goes to the old owner while its
// number is below the range's CutSeq, and to the new owner from then on.
// Counting per key (not per routing interval) keeps the numbers equal
// across workers whatever routing tables each has seen. Taking the highest
// count (not the first key's) makes a span's number at least that of any
// part of it: the old owner numbers a span that reached it with an older
// table (keys on both sides of the moving range's boundary) no lower than
// the moving keys' part of it, which other workers send on their own with
// the newer table, so its cut-over falls after every round it holds.
type pushSeqs struct {
	mu    sync.Mutex
	count map[uint64]uint64
}

func (w *Worker) issue(push, pull bool, keys []uint64, vals []byte, lens []int32, dst destination, lensOut *[]int32, opts Options) (int32, error) {
	dt := opts.dataType()
	es := dt.Size()
	if err := checkRequest(push, keys, vals, lens, es); err != nil {
		return -1, err
	}
	ranges := w.ranges
	if len(keys) > 0 {
		if len(ranges) == 0 {
			return -1, errors.New("kv: the job has no servers")
		}
		if last := ranges[len(ranges)-1].End; keys[len(keys)-1] >= last {
			return -1, fmt.Errorf("kv: key %d is outside every server key range (keys must be < %d; build keys as ServerKeyRanges()[i].Begin + k)", keys[len(keys)-1], last)
		}
	}
	o := &op{push: push, pull: pull, keys: keys, esize: es, dst: dst, lens: lensOut, cb: opts.Callback, onErr: opts.OnError,
		dt: dt, cmd: opts.Cmd, prio: opts.Priority, iter: opts.Iteration}
	if push {
		o.vals, o.lensIn = vals, lens
	}
	parts, err := w.customParts(keys, vals, lens, &opts)
	if err != nil {
		return -1, err
	}
	o.start = time.Now()
	var buf [16]span
	var spans []span
	if parts != nil {
		if spans, err = w.partSpans(o, parts, buf[:0]); err != nil {
			return -1, err
		}
	} else {
		spans = w.slice(o, 0, len(keys), 0, buf[:0], true, 0)
	}
	if len(spans) == 0 {
		// Nothing to send (no keys): complete here, as ps-lite does.
		w.complete(o)
		return w.c.newCompleted(o.err), nil
	}
	o.waiting = o.waitBuf[:0]
	for i := range spans {
		o.waiting = append(o.waiting, spans[i].node)
	}
	o.spans = append(o.spans, spans...)
	if pull {
		o.replies = make([]reply, 0, len(spans))
	}
	// ps-lite counts a response per logical server; skipped ones count as
	// answered at once.
	expected := max(len(ranges), len(spans))
	o.tr = request{expected: expected, got: expected - len(spans), state: o}
	ts := w.c.track(&o.tr)
	var firstErr error
	o.sending.Lock()
	for _, s := range spans {
		if err := w.send(o, ts, s); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	o.issued = true
	o.sending.Unlock()
	return ts, firstErr
}

// slice cuts keys[ka:kb] (values from byte va) into one span per routing
// interval. With count set, each push advances its keys' push counts;
// otherwise (re-routing) the counts at issue number the spans (or the given
// seq, when pushes are not numbered).
func (w *Worker) slice(o *op, ka, kb, va int, spans []span, count bool, seq uint64) []span {
	keys, lens := o.keys, o.lensIn
	perKey := 0
	if len(lens) == 0 && len(keys) > 0 {
		perKey = len(o.vals) / len(keys)
	}
	routes := w.table.Current()
	if w.counted {
		w.seqs.mu.Lock()
		defer w.seqs.mu.Unlock()
		if w.seqs.count == nil {
			w.seqs.count = map[uint64]uint64{}
		}
	}
	for ka < kb {
		i := routes.Find(keys[ka])
		if i < 0 {
			// Checked against the logical ranges in issue; a table always
			// covers them.
			i = len(routes.Intervals) - 1
		}
		iv := &routes.Intervals[i]
		n, _ := slices.BinarySearch(keys[ka:kb], iv.End)
		if n == 0 {
			n = kb - ka
		}
		s := span{ka: ka, kb: ka + n, va: va, routeEpoch: routes.Epoch}
		if !o.push {
			s.vb = va
		} else if len(lens) > 0 {
			for _, l := range lens[ka : ka+n] {
				s.vb += int(l)
			}
			s.vb = va + s.vb*o.esize
		} else {
			s.vb = va + n*perKey
		}
		s.seq = seq
		switch {
		case count && w.counted:
			if o.seqs == nil {
				o.seqs = make([]uint64, len(keys))
			}
			s.seq = 0
			for j, k := range keys[ka : ka+n] {
				c := w.seqs.count[k]
				if o.push && (j == 0 || k != keys[ka+j-1]) {
					c++ // a repeated key (row-sparse) is one push of it
					w.seqs.count[k] = c
				}
				o.seqs[ka+j] = c
				s.seq = max(s.seq, c)
			}
		case o.seqs != nil:
			// re-slicing a redirected span: number each part by the
			// counts its keys had at issue
			s.seq = slices.Max(o.seqs[ka : ka+n])
		}
		s.node = iv.Dest(s.seq)
		spans = append(spans, s)
		ka, va = s.kb, s.vb
	}
	return spans
}

// send sends the request for one span; a failure becomes a local error
// response so that Wait still finishes.
func (w *Worker) send(o *op, ts int32, s span) error {
	out := newOutMsg()
	m := &out.msg
	m.Meta.AppID = w.c.appID
	m.Meta.CustomerID = w.c.customerID
	m.Meta.Request = true
	m.Meta.Push = o.push
	m.Meta.Pull = o.pull
	m.Meta.Head = o.cmd
	m.Meta.Timestamp = ts
	m.Meta.Priority = o.prio
	m.Meta.Recver = s.node
	m.Meta.Ext.Epoch = s.routeEpoch
	m.Meta.Ext.PushSeq = s.seq
	m.Meta.Ext.Iteration = o.iter
	keys, vals, lens := o.keys[s.ka:s.kb], o.vals[s.va:s.vb], o.lensIn
	if len(lens) > 0 {
		lens = lens[s.ka:s.kb]
	}
	if o.parts != nil {
		p := &o.parts[s.part]
		keys, vals, lens = p.Keys, p.Vals, p.Lens
	}
	m.AddData(message.Uint64, KeysToBytes(keys))
	if o.push {
		m.Meta.Raw = requestRaw(o.dt, vals)
		m.AddData(o.dt, vals)
		if len(lens) > 0 {
			m.AddData(message.Int32, LensToBytes(lens))
		}
	} else {
		// ps-lite always sends an (empty) vals frame with a pull, and
		// never lens.
		m.Meta.Raw = pullRaw(o, len(keys))
		m.AddData(o.dt, nil)
	}
	if err := w.deadServer(s.node); err != nil && w.failover {
		// Not sent: it waits, as if the server had it, for the table
		// that promotes a backup, and goes there then.
		go w.awaitFailover(s.node, []int32{ts})
		return nil
	} else if err != nil {
		err = fmt.Errorf("kv: request %d not sent: %w", ts, err)
		w.c.enqueue(localResponse(m, s.node), err)
		return err
	}
	if _, err := w.po.Send(m); err != nil {
		err = fmt.Errorf("kv: request %d to server %d not sent: %w", ts, s.node, err)
		w.c.enqueue(localResponse(m, s.node), err)
		return err
	}
	out.sent(w.po)
	return nil
}

// redirect re-routes the span a server declined (Ext.Redirect): the server
// applied nothing, so sending it to the owner the newer table names keeps
// every update applied exactly once. It returns false: the redirect itself
// is not one of the operation's responses.
func (w *Worker) redirect(o *op, ts int32, m *message.Message) bool {
	if w.table.Epoch() < m.Meta.Ext.Epoch {
		// The server knows a newer table than we do; it is on its way from
		// the scheduler. Retry when it arrives.
		go w.retryRedirect(m)
		return false
	}
	first, err := BytesToKeys(firstFrame(m))
	si := -1
	if err == nil && len(first) > 0 {
		for i, s := range o.spans {
			if s.node == m.Meta.Sender && s.kb > s.ka && o.keys[s.ka] == first[0] {
				si = i
				break
			}
		}
	}
	wi := slices.Index(o.waiting, m.Meta.Sender)
	if si < 0 || wi < 0 {
		w.drop(m, "a redirect that matches no span sent to that server")
		return false
	}
	o.redirects++
	s := o.spans[si]
	o.spans = slices.Delete(o.spans, si, si+1)
	o.waiting = slices.Delete(o.waiting, wi, wi+1)
	subs := w.slice(o, s.ka, s.kb, s.va, nil, false, s.seq)
	w.c.expect(ts, len(subs)-1)
	for _, n := range subs {
		o.waiting = append(o.waiting, n.node)
		o.spans = append(o.spans, n)
	}
	w.redirects.Add(1)
	for _, n := range subs {
		_ = w.send(o, ts, n)
	}
	return false
}

// maxRedirects bounds how often one operation may be re-routed.
const maxRedirects = 64

func firstFrame(m *message.Message) []byte {
	if len(m.Data) == 0 {
		return nil
	}
	return m.Data[0]
}

// retryRedirect re-queues a redirect once the routing table reaches its
// epoch (or gives up after a minute with an error for the operation).
func (w *Worker) retryRedirect(m *message.Message) {
	deadline := time.After(time.Minute)
	for {
		// Take the channel before reading the epoch, so an update between
		// the two cannot be missed.
		changed := w.table.Changed()
		if w.table.Epoch() >= m.Meta.Ext.Epoch {
			break
		}
		select {
		case <-changed:
		case <-w.po.Done():
			return
		case <-deadline:
			w.c.enqueue(m, fmt.Errorf("kv: server %d redirected request %d to routing epoch %d, which never arrived (current %d)",
				m.Meta.Sender, m.Meta.Timestamp, m.Meta.Ext.Epoch, w.table.Epoch()))
			return
		}
	}
	w.c.enqueue(m, nil)
}

// checkRequest validates what can be checked before anything is sent.
func checkRequest(push bool, keys []uint64, vals []byte, lens []int32, es int) error {
	for i := 1; i < len(keys); i++ {
		if keys[i] < keys[i-1] {
			return fmt.Errorf("kv: keys must be sorted ascending, but keys[%d]=%d > keys[%d]=%d", i-1, keys[i-1], i, keys[i])
		}
	}
	if !push {
		return nil
	}
	if len(lens) > 0 {
		if len(lens) != len(keys) {
			return fmt.Errorf("kv: %d lens for %d keys: give one length per key, or none", len(lens), len(keys))
		}
		total := 0
		for i, l := range lens {
			if l < 0 {
				return fmt.Errorf("kv: lens[%d]=%d is negative", i, l)
			}
			total += int(l)
		}
		if total*es != len(vals) {
			return fmt.Errorf("kv: lens add up to %d elements (%d bytes) but vals has %d bytes", total, total*es, len(vals))
		}
		return nil
	}
	if len(keys) == 0 {
		if len(vals) != 0 {
			return fmt.Errorf("kv: %d bytes of vals for no keys", len(vals))
		}
		return nil
	}
	if len(vals)%(len(keys)*es) != 0 {
		return fmt.Errorf("kv: %d bytes of vals cannot be split evenly over %d keys of %d-byte elements: pass lens", len(vals), len(keys), es)
	}
	return nil
}

// process handles one message in the customer goroutine.
func (w *Worker) process(m *message.Message, localErr error) bool {
	if sw, ok := localErr.(*sweep); ok {
		w.sweep(sw)
		return false
	}
	if fo, ok := localErr.(*failoverSweep); ok {
		w.resendAll(fo)
		return false
	}
	if m.Meta.SimpleApp {
		w.po.Detach(m) // SimpleApp handlers may keep the message
		return w.simple.process(m, localErr)
	}
	if m.Meta.Request {
		w.drop(m, "a KV request reached a worker")
		return false
	}
	ts := m.Meta.Timestamp
	st, last, ok := w.c.lookup(ts)
	o, isOp := st.(*op)
	if !ok || !isOp {
		w.drop(m, "no outstanding operation has this timestamp")
		return false
	}
	if m.Meta.Ext.Redirect && localErr == nil && o.parts != nil {
		localErr = fmt.Errorf("kv: server %d redirected request %d, which a custom slicer sliced (slicers need static key ranges)", m.Meta.Sender, ts)
	}
	if m.Meta.Ext.Redirect && localErr == nil {
		if o.redirects < maxRedirects {
			w.po.Detach(m) // rare; not proven to release
			return w.redirect(o, ts, m)
		}
		// A table that keeps sending keys back and forth is a bug: fail
		// the operation rather than loop.
		localErr = fmt.Errorf("kv: request %d was redirected %d times (last by server %d at routing epoch %d)", ts, o.redirects, m.Meta.Sender, m.Meta.Ext.Epoch)
	}
	i := slices.Index(o.waiting, m.Meta.Sender)
	if i < 0 {
		w.drop(m, "the sender was not asked or has already answered")
		return false
	}

	o.waiting = slices.Delete(o.waiting, i, i+1)
	o.handling = max(o.handling, m.Meta.Ext.HandleNano)
	switch {
	case localErr != nil:
		o.fail(localErr)
	case len(m.Meta.Body) > 0:
		o.fail(&ServerError{Node: m.Meta.Sender, Msg: string(m.Meta.Body)})
	case o.pull && o.err == nil:
		o.fail(o.addReply(m))
	}
	if !o.pull || len(o.replies) == 0 || o.replies[len(o.replies)-1].msg != m {
		w.po.Release(m)
	}
	if last {
		w.complete(o)
		if o.err != nil {
			w.c.fail(ts, o.err)
		}
	}
	return true
}

func (w *Worker) drop(m *message.Message, why string) {
	n := w.dropped.Add(1)
	w.po.Logger().Warn("kv: worker dropped a message", "why", why, "msg", m.Meta.String(), "dropped_total", n)
	w.po.Release(m) // nothing keeps a dropped message
}

func (o *op) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// addReply records one server's pull reply after checking its frames.
func (o *op) addReply(m *message.Message) error {
	r := reply{from: m.Meta.Sender, msg: m}
	switch n := len(m.Data); {
	case n == 0:
		// An empty reply; complete() reports the keys it lacks.
	case n == 2 || n == 3:
		var err error
		if r.keys, err = BytesToKeys(m.Data[0]); err != nil {
			return fmt.Errorf("kv: pull reply from server %d: keys frame: %w", r.from, err)
		}
		r.vals = m.Data[1]
		if len(r.vals)%o.esize != 0 {
			return fmt.Errorf("kv: pull reply from server %d: %d bytes of values is not a whole number of %d-byte elements", r.from, len(r.vals), o.esize)
		}
		if n == 3 {
			if r.lens, err = BytesToLens(m.Data[2]); err != nil {
				return fmt.Errorf("kv: pull reply from server %d: lens frame: %w", r.from, err)
			}
			if len(r.lens) != len(r.keys) {
				return fmt.Errorf("kv: pull reply from server %d: %d lens for %d keys", r.from, len(r.lens), len(r.keys))
			}
		}
	default:
		return fmt.Errorf("kv: pull reply from server %d has %d data frames; expected keys, vals and optionally lens", r.from, n)
	}
	o.replies = append(o.replies, r)
	return nil
}

// complete finishes an operation: for a pull, it assembles the replies into
// the destination; then it runs OnError (on failure) and Callback.
func (w *Worker) complete(o *op) {
	if !o.start.IsZero() {
		rtt := time.Since(o.start)
		w.router.OperationDone(rtt, time.Duration(o.handling))
		w.po.KVMetrics().ObserveRoundTrip(o.pull, rtt, time.Duration(o.handling))
	}
	if o.pull && o.err == nil {
		o.sending.Lock() // see op.sending
		issued := o.issued
		o.sending.Unlock()
		if !issued {
			o.err = errors.New("kv: internal error: a pull completed before all of its requests were sent")
		} else if o.parts != nil {
			o.err = o.assembleParts()
		} else {
			o.err = o.assemble()
		}
	}
	// The values were copied into the destination: the transport may reuse
	// the reply buffers.
	for i := range o.replies {
		w.po.Release(o.replies[i].msg)
		o.replies[i] = reply{}
	}
	if o.err != nil && o.onErr != nil {
		o.onErr(o.err)
	}
	if o.cb != nil {
		o.cb()
	}
}

// assemble checks that the replies tile the requested keys exactly, then
// copies values (and lens) into the destination. Nothing is written unless
// every check passes.
func (o *op) assemble() error {
	req := o.keys
	for i := range o.replies {
		r := &o.replies[i]
		if len(r.keys) == 0 {
			continue
		}
		p, _ := slices.BinarySearch(req, r.keys[0])
		if p+len(r.keys) > len(req) || !slices.Equal(req[p:p+len(r.keys)], r.keys) {
			return fmt.Errorf("kv: pull reply from server %d has %d keys from %d to %d that are not a contiguous run of the requested keys",
				r.from, len(r.keys), r.keys[0], r.keys[len(r.keys)-1])
		}
		r.pos = p
	}
	slices.SortFunc(o.replies, func(a, b reply) int { return cmp.Compare(a.pos, b.pos) })
	next, total := 0, 0
	for _, r := range o.replies {
		if len(r.keys) == 0 {
			continue
		}
		if r.pos != next {
			return pullGapError(req, next, r)
		}
		next += len(r.keys)
		total += len(r.vals)
	}
	if next != len(req) {
		return fmt.Errorf("kv: pull: the servers returned %d of %d keys; key %d and later are missing", next, len(req), req[next])
	}
	var lensDst []int32
	if o.lens != nil {
		if len(*o.lens) != 0 && len(*o.lens) != len(req) {
			return fmt.Errorf("kv: pull lens destination has %d entries for %d keys", len(*o.lens), len(req))
		}
		for _, r := range o.replies {
			if r.lens == nil && len(r.keys) > 0 && (len(r.vals)/o.esize)%len(r.keys) != 0 {
				return fmt.Errorf("kv: pull reply from server %d has no lens and its %d values cannot be split evenly over %d keys", r.from, len(r.vals)/o.esize, len(r.keys))
			}
		}
		if len(*o.lens) == 0 {
			*o.lens = make([]int32, len(req))
		}
		lensDst = *o.lens
	}
	buf, err := o.dst.buffer(total)
	if err != nil {
		return err
	}
	off, k := 0, 0
	for _, r := range o.replies {
		if len(r.keys) == 0 {
			continue
		}
		off += copy(buf[off:], r.vals)
		if lensDst != nil {
			if r.lens != nil {
				copy(lensDst[k:], r.lens)
			} else {
				// ps-lite would abort; the reply is well-formed enough to
				// derive the lengths, as the even split of a push.
				per := int32(len(r.vals) / o.esize / len(r.keys))
				for j := range r.keys {
					lensDst[k+j] = per
				}
			}
		}
		k += len(r.keys)
	}
	if !littleEndian && o.dst.hostOrder() {
		swapElements(buf, o.esize)
	}
	return nil
}

func pullGapError(req []uint64, next int, r reply) error {
	if r.pos < next {
		return fmt.Errorf("kv: pull reply from server %d repeats keys another server returned (from key %d)", r.from, r.keys[0])
	}
	return fmt.Errorf("kv: pull: no server returned key %d", req[next])
}

// swapElements converts wire (little-endian) elements to host order in place
// on big-endian hosts.
func swapElements(b []byte, size int) {
	if size == 1 {
		return
	}
	for i := 0; i+size <= len(b); i += size {
		slices.Reverse(b[i : i+size])
	}
}

// DeadServerError fails an operation that waited on, or was sent to, a
// server the scheduler declared dead. Without replicas the values of the
// server's key range died with it, also when a restarted process took its
// id (is_recovery): that process holds none of them, so the worker fails
// requests to it rather than let it answer with empty values.
type DeadServerError struct {
	Node     int32  // server node id
	Rank     int    // server rank
	Addr     string // host:port the server had
	Reason   string // how the scheduler found out (heartbeat timeout, gossip, ...)
	Replaced bool   // a restarted process took the id
	// Range is the server's key range (ps-lite's GetServerKeyRanges);
	// HasRange is false for a standby, which has none of its own.
	Range    routing.Range
	HasRange bool
}

func (e *DeadServerError) Error() string {
	s := fmt.Sprintf("kv: server %d (rank %d, %s) is dead (%s)", e.Node, e.Rank, e.Addr, e.Reason)
	if e.HasRange {
		s += fmt.Sprintf(": the values of its key range [%d, %d) are lost", e.Range.Begin, e.Range.End)
	} else {
		s += ": the values it held are lost"
	}
	if e.Replaced {
		s += "; the restarted process that took its id holds none of them"
	}
	return s + " (without replicas a server's state dies with it): the job cannot finish correctly; restart it"
}

// deadServer returns the error for a request to server id if the job lost
// it (nil otherwise; one atomic load while no node was lost).
func (w *Worker) deadServer(id int32) error {
	g, ok := w.po.Gone(id)
	if !ok || !g.Dead || g.Node.Role != message.RoleServer {
		return nil
	}
	e := &DeadServerError{Node: id, Rank: message.IDToRank(int(id)), Addr: fmt.Sprintf("%s:%d", g.Node.Hostname, g.Node.Port),
		Reason: g.Reason, Replaced: g.Replaced}
	if e.Rank < len(w.ranges) {
		e.Range, e.HasRange = w.ranges[e.Rank], true
	}
	return e
}

// sweep is queued to the customer, as the local error of an empty message,
// to fail on the customer goroutine (which owns the operations) what waits
// on a dead server (node), or, with node 0, every operation issued before
// `before` that still waits (the scheduler is lost: nobody would say that
// a server died).
type sweep struct {
	node   int32
	before time.Time
}

func (*sweep) Error() string { return "kv: a sweep of waiting operations" }

func (w *Worker) enqueueSweep(sw *sweep) {
	m := &message.Message{Meta: message.NewMeta()}
	w.c.enqueue(m, sw)
}

// nodeGone is the worker's postoffice.OnNodeGone subscriber.
func (w *Worker) nodeGone(ev postoffice.NodeEvent) {
	switch {
	case !ev.Dead:
	case ev.Role == message.RoleServer:
		w.enqueueSweep(&sweep{node: ev.ID})
	}
}

// sweep fails, with a stand-in response from each server concerned, the
// operations sw names.
func (w *Worker) sweep(sw *sweep) {
	type hit struct {
		ts, node int32
		waited   time.Duration
	}
	var hits []hit
	var resend []int32
	now := time.Now()
	// With PS_REPLICAS, a silent server whose intervals have backups
	// fails over once the scheduler is back (a restarted one declares the
	// servers that did not re-register dead): its operations wait for that
	// re-send rather than fail, until the scheduler's loss is final.
	var routes *routing.Routes
	var waitFailover []int32
	if sw.node == 0 && w.failover {
		if g, gone := w.po.Gone(message.SchedulerID); !gone || !g.Dead {
			routes = w.table.Current()
		}
	}
	w.c.tmu.Lock()
	for ts, r := range w.c.pending {
		if o, ok := r.state.(*op); ok && w.failover && sw.node != 0 && slices.Contains(o.waiting, sw.node) {
			resend = append(resend, ts)
			continue
		}
		o, ok := r.state.(*op)
		if !ok || sw.node == 0 && !o.start.Before(sw.before) {
			continue
		}
		for _, n := range o.waiting {
			if sw.node == 0 && w.po.HeardFrom(n).After(sw.before) {
				continue // it answers the node's probes: alive
			}
			if routes != nil && awaitsFailover(routes, n) {
				waitFailover = append(waitFailover, n)
				continue // its failover re-sends it
			}
			if sw.node == 0 || n == sw.node {
				hits = append(hits, hit{ts, n, now.Sub(o.start)})
			}
		}
	}
	w.c.tmu.Unlock()
	w.saySilent(waitFailover)
	if len(resend) > 0 {
		slices.Sort(resend)
		go w.awaitFailover(sw.node, resend)
	}
	slices.SortFunc(hits, func(a, b hit) int { return cmp.Compare(a.ts, b.ts) })
	since, _ := w.po.SchedulerLost()
	for _, h := range hits {
		err := w.deadServer(h.node)
		switch {
		case sw.node == 0 && w.failover && awaitsFailover(w.table.Current(), h.node):
			err = fmt.Errorf("kv: request %d waited %s for server %d (rank %d), which has not answered since the scheduler became unreachable %s ago; the scheduler, which would fail that server over to its backup, did not come back within PS_SCHEDULER_WAIT: the request fails; restart the job",
				h.ts, h.waited.Round(time.Millisecond), h.node, message.IDToRank(int(h.node)), now.Sub(since).Round(time.Millisecond))
		case sw.node == 0:
			err = fmt.Errorf("kv: request %d waited %s for server %d (rank %d), which has not answered for longer than PS_HEARTBEAT_TIMEOUT while the scheduler is unreachable (no answer to heartbeats for PS_HEARTBEAT_TIMEOUT, found %s ago), so nobody can tell whether that server is alive: the request fails; restart the job",
				h.ts, h.waited.Round(time.Millisecond), h.node, message.IDToRank(int(h.node)), now.Sub(since).Round(time.Millisecond))
		default:
			err = fmt.Errorf("kv: request %d: %w", h.ts, err)
		}
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.AppID, m.Meta.CustomerID, m.Meta.Timestamp, m.Meta.Sender = w.c.appID, w.c.customerID, h.ts, h.node
		if w.process(m, err) {
			w.c.AddResponse(h.ts, 1)
		}
	}
}

// saySilent logs, once per server, that operations wait on silent
// servers ids for their failover; sweep calls it.
func (w *Worker) saySilent(ids []int32) {
	for _, id := range ids {
		if w.silentSaid[id] {
			continue
		}
		if w.silentSaid == nil {
			w.silentSaid = map[int32]bool{}
		}
		w.silentSaid[id] = true
		w.po.Logger().Warn("kv: a server has not answered for PS_HEARTBEAT_TIMEOUT while the scheduler is lost; its intervals have backups, so what waits on it waits for a restarted scheduler to fail it over (it fails if the scheduler is not back within PS_SCHEDULER_WAIT)",
			"server", id, "rank", message.IDToRank(int(id)))
	}
}

// failoverSweep is queued to the customer, as sweep is, once the routing
// table no longer relies on dead server node: the operations ts that wait
// on it are re-sent.
type failoverSweep struct {
	node int32
	ts   []int32
}

func (*failoverSweep) Error() string { return "kv: a failover re-send of waiting operations" }

// failoverWait bounds how long a worker waits for the routing table that
// replaces a dead server before failing what waited on it.
const failoverWait = time.Minute

// awaitFailover waits until the routing table no longer names dead server
// node as a backup, nor as the primary of an interval that has backups
// (the coordinator's failover table, which promotes a backup of each
// interval it was the primary of, has arrived), then has operations ts
// re-sent (resendAll).
func (w *Worker) awaitFailover(node int32, ts []int32) {
	deadline := time.NewTimer(failoverWait)
	defer deadline.Stop()
	for {
		changed := w.table.Changed()
		if !awaitsFailover(w.table.Current(), node) {
			break
		}
		select {
		case <-changed:
		case <-deadline.C:
			w.po.Logger().Error("kv: no routing table replaced a dead server in time; what waited on it fails", "server", node, "waited", failoverWait)
			w.enqueueSweep(&sweep{node: node})
			return
		case <-w.po.Done():
			return
		}
	}
	m := &message.Message{Meta: message.NewMeta()}
	w.c.enqueue(m, &failoverSweep{node: node, ts: ts})
}

// awaitsFailover reports whether table r still gives dead server node a
// part that a failover table will take from it: a copy it holds as a
// backup, or an interval it is the primary of and that has a backup to
// promote. (A primary-only server is a primary too: waiting only on backup
// copies failed its intervals' operations before their failover came.)
func awaitsFailover(r *routing.Routes, node int32) bool {
	return slices.ContainsFunc(r.Intervals, func(iv routing.Interval) bool {
		return iv.HasBackup(node) || iv.Node == node && len(iv.Backups) > 0
	})
}

// resendAll re-sends, on the customer goroutine, what operations fo.ts
// still wait for from the dead server, routed by the current table. A
// span whose keys the table still gives the dead server (an interval
// without a live backup) fails with the DeadServerError.
func (w *Worker) resendAll(fo *failoverSweep) {
	routes := w.table.Current()
	for _, ts := range fo.ts {
		st, _, ok := w.c.lookup(ts)
		o, isOp := st.(*op)
		if !ok || !isOp || !slices.Contains(o.waiting, fo.node) {
			continue
		}
		lost := false
		for _, s := range o.spans {
			if s.node == fo.node && s.kb > s.ka {
				if i := routes.Find(o.keys[s.ka]); i >= 0 && routes.Intervals[i].Node == fo.node {
					lost = true
				}
			}
		}
		if lost || !w.resend(o, ts, fo.node) {
			err := fmt.Errorf("kv: request %d: %w", ts, w.deadServer(fo.node))
			n := 0
			for _, x := range o.waiting {
				if x == fo.node {
					n++
				}
			}
			for range n {
				m := &message.Message{Meta: message.NewMeta()}
				m.Meta.AppID, m.Meta.CustomerID, m.Meta.Timestamp, m.Meta.Sender = w.c.appID, w.c.customerID, ts, fo.node
				if w.process(m, err) {
					w.c.AddResponse(ts, 1)
				}
			}
		}
	}
}

// resend re-routes the spans of o that dead server node has not answered
// and sends them. Which push spans a server answered is not known when it
// had several (push answers carry no keys), so then every push span sent
// to it goes again: the new primary acknowledges one applied before
// without applying it again. It reports false when the spans cannot be
// told apart (a pull answered without keys), and changes nothing then.
func (w *Worker) resend(o *op, ts int32, node int32) bool {
	unanswered := 0
	for _, n := range o.waiting {
		if n == node {
			unanswered++
		}
	}
	var again []span
	var keep []span
	for _, s := range o.spans {
		switch {
		case s.node != node:
			keep = append(keep, s)
		case o.pull && slices.ContainsFunc(o.replies, func(r reply) bool {
			return r.from == node && len(r.keys) > 0 && s.kb > s.ka && r.keys[0] == o.keys[s.ka]
		}):
			keep = append(keep, s) // answered: its values are in
		default:
			again = append(again, s)
		}
	}
	if len(again) < unanswered || o.pull && len(again) != unanswered {
		return false
	}
	var subs []span
	for _, s := range again {
		subs = w.slice(o, s.ka, s.kb, s.va, subs, false, s.seq)
	}
	o.spans = append(keep, subs...)
	o.waiting = slices.DeleteFunc(o.waiting, func(n int32) bool { return n == node })
	for _, s := range subs {
		o.waiting = append(o.waiting, s.node)
	}
	w.c.expect(ts, len(subs)-unanswered)
	w.redirects.Add(int64(len(again)))
	for _, s := range subs {
		_ = w.send(o, ts, s)
	}
	return true
}

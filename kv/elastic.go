package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// ElasticAppID is the app id of elasticps's elastic control messages
// (routing tables, migrations, load reports). They travel as SimpleApp
// messages between the scheduler's coordinator and the nodes' agents, so
// the ps-lite wire format is unchanged. Only jobs whose nodes are all
// elasticps enable elastic mode (PS_ELASTIC): a C++ ps-lite node would
// abort on a message for an app it does not know.
const ElasticAppID = 0x7e1a

// Heads of the elastic control messages.
const (
	// ElasticRoutes: scheduler -> node, body = postoffice.Routes.Marshal().
	ElasticRoutes int32 = 1 + iota
	// ElasticPrepare: scheduler -> old owner, body = move; the reply body is
	// the cut-over push sequence number (8 bytes).
	ElasticPrepare
	// ElasticExport: old owner -> scheduler, body = move + state.
	ElasticExport
	// ElasticImport: scheduler -> new owner, body = move + state; replied
	// once installed.
	ElasticImport
	// ElasticAbort: scheduler -> old and new owner, body = move; the reply
	// body is 1 byte, 1 when the old owner had exported the keys already
	// (their state is on its way to the scheduler).
	ElasticAbort
	// ElasticReport: server -> scheduler, body = a load report.
	ElasticReport
	// ElasticLeave: scheduler -> drained server: leave the job.
	ElasticLeave
	// ElasticAccept: scheduler -> new owner, before a move: can it take
	// the keys? (answered with an error when it cannot)
	ElasticAccept
	// ElasticExportFailed: old owner -> scheduler, body = move + the
	// error's text: the export failed, abort the move now rather than
	// after the timeout.
	ElasticExportFailed
)

// ElasticMessageName names an elastic control message for logs and
// metrics ("routes", "prepare", ...).
func ElasticMessageName(head int32) string {
	switch head {
	case ElasticRoutes:
		return "routes"
	case ElasticPrepare:
		return "prepare"
	case ElasticExport:
		return "export"
	case ElasticImport:
		return "import"
	case ElasticAbort:
		return "abort"
	case ElasticReport:
		return "report"
	case ElasticLeave:
		return "leave"
	case ElasticAccept:
		return "accept"
	case ElasticExportFailed:
		return "export-failed"
	}
	return "message " + strconv.Itoa(int(head))
}

// ErrNoAnswer is wrapped by the error of an elastic call that the peer did
// not answer within its timeout. Each one is counted in
// elasticps_elastic_unanswered_total{node,message} on the calling node.
var ErrNoAnswer = errors.New("no answer")

// Move names one migration: keys [Begin, End) go from node From to node
// To, in routing epoch Epoch.
type Move struct {
	Begin, End uint64
	From, To   int32
	Epoch      uint64
}

const moveWire = 8 + 8 + 4 + 4 + 8

// MarshalMove encodes m followed by payload.
func MarshalMove(m Move, payload []byte) []byte {
	b := make([]byte, moveWire, moveWire+len(payload))
	binary.LittleEndian.PutUint64(b, m.Begin)
	binary.LittleEndian.PutUint64(b[8:], m.End)
	binary.LittleEndian.PutUint32(b[16:], uint32(m.From))
	binary.LittleEndian.PutUint32(b[20:], uint32(m.To))
	binary.LittleEndian.PutUint64(b[24:], m.Epoch)
	return append(b, payload...)
}

// UnmarshalMove decodes MarshalMove's output.
func UnmarshalMove(b []byte) (Move, []byte, error) {
	if len(b) < moveWire {
		return Move{}, nil, fmt.Errorf("elastic: move message of %d bytes is shorter than %d", len(b), moveWire)
	}
	m := Move{Begin: binary.LittleEndian.Uint64(b), End: binary.LittleEndian.Uint64(b[8:]),
		From: int32(binary.LittleEndian.Uint32(b[16:])), To: int32(binary.LittleEndian.Uint32(b[20:])),
		Epoch: binary.LittleEndian.Uint64(b[24:])}
	if m.End <= m.Begin {
		return m, nil, fmt.Errorf("elastic: move [%d, %d) is empty", m.Begin, m.End)
	}
	return m, b[moveWire:], nil
}

// Migrator is implemented by server handlers that can hand the state of a
// key range to another server (DefaultHandler does). Export returns an
// opaque snapshot of every key in [begin, end) and stops serving them;
// Import installs such a snapshot. Handlers without it fall back to
// capturing values through their own pull path and installing them as
// initializing pushes (see Server's doc).
//
// Export and Import run on their own goroutine, concurrently with the
// handler serving other keys. Both must be all or nothing: an Export that
// fails keeps every key (the move is aborted and the keys stay), an Import
// that fails installs none (the snapshot goes back to the old owner, which
// imports it again). Export and Import may each run several times for the
// same keys (a range may move away and come back).
type Migrator interface {
	Export(begin, end uint64) ([]byte, error)
	Import(state []byte) error
}

// elasticLink is the SimpleApp of ElasticAppID on one node, with
// request/response correlation for callers that wait for an answer.
type elasticLink struct {
	app *SimpleApp

	mu      sync.Mutex
	waiters map[int32]chan SimpleData
	handle  func(d SimpleData) ([]byte, error)
}

func newElasticLink(po *postoffice.Postoffice) (*elasticLink, error) {
	app, err := NewSimpleApp(po, ElasticAppID, ElasticAppID)
	if err != nil {
		return nil, err
	}
	l := &elasticLink{app: app, waiters: map[int32]chan SimpleData{}}
	app.SetResponseHandler(func(d SimpleData, _ *SimpleApp) {
		l.mu.Lock()
		ch := l.waiters[d.Timestamp]
		delete(l.waiters, d.Timestamp)
		l.mu.Unlock()
		if ch != nil {
			ch <- d
		}
	})
	app.SetRequestHandler(func(d SimpleData, a *SimpleApp) {
		l.mu.Lock()
		h := l.handle
		l.mu.Unlock()
		var body []byte
		var err error
		if h != nil {
			body, err = h(d)
		} else {
			err = errors.New("no elastic handler on this node")
		}
		if err != nil {
			// Errors travel as a body starting with 0xff.
			body = append([]byte{0xff}, err.Error()...)
		} else {
			body = append([]byte{0}, body...)
		}
		if rerr := a.Response(d, body); rerr != nil {
			a.po.Logger().Error("elastic: cannot answer", "to", d.Sender, "err", rerr)
		}
	})
	return l, nil
}

// Call sends a request to node and waits for its answer.
func (l *elasticLink) Call(node int32, head int32, body []byte, timeout time.Duration) ([]byte, error) {
	ch := make(chan SimpleData, 1)
	// The response handler runs in the customer goroutine after Request
	// returns the timestamp, so register under the lock first.
	l.mu.Lock()
	ts, err := l.app.Request(head, body, int(node))
	if err != nil {
		l.mu.Unlock()
		return nil, err
	}
	l.waiters[ts] = ch
	l.mu.Unlock()
	select {
	case d := <-ch:
		if len(d.Body) == 0 {
			return nil, fmt.Errorf("elastic: empty answer from node %d", node)
		}
		if d.Body[0] == 0xff {
			return nil, fmt.Errorf("elastic: node %d: %s", node, d.Body[1:])
		}
		return d.Body[1:], nil
	case <-time.After(timeout):
		l.mu.Lock()
		delete(l.waiters, ts)
		l.mu.Unlock()
		name := ElasticMessageName(head)
		l.app.po.ElasticMetrics().ControlUnansweredTotal.WithLabelValues(strconv.Itoa(int(node)), name).Inc()
		return nil, fmt.Errorf("elastic: node %d: %w to %s (request %d) within %v", node, ErrNoAnswer, name, ts, timeout)
	case <-l.app.po.Done():
		return nil, postoffice.ErrStopped
	}
}

// Post sends a one-way request (its answer is ignored).
func (l *elasticLink) Post(node int32, head int32, body []byte) error {
	_, err := l.app.Request(head, body, int(node))
	return err
}

// SetHandler sets the function answering incoming elastic requests.
func (l *elasticLink) SetHandler(h func(d SimpleData) ([]byte, error)) {
	l.mu.Lock()
	l.handle = h
	l.mu.Unlock()
}

// ElasticLink is the scheduler's end of the elastic control messages: the
// coordinator calls nodes with it and receives their exports and reports.
type ElasticLink struct{ l *elasticLink }

// NewElasticLink registers the elastic app on the scheduler's postoffice.
func NewElasticLink(po *postoffice.Postoffice) (*ElasticLink, error) {
	l, err := newElasticLink(po)
	if err != nil {
		return nil, err
	}
	return &ElasticLink{l: l}, nil
}

// Call sends head/body to node and returns its answer.
func (e *ElasticLink) Call(node int32, head int32, body []byte, timeout time.Duration) ([]byte, error) {
	return e.l.Call(node, head, body, timeout)
}

// Handle sets the handler for requests from nodes (exports, reports).
func (e *ElasticLink) Handle(h func(from int32, head int32, body []byte) ([]byte, error)) {
	e.l.SetHandler(func(d SimpleData) ([]byte, error) { return h(d.Sender, d.Head, d.Body) })
}

// workerLinks holds each worker postoffice's elastic link (one per node).
var workerLinks sync.Map // *postoffice.Postoffice -> *elasticLink

// EnableElastic makes a worker node follow routing-table updates from the
// scheduler (PS_ELASTIC). Servers enable it with Server.EnableElastic. It
// is idempotent per node.
func EnableElastic(po *postoffice.Postoffice) error {
	_, err := workerLink(po)
	return err
}

func workerLink(po *postoffice.Postoffice) (*elasticLink, error) {
	if l, ok := workerLinks.Load(po); ok {
		return l.(*elasticLink), nil
	}
	l, err := newElasticLink(po)
	if err != nil {
		return nil, err
	}
	if prev, loaded := workerLinks.LoadOrStore(po, l); loaded {
		l.app.Close()
		return prev.(*elasticLink), nil
	}
	po.SetElastic(true)
	po.RegisterExitCallback(func() { workerLinks.Delete(po) })
	l.SetHandler(func(d SimpleData) ([]byte, error) {
		if d.Head != ElasticRoutes {
			return nil, fmt.Errorf("a worker does not handle elastic message %d", d.Head)
		}
		r, err := postoffice.UnmarshalRoutes(d.Body)
		if err != nil {
			return nil, err
		}
		po.Routing().Update(r)
		return nil, nil
	})
	return l, nil
}

// EnableElastic puts this worker's node in elastic mode (see the package
// function) and reports the worker's round trips to the scheduler every
// PS_REPORT_INTERVAL, which the balancer uses as the job's iteration-time
// signal.
func (w *Worker) EnableElastic() error {
	l, err := workerLink(w.po)
	if err != nil {
		return err
	}
	go w.reportLoop(l, reportInterval(w.po))
	return nil
}

func (w *Worker) reportLoop(l *elasticLink, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-w.po.Done():
			return
		case <-w.c.quit:
			return
		case now := <-t.C:
			ops, rtt, handle := w.rttOps.Swap(0), w.rttNanos.Swap(0), w.handleNanos.Swap(0)
			r := WorkerReport{Interval: now.Sub(last), Ops: ops}
			if ops > 0 {
				r.MeanRTT, r.MeanHandling = time.Duration(rtt/ops), time.Duration(handle/ops)
			}
			last = now
			if err := l.Post(message.SchedulerID, ElasticReport, r.Marshal()); err != nil {
				w.po.Logger().Debug("elastic: worker report not sent", "err", err)
			}
		}
	}
}

// keyState is what a server remembers about the pushes it received whose
// first key is the same: the highest last key among them (a push of keys
// [lo, hi] counts for every range it overlaps, not only for the one holding
// lo: a routing interval may hold several ranges that move apart later),
// who pushed them and up to which push sequence number.
type keyState struct {
	hi      uint64
	pushers map[int32]uint64 // worker (see workerKey) -> highest push seq received
}

// cut is an outgoing migration on the old owner.
type cut struct {
	mv       Move
	seq      uint64           // pushes from this seq on belong to the new owner
	pushers  map[int32]uint64 // workers expected to push up to seq-1
	recv     map[int32]uint64
	exported bool
	warned   bool
	started  time.Time
}

// incoming is a migration on the new owner, until installed.
type incoming struct {
	mv     Move
	parked []*message.Message
}

func overlaps(b1, e1, b2, e2 uint64) bool { return b1 < e2 && b2 < e1 }

func encodeU64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

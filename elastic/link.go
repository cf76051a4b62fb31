package elastic

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/postoffice"
)

// Handler answers one elastic request from node from; its result is the
// answer's body, or an error the caller's Call returns.
type Handler func(from int32, head int32, body []byte) ([]byte, error)

// Link is a node's end of the elastic control messages: the SimpleApp of
// AppID, with request/answer correlation for callers that wait. The
// scheduler's coordinator calls nodes with it; the nodes' agents answer and
// send their exports and reports with it. One per node.
type Link struct {
	app     *kv.SimpleApp
	po      *postoffice.Postoffice
	metrics *Metrics

	mu      sync.Mutex
	waiters map[int32]waiter // by request timestamp
	handle  Handler
}

// waiter is a request waiting for its answer.
type waiter struct {
	node int32
	f    func(kv.SimpleData)
}

// NewLink registers the elastic app and the elastic metrics (NewMetrics) on
// po.
func NewLink(po *postoffice.Postoffice) (*Link, error) {
	m, err := NewMetrics(po.Metrics())
	if err != nil {
		return nil, fmt.Errorf("elastic: metrics: %w", err)
	}
	app, err := kv.NewSimpleApp(po, AppID, AppID)
	if err != nil {
		return nil, err
	}
	// Moved ranges, seeds, forwarded pushes and round states are bodies
	// of any size; in the meta, one over PS_MAX_META_BYTES would be
	// refused and its caller left waiting.
	app.SetBodyInData(true)
	l := &Link{app: app, po: po, metrics: m, waiters: map[int32]waiter{}}
	app.SetResponseHandler(func(d kv.SimpleData, _ *kv.SimpleApp) {
		l.mu.Lock()
		w, ok := l.waiters[d.Timestamp]
		delete(l.waiters, d.Timestamp)
		l.mu.Unlock()
		if ok {
			w.f(d)
		}
	})
	// A dead node answers nothing: its waiters would stay until the link
	// closes. Call's callers learn of the death themselves, and Go's
	// caller decides without an answer (see Go).
	po.OnNodeGone(func(ev postoffice.NodeEvent) {
		if ev.Dead {
			l.forgetNode(ev.ID)
		}
	})
	app.SetRequestHandler(func(d kv.SimpleData, a *kv.SimpleApp) {
		l.mu.Lock()
		h := l.handle
		l.mu.Unlock()
		var body []byte
		var err error
		if h != nil {
			body, err = h(d.Sender, d.Head, d.Body)
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
			// A server of a replicated job may get a request from
			// another server before it has connected to it (the
			// scheduler's peer list comes on another connection): try
			// again for a while rather than leave the caller waiting.
			go l.answerLater(a, d, body, rerr)
		}
	})
	return l, nil
}

// Call sends a request to node and waits for its answer.
func (l *Link) Call(node int32, head int32, body []byte, timeout time.Duration) ([]byte, error) {
	ch := make(chan kv.SimpleData, 1)
	// The response handler runs in the customer goroutine after Request
	// returns the timestamp, so register under the lock first.
	l.mu.Lock()
	ts, err := l.app.Request(head, body, int(node))
	if err != nil {
		l.mu.Unlock()
		return nil, err
	}
	l.waiters[ts] = waiter{node, func(d kv.SimpleData) { ch <- d }}
	l.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	forget := func() {
		l.mu.Lock()
		delete(l.waiters, ts)
		l.mu.Unlock()
	}
	for {
		// A node declared dead answers nothing: waiting for the timeout
		// would only hold up what comes next (a failover waits for the
		// move that called it).
		changed := l.po.GoneChanged()
		if g, ok := l.dead(node); ok {
			select {
			case d := <-ch: // it answered before it died
				return answer(node, d)
			default:
			}
			forget()
			return nil, fmt.Errorf("elastic: node %d: %w (%s) before it answered %s (request %d)", node, ErrNodeDead, g.Reason, MessageName(head), ts)
		}
		select {
		case d := <-ch:
			return answer(node, d)
		case <-changed:
		case <-t.C:
			forget()
			name := MessageName(head)
			l.metrics.ControlUnansweredTotal.WithLabelValues(strconv.Itoa(int(node)), name).Inc()
			return nil, fmt.Errorf("elastic: node %d: %w to %s (request %d) within %v", node, ErrNoAnswer, name, ts, timeout)
		case <-l.po.Done():
			return nil, postoffice.ErrStopped
		}
	}
}

// answerRetry bounds how long an answer that could not be sent is tried
// again.
const answerRetry = 10 * time.Second

func (l *Link) answerLater(a *kv.SimpleApp, d kv.SimpleData, body []byte, err error) {
	for deadline := time.Now().Add(answerRetry); time.Now().Before(deadline); {
		select {
		case <-l.po.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
		if err = a.Response(d, body); err == nil {
			return
		}
	}
	l.po.Logger().Error("elastic: cannot answer", "to", d.Sender, "err", err)
}

// answer decodes an answer's body (see NewLink's request handler).
func answer(node int32, d kv.SimpleData) ([]byte, error) {
	if len(d.Body) == 0 {
		return nil, fmt.Errorf("elastic: empty answer from node %d", node)
	}
	if d.Body[0] == 0xff {
		return nil, fmt.Errorf("elastic: node %d: %s", node, d.Body[1:])
	}
	return d.Body[1:], nil
}

// Go sends a request to node without waiting: done gets the answer (or the
// node's error) on the link's receive goroutine, so it must not block. It
// is never called when no answer comes, nor once the node was declared
// dead; the caller decides how long to wait (a replicating primary waits
// until the node answers or leaves the routing table). The returned error
// is the send's.
func (l *Link) Go(node int32, head int32, body []byte, done func([]byte, error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Checked under mu: a death recorded after this check is forgotten
	// (forgetNode) only after this waiter is in.
	if g, ok := l.dead(node); ok {
		return fmt.Errorf("elastic: node %d: %w (%s); its %s request is not sent", node, ErrNodeDead, g.Reason, MessageName(head))
	}
	ts, err := l.app.Request(head, body, int(node))
	if err != nil {
		return err
	}
	l.waiters[ts] = waiter{node, func(d kv.SimpleData) { done(answer(node, d)) }}
	return nil
}

// dead reports whether node was declared dead and no new process took
// over its id (is_recovery) since.
func (l *Link) dead(node int32) (postoffice.GoneNode, bool) {
	g, ok := l.po.Gone(node)
	return g, ok && g.Dead && !g.Replaced
}

// forgetNode drops the waiters of requests to node.
func (l *Link) forgetNode(node int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ts, w := range l.waiters {
		if w.node == node {
			delete(l.waiters, ts)
		}
	}
}

// Metrics are the elastic metrics of the link's node.
func (l *Link) Metrics() *Metrics { return l.metrics }

// Post sends a one-way request (its answer is ignored).
func (l *Link) Post(node int32, head int32, body []byte) error {
	_, err := l.app.Request(head, body, int(node))
	return err
}

// Handle sets the function answering incoming elastic requests.
func (l *Link) Handle(h Handler) {
	l.mu.Lock()
	l.handle = h
	l.mu.Unlock()
}

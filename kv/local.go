package kv

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/message"
)

// captured is a handler's answer to a local request.
type captured struct {
	res KVPairs
	err error
}

// localRequests are the requests HandleLocal put in the server's queue,
// each with the channel its answer goes to. n lets the receive path skip
// the lock while there are none (nearly always).
type localRequests struct {
	n       atomic.Int32
	mu      sync.Mutex
	pending map[*message.Message]chan captured
}

func (l *localRequests) add(m *message.Message) chan captured {
	ch := make(chan captured, 1)
	l.mu.Lock()
	if l.pending == nil {
		l.pending = map[*message.Message]chan captured{}
	}
	l.pending[m] = ch
	l.n.Add(1)
	l.mu.Unlock()
	return ch
}

// take returns m's answer channel if m is a local request, and forgets it.
func (l *localRequests) take(m *message.Message) chan captured {
	if l.n.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.pending[m]
	if ok {
		delete(l.pending, m)
		l.n.Add(-1)
	}
	return ch
}

// LocalRequest is a request a Server runs through its own queue and
// handler as if a worker had sent it.
type LocalRequest struct {
	Push     bool // a push; otherwise a pull
	Cmd      int32
	DataType message.DataType
	Data     KVPairs // Vals empty for a pull
}

// HandleLocal runs req through the server's queue and handler, in order
// with the requests from the network, and returns the handler's response
// instead of sending it: a copy of its keys, values and lens, or its error.
// The gate does not see local requests. It gives up after timeout, or when
// the node stops. Elastic mode's generic hand-over captures and installs
// key ranges this way for handlers that cannot export them.
func (s *Server) HandleLocal(req LocalRequest, timeout time.Duration) (KVPairs, error) {
	me := s.po.MyNode().ID
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.AppID = s.c.appID
	m.Meta.CustomerID = s.c.appID
	m.Meta.Sender, m.Meta.Recver = me, me
	m.Meta.Timestamp = -1
	m.Meta.Request = true
	m.Meta.Push, m.Meta.Pull = req.Push, !req.Push
	m.Meta.Head = req.Cmd
	m.AddData(message.Uint64, KeysToBytes(req.Data.Keys))
	m.AddData(req.DataType, req.Data.Vals)
	if len(req.Data.Lens) > 0 {
		m.AddData(message.Int32, LensToBytes(req.Data.Lens))
	}
	ch := s.locals.add(m)
	s.c.enqueue(m, nil)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case c := <-ch:
		return c.res, c.err
	case <-t.C:
		s.locals.take(m) // a late answer goes into ch's buffer, unread
		return KVPairs{}, fmt.Errorf("kv: the handler did not answer a local request within %v", timeout)
	case <-s.po.Done():
		return KVPairs{}, errors.New("kv: node stopped")
	}
}

// Readmit puts a request its gate held back into the server's queue; the
// gate sees it again.
func (s *Server) Readmit(m *message.Message) { s.c.enqueue(m, nil) }

// AppID is the server's app id.
func (s *Server) AppID() int { return int(s.c.appID) }

// cloneKVPairs copies a handler's response, whose buffers it may reuse.
func cloneKVPairs(res KVPairs) KVPairs {
	return KVPairs{Keys: slices.Clone(res.Keys), Vals: slices.Clone(res.Vals), Lens: slices.Clone(res.Lens)}
}

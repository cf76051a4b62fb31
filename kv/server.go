package kv

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/syncctl"
)

// ReqMeta describes a KV request received by a Server (ps::KVMeta).
type ReqMeta struct {
	Cmd        int32 // Meta.Head: the worker's Options.Cmd
	Push, Pull bool  // both for a push-pull
	Sender     int32 // the worker's node id
	Timestamp  int32 // the worker's operation timestamp
	CustomerID int32 // the worker's customer id
	// DataType is the tag of the request's vals frame (Float when the
	// request has no frames). Response tags its vals with it: change it
	// before responding to answer with another type.
	DataType message.DataType
	Priority int32
	// Raw is the request's BytePS-fork fields (all on PS_WIRE=bytedance;
	// Key, Addr, ValLen and Option on the dmlc wire, the rest zero).
	// Response echoes its Key, Addr, ValLen and Option, as the fork's
	// KVServer does (rawfields.go).
	Raw message.RawFields

	state    *reqState     // nil for a ReqMeta built by hand
	admitted Admitted      // the gate's record, told when answered
	capture  chan captured // a local request (HandleLocal): the response goes here, not to the network
	received time.Time     // for the handling-time metric
}

// KVPairs are the keys, values and optional per-key lengths (in elements) of
// a request or response. In a request they are views of the received frames
// (no copy); they stay valid after the handler returns, so a handler may keep
// them for a later Response.
type KVPairs struct {
	Keys []uint64
	Vals []byte
	Lens []int32
}

// ServerHandler handles one KV request, one at a time: on the node's
// receive goroutine when the server is idle, else in its customer goroutine
// (see Customer). It must arrange for exactly one Response (or
// ResponseError) for the request, now or later from any goroutine. It may
// block; one that blocks longer than postoffice.Config.InlineHandOver makes
// the node go on receiving in a new goroutine.
type ServerHandler func(meta ReqMeta, data KVPairs, srv *Server)

// ErrAlreadyResponded is returned by a second Response for one request.
var ErrAlreadyResponded = errors.New("kv: this request has already been answered")

// Server receives KV requests and answers them (ps::KVServer). Its customer
// id is its app id, as in ps-lite, because servers route data messages by
// (app id, app id).
//
// Malformed requests (a frame count other than 0, 2 or 3, a keys or lens
// frame that is not whole 8- or 4-byte elements, lens not one per key, vals
// not whole elements of their type) never reach the handler: they are
// logged, counted (Invalid) and answered with an error response.
//
// Error responses are an elasticps extension: a KV response whose Meta.Body
// is non-empty carries a UTF-8 error message instead of data, and the Go
// Worker's Wait returns it as a *ServerError. C++ ps-lite workers ignore the
// body and see a response without data (which they treat as an empty
// result, or abort on for a pull).
type Server struct {
	po      *postoffice.Postoffice
	c       *Customer
	simple  *SimpleApp
	handler atomic.Pointer[ServerHandler]

	gate    RequestGate // set before registration, then read-only
	sync    *SyncGate   // the sync gate (alone as gate, or chained by gate); nil under ASP
	invalid atomic.Int64
	dropped atomic.Int64
	locals  localRequests

	releaseRequests atomic.Bool
}

// NewServer registers a server for appID on po. Until SetRequestHandler is
// called, every request is answered with an error.
func NewServer(po *postoffice.Postoffice, appID int) (*Server, error) {
	return NewServerWith(po, appID, ServerOptions{})
}

// ServerOptions are handlers installed before the server is registered, so
// that no request that arrives early meets a missing handler (a C++
// KVServer created after Start receives requests at once).
type ServerOptions struct {
	Handler        ServerHandler
	SimpleRequest  SimpleHandler
	SimpleResponse SimpleHandler
	// ReleaseRequests: see Server.ReleaseRequests.
	ReleaseRequests bool
	// Gate, when set, builds the server's RequestGate (elastic mode's
	// migrations); it is called once, before the server registers.
	Gate func(*Server) RequestGate
}

// NewServerWith is NewServer with handlers in place from the start.
func NewServerWith(po *postoffice.Postoffice, appID int, opts ...ServerOptions) (*Server, error) {
	if po == nil {
		return nil, errors.New("kv: nil postoffice")
	}
	s := &Server{po: po, simple: embeddedSimpleApp(po)}
	// Without a gate of its own, a server whose job synchronizes
	// (PS_SYNC_MODE) gets the sync gate, before it can receive anything.
	var syncGate *SyncGate
	if mode := po.Config().Sync.Mode; mode != syncctl.ASP && !slices.ContainsFunc(opts, func(o ServerOptions) bool { return o.Gate != nil }) {
		var err error
		if syncGate, err = NewSyncGate(s); err != nil {
			return nil, err
		}
	}
	c, err := newCustomer(po, appID, appID, s.process, func(c *Customer) {
		s.c, s.simple.c, c.releases, c.inline = c, c, true, true
		for _, o := range opts {
			if o.ReleaseRequests {
				s.ReleaseRequests(true)
			}
			if o.Handler != nil {
				s.SetRequestHandler(o.Handler)
			}
			if o.SimpleRequest != nil {
				s.simple.SetRequestHandler(o.SimpleRequest)
			}
			if o.SimpleResponse != nil {
				s.simple.SetResponseHandler(o.SimpleResponse)
			}
			if o.Gate != nil {
				s.gate = o.Gate(s)
			}
		}
		if syncGate != nil {
			s.gate = syncGate
		}
	})
	if err != nil {
		return nil, err
	}
	if po.Config().Elastic && s.gate == nil {
		c.Close()
		return nil, errors.New("kv: PS_ELASTIC=1 but the server has no elastic gate: open the node's elastic side with elastic.Open(po) and create the server with its NewServer")
	}
	if mode := po.Config().Sync.Mode; mode != syncctl.ASP && s.sync == nil {
		c.Close()
		return nil, fmt.Errorf("kv: PS_SYNC_MODE=%v but the server's own gate does not apply it (it must chain kv.NewSyncGate); PS_SYNC_MODE=asp runs without", mode)
	}
	return s, nil
}

// SetRequestHandler sets the KV request handler (for example
// NewDefaultHandler().Handle).
func (s *Server) SetRequestHandler(h ServerHandler) {
	if h == nil {
		s.handler.Store(nil)
		return
	}
	s.handler.Store(&h)
}

// Simple returns the server's SimpleApp, which handles the simple_app
// messages (commands) sent to this server's app.
func (s *Server) Simple() *SimpleApp { return s.simple }

// Customer returns the server's customer.
func (s *Server) Customer() *Customer { return s.c }

// Invalid counts requests rejected without reaching a handler (malformed,
// or no handler set).
func (s *Server) Invalid() int64 { return s.invalid.Load() }

// Close unregisters the server. Requests its sync gate parked are
// answered first (SyncGate.Close).
func (s *Server) Close() {
	if s.sync != nil {
		s.sync.Close()
	}
	s.c.Close()
}

// Response answers request meta with res (ps::KVServer::Response): keys,
// vals and lens frames are sent when res.Keys is non-empty (lens only when
// non-empty). It may be called from any goroutine, once per request; res is
// sent without copying and must not be modified afterwards. A response whose
// lens do not match its keys is not sent: the worker gets an error response
// instead, and the error is returned.
func (s *Server) Response(meta ReqMeta, res KVPairs) error {
	if len(res.Lens) != 0 && len(res.Lens) != len(res.Keys) {
		err := fmt.Errorf("kv: server response has %d lens for %d keys", len(res.Lens), len(res.Keys))
		if sendErr := s.ResponseError(meta, err); sendErr != nil {
			return errors.Join(err, sendErr)
		}
		return err
	}
	if meta.state != nil && meta.state.responded.Swap(true) {
		return ErrAlreadyResponded
	}
	if meta.capture != nil {
		// copies: the handler may reuse its response buffers
		meta.capture <- captured{res: cloneKVPairs(res)}
		return nil
	}
	out := newOutMsg()
	m := s.responseTo(meta, &out.msg)
	if !meta.received.IsZero() {
		// the worker splits its round trip into this and network time
		m.Meta.Ext.HandleNano = int64(time.Since(meta.received))
	}
	if len(res.Keys) > 0 {
		m.AddData(message.Uint64, KeysToBytes(res.Keys))
		m.AddData(meta.DataType, res.Vals)
		if len(res.Lens) > 0 {
			m.AddData(message.Int32, LensToBytes(res.Lens))
		}
	}
	if h, ok := meta.admitted.(ResponseHolder); ok {
		send := func(fail error) error {
			if fail != nil {
				return s.sendError(meta, fail)
			}
			defer s.closeInflight(meta)
			if err := s.send(m); err != nil {
				return err
			}
			out.sent(s.po)
			return nil
		}
		if h.Hold(send) {
			return nil
		}
		return send(nil)
	}
	defer s.closeInflight(meta)
	if err := s.send(m); err != nil {
		return err
	}
	out.sent(s.po)
	return nil
}

// ResponseError answers request meta with an error (the elasticps error
// extension, see Server); the worker's Wait returns it as a *ServerError.
func (s *Server) ResponseError(meta ReqMeta, err error) error {
	if meta.state != nil && meta.state.responded.Swap(true) {
		return ErrAlreadyResponded
	}
	if meta.capture != nil {
		meta.capture <- captured{err: err}
		return nil
	}
	return s.sendError(meta, err)
}

// sendError sends ResponseError's answer.
func (s *Server) sendError(meta ReqMeta, err error) error {
	defer s.closeInflight(meta)
	msg := "unknown error"
	if err != nil && err.Error() != "" {
		msg = err.Error()
	}
	m := s.responseTo(meta, &message.Message{Meta: message.NewMeta()})
	m.Meta.Body = []byte(msg)
	return s.send(m)
}

// closeInflight tells the gate a request is answered (after the response
// is sent, so that a migration's export never overtakes it).
func (s *Server) closeInflight(meta ReqMeta) {
	if !meta.received.IsZero() {
		s.po.KVMetrics().ObserveServerHandle(meta.Pull, time.Since(meta.received))
	}
	if meta.admitted != nil {
		meta.admitted.Answered()
	}
}

// responseTo fills in m, whose Meta holds ps-lite's defaults
// (message.NewMeta, as newOutMsg leaves it), as the response to meta.
func (s *Server) responseTo(meta ReqMeta, m *message.Message) *message.Message {
	m.Meta.AppID = s.c.appID
	m.Meta.CustomerID = meta.CustomerID
	m.Meta.Request = false
	m.Meta.Push = meta.Push
	m.Meta.Pull = meta.Pull
	m.Meta.Head = meta.Cmd
	m.Meta.Timestamp = meta.Timestamp
	m.Meta.Recver = meta.Sender
	m.Meta.Raw = echoRaw(meta.Raw)
	return m
}

func (s *Server) send(m *message.Message) error {
	if _, err := s.po.Send(m); err != nil {
		return fmt.Errorf("kv: response to node %d (timestamp %d) not sent: %w", m.Meta.Recver, m.Meta.Timestamp, err)
	}
	return nil
}

// process handles one message in the customer goroutine.
func (s *Server) process(m *message.Message, localErr error) bool {
	// Read once: the handler's view of the request must match what is
	// done with it afterwards. Views of transport memory only reach a
	// handler that lets the request be released; a gate may park and
	// redirect requests, so gated servers get Go memory (before
	// parseRequest, whose KVPairs alias the frames). Local requests
	// (HandleLocal) are not the transport's buffers: never released.
	capture := s.locals.take(m)
	release := s.releaseRequests.Load() && capture == nil
	if m.Meta.SimpleApp || !release || s.gate != nil {
		s.po.Detach(m)
	}
	if m.Meta.SimpleApp {
		return s.simple.process(m, localErr)
	}
	if !m.Meta.Request {
		n := s.dropped.Add(1)
		s.po.Logger().Warn("kv: server dropped a KV response; servers only answer requests", "msg", m.Meta.String(), "dropped_total", n)
		s.po.Release(m)
		return false
	}
	meta := ReqMeta{
		Cmd:        m.Meta.Head,
		Push:       m.Meta.Push,
		Pull:       m.Meta.Pull,
		Sender:     m.Meta.Sender,
		Timestamp:  m.Meta.Timestamp,
		CustomerID: m.Meta.CustomerID,
		DataType:   message.Float,
		Priority:   m.Meta.Priority,
		Raw:        m.Meta.Raw,
		state:      &reqState{},
		capture:    capture,
		received:   time.Now(),
	}
	if len(m.Meta.DataType) >= 2 {
		meta.DataType = m.Meta.DataType[1]
	}
	data, err := parseRequest(m, meta.DataType)
	if err == nil && s.handler.Load() == nil {
		err = errors.New("no request handler is set on this server (Server.SetRequestHandler)")
	}
	if err != nil {
		n := s.invalid.Add(1)
		s.po.Logger().Error("kv: rejected a request; the server keeps serving", "err", err, "msg", m.Meta.String(), "invalid_total", n)
		if rerr := s.ResponseError(meta, err); rerr != nil {
			s.po.Logger().Error("kv: cannot send the error response", "err", rerr)
		}
		if release && s.gate == nil {
			s.po.Release(m)
		}
		return true
	}
	if capture != nil {
		(*s.handler.Load())(meta, data, s)
		return false
	}
	if s.gate != nil {
		a, run := s.gate.Admit(m, data.Keys)
		if !run {
			return true
		}
		meta.admitted = a
	}
	if release {
		meta.state.msg, meta.state.po = m, s.po
	}
	(*s.handler.Load())(meta, data, s)
	if release && !meta.state.retained.Load() {
		s.po.Release(m)
	}
	return true
}

// reqState is what the copies of one request's ReqMeta share.
type reqState struct {
	responded atomic.Bool
	retained  atomic.Bool            // the handler kept the request's buffers (Retain)
	msg       *message.Message       // set when the server releases requests
	po        *postoffice.Postoffice // to release msg
}

// Retain keeps the request's KVPairs valid after the handler returns on a
// server with ReleaseRequests(true), for a handler that lends them on (the
// C++ bridge hands large requests to C++ until it is done with them). The
// handler must call it before it returns; the returned function gives the
// buffers back to the transport and must be called once, when nothing
// reads them any more (later calls do nothing). Where requests are not
// released, Retain changes nothing and the function does nothing.
func (m ReqMeta) Retain() (release func()) {
	st := m.state
	if st == nil || st.msg == nil || st.retained.Swap(true) {
		return func() {}
	}
	return sync.OnceFunc(func() { st.po.Release(st.msg) })
}

// ReleaseRequests(true) lets the transport reuse a request's buffers as
// soon as the handler returns, which saves an allocation and a copy per
// large message. Only for handlers that keep no view of the request's
// KVPairs after returning (DefaultHandler copies what it stores) or that
// call ReqMeta.Retain for the requests they keep; without it, KVPairs stay
// valid as long as the handler holds them.
func (s *Server) ReleaseRequests(on bool) { s.releaseRequests.Store(on) }

// parseRequest checks a request's frames and returns views of them.
func parseRequest(m *message.Message, dt message.DataType) (KVPairs, error) {
	var kv KVPairs
	n := len(m.Data)
	if n == 0 {
		return kv, nil
	}
	if n != 2 && n != 3 {
		return kv, fmt.Errorf("request has %d data frames; expected keys, vals and optionally lens", n)
	}
	var err error
	if kv.Keys, err = BytesToKeys(m.Data[0]); err != nil {
		return kv, fmt.Errorf("keys frame: %w", err)
	}
	kv.Vals = m.Data[1]
	if es := dt.Size(); len(kv.Vals)%es != 0 {
		return kv, fmt.Errorf("vals frame of %d bytes is not a whole number of %s elements", len(kv.Vals), dt)
	}
	if n == 3 {
		if kv.Lens, err = BytesToLens(m.Data[2]); err != nil {
			return kv, fmt.Errorf("lens frame: %w", err)
		}
		if len(kv.Lens) != len(kv.Keys) {
			return kv, fmt.Errorf("request has %d lens for %d keys", len(kv.Lens), len(kv.Keys))
		}
	}
	return kv, nil
}

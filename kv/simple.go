package kv

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// SimpleData is a SimpleApp request or response (ps::SimpleData).
type SimpleData struct {
	Head int32
	// Body is the message body; it is the received buffer (not a copy) and
	// stays valid after the handler returns.
	Body       []byte
	Sender     int32 // node id of the sender
	Timestamp  int32 // the requester's timestamp
	CustomerID int32 // the requester's customer id
}

// SimpleHandler handles a SimpleApp request or response. It runs in the
// customer goroutine: it must not call Wait on the same app.
type SimpleHandler func(d SimpleData, app *SimpleApp)

// SimpleApp sends (head int, body bytes) requests to groups of nodes and
// answers them (ps::SimpleApp). Worker and Server embed one on their own
// customer: messages with simple_app=1 that reach them are handled here,
// which is how MXNet sends commands to servers.
type SimpleApp struct {
	po       *postoffice.Postoffice
	c        *Customer
	owned    bool // Close closes c (false when embedded in a Worker/Server)
	request  atomic.Pointer[SimpleHandler]
	response atomic.Pointer[SimpleHandler]
	// bodyInData: bodies travel as a data frame (SetBodyInData)
	bodyInData atomic.Bool
}

// SetBodyInData makes the app send request and response bodies as one
// data frame instead of in the meta, so that they are bounded by
// PS_MAX_MESSAGE_BYTES rather than PS_MAX_META_BYTES (1 MiB by default):
// for apps whose bodies carry parameter state (elastic moves, replicas).
// Only for apps whose peers are all elasticps nodes: C++ ps-lite reads a
// SimpleApp body from the meta. Every SimpleApp accepts either form.
func (a *SimpleApp) SetBodyInData(on bool) { a.bodyInData.Store(on) }

// setBody puts body into m as SetBodyInData says.
func (a *SimpleApp) setBody(m *message.Message, body []byte) {
	if a.bodyInData.Load() && len(body) > 0 {
		m.AddData(message.Char, body)
		return
	}
	m.Meta.Body = body
}

// NewSimpleApp registers a SimpleApp as customer (appID, customerID) of po.
// On servers and the scheduler, messages are delivered to customer id ==
// app id (ps-lite's rule), so use customerID = appID there.
func NewSimpleApp(po *postoffice.Postoffice, appID, customerID int) (*SimpleApp, error) {
	a := &SimpleApp{po: po, owned: true}
	a.setDefaults()
	if _, err := newCustomer(po, appID, customerID, a.process, func(c *Customer) { a.c = c }); err != nil {
		return nil, err
	}
	return a, nil
}

// embeddedSimpleApp is the SimpleApp part of a Worker or Server; its
// customer is set by the owner.
func embeddedSimpleApp(po *postoffice.Postoffice) *SimpleApp {
	a := &SimpleApp{po: po}
	a.setDefaults()
	return a
}

// ps-lite's defaults: answer every request with an empty body; ignore
// responses.
func defaultSimpleRequest(d SimpleData, app *SimpleApp) {
	if err := app.Response(d, nil); err != nil && !errors.Is(err, postoffice.ErrStopped) {
		app.po.Logger().Error("kv: SimpleApp default response failed", "to", d.Sender, "err", err)
	}
}

func ignoreSimple(SimpleData, *SimpleApp) {}

func (a *SimpleApp) setDefaults() {
	a.SetRequestHandler(nil)
	a.SetResponseHandler(nil)
}

// SetRequestHandler sets the handler for requests; the default replies with
// an empty body. The handler must eventually call Response once per request
// (it may do so later, from any goroutine), or the requester never
// completes. A nil h restores the default.
func (a *SimpleApp) SetRequestHandler(h SimpleHandler) {
	if h == nil {
		h = defaultSimpleRequest
	}
	a.request.Store(&h)
}

// SetResponseHandler sets the handler for responses (default: ignore). It
// runs before Wait for the request returns. A nil h restores the default.
func (a *SimpleApp) SetResponseHandler(h SimpleHandler) {
	if h == nil {
		h = ignoreSimple
	}
	a.response.Store(&h)
}

// Customer returns the customer the app runs on.
func (a *SimpleApp) Customer() *Customer { return a.c }

// Request sends (head, body) to every node of group (a group id 1-7 or a
// node id; this node itself included when it is a member, as the scheduler
// handles its own requests in ps-lite) and returns the request's timestamp
// for Wait. If some messages cannot be sent, the request completes with that
// error once the others have been answered; the error is also returned here
// (with a valid timestamp). With instance groups (DMLC_GROUP_SIZE n > 1) a
// group request goes to every instance but completes, as in the BytePS
// fork, after one response per process of the group (the instances
// divided by n); the other responses reach the response handler later.
func (a *SimpleApp) Request(head int32, body []byte, group int) (int32, error) {
	ids := a.po.NodeIDs(group)
	if ids == nil {
		return -1, fmt.Errorf("kv: SimpleApp.Request: %d is neither a group (1-7) nor a node id of this job", group)
	}
	ts := a.c.newRequest(groupReplies(a.po, group, ids), 0, nil)
	var firstErr error
	for _, id := range ids {
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.Head = head
		a.setBody(m, body)
		m.Meta.Timestamp = ts
		m.Meta.Request = true
		m.Meta.SimpleApp = true
		m.Meta.AppID = a.c.appID
		m.Meta.CustomerID = a.c.customerID
		m.Meta.Recver = id
		if _, err := a.po.Send(m); err != nil {
			err = fmt.Errorf("kv: SimpleApp request %d to node %d not sent: %w", ts, id, err)
			if firstErr == nil {
				firstErr = err
			}
			a.c.enqueue(localResponse(m, id), err)
		}
	}
	return ts, firstErr
}

// localResponse is the stand-in response, queued to the customer, for a
// request message that could not be sent; it makes the request complete
// (with an error) on the customer goroutine like a real response would.
func localResponse(req *message.Message, from int32) *message.Message {
	r := &message.Message{Meta: req.Meta}
	r.Meta.Request = false
	r.Meta.Sender = from
	r.Meta.Body = nil
	r.Meta.DataType = nil
	r.Meta.DataSize = 0
	return r
}

// Response answers request req with body. It may be called from any
// goroutine, once per request.
func (a *SimpleApp) Response(req SimpleData, body []byte) error {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Head = req.Head
	a.setBody(m, body)
	m.Meta.Timestamp = req.Timestamp
	m.Meta.Request = false
	m.Meta.SimpleApp = true
	m.Meta.AppID = a.c.appID
	m.Meta.CustomerID = req.CustomerID
	m.Meta.Recver = req.Sender
	if _, err := a.po.Send(m); err != nil {
		return fmt.Errorf("kv: SimpleApp response to node %d (timestamp %d) not sent: %w", req.Sender, req.Timestamp, err)
	}
	return nil
}

// Wait blocks until request ts has been answered by every node it was sent
// to and the response handler has run for each answer.
func (a *SimpleApp) Wait(ts int32) error { return a.c.Wait(ts) }

// Close unregisters the app. For the SimpleApp of a Worker or Server, close
// the Worker or Server instead.
func (a *SimpleApp) Close() {
	if a.owned {
		a.c.Close()
	}
}

// process handles one simple_app message in the customer goroutine.
func (a *SimpleApp) process(m *message.Message, localErr error) bool {
	if localErr != nil {
		a.c.fail(m.Meta.Timestamp, localErr)
		return true
	}
	body := m.Meta.Body
	if len(body) == 0 && len(m.Data) == 1 {
		body = m.Data[0] // SetBodyInData's form; the message is detached
	}
	d := SimpleData{
		Head:       m.Meta.Head,
		Body:       body,
		Sender:     m.Meta.Sender,
		Timestamp:  m.Meta.Timestamp,
		CustomerID: m.Meta.CustomerID,
	}
	if m.Meta.Request {
		(*a.request.Load())(d, a)
	} else {
		(*a.response.Load())(d, a)
	}
	return true
}

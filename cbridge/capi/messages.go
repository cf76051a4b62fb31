package main

import (
	"fmt"
	"log/slog"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
)

// The message handling of SimpleApps (see app): what ps::SimpleApp::Process
// / Request / Response do, on a kv.Customer. KVServers are kv.Servers (see
// newServerApp).

// handleSimpleAppMessage handles a message for a SimpleApp. It runs in the
// customer's goroutine; responses are counted by the customer afterwards.
func (a *app) handleSimpleAppMessage(m *message.Message) {
	if !m.Meta.SimpleApp {
		slog.Warn("elasticps: a SimpleApp received a KV message; dropped", "msg", m.Meta.String())
		return
	}
	a.deliverSimple(m)
}

func (a *app) deliverSimple(m *message.Message) {
	callSimple(a.appCtx, m.Meta.Request, kv.SimpleData{
		Head:       m.Meta.Head,
		Body:       m.Meta.Body,
		Sender:     m.Meta.Sender,
		Timestamp:  m.Meta.Timestamp,
		CustomerID: m.Meta.CustomerID,
	})
}

// sendSimpleRequest is SimpleApp::Request: (head, body) to every node of
// group, this node included when it is a member. A message that cannot be
// sent counts as answered, so that Wait does not hang; the error is
// returned (with the timestamp).
func (a *app) sendSimpleRequest(head int32, body []byte, group int) (int32, error) {
	ids := a.po.NodeIDs(group)
	if ids == nil {
		return -1, fmt.Errorf("elasticps: SimpleApp::Request: %d is neither a group (1-7) nor a node id of this job", group)
	}
	ts := a.cust.NewRequest(group)
	var firstErr error
	for _, id := range ids {
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.Head = head
		m.Meta.Body = body
		m.Meta.Timestamp = ts
		m.Meta.Request = true
		m.Meta.SimpleApp = true
		m.Meta.AppID = a.appID
		m.Meta.CustomerID = a.customerID
		m.Meta.Recver = id
		if _, err := a.po.Send(m); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("elasticps: SimpleApp request %d to node %d not sent: %w", ts, id, err)
			}
			a.cust.AddResponse(ts, 1)
		}
	}
	return ts, firstErr
}

// sendSimpleResponse is SimpleApp::Response.
func (a *app) sendSimpleResponse(req kv.SimpleData, body []byte) error {
	if a.simple != nil {
		return a.simple.Response(req, body)
	}
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Head = req.Head
	m.Meta.Body = body
	m.Meta.Timestamp = req.Timestamp
	m.Meta.SimpleApp = true
	m.Meta.AppID = a.appID
	m.Meta.CustomerID = req.CustomerID
	m.Meta.Recver = req.Sender
	if _, err := a.po.Send(m); err != nil {
		return fmt.Errorf("elasticps: SimpleApp response to node %d (timestamp %d) not sent: %w", req.Sender, req.Timestamp, err)
	}
	return nil
}

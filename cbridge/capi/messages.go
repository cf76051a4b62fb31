package main

import (
	"fmt"
	"log/slog"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
)

// The message handling of SimpleApps and KVServers (see app): what
// ps::SimpleApp::Process / Request / Response and ps::KVServer::Process /
// Response do, on a kv.Customer. The wire format is kv's (and ps-lite's):
// KV frames keys (UINT64), vals, optional lens (INT32); error responses
// carry their message in Meta.Body and no data (the elasticps extension
// that kv's workers understand).

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

// handleServerMessage handles a message for a KVServer: SimpleApp commands
// and KV requests.
func (a *app) handleServerMessage(m *message.Message) {
	if m.Meta.SimpleApp {
		a.deliverSimple(m)
		return
	}
	if !m.Meta.Request {
		slog.Warn("elasticps: a KVServer received a KV response; servers only answer requests", "msg", m.Meta.String())
		return
	}
	meta := kv.ReqMeta{
		Cmd:        m.Meta.Head,
		Push:       m.Meta.Push,
		Pull:       m.Meta.Pull,
		Sender:     m.Meta.Sender,
		Timestamp:  m.Meta.Timestamp,
		CustomerID: m.Meta.CustomerID,
		DataType:   message.Float, // a request without frames has no tag
		Priority:   m.Meta.Priority,
	}
	if len(m.Meta.DataType) >= 2 {
		meta.DataType = m.Meta.DataType[1]
	}
	data, err := parseKVRequest(m, meta.DataType)
	if err != nil {
		// A malformed request never reaches C++ (ps-lite would abort on
		// it): the worker gets an error response, the server goes on.
		slog.Error("elasticps: rejected a malformed KV request; the server keeps serving", "err", err, "msg", m.Meta.String())
		if err := a.sendKVError(meta, err); err != nil {
			slog.Error("elasticps: cannot send the error response", "err", err)
		}
		return
	}
	a.mu.Lock()
	a.reqs[reqKey{meta.Sender, meta.CustomerID, meta.Timestamp}] = struct{}{}
	a.mu.Unlock()
	callKVRequest(a.srvCtx, meta, data)
}

// parseKVRequest checks a request's frames and returns views of them:
// none, or keys and vals, or keys, vals and one len per key.
func parseKVRequest(m *message.Message, dt message.DataType) (kv.KVPairs, error) {
	var d kv.KVPairs
	switch n := len(m.Data); n {
	case 0:
		return d, nil
	case 2, 3:
	default:
		return d, fmt.Errorf("request has %d data frames; expected keys, vals and optionally lens", n)
	}
	var err error
	if d.Keys, err = kv.BytesToKeys(m.Data[0]); err != nil {
		return d, fmt.Errorf("keys frame: %w", err)
	}
	d.Vals = m.Data[1]
	if es := dt.Size(); len(d.Vals)%es != 0 {
		return d, fmt.Errorf("vals frame of %d bytes is not a whole number of %s elements", len(d.Vals), dt)
	}
	if len(m.Data) == 3 {
		if d.Lens, err = kv.BytesToLens(m.Data[2]); err != nil {
			return d, fmt.Errorf("lens frame: %w", err)
		}
		if len(d.Lens) != len(d.Keys) {
			return d, fmt.Errorf("request has %d lens for %d keys", len(d.Lens), len(d.Keys))
		}
	}
	return d, nil
}

// kvResponseTo is the header of the response to req.
func (a *app) kvResponseTo(req kv.ReqMeta) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.AppID = a.appID
	m.Meta.CustomerID = req.CustomerID
	m.Meta.Push = req.Push
	m.Meta.Pull = req.Pull
	m.Meta.Head = req.Cmd
	m.Meta.Timestamp = req.Timestamp
	m.Meta.Recver = req.Sender
	return m
}

// sendKVResponse is KVServer::Response: keys, vals and lens frames when
// res has keys (lens only when given), tagged as ps-lite tags them.
func (a *app) sendKVResponse(req kv.ReqMeta, dt message.DataType, res kv.KVPairs) error {
	m := a.kvResponseTo(req)
	if len(res.Keys) > 0 {
		m.AddData(message.Uint64, kv.KeysToBytes(res.Keys))
		m.AddData(dt, res.Vals)
		if len(res.Lens) > 0 {
			m.AddData(message.Int32, kv.LensToBytes(res.Lens))
		}
	}
	if _, err := a.po.Send(m); err != nil {
		return fmt.Errorf("elasticps: KV response to node %d (timestamp %d) not sent: %w", req.Sender, req.Timestamp, err)
	}
	return nil
}

// sendKVError answers req with an error response.
func (a *app) sendKVError(req kv.ReqMeta, cause error) error {
	m := a.kvResponseTo(req)
	msg := "unknown error"
	if cause != nil && cause.Error() != "" {
		msg = cause.Error()
	}
	m.Meta.Body = []byte(msg)
	if _, err := a.po.Send(m); err != nil {
		return fmt.Errorf("elasticps: KV error response to node %d (timestamp %d) not sent: %w", req.Sender, req.Timestamp, err)
	}
	return nil
}

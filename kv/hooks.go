package kv

import (
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/routing"
)

// The two hooks through which a mode that moves keys between servers while
// the job runs (package elastic) changes what Workers and Servers do. kv
// knows nothing else of it: without hooks, a Worker routes by ps-lite's
// static key ranges and a Server hands every request to its handler.

// Router tells a Worker where its requests go. One Router serves one
// Worker; its methods are called from the Worker's goroutines and must not
// block.
type Router interface {
	// Table is the routing table the worker slices requests by. It is
	// read once, when the Worker is created; the table itself may change
	// (routing.Table.Update) at any time.
	Table() *routing.Table
	// NumbersPushes reports whether each push carries its keys' push count
	// (Meta.Ext.PushSeq), so that a migrating range switches servers at the
	// same push on every worker. Read once, when the Worker is created.
	NumbersPushes() bool
	// OperationDone is told each completed operation's round trip and the
	// slowest answering server's handling time (0 if none reported it).
	OperationDone(roundTrip, handling time.Duration)
}

// staticRouter is ps-lite's partition: range i always on server rank i.
type staticRouter struct{ table *routing.Table }

func (r staticRouter) Table() *routing.Table          { return r.table }
func (staticRouter) NumbersPushes() bool              { return false }
func (staticRouter) OperationDone(_, _ time.Duration) {}

// RequestGate decides, before a Server's handler sees a request, whether
// the handler runs it now. It is installed before the server registers
// (ServerOptions.Gate), so no request passes ungated.
type RequestGate interface {
	// Admit is called on the server's customer goroutine for every valid
	// KV request from the network, with its keys (views of its frames).
	// With run false the gate has taken m: it hands it back later with
	// Server.Readmit or answers it itself; the handler does not see it now.
	// With run true and a non-nil Admitted, Answered is called once the
	// request's response has been sent.
	Admit(m *message.Message, keys []uint64) (a Admitted, run bool)
}

// Admitted is a gate's record of one request it let through.
type Admitted interface {
	// Answered is called once, after the response was handed to the
	// network, from the goroutine that responded.
	Answered()
}

// ResponseHolder is an Admitted that may hold back its request's
// response (a replicated server acknowledges a push only once its backups
// hold it). Server.Response calls Hold with the sending of the response
// instead of sending it; with true the holder calls send later, once,
// from any goroutine (Answered follows it): send(nil) sends the response,
// send(err) an error response instead (ResponseError's). With false it is
// sent now. Error responses are never held.
type ResponseHolder interface {
	Admitted
	Hold(send func(fail error) error) bool
}

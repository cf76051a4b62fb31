package main

import (
	"errors"
	"syscall"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// retryEINTR makes Recv retry a receive interrupted by a signal. Inside a
// C++ host signals are common (the Go runtime preempts with SIGURG; hosts
// install their own handlers: Python's SIGINT, SIGCHLD of subprocesses),
// a blocking receive in libzmq fails with EINTR whenever one reaches its
// thread, whatever SA_RESTART says, and the node's receive loop treats any
// error other than a malformed message as fatal. van/zmq retries EINTR
// itself; this keeps that guarantee for whichever transport the node uses.
// An interrupted receive was waiting for a new message (the parts of a
// message are delivered together), so retrying loses nothing.
type retryEINTR struct {
	van.Transport
}

func (t retryEINTR) Recv() (*message.Message, error) {
	for {
		m, err := t.Transport.Recv()
		if err != nil && errors.Is(err, syscall.EINTR) {
			continue
		}
		return m, err
	}
}

// Release hands a received message's buffers back to the transport (see
// postoffice.Release); without it the wrapper would hide the transport's
// buffer reuse and every large message would cost a fresh allocation.
func (t retryEINTR) Release(m *message.Message) {
	if r, ok := t.Transport.(interface{ Release(*message.Message) }); ok {
		r.Release(m)
	}
}

// Detach forwards to the transport (see postoffice.Detach); hiding it would
// leave messages for consumers that do not release holding transport memory
// forever.
func (t retryEINTR) Detach(m *message.Message) {
	if d, ok := t.Transport.(interface{ Detach(*message.Message) }); ok {
		d.Detach(m)
	}
}

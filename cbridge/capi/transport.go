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
// message are delivered together), so retrying loses nothing. Release and
// Detach are the embedded transport's own: the message lifetime passes
// through unchanged.
type retryEINTR struct {
	van.Transport
}

var _ van.Transport = retryEINTR{}

func (t retryEINTR) Recv() (*message.Message, error) {
	for {
		m, err := t.Transport.Recv()
		if err != nil && errors.Is(err, syscall.EINTR) {
			continue
		}
		return m, err
	}
}

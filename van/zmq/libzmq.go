//go:build cgo

package zmq

/*
#cgo !windows pkg-config: libzmq
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"syscall"
	"unsafe"
)

// This file is van/zmq's own, minimal binding to libzmq: a context, sockets,
// options, bind/connect, and message send/receive through the shims in
// shim.c. It exists (instead of github.com/pebbe/zmq4) for the data path:
// pebbe copies every frame on send and on receive and allocates per frame;
// here a message costs one cgo call each way and large frames are handed to
// libzmq without a copy (see release.go).

// errno is a libzmq error number; libzmq uses the system's numbers for
// POSIX errors and its own above ZMQ_HAUSNUMERO.
type errno int

func (e errno) Error() string { return C.GoString(C.zmq_strerror(C.int(e))) }

// Is lets errors.Is match the syscall.Errno of the same number, so that
// callers can test for syscall.EADDRINUSE and friends.
func (e errno) Is(target error) bool {
	var se syscall.Errno
	return errors.As(target, &se) && int(se) == int(e)
}

const (
	errTerm  = errno(C.ETERM)
	errInUse = errno(C.EADDRINUSE)
	errIntr  = errno(C.EINTR)
)

// callErr is the error of a libzmq call that failed, from the errno cgo
// read right after it on the same thread (the call's two-value form).
// libzmq reports errors in errno, which is per thread: zmq_errno in a
// second cgo call may run on another thread (the goroutine can move
// between the two) and return that thread's errno, which made a bind to a
// taken port fail with "Invalid argument" instead of being retried.
func callErr(err error) error {
	var se syscall.Errno
	if errors.As(err, &se) && se != 0 {
		return errno(se)
	}
	return errors.New("libzmq call failed without an error number")
}

// zctx is a libzmq context.
type zctx struct{ p unsafe.Pointer }

func newContext() (*zctx, error) {
	p, err := C.zmq_ctx_new()
	if p == nil {
		return nil, callErr(err)
	}
	return &zctx{p}, nil
}

func (c *zctx) setInt(opt C.int, v int) error {
	if rc, err := C.zmq_ctx_set(c.p, opt, C.int(v)); rc != 0 {
		return callErr(err)
	}
	return nil
}

// term is zmq_ctx_term: blocking calls on the context's sockets fail with
// ETERM, then it waits until every socket is closed. EINTR is retried, as
// the libzmq docs ask.
func (c *zctx) term() error {
	return retryIntr(func() (C.int, error) {
		rc, err := C.zmq_ctx_term(c.p) // two-value form: errno of this call
		return rc, err
	})
}

// retryIntr makes a libzmq call (returning 0 or -1 and errno) until it
// does not fail with EINTR.
func retryIntr(call func() (C.int, error)) error {
	for {
		rc, err := call()
		if rc == 0 {
			return nil
		}
		if err := callErr(err); err != errIntr {
			return err
		}
	}
}

// zsocket is a libzmq socket. Like every libzmq socket it must be used by
// one goroutine at a time; the Transport's locks see to that.
type zsocket struct{ p unsafe.Pointer }

func (c *zctx) socket(typ C.int) (*zsocket, error) {
	p, err := C.zmq_socket(c.p, typ)
	if p == nil {
		return nil, callErr(err)
	}
	return &zsocket{p}, nil
}

func (s *zsocket) close() error {
	if rc, err := C.zmq_close(s.p); rc != 0 {
		return callErr(err)
	}
	return nil
}

func (s *zsocket) setInt(opt C.int, v int) error {
	x := C.int(v)
	if rc, err := C.zmq_setsockopt(s.p, opt, unsafe.Pointer(&x), C.size_t(unsafe.Sizeof(x))); rc != 0 {
		return callErr(err)
	}
	return nil
}

func (s *zsocket) setInt64(opt C.int, v int64) error {
	x := C.int64_t(v)
	if rc, err := C.zmq_setsockopt(s.p, opt, unsafe.Pointer(&x), C.size_t(unsafe.Sizeof(x))); rc != 0 {
		return callErr(err)
	}
	return nil
}

func (s *zsocket) setBytes(opt C.int, v string) error {
	cs := C.CString(v)
	defer C.free(unsafe.Pointer(cs))
	if rc, err := C.zmq_setsockopt(s.p, opt, unsafe.Pointer(cs), C.size_t(len(v))); rc != 0 {
		return callErr(err)
	}
	return nil
}

func (s *zsocket) lastEndpoint() (string, error) {
	var buf [512]C.char
	n := C.size_t(len(buf))
	if rc, err := C.zmq_getsockopt(s.p, C.ZMQ_LAST_ENDPOINT, unsafe.Pointer(&buf[0]), &n); rc != 0 {
		return "", callErr(err)
	}
	return C.GoString(&buf[0]), nil
}

// bind is zmq_bind. zmq_bind and zmq_connect first process the socket's
// pending commands, a poll that a signal (Go preempts goroutines with
// SIGURG) interrupts with EINTR before anything was done; they are retried,
// as shim.c retries every blocking call.
func (s *zsocket) bind(endpoint string) error {
	cs := C.CString(endpoint)
	defer C.free(unsafe.Pointer(cs))
	return retryIntr(func() (C.int, error) {
		rc, err := C.zmq_bind(s.p, cs) // two-value form: errno of this call
		return rc, err
	})
}

func (s *zsocket) connect(endpoint string) error {
	cs := C.CString(endpoint)
	defer C.free(unsafe.Pointer(cs))
	return retryIntr(func() (C.int, error) {
		rc, err := C.zmq_connect(s.p, cs) // two-value form: errno of this call
		return rc, err
	})
}

// Socket types and options used by the transport.
const (
	sockRouter = C.ZMQ_ROUTER
	sockDealer = C.ZMQ_DEALER

	optLinger         = C.ZMQ_LINGER
	optIdentity       = C.ZMQ_IDENTITY
	optSndHWM         = C.ZMQ_SNDHWM
	optIPv6           = C.ZMQ_IPV6
	optMaxMsgSize     = C.ZMQ_MAXMSGSIZE
	optRouterHandover = C.ZMQ_ROUTER_HANDOVER

	ctxMaxSockets = C.ZMQ_MAX_SOCKETS
)

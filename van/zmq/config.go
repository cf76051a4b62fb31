// Package zmq implements van.Transport over ZeroMQ, wire-compatible with the
// ZMQ van of C++ ps-lite (dmlc generation). It calls libzmq through its own
// small cgo binding (libzmq.go, shim.c) rather than a general-purpose Go
// wrapper, so that a message costs one cgo call each way and large frames
// are sent without a copy (release.go explains how their memory is kept
// alive and pinned until libzmq is done with it).
//
// Topology, as in ps-lite: each Transport owns one ZeroMQ context, one ROUTER
// socket bound at the node's own address (Bind) on which every message is
// received, and one DEALER socket per peer id (Connect) on which messages to
// that peer are sent. A request and its response therefore travel on two
// different TCP connections. The DEALER announces the identity "ps<id>" once
// the node knows its id (with a token, "ps<id>:<tag>": identity.go); the receiving ROUTER turns that identity back into
// Meta.Sender.
//
// Framing: a message is one ZeroMQ multipart message whose frame 0 is the
// encoded Meta and whose frames 1..n are the raw data frames. The meta
// encoding is Options.Wire: dmlc's protobuf (message.EncodeMeta, the
// default) or the BytePS fork's raw struct (message.EncodeRawMeta). Empty frames are legal and preserved (a pull request
// carries an empty vals frame).
//
// Data path: Send hands frames of at least Config.ZeroCopySendMin bytes to
// libzmq by reference (zmq_msg_init_data) and copies smaller ones; the meta
// frame is encoded into C memory reused per peer, so a steady-state Send
// allocates nothing and makes one cgo call. Recv receives a whole message in
// one cgo call (a second one if it has to wait; see recvLocked), decodes the
// meta in place and copies the data frames into Go memory: large frames into
// pooled buffers that Transport.Release recycles, small ones into one
// allocation per message.
//
// Frames of at least Config.ZeroCopyRecvMin bytes are the exception: they
// are delivered as views of libzmq's own buffers (as ps-lite's SArray
// does), which saves a memcpy that is a measurable share of a large round
// trip. Such a view is C memory: the consumer must Release the message (or
// Detach it, which copies the views into Go memory) — a dropped or kept
// message would otherwise leak, and a view read after Release is a
// use-after-free the race detector does not see. The postoffice and kv
// therefore Detach every message whose consumer is not known to Release
// it (see zerocopy.go).
//
// Building without cgo: the package still compiles, but New returns
// ErrNoCgo, so that pure-Go builds of the rest of the tree keep working.
package zmq

import (
	"errors"

	"github.com/elasticps/elasticps/van"
)

// Config configures a Transport. The zero value is usable: TCP on the node's
// hostname, libzmq's default high-water mark, van.DefaultLimits, and
// slog.Default for logging.
//
// Of the shared van.Options, as libzmq applies them: Local selects IPC
// endpoints ipc:///tmp/<port> instead of tcp://host:port, for bind and
// connect alike. WaterMark is ZMQ_SNDHWM, in messages, applied to every
// DEALER created by Connect: when a peer falls this far behind, Send blocks
// until it catches up (0 keeps libzmq's default, 1000). Limits bound what
// Recv accepts, and MaxMessageBytes is also given to libzmq as
// ZMQ_MAXMSGSIZE, so a single larger frame makes libzmq drop the offending
// connection before it is buffered. KeepMalloc leaves the process's malloc
// settings alone: by default the first New raises glibc malloc's mmap
// threshold to 32 MiB and its trim threshold to 64 MiB, for the whole
// process, unless the environment sets either (MALLOC_MMAP_THRESHOLD_,
// MALLOC_TRIM_THRESHOLD_, or those in GLIBC_TUNABLES): libzmq mallocs
// every received message, and with glibc's defaults large messages in
// flight cost fresh pages each (malloc.go). The price is that up to 64 MiB
// of freed memory per malloc arena stays with the process. Host is unused.
type Config struct {
	van.Options

	// ZeroCopySendMin is the size, in bytes, from which Send hands a data
	// frame to libzmq without copying it (and the caller must keep it
	// unchanged until it has been sent; see Transport.Send). Below it,
	// copying is cheaper than pinning and releasing the frame. 0 means
	// DefaultZeroCopySendMin; negative copies every frame, as pebbe/zmq4
	// does (for callers that cannot keep buffers unchanged).
	ZeroCopySendMin int

	// ZeroCopyRecvMin is the size, in bytes, from which Recv delivers a
	// data frame as a view of libzmq's buffer (C memory) instead of
	// copying it out; the view stays valid until Transport.Release or
	// Transport.Detach, and a message holding views must get one of them
	// (see Transport.Recv). Below it, the copy costs less than keeping the
	// zmq message open. 0 means DefaultZeroCopyRecvMin; negative copies
	// every frame.
	ZeroCopyRecvMin int
}

// DefaultZeroCopySendMin is Config.ZeroCopySendMin's default. Measured with
// BenchmarkSendFrame on loopback: below about 1 KiB a memcpy is cheaper
// than pinning the frame and taking its release record back.
const DefaultZeroCopySendMin = 1 << 10

// DefaultZeroCopyRecvMin is Config.ZeroCopyRecvMin's default. Frames this
// large arrive in a malloc'd buffer of their own, and copying one out costs
// more than keeping its zmq message open: lowered from 256 KiB, the 128 KB
// frames of the bench's 2x2 256 KB cells went 1.04x-1.18x faster
// (docs/performance.md). Small frames arrive inside libzmq's shared
// decoder buffer, unaligned, and are copied anyway.
const DefaultZeroCopyRecvMin = 64 << 10

// ErrNoCgo is returned by New in builds without cgo, where libzmq cannot be
// called.
var ErrNoCgo = errors.New("van/zmq: built without cgo; the ZeroMQ transport needs cgo and libzmq")

// withDefaults returns cfg with every zero field replaced by its default,
// or an error for values that cannot be honoured.
func (cfg Config) withDefaults() (Config, error) {
	var err error
	if cfg.Options, err = cfg.Options.WithDefaults("van/zmq"); err != nil {
		return cfg, err
	}
	if cfg.ZeroCopyRecvMin == 0 {
		cfg.ZeroCopyRecvMin = DefaultZeroCopyRecvMin
	}
	if cfg.ZeroCopySendMin == 0 {
		cfg.ZeroCopySendMin = DefaultZeroCopySendMin
	}
	return cfg, nil
}

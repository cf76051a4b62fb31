// Package van defines the Transport interface that moves Messages between
// nodes, and the Options every transport shares. It knows nothing of the
// control protocol (ADD_NODE, barriers, ...): that lives in package
// postoffice. Implementations: van/zmq (wire-compatible with ps-lite),
// van/tcp (pure Go), van/rdma (ibverbs, libfabric) and van/memvan (in
// memory, for tests); van/anyvan opens any of them by name.
package van

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/internal/recvmsg"
)

// ErrClosed is returned by Recv and Send after Close.
var ErrClosed = errors.New("van: transport closed")

// FrameError reports a message that arrived but could not be decoded (bad
// meta, too many frames, frame count not matching data_type...). The
// transport stays usable: the caller logs it, counts it and calls Recv again.
type FrameError struct {
	Peer string // peer identity as received (e.g. "ps9"), or "anonymous"
	// Reason classifies Err with one of the Reason constants, so that the
	// node can count refusals per limit and rate-limit their logs per
	// (Peer, Reason).
	Reason string
	Err    error
}

// Reasons of a FrameError. The limit ones name a field of Limits.
const (
	ReasonMalformed = "malformed"     // the bytes do not decode
	ReasonHello     = "hello"         // a connection that did not start with a valid hello (van/tcp)
	ReasonMeta      = "max_meta"      // Limits.MaxMetaBytes
	ReasonFrames    = "max_frames"    // Limits.MaxFrames
	ReasonSize      = "max_message"   // Limits.MaxMessageBytes
	ReasonPending   = "max_pending"   // Limits.MaxPendingBytes: the peer was cut off
	ReasonRegister  = "register_wait" // Limits.RegisterTimeout: the peer was cut off
	ReasonEncrypt   = "encryption"    // Options.Encryption: a peer failed the CURVE or TLS handshake
)

func (e *FrameError) Error() string {
	return fmt.Sprintf("van: rejected malformed message from %s: %v", e.Peer, e.Err)
}

func (e *FrameError) Unwrap() error { return e.Err }

// Transport is what the control plane needs from a network: ps-lite's four
// van hooks (Bind, Connect, SendMsg, RecvMsg), Close, and the two calls
// that end a received message's lifetime (Release, Detach).
//
// Concurrency: Send and Connect may be called from many goroutines at once;
// Recv is called from exactly one goroutine (the node's receive loop);
// Release and Detach from any goroutine, at any time, also after Close.
//
// Message lifetime. A message Recv returns is owned by whoever Recv handed
// it to (the receive loop, then the one consumer it dispatches the message
// to); its frames may be views of transport memory (van/zmq: C memory) or
// pooled buffers the transport wants back. Before the owner lets go of it,
// the message must get Release or Detach:
//
//   - Release, once, after its owner's last read of it;
//   - Detach, when it is kept, dropped or handed to code that is not known
//     to Release it; after Detach it is ordinary Go memory, owned like any
//     other value, which whoever ends up owning it may still Release (once)
//     or simply drop.
//
// Skipping both leaks transport memory on transports whose frames are
// views; elsewhere it only costs the reuse of the message's buffers.
// Calling them directly on the Transport is all it takes: there is nothing
// to assert, and a wrapper that embeds a Transport inherits them.
type Transport interface {
	// Bind starts listening at node.Hostname:node.Port. Port 0 or Empty picks
	// a free port; if the port is taken it retries up to maxRetry random
	// ports in [10000, 50000). It returns the port actually bound.
	Bind(node message.Node, maxRetry int) (int, error)

	// Connect opens the sending path to node.ID at node.Hostname:node.Port,
	// replacing any previous path to that id. myID is this node's own id; it
	// is message.Empty before registration, in which case the connection is
	// anonymous (peers see Sender = message.Empty).
	Connect(node message.Node, myID int32) error

	// Send delivers msg to msg.Meta.Recver in order (FIFO per peer pair) and
	// returns the number of bytes handed to the network. The data frames are
	// read during the call or, for zero-copy transports, until the send
	// completes; the caller must not modify them afterwards.
	Send(msg *message.Message) (int, error)

	// Recv blocks until a message arrives. It sets Meta.Sender from the peer
	// identity (message.Empty for anonymous peers). A *FrameError means one
	// bad message was dropped and Recv may be called again; ErrClosed means
	// the transport was closed.
	Recv() (*message.Message, error)

	// Release gives msg, which this transport's Recv returned, back to
	// the transport: its buffers, and the Message itself, which a later
	// Recv may return again. Nothing of msg (Meta, Data, slices of its
	// frames kept elsewhere) may be read or written afterwards, and msg is
	// released at most once; a second concurrent release is refused and
	// counted (ReleasedTwice). Never pass it a message built by hand or
	// received by another transport: its buffers would be recycled.
	Release(msg *message.Message)

	// Detach makes msg safe to keep without Release: frames that are views
	// of transport memory are copied into Go memory and the originals
	// freed; slices of those frames taken before Detach become invalid.
	// It may be called any number of times, before Release, on any message
	// (it does nothing to frames that are not views, so messages built by
	// hand are fine).
	Detach(msg *message.Message)

	// Close stops the transport. A goroutine blocked in Recv returns
	// ErrClosed. Close is idempotent.
	Close() error
}

// Options are the settings every transport shares; each van's Config
// embeds them (zmq.Config, tcp.Config, rdma.Config, memvan takes none of
// them but Limits). The zero value is usable: each field documents its
// default and which vans read it.
type Options struct {
	// Local selects same-host endpoints (ps-lite's DMLC_LOCAL=1): IPC
	// sockets ipc:///tmp/<port> for van/zmq, Unix sockets for van/tcp.
	// All nodes of a job must agree on it. Ignored by van/rdma. Default
	// false.
	Local bool

	// WaterMark bounds, in messages, what Send queues for a peer that
	// cannot take them yet, after which Send blocks (ps-lite's
	// DMLC_PS_WATER_MARK). 0 means 1000 (libzmq's default); negative
	// values are rejected. Ignored by van/rdma, which has SendDepth.
	WaterMark int

	// BindAll makes Bind listen on 0.0.0.0 whatever the node's hostname
	// (ps-lite's DMLC_USE_KUBERNETES for the scheduler, whose advertised
	// name is a service address that is not a local interface). Default
	// false.
	BindAll bool

	// Host is the local address the transport opens its device on
	// (DMLC_NODE_HOST, or the scheduler's DMLC_PS_ROOT_URI). Only van/rdma
	// needs it before Bind (the fabric endpoint binds it; the ibverbs
	// backend picks the device behind it); empty leaves the choice to the
	// library. The socket vans bind the hostname given to Bind.
	Host string

	// KeepMalloc leaves the process's malloc settings alone; only van/zmq
	// changes them (see zmq.Config). Default false.
	KeepMalloc bool

	// Limits bounds what Recv accepts; zero fields take DefaultLimits.
	Limits Limits

	// Wire is the meta encoding (PS_WIRE): dmlc ps-lite's protobuf (the
	// zero value) or the BytePS fork's raw struct. All nodes of a job must
	// agree on it; a frame of the other wire is rejected with a
	// *message.WireMismatchError. Only van/zmq, the van that speaks C++
	// ps-lite's wire, offers the bytedance wire; the others refuse it.
	Wire message.Wire

	// Encryption, when set, encrypts every connection (van/zmq: CURVE,
	// van/tcp: TLS); the other vans refuse it. Default nil: plaintext.
	Encryption *Encryption

	// Logger receives the transport's debug logs (binds, connects, dropped
	// connections). Default slog.Default().
	Logger *slog.Logger

	// AuthKey is the job's token (PS_AUTH_TOKEN), nil in an open job.
	// van/zmq and van/tcp then bind the id a connection announces to it
	// (van/internal/peerauth), so that a peer without the token cannot
	// speak under a node's id; see docs/security.md.
	AuthKey []byte
}

// WithDefaults returns o with Limits and Logger filled in, or an error
// naming van (e.g. "van/tcp") for values no transport can honour.
func (o Options) WithDefaults(van string) (Options, error) {
	if o.WaterMark < 0 {
		return o, fmt.Errorf("%s: Options.WaterMark must not be negative", van)
	}
	l := &o.Limits
	if l.MaxFrames < 0 || l.MaxMessageBytes < 0 || l.MaxMetaBytes < 0 || l.MaxPendingBytes < 0 || l.RegisterTimeout < 0 {
		return o, fmt.Errorf("%s: Options.Limits must not be negative", van)
	}
	def := DefaultLimits()
	setDefault(&l.MaxFrames, def.MaxFrames)
	setDefault(&l.MaxMessageBytes, def.MaxMessageBytes)
	setDefault(&l.MaxMetaBytes, def.MaxMetaBytes)
	setDefault(&l.MaxPendingBytes, def.MaxPendingBytes)
	setDefault(&l.RegisterTimeout, def.RegisterTimeout)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

func setDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}

// Limits bounds what a transport accepts from the network. The defaults
// are far above what a ps-lite, MXNet or BytePS job sends (a meta of a few
// hundred bytes, at most 4 data frames, messages up to a tensor partition)
// and bound what a stranger can make a node hold. A message beyond a limit
// is a *FrameError with the limit's Reason.
type Limits struct {
	MaxFrames       int   // data frames per message; default 16
	MaxMessageBytes int64 // total bytes per message; default 2 GiB
	MaxMetaBytes    int64 // bytes of a message's meta frame; default 1 MiB

	// MaxPendingBytes bounds the bytes of one peer's messages that a
	// transport has received but Recv has not yet returned; a peer that
	// floods faster than the node reads is cut off (its connection
	// closed) rather than allowed to grow the node's memory. One message
	// is always accepted whatever its size (within MaxMessageBytes).
	// Default 4 GiB. van/tcp; van/zmq bounds its queues in messages
	// (ZMQ_RCVHWM) and frames (ZMQ_MAXMSGSIZE).
	MaxPendingBytes int64

	// RegisterTimeout is how long an anonymous connection (one whose
	// dialer has no node id yet) may stay open: long enough to send its
	// ADD_NODE, after which the node reconnects under its id. A half-open
	// peer that never registers is cut off. Default 60 s. van/tcp.
	RegisterTimeout time.Duration
}

// DefaultLimits returns the limits used when a field is zero.
func DefaultLimits() Limits {
	return Limits{MaxFrames: 16, MaxMessageBytes: 2 << 30, MaxMetaBytes: 1 << 20,
		MaxPendingBytes: 4 << 30, RegisterTimeout: time.Minute}
}

// ReleasedTwice counts, process-wide, the releases of received messages
// that van/zmq and van/tcp refused because another release of the same
// message had just given it back to their pool: a consumer that releases a
// message twice at once. (A second release after the first returned does
// nothing, unless a later Recv reused the message; that is not detected.)
// It stays 0 in a correct program; tests check it.
func ReleasedTwice() int64 { return recvmsg.Misuses() }

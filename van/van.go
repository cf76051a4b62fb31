// Package van defines the Transport interface that moves Messages between
// nodes. It knows nothing of the control protocol (ADD_NODE, barriers, ...):
// that lives in package postoffice. Implementations: van/zmq (wire-compatible
// with ps-lite), and later van/tcp and van/rdma.
package van

import (
	"errors"
	"fmt"

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
	Err  error
}

func (e *FrameError) Error() string {
	return fmt.Sprintf("van: rejected malformed message from %s: %v", e.Peer, e.Err)
}

func (e *FrameError) Unwrap() error { return e.Err }

// Transport is what the control plane needs from a network: ps-lite's four
// van hooks (Bind, Connect, SendMsg, RecvMsg) plus Close.
//
// Concurrency: Send and Connect may be called from many goroutines at once;
// Recv is called from exactly one goroutine (the node's receive loop).
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

	// Close stops the transport. A goroutine blocked in Recv returns
	// ErrClosed. Close is idempotent.
	Close() error
}

// Limits bounds what a transport accepts from the network.
type Limits struct {
	MaxFrames       int   // data frames per message; default 16
	MaxMessageBytes int64 // total bytes per message; default 2 GiB
}

// DefaultLimits returns the limits used when a field is zero.
func DefaultLimits() Limits { return Limits{MaxFrames: 16, MaxMessageBytes: 2 << 30} }

// ReleasedTwice counts, process-wide, the releases of received messages
// that van/zmq and van/tcp refused because another release of the same
// message had just given it back to their pool: a consumer that releases a
// message twice at once. (A second release after the first returned does
// nothing, unless a later Recv reused the message; that is not detected.)
// It stays 0 in a correct program; tests check it.
func ReleasedTwice() int64 { return recvmsg.Misuses() }

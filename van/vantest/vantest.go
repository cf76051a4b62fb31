// Package vantest is a conformance suite for van.Transport implementations:
// every transport runs the same tests (Run) and benchmarks (Bench) through a
// Factory that knows how to create it and how to speak its wire protocol
// raw, for the malformed-input tests.
//
// The tests use real sockets on 127.0.0.1 and never assert on wall time;
// timeouts only turn a hang into a failure.
package vantest

import (
	"testing"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// Options configure a transport under test. Zero fields mean the
// transport's defaults.
type Options struct {
	Limits    van.Limits
	WaterMark int
}

// Factory describes a transport to the suite.
type Factory struct {
	// New returns an unbound transport.
	New func(t testing.TB, opt Options) van.Transport

	// Raw returns a sender that delivers exactly the given frames (frame 0
	// is the meta) as one message to the transport bound at to, announcing
	// the identity id (message.Empty: anonymous), bypassing every check a
	// Transport's Send makes. Each call opens a new connection.
	Raw func(t testing.TB, to message.Node, id int32) func(frames ...[]byte)

	// GarbageReported says whether bytes that are not the transport's
	// protocol at all, written to its port, surface as a *van.FrameError
	// (true) or are dropped silently before Recv sees anything (false, as
	// libzmq does during its handshake).
	GarbageReported bool
}

// Releaser is implemented by transports whose received messages may come
// from a pool: Release(msg) gives them back, after which nothing of msg may
// be read. It is optional.
type Releaser interface {
	Release(msg *message.Message)
}

const (
	schedulerID = 1
	serverID    = 8
	workerID    = 9
	recvTimeout = 10 * time.Second
)

// Run runs the conformance suite against f.
func Run(t *testing.T, f Factory) {
	t.Run("ExchangeBothWaysWithIdentities", func(t *testing.T) { testExchange(t, f) })
	t.Run("KVFramesExact", func(t *testing.T) { testKVFrames(t, f) })
	t.Run("RecvFramesAligned", func(t *testing.T) { testAligned(t, f) })
	t.Run("ConcurrentSendsFIFOPerSender", func(t *testing.T) { testConcurrentFIFO(t, f) })
	t.Run("ConnectReplacesPath", func(t *testing.T) { testConnectReplaces(t, f) })
	t.Run("RestartedPeerKeepsIdentity", func(t *testing.T) { testRestartedPeer(t, f) })
	t.Run("GarbageOnPortIsSurvived", func(t *testing.T) { testGarbage(t, f) })
	t.Run("MalformedMessagesAreRejected", func(t *testing.T) { testMalformed(t, f) })
	t.Run("SendErrors", func(t *testing.T) { testSendErrors(t, f) })
	t.Run("CloseUnblocksRecv", func(t *testing.T) { testCloseUnblocksRecv(t, f) })
	t.Run("CloseUnblocksSendAtWaterMark", func(t *testing.T) { testCloseUnblocksSend(t, f) })
	t.Run("ConcurrentConnectSendClose", func(t *testing.T) { testConnectSendClose(t, f) })
	t.Run("ReleaseAndReuse", func(t *testing.T) { testRelease(t, f) })
}

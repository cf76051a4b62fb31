// Package vantest is a conformance suite for van.Transport implementations:
// every transport runs the same tests (Run) and benchmarks (Bench) through a
// Factory that knows how to create it and how to speak its wire protocol
// raw, for the malformed-input tests.
//
// The tests use real sockets on 127.0.0.1 (except for an InMemory
// transport) and never assert on wall time; timeouts only turn a hang into
// a failure. RecvWithin and MustRecv are the receive-with-timeout of every
// van's own tests too.
package vantest

import (
	"net"
	"testing"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// Factory describes a transport to the suite.
type Factory struct {
	// New returns an unbound transport configured with opt; the suite sets
	// only Limits and WaterMark, zero fields meaning the defaults.
	New func(t testing.TB, opt van.Options) van.Transport

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

	// Dial opens a raw connection to the port a transport of this
	// factory is bound at, for GarbageOnPortIsSurvived; nil dials TCP on
	// 127.0.0.1.
	Dial func(t testing.TB, port int32) net.Conn

	// InMemory says the transport has no port a socket can reach (van/memvan),
	// so GarbageOnPortIsSurvived, which writes to one, is skipped.
	InMemory bool
}

const (
	schedulerID = 1
	serverID    = 8
	workerID    = 9
	// RecvTimeout is how long RecvWithin waits: long enough for a loaded
	// machine, short enough that a hang fails the test.
	RecvTimeout = 10 * time.Second
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

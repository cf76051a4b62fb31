//go:build cgo

package zmq

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

// factory runs the shared conformance suite against this transport; raw
// messages go through a plain pebbe/zmq4 DEALER, an independent ZeroMQ
// implementation of the same wire protocol.
var factory = vantest.Factory{
	New: func(t testing.TB, opt van.Options) van.Transport {
		tr, err := New(Config{Options: opt})
		require.NoError(t, err)
		return tr
	},
	Raw: func(t testing.TB, to message.Node, id int32) func(frames ...[]byte) {
		return rawDealer(t, to.Port, id, nil, nil)
	},
	GarbageReported: false, // libzmq's ZMTP handshake drops it
}

func TestConformance(t *testing.T) {
	vantest.Run(t, factory)
	assert.Zero(t, pinnedFrames(), "every zero-copy frame was released")
}

func BenchmarkRoundTrip(b *testing.B) { vantest.BenchRoundTrips(b, factory) }

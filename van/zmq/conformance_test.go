//go:build cgo

package zmq

import (
	"fmt"
	"strconv"
	"testing"

	zmq4 "github.com/pebbe/zmq4"
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
		ident := ""
		if id != message.Empty {
			ident = "ps" + strconv.Itoa(int(id))
		}
		ctx, err := zmq4.NewContext()
		require.NoError(t, err)
		s, err := ctx.NewSocket(zmq4.DEALER)
		require.NoError(t, err)
		require.NoError(t, s.SetLinger(0))
		if ident != "" {
			require.NoError(t, s.SetIdentity(ident))
		}
		require.NoError(t, s.Connect(fmt.Sprintf("tcp://%s:%d", to.Hostname, to.Port)))
		t.Cleanup(func() {
			assert.NoError(t, s.Close())
			assert.NoError(t, ctx.Term())
		})
		return func(frames ...[]byte) {
			for i, f := range frames {
				flag := zmq4.SNDMORE
				if i == len(frames)-1 {
					flag = 0
				}
				_, err := s.SendBytes(f, flag)
				require.NoError(t, err)
			}
		}
	},
	GarbageReported: false, // libzmq's ZMTP handshake drops it
}

func TestConformance(t *testing.T) {
	vantest.Run(t, factory)
	assert.Zero(t, pinnedFrames(), "every zero-copy frame was released")
}

func BenchmarkRoundTrip(b *testing.B) { vantest.BenchRoundTrips(b, factory) }

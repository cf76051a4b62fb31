package memvan

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

// newFactory runs the shared conformance suite on one network per test;
// raw messages are injected into the receiver's queue.
func newFactory() vantest.Factory {
	net := NewNetwork()
	return vantest.Factory{
		New: func(t testing.TB, opt van.Options) van.Transport {
			tr, err := net.NewTransport(opt)
			require.NoError(t, err)
			return tr
		},
		Raw: func(t testing.TB, to message.Node, id int32) func(frames ...[]byte) {
			return func(frames ...[]byte) { require.NoError(t, net.inject(to.Port, id, frames)) }
		},
		InMemory: true,
	}
}

func TestConformance(t *testing.T) { vantest.Run(t, newFactory()) }

func BenchmarkRoundTrip(b *testing.B) { vantest.BenchRoundTrips(b, newFactory()) }

package tcp

import (
	"encoding/binary"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

var factory = vantest.Factory{
	New: func(t testing.TB, opt van.Options) van.Transport {
		tr, err := New(Config{Options: opt})
		require.NoError(t, err)
		return tr
	},
	Raw: func(t testing.TB, to message.Node, id int32) func(frames ...[]byte) {
		c, err := net.Dial("tcp", net.JoinHostPort(to.Hostname, strconv.Itoa(int(to.Port))))
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, c.Close()) })
		require.NoError(t, writeHello(c, id, nil))
		return func(frames ...[]byte) {
			_, err := c.Write(rawMessage(frames...))
			require.NoError(t, err)
		}
	},
	GarbageReported: true,
}

// rawMessage frames frames (meta first) as the wire format says, with no
// checks at all.
func rawMessage(frames ...[]byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(frames)))
	for _, f := range frames {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
	}
	for _, f := range frames {
		b = append(b, f...)
	}
	return b
}

func TestConformance(t *testing.T) { vantest.Run(t, factory) }

func BenchmarkRoundTrip(b *testing.B) { vantest.BenchRoundTrips(b, factory) }

//go:build linux

package shm

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

func dial(t testing.TB, port int32) *net.UnixConn {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: Addr(int(port)), Net: "unix"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var factory = vantest.Factory{
	New: func(t testing.TB, opt van.Options) van.Transport {
		tr, err := New(Config{Options: opt, RingBytes: 4 << 20})
		require.NoError(t, err)
		return tr
	},
	Raw: func(t testing.TB, to message.Node, id int32) func(frames ...[]byte) {
		c := dial(t, to.Port)
		o, err := sendHello(c, id, Config{RingBytes: 1 << 20, StreamBytes: 1 << 16}.layout())
		require.NoError(t, err)
		t.Cleanup(o.unmap)
		return func(frames ...[]byte) {
			require.NoError(t, o.w.write(rawMessage(frames...)))
		}
	},
	Dial:            func(t testing.TB, port int32) net.Conn { return dial(t, port) },
	GarbageReported: true,
}

// rawMessage frames frames (meta first) inline, with no checks at all.
func rawMessage(frames ...[]byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(frames)))
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, 0)
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

func TestNewRejectsNegativeSizes(t *testing.T) {
	_, err := New(Config{RingBytes: -1})
	assert.ErrorContains(t, err, "RingBytes")
}

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
	New: func(t testing.TB, opt vantest.Options) van.Transport {
		tr, err := New(Config{Limits: opt.Limits, WaterMark: opt.WaterMark})
		require.NoError(t, err)
		return tr
	},
	Raw: func(t testing.TB, to message.Node, id int32) func(frames ...[]byte) {
		c, err := net.Dial("tcp", net.JoinHostPort(to.Hostname, strconv.Itoa(int(to.Port))))
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, c.Close()) })
		require.NoError(t, writeHello(c, id))
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

func BenchmarkRoundTrip(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, release := range []bool{false, true} {
			name := sizeName(size)
			if release {
				name += "/release"
			}
			b.Run(name, func(b *testing.B) { vantest.BenchRoundTrip(b, factory, size, release) })
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return strconv.Itoa(n>>20) + "MB"
	}
	return strconv.Itoa(n>>10) + "KB"
}

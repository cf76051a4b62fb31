package ports

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFreeIsBelowTheEphemeralRange: Free's ports can be listened on and
// lie below the range bind(0) and outgoing connections take ports from.
func TestFreeIsBelowTheEphemeralRange(t *testing.T) {
	lo := EphemeralLow()
	if lo <= 2048+3 {
		t.Skipf("the ephemeral port range starts at %d (or cannot be read): no room below it", lo)
	}
	for range 20 {
		port := Free(3)
		require.NotZero(t, port)
		assert.GreaterOrEqual(t, port, 1024)
		assert.Less(t, port+2, lo, "ports %d-%d", port, port+2)
		for p := port; p < port+3; p++ {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			require.NoError(t, err, "port %d", p)
			require.NoError(t, l.Close())
		}
	}
}

package porttest

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// listenOn binds 127.0.0.1:port, as a node's transport does.
func listenOn(port int) (net.Listener, error) {
	return net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
}

func TestStartRetryingStartsAgainAfterAPortClash(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	ports := []int{held.Addr().(*net.TCPAddr).Port} // the first start gets a taken port
	starts, stops := 0, 0
	l := StartRetrying(t, func() (net.Listener, error) {
		starts++
		port := Free(t)
		if starts <= len(ports) {
			port = ports[starts-1]
		}
		return listenOn(port)
	}, func(net.Listener) { stops++ })
	defer l.Close()
	assert.Equal(t, 2, starts, "starts")
	assert.Equal(t, 1, stops, "stops")
}

func TestStartRetryingGivesUp(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	for _, c := range []struct {
		name                  string
		start                 func() (net.Listener, error)
		wantStarts, wantStops int
	}{
		{"port always taken", func() (net.Listener, error) { return listenOn(port) }, attempts, attempts - 1},
		{"another error", func() (net.Listener, error) { return nil, fmt.Errorf("scheduler unreachable") }, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			starts, stops := 0, 0
			f := testutil.CatchFailure(t, func(tb testing.TB) {
				StartRetrying(tb, func() (net.Listener, error) { starts++; return c.start() }, func(net.Listener) { stops++ })
			})
			require.True(t, f.Stopped, "StartRetrying returned instead of failing the test")
			assert.Equal(t, c.wantStarts, starts, "starts (failure: %s)", f.Message)
			assert.Equal(t, c.wantStops, stops, "stops (failure: %s)", f.Message)
		})
	}
}

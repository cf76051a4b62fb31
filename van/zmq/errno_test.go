//go:build cgo

package zmq

import (
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrnoOfTheFailedCall binds a taken port many times while other
// goroutines make libzmq calls that fail with EINVAL on whatever threads
// they run on, and requires every bind to report EADDRINUSE. libzmq
// reports errors in errno, which is per thread: an errno read by a second
// cgo call (zmq_errno) after the goroutine moved to another thread is that
// thread's, and Bind then failed with "Invalid argument" or "Resource
// temporarily unavailable" instead of retrying another port.
func TestErrnoOfTheFailedCall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	endpoint := "tcp://127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	ctx, err := newContext()
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.term()) }()
	sock, err := ctx.socket(sockRouter)
	require.NoError(t, err)
	defer sock.close()

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		s, err := ctx.socket(sockDealer)
		require.NoError(t, err)
		wg.Go(func() {
			defer s.close()
			for !stop.Load() {
				_ = s.setInt(-1, 0) // EINVAL on this thread
			}
		})
	}
	wrong := map[string]int{}
	for range 3000 {
		err := sock.bind(endpoint)
		require.Error(t, err, "bind to a taken port")
		if err != errInUse {
			wrong[err.Error()]++
		}
	}
	stop.Store(true)
	wg.Wait()
	require.Empty(t, wrong, "binds to a taken port that reported another error than EADDRINUSE")
}

// TestBindConnectRetryInterrupted binds and connects sockets while another
// goroutine keeps sending SIGURG (what Go's preemption uses) to the
// thread making the calls. zmq_bind and zmq_connect first poll the
// socket's mailbox, which a signal interrupts with EINTR although nothing
// is wrong; they are retried, as every blocking libzmq call is.
func TestBindConnectRetryInterrupted(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := syscall.Getpid(), syscall.Gettid()
	ctx, err := newContext()
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.term()) }()

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			_ = syscall.Tgkill(pid, tid, syscall.SIGURG)
			runtime.Gosched()
		}
	})
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	failures := map[string]int{}
	for range 1000 {
		r, err := ctx.socket(sockRouter)
		require.NoError(t, err)
		if err := r.bind("tcp://127.0.0.1:*"); err != nil {
			failures["bind: "+err.Error()]++
		} else if endpoint, err := r.lastEndpoint(); err != nil {
			failures["last endpoint: "+err.Error()]++
		} else {
			d, err := ctx.socket(sockDealer)
			require.NoError(t, err)
			if err := d.connect(endpoint); err != nil {
				failures["connect: "+err.Error()]++
			}
			require.NoError(t, d.close())
		}
		require.NoError(t, r.close())
	}
	require.Empty(t, failures)
}

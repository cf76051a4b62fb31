//go:build linux

package shm

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/vantest"
)

const childPortEnv = "ELASTICPS_SHM_TEST_CHILD_PORT"

// segmentMaps counts this process's mappings of shm segments.
func segmentMaps(t testing.TB) int {
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(b), "memfd:elasticps-shm")
}

// bindServer returns a bound transport, node id 8, closed at the end of
// the test, and its node.
func bindServer(t testing.TB, cfg Config) (*Transport, message.Node) {
	server, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, server.Close()) })
	sn := message.NewNode(message.RoleServer)
	sn.ID = 8
	port, err := server.Bind(sn, 0)
	require.NoError(t, err)
	sn.Port = int32(port)
	return server, sn
}

// connectedPair returns a bound server (node id 8) and a worker (id 9)
// connected to it, both with cfg and closed at the end of the test.
func connectedPair(t testing.TB, cfg Config) (server, worker *Transport) {
	server, sn := bindServer(t, cfg)
	worker, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, worker.Close()) })
	require.NoError(t, worker.Connect(sn, 9))
	return server, worker
}

func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

func kvMsg(to, ts int32, vals []byte) *message.Message {
	return vantest.KVMsg(to, ts, true, true, vantest.U64s(1), vals, []byte{0, 0, 0, 0})
}

// TestDeadSenderLeavesNothing: a sender killed in the middle of a message
// leaves no segment behind (once the receiver let go of its views), the
// message it completed before dying stays intact in the receiver's hands,
// and other senders' messages are unaffected.
func TestDeadSenderLeavesNothing(t *testing.T) {
	if port := os.Getenv(childPortEnv); port != "" {
		runDyingSender(t, port)
		return
	}
	base := segmentMaps(t)
	server, sn := bindServer(t, Config{})
	port := int(sn.Port)

	child := exec.Command(os.Args[0], "-test.run=^TestDeadSenderLeavesNothing$", "-test.v")
	child.Env = append(os.Environ(), childPortEnv+"="+strconv.Itoa(port))
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for l := range lines {
		if l == "ready" {
			break
		}
	}

	got, err := vantest.RecvWithin(t, server)
	require.NoError(t, err)
	require.Equal(t, int32(9), got.Meta.Sender)
	want := pattern(3, 1<<20)
	require.Equal(t, want, got.Data[1])
	assert.Equal(t, base+1, segmentMaps(t), "the receiver maps the dead sender's segment")

	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	killed = true

	// Another sender's messages go through their own segment, intact.
	good, err := New(Config{})
	require.NoError(t, err)
	require.NoError(t, good.Connect(sn, 10))
	for i := range 5 {
		vals := pattern(byte(i), 1<<20)
		_, err := good.Send(kvMsg(8, int32(i), vals))
		require.NoError(t, err)
		m, err := vantest.RecvWithin(t, server)
		require.NoError(t, err)
		assert.Equal(t, int32(10), m.Meta.Sender)
		assert.Equal(t, vals, m.Data[1])
		server.Release(m)
	}
	require.NoError(t, good.Close())

	assert.Equal(t, want, got.Data[1], "a view outlives its dead sender")
	server.Release(got)
	testutil.WaitFor(t, 10*time.Second, func() bool { return segmentMaps(t) == base },
		func() string { return strconv.Itoa(segmentMaps(t)-base) + " segment mappings left" })
	entries, err := os.ReadDir("/dev/shm")
	if err == nil {
		for _, e := range entries {
			assert.NotContains(t, e.Name(), "elasticps")
		}
	}
}

// runDyingSender is the child of TestDeadSenderLeavesNothing: it sends one
// message through its segment, then half of a second one, and waits to be
// killed.
func runDyingSender(t *testing.T, port string) {
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	c := dial(t, int32(p))
	o, err := sendHello(c, 9, Config{RingBytes: 16 << 20, StreamBytes: 1 << 16}.layout())
	require.NoError(t, err)
	for i, seed := range []byte{3, 4} {
		msg := kvMsg(8, int32(i), pattern(seed, 1<<20))
		off, ok := o.ring.alloc(spanOf(msg.Data))
		require.True(t, ok)
		h, iov, _ := encode(nil, nil, msg, o.ring.mem, off)
		require.Len(t, iov, 1, "frames in the segment")
		if i == 1 {
			h = h[:len(h)/2] // dies mid-message
		}
		require.NoError(t, o.w.write(h))
	}
	os.Stdout.WriteString("ready\n")
	time.Sleep(time.Minute) // until killed
}

//go:build linux

package samehost

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/shm"
	"github.com/elasticps/elasticps/van/tcp"
	"github.com/elasticps/elasticps/van/vantest"
)

// factory makes transports whose peers are on this host when sameHost
// says so (nil: SameHost, so every 127.0.0.1 peer goes over shm).
func factory(sameHost func(string) bool) vantest.Factory {
	return vantest.Factory{
		New: func(t testing.TB, opt van.Options) van.Transport {
			tr, err := New(Config{TCP: tcp.Config{Options: opt},
				SHM: shm.Config{Options: opt, RingBytes: 4 << 20}, SameHost: sameHost})
			require.NoError(t, err)
			return tr
		},
		Raw:             rawTCP,
		GarbageReported: true,
	}
}

// rawTCP speaks van/tcp's wire (its package doc) to the tcp side of a
// transport: hello, then messages exactly as given.
func rawTCP(t testing.TB, to message.Node, id int32) func(frames ...[]byte) {
	c, err := net.Dial("tcp", net.JoinHostPort(to.Hostname, strconv.Itoa(int(to.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	hello := append([]byte("EPSV\x01\x00\x00\x00"), binary.LittleEndian.AppendUint32(nil, uint32(id))...)
	_, err = c.Write(hello)
	require.NoError(t, err)
	return func(frames ...[]byte) {
		b := binary.LittleEndian.AppendUint32(nil, uint32(len(frames)))
		for _, f := range frames {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		}
		_, err := c.Write(append(b, bytes.Join(frames, nil)...))
		require.NoError(t, err)
	}
}

func TestConformanceOneHost(t *testing.T) { vantest.Run(t, factory(nil)) }

func TestConformanceOtherHosts(t *testing.T) {
	vantest.Run(t, factory(func(string) bool { return false }))
}

func BenchmarkRoundTrip(b *testing.B) { vantest.BenchRoundTrips(b, factory(nil)) }

type testNode struct {
	*Transport
	node message.Node
}

// newTestNode binds a node advertised as host ("127.0.0.1" or
// "localhost"); the job's transports take "127.0.0.1" for this host and
// "localhost" for another.
func newTestNode(t *testing.T, id int32, host string) *testNode {
	tr, err := New(Config{SHM: shm.Config{RingBytes: 4 << 20},
		SameHost: func(h string) bool { return h == "127.0.0.1" }})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	n := message.NewNode(message.RoleWorker)
	n.ID, n.Hostname = id, host
	port, err := tr.Bind(n, 0)
	require.NoError(t, err)
	n.Port = int32(port)
	return &testNode{Transport: tr, node: n}
}

// TestPeersOnThisHostGoOverShm: in one job, messages to the peer on this
// host go through shm (their large frames are views of its segment) and
// to the peer on "another host" through tcp, and both arrive intact, as
// do their answers.
func TestPeersOnThisHostGoOverShm(t *testing.T) {
	a := newTestNode(t, 9, "127.0.0.1")
	near := newTestNode(t, 8, "127.0.0.1")
	far := newTestNode(t, 10, "localhost")
	for _, n := range []*testNode{near, far} {
		require.NoError(t, a.Connect(n.node, 9))
		require.NoError(t, n.Connect(a.node, n.node.ID))
	}
	assert.Same(t, a.shm, a.via[8], "127.0.0.1 is this host")
	assert.Same(t, a.tcpVan(), a.via[10], "localhost stands for another host here")

	vals := bytes.Repeat([]byte{7}, 1<<20)
	for i, n := range []*testNode{near, far} {
		_, err := a.Send(vantest.KVMsg(n.node.ID, int32(i), true, false, vantest.U64s(1), vals, nil))
		require.NoError(t, err)
		got := vantest.MustRecv(t, n)
		assert.Equal(t, int32(9), got.Meta.Sender)
		assert.Equal(t, vals, got.Data[1])
		n.Release(got)

		_, err = n.Send(vantest.KVMsg(9, int32(i), false, false, vantest.U64s(1), vals, nil))
		require.NoError(t, err)
		back := vantest.MustRecv(t, a)
		assert.Equal(t, n.node.ID, back.Meta.Sender)
		assert.Equal(t, vals, back.Data[1])
		a.Detach(back)
		a.Release(back)
	}
}

// segmentMaps counts this process's mappings of shm segments.
func segmentMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(b), "memfd:elasticps-shm")
}

// TestReleaseGivesBackShmViews: a message whose frames are views of a
// segment keeps it mapped after its connection is gone, until Release
// through the samehost transport gives it back.
func TestReleaseGivesBackShmViews(t *testing.T) {
	base := segmentMaps(t)
	a := newTestNode(t, 9, "127.0.0.1")
	near := newTestNode(t, 8, "127.0.0.1")
	require.NoError(t, a.Connect(near.node, 9))
	// A first message waits until the connection is up: until the
	// listener answered the hello, a sender sends inline, not through
	// the segment.
	_, err := a.Send(vantest.KVMsg(8, 1, true, false, vantest.U64s(1), []byte{1, 2, 3, 4}, nil))
	require.NoError(t, err)
	near.Release(vantest.MustRecv(t, near))
	vals := bytes.Repeat([]byte{7}, 1<<20)
	_, err = a.Send(vantest.KVMsg(8, 1, true, false, vantest.U64s(1), vals, nil))
	require.NoError(t, err)
	got := vantest.MustRecv(t, near)
	require.NoError(t, a.Close())
	require.Eventually(t, func() bool { return segmentMaps(t) == base+1 }, vantest.RecvTimeout, 10*time.Millisecond,
		"the sender's mapping is gone, the receiver's held by the message")
	assert.Equal(t, vals, got.Data[1])
	near.Release(got)
	// The receiver's read loop holds the mapping too until it has seen
	// the connection end, which may come after the sender's unmap.
	require.Eventually(t, func() bool { return segmentMaps(t) == base }, vantest.RecvTimeout, 10*time.Millisecond,
		"Release (and the end of the connection) unmapped it")
}

func TestSameHost(t *testing.T) {
	for _, h := range []string{"127.0.0.1", "::1", "0.0.0.0", "localhost"} {
		assert.True(t, SameHost(h), h)
	}
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			assert.True(t, SameHost(n.IP.String()), "interface address %s", n.IP)
		}
	}
	for _, h := range []string{"192.0.2.1", "2001:db8::1", "no-such-host.invalid"} {
		assert.False(t, SameHost(h), h)
	}
}

func TestEnabled(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		return func(name string) (string, bool) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == name {
					return kv[i+1], true
				}
			}
			return "", false
		}
	}
	for _, c := range []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{Env, "1"}, true},
		{[]string{AliasEnv, "1"}, true},
		{[]string{Env, "0", AliasEnv, "1"}, true},
		{[]string{Env, " 0 "}, false},
	} {
		got, err := Enabled(env(c.env...))
		require.NoError(t, err, c.env)
		assert.Equal(t, c.want, got, c.env)
	}
	_, err := Enabled(env(AliasEnv, "yes"))
	assert.EqualError(t, err, `van/samehost: BYTEPS_ENABLE_IPC="yes" is invalid: expected 1 (peers on this host over shared memory) or 0`)
}

func TestEncryptionRefused(t *testing.T) {
	_, err := New(Config{TCP: tcp.Config{Options: van.Options{Encryption: &van.Encryption{}}}})
	assert.ErrorContains(t, err, "PS_ENCRYPT=on and PS_SHM_AUTO=1 do not go together")
}

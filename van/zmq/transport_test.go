//go:build cgo

package zmq

import (
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

const (
	schedulerID = 1
	serverID    = 8
	workerID    = 9
	recvTimeout = vantest.RecvTimeout
)

// testNode is a bound transport together with the Node others connect to.
type testNode struct {
	*Transport
	node message.Node
}

// newNode returns a transport bound to a free port on 127.0.0.1 and closed
// at the end of the test.
func newNode(t testing.TB, cfg Config, role message.Role, id int32) *testNode {
	t.Helper()
	tr, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	node := message.NewNode(role)
	node.ID = id
	node.Hostname = "127.0.0.1"
	port, err := tr.Bind(node, 0)
	require.NoError(t, err)
	require.Positive(t, port)
	node.Port = int32(port)
	// As ps-lite does, connect to ourselves: that also tells the transport
	// its own id, which Recv reports as Meta.Recver.
	if id != message.Empty {
		require.NoError(t, tr.Connect(node, id))
	}
	return &testNode{Transport: tr, node: node}
}

// frameErr receives and asserts that the next message was rejected.
func frameErr(t *testing.T, tr *Transport) *van.FrameError {
	t.Helper()
	_, err := vantest.RecvWithin(t, tr)
	var fe *van.FrameError
	require.ErrorAs(t, err, &fe)
	return fe
}

func controlMsg(to int32, cmd message.Command) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = to
	m.Meta.Control.Cmd = cmd
	m.Meta.Timestamp = 3
	return m
}

func TestParseIdentity(t *testing.T) {
	for in, want := range map[string]int32{
		"ps1":           1,
		"ps9":           9,
		"ps2147483646":  2147483646,
		"ps2147483647":  message.Empty,
		"ps2147483648":  message.Empty, // overflows int32
		"ps99999999999": message.Empty,
		"ps":            message.Empty,
		"px9":           message.Empty,
		"ps9a":          message.Empty,
		"ps-1":          message.Empty,
		"\x00k\x8bEg":   message.Empty, // libzmq-generated anonymous identity
		"":              message.Empty,
	} {
		assert.Equal(t, want, parseIdentity([]byte(in)), "%q", in)
	}
}

// TestConnectKeepsDealer: connecting again to the same address with the
// same identity keeps the DEALER, since two connections under one identity
// would confuse the ROUTER. (Replacement itself is in the vantest suite.)
func TestConnectKeepsDealer(t *testing.T) {
	sched := newNode(t, Config{}, message.RoleScheduler, schedulerID)
	server, err := New(Config{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, server.Close()) }()
	require.NoError(t, server.Connect(sched.node, serverID))
	server.mu.RLock()
	before := server.peers[schedulerID]
	server.mu.RUnlock()
	for range 3 {
		require.NoError(t, server.Connect(sched.node, serverID))
		_, err := server.Send(controlMsg(schedulerID, message.CmdHeartbeat))
		require.NoError(t, err)
		assert.Equal(t, int32(serverID), vantest.MustRecv(t, sched.Transport).Meta.Sender)
	}
	server.mu.RLock()
	assert.Same(t, before, server.peers[schedulerID])
	server.mu.RUnlock()
}

func TestLocalIPC(t *testing.T) {
	cfg := Config{Options: van.Options{Local: true}}
	a := newNode(t, cfg, message.RoleServer, serverID)
	b := newNode(t, cfg, message.RoleWorker, workerID)
	_, err := os.Stat(ipcPath(int(a.node.Port)))
	require.NoError(t, err, "DMLC_LOCAL binds ipc:///tmp/<port>")
	require.NoError(t, a.Connect(b.node, serverID))
	require.NoError(t, b.Connect(a.node, workerID))

	_, err = b.Send(vantest.KVMsg(serverID, 1, true, false, vantest.U64s(7), []byte("hello"), nil))
	require.NoError(t, err)
	got := vantest.MustRecv(t, a.Transport)
	assert.Equal(t, int32(workerID), got.Meta.Sender)
	assert.Equal(t, []byte("hello"), got.Data[1])

	_, err = a.Send(controlMsg(workerID, message.CmdAck))
	require.NoError(t, err)
	assert.Equal(t, int32(serverID), vantest.MustRecv(t, b.Transport).Meta.Sender)

	// A live ipc address counts as taken: no silent theft of the socket
	// file (libzmq would unlink it).
	c, err := New(cfg)
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()
	_, err = c.Bind(a.node, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ipc://"+ipcPath(int(a.node.Port)))

	// libzmq leaves socket files behind; Close removes its own.
	require.NoError(t, a.Close())
	assert.NoFileExists(t, ipcPath(int(a.node.Port)))
}

func TestBindRetryWhenPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	node := message.NewNode(message.RoleServer)
	node.Hostname, node.Port = "127.0.0.1", int32(taken)

	t.Run("no retry", func(t *testing.T) {
		tr, err := New(Config{})
		require.NoError(t, err)
		defer func() { assert.NoError(t, tr.Close()) }()
		_, err = tr.Bind(node, 0)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "tcp://127.0.0.1:"+strconv.Itoa(taken))
		assert.Contains(t, err.Error(), "in use")
	})
	t.Run("retry", func(t *testing.T) {
		tr, err := New(Config{})
		require.NoError(t, err)
		defer func() { assert.NoError(t, tr.Close()) }()
		port, err := tr.Bind(node, 40)
		require.NoError(t, err)
		assert.NotEqual(t, taken, port)
		assert.GreaterOrEqual(t, port, retryPortMin)
		assert.Less(t, port, retryPortMax)

		// And the retried port really receives.
		peer, err := New(Config{})
		require.NoError(t, err)
		defer func() { assert.NoError(t, peer.Close()) }()
		at := node
		at.Port, at.ID = int32(port), serverID
		require.NoError(t, peer.Connect(at, workerID))
		_, err = peer.Send(controlMsg(serverID, message.CmdHeartbeat))
		require.NoError(t, err)
		assert.Equal(t, int32(workerID), vantest.MustRecv(t, tr).Meta.Sender)
	})
	t.Run("not retried when the host is wrong", func(t *testing.T) {
		tr, err := New(Config{})
		require.NoError(t, err)
		defer func() { assert.NoError(t, tr.Close()) }()
		bad := message.NewNode(message.RoleServer)
		bad.Port = int32(taken)
		bad.Hostname = "192.0.2.1" // TEST-NET-1, never a local address
		_, err = tr.Bind(bad, 40)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "tcp://192.0.2.1:"+strconv.Itoa(taken))
	})
}

func TestBindAll(t *testing.T) {
	tr, err := New(Config{Options: van.Options{BindAll: true}})
	require.NoError(t, err)
	defer func() { assert.NoError(t, tr.Close()) }()
	node := message.NewNode(message.RoleScheduler)
	node.ID, node.Hostname = schedulerID, "scheduler.example.invalid" // not resolvable
	port, err := tr.Bind(node, 0)
	require.NoError(t, err)

	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
	require.NoError(t, err, "0.0.0.0 includes loopback")
	require.NoError(t, c.Close())
}

// TestMalformedErrorsAreSpecific checks this transport's wording for limits
// the vantest suite checks more loosely (it covers every transport).
func TestMalformedErrorsAreSpecific(t *testing.T) {
	server := newNode(t, Config{Options: van.Options{Limits: van.Limits{MaxFrames: 4, MaxMessageBytes: 1 << 16}}}, message.RoleServer, serverID)
	pushMeta := func(types ...message.DataType) []byte {
		m := message.NewMeta()
		m.Request, m.Push = true, true
		m.DataType = types
		return message.EncodeMeta(&m)
	}
	send := factory.Raw(t, server.node, 7)
	send(pushMeta(make([]message.DataType, 5)...))
	assert.Contains(t, frameErr(t, server.Transport).Error(), "meta announces 5")
	send(pushMeta(), []byte{}, []byte{}, []byte{}, []byte{}, []byte{}, []byte{})
	assert.Contains(t, frameErr(t, server.Transport).Error(), "more than 4 data frames")
}

// TestSendErrorsSayWhatToDo checks this transport's wording; the vantest
// suite checks the behaviour for every transport.
func TestSendErrorsSayWhatToDo(t *testing.T) {
	tr, err := New(Config{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, tr.Close()) }()
	_, err = tr.Send(controlMsg(workerID, message.CmdAck))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no connection to node 9; was it connected?")
	_, err = tr.Recv()
	assert.ErrorIs(t, err, errNotBound)
}

func TestConnectDoesNotWaitForBlockedSend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadPort := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	tr, err := New(Config{Options: van.Options{WaterMark: 1}})
	require.NoError(t, err)
	dead := message.NewNode(message.RoleServer)
	dead.ID, dead.Hostname, dead.Port = serverID, "127.0.0.1", int32(deadPort)
	require.NoError(t, tr.Connect(dead, workerID))
	blocked := make(chan error, 1)
	go func() {
		for {
			if _, err := tr.Send(controlMsg(serverID, message.CmdHeartbeat)); err != nil {
				blocked <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond) // let the sender block at the water mark

	// The server comes back elsewhere: Connect must not wait for the Send
	// stuck on the old DEALER, and new sends go to the new address.
	alive := newNode(t, Config{}, message.RoleServer, serverID)
	connected := make(chan error, 1)
	go func() { connected <- tr.Connect(alive.node, workerID) }()
	require.NoError(t, testutil.Recv(t, connected, recvTimeout, func() string { return "Connect waits for a Send blocked on the replaced DEALER" }))
	_, err = tr.Send(controlMsg(serverID, message.CmdAck))
	require.NoError(t, err)
	assert.Equal(t, message.CmdAck, vantest.MustRecv(t, alive.Transport).Meta.Control.Cmd)

	require.NoError(t, tr.Close())
	assert.ErrorIs(t, testutil.Recv(t, blocked, recvTimeout, func() string { return "Send still blocked after Close" }), van.ErrClosed)
}

func TestConfigValidation(t *testing.T) {
	_, err := New(Config{Options: van.Options{WaterMark: -1}})
	assert.Error(t, err)
	_, err = New(Config{Options: van.Options{Limits: van.Limits{MaxFrames: -1}}})
	assert.Error(t, err)

	cfg, err := Config{Options: van.Options{Limits: van.Limits{MaxFrames: 3}}}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 3, cfg.Limits.MaxFrames)
	assert.Equal(t, van.DefaultLimits().MaxMessageBytes, cfg.Limits.MaxMessageBytes)
	assert.NotNil(t, cfg.Logger)
}

// TestNewFrameSlotsAreZeroed checks that a peer's frame table never hands
// Send a slot holding leftovers of freed C memory where a release record
// pointer goes. Go's write barrier reads such a slot's old value as a
// pointer when Send overwrites it; a leftover Go address (a closed peer's
// old frame, a libzmq engine's pointer into a sent frame) then crashed the
// process with "found bad pointer in Go heap" (once in ~200 runs of
// ConcurrentConnectSendClose under -race).
func TestNewFrameSlotsAreZeroed(t *testing.T) {
	assert.Zero(t, dirtyFrameSlots(), "frame table slots with leftover memory where a release record goes")
}

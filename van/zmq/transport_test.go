//go:build cgo

package zmq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	zmq4 "github.com/pebbe/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

const (
	schedulerID = 1
	serverID    = 8
	workerID    = 9
	recvTimeout = 10 * time.Second
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

// recvWithin calls Recv and fails the test if nothing arrives in time. On
// timeout the Recv goroutine stays blocked until the test's Close.
func recvWithin(t testing.TB, tr *Transport) (*message.Message, error) {
	t.Helper()
	type result struct {
		msg *message.Message
		err error
	}
	ch := make(chan result, 1)
	go func() {
		m, err := tr.Recv()
		ch <- result{m, err}
	}()
	select {
	case r := <-ch:
		return r.msg, r.err
	case <-time.After(recvTimeout):
		t.Fatalf("no message within %v", recvTimeout)
		return nil, nil
	}
}

func mustRecv(t testing.TB, tr *Transport) *message.Message {
	t.Helper()
	m, err := recvWithin(t, tr)
	require.NoError(t, err)
	return m
}

// frameErr receives and asserts that the next message was rejected.
func frameErr(t *testing.T, tr *Transport) *van.FrameError {
	t.Helper()
	_, err := recvWithin(t, tr)
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

func u64s(vs ...uint64) []byte {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func TestExchangeBothWaysWithIdentities(t *testing.T) {
	sched := newNode(t, Config{}, message.RoleScheduler, schedulerID)
	worker := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, sched.Connect(worker.node, schedulerID))
	require.NoError(t, worker.Connect(sched.node, workerID))

	out := controlMsg(workerID, message.CmdBarrier)
	out.Meta.Control.BarrierGroup = 7
	n, err := sched.Send(out)
	require.NoError(t, err)
	assert.Equal(t, len(message.EncodeMeta(&out.Meta)), n)

	got := mustRecv(t, worker.Transport)
	assert.Equal(t, int32(schedulerID), got.Meta.Sender, "ps1 identity")
	assert.Equal(t, int32(workerID), got.Meta.Recver)
	assert.Equal(t, message.CmdBarrier, got.Meta.Control.Cmd)
	assert.Equal(t, int32(7), got.Meta.Control.BarrierGroup)
	assert.Empty(t, got.Data)

	back := controlMsg(schedulerID, message.CmdAck)
	back.Meta.Control.MsgSig = 42
	_, err = worker.Send(back)
	require.NoError(t, err)
	got = mustRecv(t, sched.Transport)
	assert.Equal(t, int32(workerID), got.Meta.Sender, "ps9 identity")
	assert.Equal(t, int32(schedulerID), got.Meta.Recver)
	assert.Equal(t, uint64(42), got.Meta.Control.MsgSig)

	// An unregistered node: no Bind, no id, anonymous DEALER, as the first
	// ADD_NODE to the scheduler.
	anon, err := New(Config{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, anon.Close()) }()
	require.NoError(t, anon.Connect(sched.node, message.Empty))
	reg := controlMsg(schedulerID, message.CmdAddNode)
	me := message.NewNode(message.RoleServer)
	me.Hostname, me.Port = "127.0.0.1", 1234
	reg.Meta.Control.Nodes = []message.Node{me}
	_, err = anon.Send(reg)
	require.NoError(t, err)
	got = mustRecv(t, sched.Transport)
	assert.Equal(t, message.Empty, got.Meta.Sender, "anonymous peer")
	require.Len(t, got.Meta.Control.Nodes, 1)
	assert.Equal(t, me, got.Meta.Control.Nodes[0])
}

// kvMsg builds a ps-lite KV message: keys, vals and optional lens frames.
func kvMsg(to int32, ts int32, push, pull bool, keys, vals, lens []byte) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = to
	m.Meta.AppID, m.Meta.CustomerID, m.Meta.Timestamp = 0, 0, ts
	m.Meta.Request, m.Meta.Push, m.Meta.Pull = true, push, pull
	m.Meta.Head = 0
	m.AddData(message.Uint64, keys)
	m.AddData(message.Other, vals)
	if lens != nil {
		m.AddData(message.Int32, lens)
	}
	return m
}

func TestKVFramesExact(t *testing.T) {
	server := newNode(t, Config{}, message.RoleServer, serverID)
	worker := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))

	vals := make([]byte, 1<<20+3) // odd size: no hidden padding
	for i := range vals {
		vals[i] = byte(i*7 + i>>8)
	}
	lens := binary.LittleEndian.AppendUint32(nil, uint32(len(vals)))
	cases := []struct {
		name string
		msg  *message.Message
	}{
		{"push request", kvMsg(serverID, 1, true, false, u64s(12345), vals, lens)},
		{"pull request with empty vals frame", kvMsg(serverID, 2, false, true, u64s(1, 2, 3), []byte{}, nil)},
		{"all frames empty", kvMsg(serverID, 3, true, false, nil, nil, []byte{})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.msg.Meta.Body = []byte("body")
			tc.msg.Meta.Priority = -2
			n, err := worker.Send(tc.msg)
			require.NoError(t, err)
			want := len(message.EncodeMeta(&tc.msg.Meta))
			for _, d := range tc.msg.Data {
				want += len(d)
			}
			assert.Equal(t, want, n)

			got := mustRecv(t, server.Transport)
			wantMeta := tc.msg.Meta
			wantMeta.Sender, wantMeta.Recver = workerID, serverID
			assert.Equal(t, wantMeta, got.Meta)
			require.Len(t, got.Data, len(tc.msg.Data))
			for i := range got.Data {
				assert.True(t, bytes.Equal(tc.msg.Data[i], got.Data[i]), "frame %d differs", i)
				assert.NotNil(t, got.Data[i], "frame %d", i)
			}
		})
	}
}

func TestRecvFramesAligned(t *testing.T) {
	a := newNode(t, Config{}, message.RoleServer, serverID)
	b := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, b.Connect(a.node, workerID))
	for size := range 41 {
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.Recver = serverID
		m.AddData(message.Other, bytes.Repeat([]byte{byte(size)}, size))
		m.AddData(message.Other, make([]byte, size+1))
		_, err := b.Send(m)
		require.NoError(t, err)
	}
	for size := range 41 {
		got := mustRecv(t, a.Transport)
		require.Len(t, got.Data, 2)
		require.Len(t, got.Data[0], size)
		assert.Equal(t, bytes.Repeat([]byte{byte(size)}, size), got.Data[0])
		for i, d := range got.Data {
			if len(d) > 0 {
				assert.Zero(t, uintptr(unsafe.Pointer(&d[0]))%8, "size %d frame %d misaligned", size, i)
			}
		}
	}
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

func TestConnectReplacesDealer(t *testing.T) {
	sched := newNode(t, Config{}, message.RoleScheduler, schedulerID)
	server, err := New(Config{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, server.Close()) }()

	const burst = 200
	sendBurst := func() {
		t.Helper()
		for range burst {
			_, err := server.Send(controlMsg(schedulerID, message.CmdHeartbeat))
			require.NoError(t, err)
		}
	}
	// Registration: anonymous first, then with the assigned id. The
	// anonymous burst is queued on the old DEALER when it is replaced and
	// must still be delivered, under the old (anonymous) identity.
	require.NoError(t, server.Connect(sched.node, message.Empty))
	sendBurst()
	require.NoError(t, server.Connect(sched.node, serverID))
	sendBurst()
	senders := map[int32]int{}
	for range 2 * burst {
		senders[mustRecv(t, sched.Transport).Meta.Sender]++
	}
	assert.Equal(t, map[int32]int{message.Empty: burst, serverID: burst}, senders)

	// Connecting again to the same address with the same identity keeps the
	// DEALER: two connections under one identity would confuse the ROUTER.
	server.mu.RLock()
	before := server.peers[schedulerID]
	server.mu.RUnlock()
	for range 3 {
		require.NoError(t, server.Connect(sched.node, serverID))
		sendBurst()
		for range burst {
			assert.Equal(t, int32(serverID), mustRecv(t, sched.Transport).Meta.Sender)
		}
	}
	server.mu.RLock()
	assert.Same(t, before, server.peers[schedulerID])
	server.mu.RUnlock()

	// The peer moved (say, a recovered scheduler on a new port): the new
	// DEALER goes to the new address.
	moved := newNode(t, Config{}, message.RoleScheduler, schedulerID)
	require.NoError(t, server.Connect(moved.node, serverID))
	_, err = server.Send(controlMsg(schedulerID, message.CmdHeartbeat))
	require.NoError(t, err)
	got := mustRecv(t, moved.Transport)
	assert.Equal(t, int32(serverID), got.Meta.Sender)
}

func TestRestartedPeerTakesOverIdentity(t *testing.T) {
	// A node restarts with its old id while the scheduler's ROUTER may still
	// hold the old connection: ROUTER handover lets the newcomer in at once.
	sched := newNode(t, Config{}, message.RoleScheduler, schedulerID)
	for range 3 {
		node, err := New(Config{})
		require.NoError(t, err)
		require.NoError(t, node.Connect(sched.node, workerID))
		_, err = node.Send(controlMsg(schedulerID, message.CmdHeartbeat))
		require.NoError(t, err)
		assert.Equal(t, int32(workerID), mustRecv(t, sched.Transport).Meta.Sender)
		// Deliberately no Close: the old connection stays open.
		t.Cleanup(func() { assert.NoError(t, node.Close()) })
	}
}

func TestLocalIPC(t *testing.T) {
	cfg := Config{Local: true}
	a := newNode(t, cfg, message.RoleServer, serverID)
	b := newNode(t, cfg, message.RoleWorker, workerID)
	_, err := os.Stat(ipcPath(int(a.node.Port)))
	require.NoError(t, err, "DMLC_LOCAL binds ipc:///tmp/<port>")
	require.NoError(t, a.Connect(b.node, serverID))
	require.NoError(t, b.Connect(a.node, workerID))

	_, err = b.Send(kvMsg(serverID, 1, true, false, u64s(7), []byte("hello"), nil))
	require.NoError(t, err)
	got := mustRecv(t, a.Transport)
	assert.Equal(t, int32(workerID), got.Meta.Sender)
	assert.Equal(t, []byte("hello"), got.Data[1])

	_, err = a.Send(controlMsg(workerID, message.CmdAck))
	require.NoError(t, err)
	assert.Equal(t, int32(serverID), mustRecv(t, b.Transport).Meta.Sender)

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
		assert.Equal(t, int32(workerID), mustRecv(t, tr).Meta.Sender)
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
	tr, err := New(Config{BindAll: true})
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

// rawDealer is a bare zmq DEALER with identity ident, for sending frames the
// Transport would refuse to produce.
func rawDealer(t *testing.T, to message.Node, ident string) *zmq4.Socket {
	t.Helper()
	ctx, err := zmq4.NewContext()
	require.NoError(t, err)
	s, err := ctx.NewSocket(zmq4.DEALER)
	require.NoError(t, err)
	require.NoError(t, s.SetLinger(0))
	if ident != "" {
		require.NoError(t, s.SetIdentity(ident))
	}
	require.NoError(t, s.Connect(fmt.Sprintf("tcp://%s:%d", to.Hostname, to.Port)))
	t.Cleanup(func() {
		assert.NoError(t, s.Close())
		assert.NoError(t, ctx.Term())
	})
	return s
}

func sendRaw(t *testing.T, s *zmq4.Socket, frames ...[]byte) {
	t.Helper()
	for i, f := range frames {
		flag := zmq4.SNDMORE
		if i == len(frames)-1 {
			flag = 0
		}
		_, err := s.SendBytes(f, flag)
		require.NoError(t, err)
	}
}

func TestMalformedInputIsRejectedAndSurvived(t *testing.T) {
	server := newNode(t, Config{Limits: van.Limits{MaxFrames: 4, MaxMessageBytes: 1 << 16}}, message.RoleServer, serverID)
	good := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, good.Connect(server.node, workerID))
	sendGood := func(ts int32) {
		t.Helper()
		m := kvMsg(serverID, ts, true, false, u64s(1), []byte("v"), nil)
		_, err := good.Send(m)
		require.NoError(t, err)
		got := mustRecv(t, server.Transport)
		assert.Equal(t, ts, got.Meta.Timestamp)
		assert.Equal(t, int32(workerID), got.Meta.Sender)
	}

	// Garbage straight into the ROUTER's TCP port: libzmq's ZMTP handshake
	// rejects it and drops the connection; Recv never sees it.
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", server.node.Port))
	require.NoError(t, err)
	_, err = c.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n\x00\xff"), 64))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(recvTimeout)))
	_, _ = c.Read(make([]byte, 1024)) // until libzmq hangs up
	require.NoError(t, c.Close())
	sendGood(1)

	evil := rawDealer(t, server.node, "ps7")
	pushMeta := func(types ...message.DataType) []byte {
		m := message.NewMeta()
		m.Request, m.Push = true, true
		m.DataType = types
		return message.EncodeMeta(&m)
	}
	for _, tc := range []struct {
		name   string
		frames [][]byte
		want   string
	}{
		{"garbage meta", [][]byte{bytes.Repeat([]byte{0xff}, 11), []byte("x")}, "bad meta frame"},
		{"frame count mismatch", [][]byte{pushMeta(message.Uint64, message.Float), u64s(1)}, "data frame count"},
		{"frames beyond data_type", [][]byte{pushMeta(), u64s(1)}, "data frame count"},
		{"too many announced frames", [][]byte{pushMeta(make([]message.DataType, 5)...)}, "meta announces 5"},
		{"too many frames", [][]byte{pushMeta(), {}, {}, {}, {}, {}, {}}, "more than 4 data frames"},
		{"too many bytes", [][]byte{pushMeta(message.Other, message.Other), make([]byte, 40000), make([]byte, 40000)}, "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sendRaw(t, evil, tc.frames...)
			fe := frameErr(t, server.Transport)
			assert.Equal(t, "ps7", fe.Peer)
			assert.Contains(t, fe.Error(), tc.want)
			if tc.want == "data frame count" {
				assert.ErrorIs(t, fe, message.ErrFrameCount)
			}
			sendGood(2)
		})
	}

	anon := rawDealer(t, server.node, "")
	sendRaw(t, anon, []byte{0x0f})
	assert.Equal(t, "anonymous", frameErr(t, server.Transport).Peer)
	sendGood(3)
}

func TestSendErrors(t *testing.T) {
	tr, err := New(Config{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, tr.Close()) }()

	_, err = tr.Send(controlMsg(workerID, message.CmdAck))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no connection to node 9; was it connected?")

	m := controlMsg(workerID, message.CmdEmpty)
	m.Data = [][]byte{{1}}
	_, err = tr.Send(m)
	assert.ErrorIs(t, err, message.ErrFrameCount, "frames without data_type would be rejected by the receiver")

	_, err = tr.Recv()
	assert.ErrorIs(t, err, errNotBound)

	noID := message.NewNode(message.RoleServer)
	noID.Hostname, noID.Port = "127.0.0.1", 1234
	assert.Error(t, tr.Connect(noID, workerID))
}

func TestCloseUnblocksRecv(t *testing.T) {
	tr, err := New(Config{})
	require.NoError(t, err)
	node := message.NewNode(message.RoleServer)
	node.Hostname = "127.0.0.1"
	_, err = tr.Bind(node, 0)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := tr.Recv()
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let Recv block inside libzmq
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, van.ErrClosed)
	case <-time.After(recvTimeout):
		t.Fatal("Recv still blocked after Close")
	}
	select {
	case err := <-closed:
		assert.NoError(t, err)
	case <-time.After(recvTimeout):
		t.Fatal("Close hangs")
	}

	assert.NoError(t, tr.Close(), "Close is idempotent")
	_, err = tr.Recv()
	assert.ErrorIs(t, err, van.ErrClosed)
	_, err = tr.Send(controlMsg(workerID, message.CmdAck))
	assert.ErrorIs(t, err, van.ErrClosed)
	node.ID, node.Port = workerID, 1234
	assert.ErrorIs(t, tr.Connect(node, serverID), van.ErrClosed)
	_, err = tr.Bind(node, 0)
	assert.Error(t, err)
}

func TestCloseUnblocksSendAtWaterMark(t *testing.T) {
	// Nobody listens at the peer's address, so messages pile up in the
	// DEALER until the water mark, and then Send blocks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadPort := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	tr, err := New(Config{WaterMark: 2})
	require.NoError(t, err)
	dead := message.NewNode(message.RoleServer)
	dead.ID, dead.Hostname, dead.Port = serverID, "127.0.0.1", int32(deadPort)
	require.NoError(t, tr.Connect(dead, workerID))

	done := make(chan error, 1)
	go func() {
		for {
			if _, err := tr.Send(controlMsg(serverID, message.CmdHeartbeat)); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, tr.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, van.ErrClosed)
	case <-time.After(recvTimeout):
		t.Fatal("Send still blocked after Close")
	}
}

func TestConnectDoesNotWaitForBlockedSend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadPort := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	tr, err := New(Config{WaterMark: 1})
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
	select {
	case err := <-connected:
		require.NoError(t, err)
	case <-time.After(recvTimeout):
		t.Fatal("Connect waits for a Send blocked on the replaced DEALER")
	}
	_, err = tr.Send(controlMsg(serverID, message.CmdAck))
	require.NoError(t, err)
	assert.Equal(t, message.CmdAck, mustRecv(t, alive.Transport).Meta.Control.Cmd)

	require.NoError(t, tr.Close())
	select {
	case err := <-blocked:
		assert.ErrorIs(t, err, van.ErrClosed)
	case <-time.After(recvTimeout):
		t.Fatal("Send still blocked after Close")
	}
}

func TestConcurrentSendsArriveInOrder(t *testing.T) {
	const senders, perSender = 8, 300
	server := newNode(t, Config{}, message.RoleServer, serverID)
	worker := newNode(t, Config{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))

	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for seq := range perSender {
				m := kvMsg(serverID, int32(seq), true, false, u64s(uint64(g)), make([]byte, 100+g*seq), nil)
				if _, err := worker.Send(m); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]int32, senders)
	for range senders * perSender {
		m := mustRecv(t, server.Transport)
		g := binary.LittleEndian.Uint64(m.Data[0])
		require.Less(t, g, uint64(senders))
		require.Equal(t, next[g], m.Meta.Timestamp, "FIFO per sender goroutine")
		require.Len(t, m.Data[1], 100+int(g)*int(m.Meta.Timestamp))
		next[g]++
	}
	wg.Wait()
}

func TestConcurrentConnectSendClose(t *testing.T) {
	// Exercise the locking under -race: sends racing with re-connects and,
	// finally, Close. Errors are expected once Close starts; only races,
	// hangs and panics are failures.
	server := newNode(t, Config{}, message.RoleServer, serverID)
	worker, err := New(Config{})
	require.NoError(t, err)
	require.NoError(t, worker.Connect(server.node, workerID))

	stop := make(chan struct{})
	go func() {
		for {
			if _, err := server.Recv(); errors.Is(err, van.ErrClosed) {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := worker.Send(controlMsg(serverID, message.CmdHeartbeat))
				if errors.Is(err, van.ErrClosed) {
					return
				}
				if !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if err := worker.Connect(server.node, workerID); err != nil {
				assert.ErrorIs(t, err, van.ErrClosed)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, worker.Close())
	close(stop)
	wg.Wait()
}

func TestConfigValidation(t *testing.T) {
	_, err := New(Config{WaterMark: -1})
	assert.Error(t, err)
	_, err = New(Config{Limits: van.Limits{MaxFrames: -1}})
	assert.Error(t, err)

	cfg, err := Config{Limits: van.Limits{MaxFrames: 3}}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 3, cfg.Limits.MaxFrames)
	assert.Equal(t, van.DefaultLimits().MaxMessageBytes, cfg.Limits.MaxMessageBytes)
	assert.NotNil(t, cfg.Logger)
}

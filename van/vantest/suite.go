package vantest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

func testExchange(t *testing.T, f Factory) {
	sched := newNode(t, f, van.Options{}, message.RoleScheduler, schedulerID)
	worker := newNode(t, f, van.Options{}, message.RoleWorker, workerID)
	require.NoError(t, sched.Connect(worker.node, schedulerID))
	require.NoError(t, worker.Connect(sched.node, workerID))

	out := controlMsg(workerID, message.CmdBarrier)
	out.Meta.Control.BarrierGroup = 7
	n, err := sched.Send(out)
	require.NoError(t, err)
	assert.Equal(t, len(message.EncodeMeta(&out.Meta)), n, "Send counts meta and data bytes")

	got := MustRecv(t, worker)
	assert.Equal(t, int32(schedulerID), got.Meta.Sender)
	assert.Equal(t, int32(workerID), got.Meta.Recver)
	assert.Equal(t, message.CmdBarrier, got.Meta.Control.Cmd)
	assert.Equal(t, int32(7), got.Meta.Control.BarrierGroup)
	assert.Empty(t, got.Data)

	back := controlMsg(schedulerID, message.CmdAck)
	back.Meta.Control.MsgSig = 42
	_, err = worker.Send(back)
	require.NoError(t, err)
	got = MustRecv(t, sched)
	assert.Equal(t, int32(workerID), got.Meta.Sender)
	assert.Equal(t, int32(schedulerID), got.Meta.Recver)
	assert.Equal(t, uint64(42), got.Meta.Control.MsgSig)

	// An unregistered node: no Bind, no id, an anonymous connection, as
	// the first ADD_NODE to the scheduler.
	anon := f.New(t, van.Options{})
	defer func() { assert.NoError(t, anon.Close()) }()
	require.NoError(t, anon.Connect(sched.node, message.Empty))
	reg := controlMsg(schedulerID, message.CmdAddNode)
	me := message.NewNode(message.RoleServer)
	me.Hostname, me.Port = "127.0.0.1", 1234
	reg.Meta.Control.Nodes = []message.Node{me}
	_, err = anon.Send(reg)
	require.NoError(t, err)
	got = MustRecv(t, sched)
	assert.Equal(t, message.Empty, got.Meta.Sender, "anonymous peer")
	require.Len(t, got.Meta.Control.Nodes, 1)
	assert.Equal(t, me, got.Meta.Control.Nodes[0])
}

func testKVFrames(t *testing.T, f Factory) {
	server := newNode(t, f, van.Options{}, message.RoleServer, serverID)
	worker := newNode(t, f, van.Options{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))

	vals := make([]byte, 1<<20+3) // odd size: no hidden padding
	for i := range vals {
		vals[i] = byte(i*7 + i>>8)
	}
	lens := binary.LittleEndian.AppendUint32(nil, uint32(len(vals)))
	withExt := KVMsg(serverID, 4, true, false, U64s(1<<40), vals[:40000], nil)
	withExt.Meta.Ext = message.Ext{Epoch: 3, SendNanos: -5, PushSeq: 1 << 50}
	cases := []struct {
		name string
		msg  *message.Message
	}{
		{"push request", KVMsg(serverID, 1, true, false, U64s(12345), vals, lens)},
		{"pull request with empty vals frame", KVMsg(serverID, 2, false, true, U64s(1, 2, 3), []byte{}, nil)},
		{"all frames empty", KVMsg(serverID, 3, true, false, nil, nil, []byte{})},
		{"extension fields", withExt},
		{"many keys", KVMsg(serverID, 5, true, false, U64s(make([]uint64, 5000)...), vals[:20000], nil)},
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

			got := MustRecv(t, server)
			wantMeta := tc.msg.Meta
			wantMeta.Sender, wantMeta.Recver = workerID, serverID
			assert.Equal(t, wantMeta, got.Meta)
			require.Len(t, got.Data, len(tc.msg.Data))
			for i := range got.Data {
				assert.True(t, bytes.Equal(tc.msg.Data[i], got.Data[i]), "frame %d differs", i)
				assert.NotNil(t, got.Data[i], "frame %d: an empty frame is not a missing one", i)
			}
		})
	}
}

func testAligned(t *testing.T, f Factory) {
	a := newNode(t, f, van.Options{}, message.RoleServer, serverID)
	b := newNode(t, f, van.Options{}, message.RoleWorker, workerID)
	require.NoError(t, b.Connect(a.node, workerID))
	sizes := []int{}
	for size := range 41 {
		sizes = append(sizes, size)
	}
	sizes = append(sizes, 4093, 40001, 70003)
	for _, size := range sizes {
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.Recver = serverID
		m.AddData(message.Other, bytes.Repeat([]byte{byte(size)}, size))
		m.AddData(message.Other, make([]byte, size+1))
		m.AddData(message.Other, make([]byte, 3))
		_, err := b.Send(m)
		require.NoError(t, err)
	}
	for _, size := range sizes {
		got := MustRecv(t, a)
		require.Len(t, got.Data, 3)
		require.Len(t, got.Data[0], size)
		assert.Equal(t, bytes.Repeat([]byte{byte(size)}, size), got.Data[0])
		for i, d := range got.Data {
			if len(d) > 0 {
				assert.Zero(t, uintptr(unsafe.Pointer(&d[0]))%8, "size %d frame %d misaligned", size, i)
			}
		}
	}
}

func testConcurrentFIFO(t *testing.T, f Factory) {
	const senders, perSender = 8, 300
	server := newNode(t, f, van.Options{}, message.RoleServer, serverID)
	worker := newNode(t, f, van.Options{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))

	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for seq := range perSender {
				// Sizes straddle every copy/zero-copy threshold.
				m := KVMsg(serverID, int32(seq), true, false, U64s(uint64(g)), make([]byte, 100+g*seq*7), nil)
				if _, err := worker.Send(m); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]int32, senders)
	for range senders * perSender {
		m := MustRecv(t, server)
		g := binary.LittleEndian.Uint64(m.Data[0])
		require.Less(t, g, uint64(senders))
		require.Equal(t, next[g], m.Meta.Timestamp, "FIFO per sender goroutine")
		require.Len(t, m.Data[1], 100+int(g)*int(m.Meta.Timestamp)*7)
		next[g]++
	}
	wg.Wait()
}

func testConnectReplaces(t *testing.T, f Factory) {
	sched := newNode(t, f, van.Options{}, message.RoleScheduler, schedulerID)
	server := f.New(t, van.Options{})
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
	// anonymous burst, possibly still queued on the old path when it is
	// replaced, must be delivered under the old (anonymous) identity.
	require.NoError(t, server.Connect(sched.node, message.Empty))
	sendBurst()
	require.NoError(t, server.Connect(sched.node, serverID))
	sendBurst()
	senders := map[int32]int{}
	for range 2 * burst {
		senders[MustRecv(t, sched).Meta.Sender]++
	}
	assert.Equal(t, map[int32]int{message.Empty: burst, serverID: burst}, senders)

	// Connecting again the same way changes nothing.
	for range 3 {
		require.NoError(t, server.Connect(sched.node, serverID))
		sendBurst()
		for range burst {
			assert.Equal(t, int32(serverID), MustRecv(t, sched).Meta.Sender)
		}
	}

	// The peer moved (a recovered scheduler on a new port).
	moved := newNode(t, f, van.Options{}, message.RoleScheduler, schedulerID)
	require.NoError(t, server.Connect(moved.node, serverID))
	_, err := server.Send(controlMsg(schedulerID, message.CmdHeartbeat))
	require.NoError(t, err)
	assert.Equal(t, int32(serverID), MustRecv(t, moved).Meta.Sender)
}

func testRestartedPeer(t *testing.T, f Factory) {
	// A node restarts with its old id while the old connection may still
	// be open: the newcomer's messages get through at once.
	sched := newNode(t, f, van.Options{}, message.RoleScheduler, schedulerID)
	for range 3 {
		tr := f.New(t, van.Options{})
		require.NoError(t, tr.Connect(sched.node, workerID))
		_, err := tr.Send(controlMsg(schedulerID, message.CmdHeartbeat))
		require.NoError(t, err)
		assert.Equal(t, int32(workerID), MustRecv(t, sched).Meta.Sender)
		t.Cleanup(func() { assert.NoError(t, tr.Close()) }) // old ones stay open
	}
}

// sendGood sends one valid message from good to server and checks it
// arrives: the server survived whatever came before.
func sendGood(t *testing.T, good, server *node, ts int32) {
	t.Helper()
	_, err := good.Send(KVMsg(serverID, ts, true, false, U64s(1), []byte("v"), nil))
	require.NoError(t, err)
	got := MustRecv(t, server)
	assert.Equal(t, ts, got.Meta.Timestamp)
	assert.Equal(t, int32(workerID), got.Meta.Sender)
}

func testGarbage(t *testing.T, f Factory) {
	if f.InMemory {
		t.Skip("an in-memory transport has no port to write garbage to")
	}
	server := newNode(t, f, van.Options{}, message.RoleServer, serverID)
	good := newNode(t, f, van.Options{}, message.RoleWorker, workerID)
	require.NoError(t, good.Connect(server.node, workerID))

	var c net.Conn
	if f.Dial != nil {
		c = f.Dial(t, server.node.Port)
	} else {
		var err error
		c, err = net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(server.node.Port))))
		require.NoError(t, err)
	}
	_, err := c.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n\x00\xff"), 64))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(RecvTimeout)))
	_, _ = c.Read(make([]byte, 1024)) // until the transport hangs up
	require.NoError(t, c.Close())
	if f.GarbageReported {
		fe := frameErr(t, server)
		assert.NotEmpty(t, fe.Peer)
	}
	sendGood(t, good, server, 1)
}

func testMalformed(t *testing.T, f Factory) {
	server := newNode(t, f, van.Options{Limits: van.Limits{MaxFrames: 4, MaxMessageBytes: 1 << 16}}, message.RoleServer, serverID)
	good := newNode(t, f, van.Options{}, message.RoleWorker, workerID)
	require.NoError(t, good.Connect(server.node, workerID))
	sendGood(t, good, server, 1)

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
		{"frame count mismatch", [][]byte{pushMeta(message.Uint64, message.Float), U64s(1)}, "data frame count"},
		{"frames beyond data_type", [][]byte{pushMeta(), U64s(1)}, "data frame count"},
		{"too many announced frames", [][]byte{pushMeta(make([]message.DataType, 5)...)}, "announces 5"},
		{"too many frames", [][]byte{pushMeta(), {}, {}, {}, {}, {}, {}}, "frames"},
		{"too many bytes", [][]byte{pushMeta(message.Other, message.Other), make([]byte, 40000), make([]byte, 40000)}, "exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send := f.Raw(t, server.node, 7)
			send(tc.frames...)
			fe := frameErr(t, server)
			assert.Equal(t, "ps7", fe.Peer)
			assert.Contains(t, fe.Error(), tc.want)
			if tc.want == "data frame count" {
				assert.ErrorIs(t, fe, message.ErrFrameCount)
			}
			sendGood(t, good, server, 2)
		})
	}
	t.Run("anonymous", func(t *testing.T) {
		send := f.Raw(t, server.node, message.Empty)
		send([]byte{0x0f})
		assert.Equal(t, "anonymous", frameErr(t, server).Peer)
		sendGood(t, good, server, 3)
	})
	t.Run("a connection survives a rejected message", func(t *testing.T) {
		send := f.Raw(t, server.node, 7)
		send(bytes.Repeat([]byte{0xff}, 11))
		frameErr(t, server)
		ok := message.NewMeta()
		ok.Timestamp = 77
		send(message.EncodeMeta(&ok))
		got := MustRecv(t, server)
		assert.Equal(t, int32(77), got.Meta.Timestamp)
		assert.Equal(t, int32(7), got.Meta.Sender)
	})
}

func testSendErrors(t *testing.T, f Factory) {
	tr := f.New(t, van.Options{})
	defer func() { assert.NoError(t, tr.Close()) }()

	_, err := tr.Send(controlMsg(workerID, message.CmdAck))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no connection to node 9")

	m := controlMsg(workerID, message.CmdEmpty)
	m.Data = [][]byte{{1}}
	_, err = tr.Send(m)
	assert.ErrorIs(t, err, message.ErrFrameCount, "frames without data_type would be rejected by the receiver")

	_, err = tr.Recv()
	assert.Error(t, err, "Recv before Bind")
	assert.NotErrorIs(t, err, van.ErrClosed)

	noID := message.NewNode(message.RoleServer)
	noID.Hostname, noID.Port = "127.0.0.1", 1234
	assert.Error(t, tr.Connect(noID, workerID))
	noPort := message.NewNode(message.RoleServer)
	noPort.ID, noPort.Hostname = serverID, "127.0.0.1"
	assert.Error(t, tr.Connect(noPort, workerID))
}

func testCloseUnblocksRecv(t *testing.T, f Factory) {
	tr := f.New(t, van.Options{})
	n := message.NewNode(message.RoleServer)
	n.Hostname = "127.0.0.1"
	_, err := tr.Bind(n, 0)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := tr.Recv()
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let Recv block (not required for correctness)
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, van.ErrClosed)
	case <-time.After(RecvTimeout):
		t.Fatal("Recv still blocked after Close")
	}
	select {
	case err := <-closed:
		assert.NoError(t, err)
	case <-time.After(RecvTimeout):
		t.Fatal("Close hangs")
	}

	assert.NoError(t, tr.Close(), "Close is idempotent")
	_, err = tr.Recv()
	assert.ErrorIs(t, err, van.ErrClosed)
	_, err = tr.Send(controlMsg(workerID, message.CmdAck))
	assert.ErrorIs(t, err, van.ErrClosed)
	n.ID, n.Port = workerID, 1234
	assert.ErrorIs(t, tr.Connect(n, serverID), van.ErrClosed)
	_, err = tr.Bind(n, 0)
	assert.Error(t, err)
}

func testCloseUnblocksSend(t *testing.T, f Factory) {
	// Nobody listens at the peer's address, so messages pile up until the
	// water mark, and then Send blocks.
	tr := f.New(t, van.Options{WaterMark: 2})
	dead := message.NewNode(message.RoleServer)
	dead.ID, dead.Hostname, dead.Port = serverID, "127.0.0.1", deadPort(t, f)
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
	case <-time.After(RecvTimeout):
		t.Fatal("Send still blocked after Close")
	}
}

func testConnectSendClose(t *testing.T, f Factory) {
	// Exercise the locking under -race: sends racing with re-connects and,
	// finally, Close. Errors are expected once Close starts; only races,
	// hangs and panics are failures.
	server := newNode(t, f, van.Options{}, message.RoleServer, serverID)
	worker := f.New(t, van.Options{})
	require.NoError(t, worker.Connect(server.node, workerID))

	go func() {
		for {
			if _, err := server.Recv(); errors.Is(err, van.ErrClosed) {
				return
			}
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			payload := make([]byte, 1<<i*1000)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := worker.Send(KVMsg(serverID, 1, true, false, U64s(1), payload, nil))
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
		for i := range 20 {
			id := int32(workerID)
			if i%2 == 1 {
				id = message.Empty // alternate identities: real replacements
			}
			if err := worker.Connect(server.node, id); err != nil {
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

func testRelease(t *testing.T, f Factory) {
	server := newNode(t, f, van.Options{}, message.RoleServer, serverID)
	worker := newNode(t, f, van.Options{}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))
	for i := range 20 {
		vals := bytes.Repeat([]byte{byte(i)}, 100000+i)
		_, err := worker.Send(KVMsg(serverID, int32(i), true, false, U64s(1), vals, nil))
		require.NoError(t, err)
		got := MustRecv(t, server)
		require.Equal(t, vals, got.Data[1])
		// Nothing of got may be read after this: the transport reuses
		// its buffers, and the Message itself, for the next messages,
		// whose different contents the Equal above checks.
		server.Release(got)
	}
}

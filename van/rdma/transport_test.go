//go:build rdma && cgo

package rdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

// These tests run the libfabric backend for real on 127.0.0.1 (provider
// FI_PROVIDER, else tcp;ofi_rxm, which any Linux host has).

const (
	schedulerID = 1
	serverID    = 8
	workerID    = 9
	recvTimeout = vantest.RecvTimeout
)

func testProvider() string {
	if p := os.Getenv("FI_PROVIDER"); p != "" {
		return p
	}
	return "tcp;ofi_rxm"
}

func quiet() *slog.Logger {
	if os.Getenv("RDMA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func fabricConfig() Config {
	return Config{Options: van.Options{Host: "127.0.0.1", Logger: quiet()}, Backend: Fabric, Provider: testProvider()}
}

type testNode struct {
	*Transport
	node message.Node
}

// newNode returns a transport bound on 127.0.0.1, connected to itself as
// ps-lite nodes are, and closed at the end of the test.
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
	node.Port = int32(port)
	if id != message.Empty {
		require.NoError(t, tr.Connect(node, id))
	}
	return &testNode{Transport: tr, node: node}
}

// pair returns a server and a worker connected both ways.
func pair(t testing.TB, cfg Config) (server, worker *testNode) {
	server = newNode(t, cfg, message.RoleServer, serverID)
	worker = newNode(t, cfg, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))
	require.NoError(t, server.Connect(worker.node, serverID))
	return server, worker
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

// kvMsg builds a ps-lite KV request: keys, vals and optional lens frames.
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

// response turns a received request into its response (what kv.Server does).
func response(req *message.Message, data ...[]byte) *message.Message {
	r := &message.Message{Meta: req.Meta}
	r.Meta.Recver, r.Meta.Request = req.Meta.Sender, false
	r.Meta.DataType = nil
	r.Meta.DataSize = 0
	for i, d := range data {
		dt := message.Other
		if i == 0 {
			dt = message.Uint64
		}
		r.AddData(dt, d)
	}
	return r
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestExchangeBothWaysWithIdentities(t *testing.T) {
	sched := newNode(t, fabricConfig(), message.RoleScheduler, schedulerID)
	worker := newNode(t, fabricConfig(), message.RoleWorker, workerID)
	require.NoError(t, sched.Connect(worker.node, schedulerID))
	require.NoError(t, worker.Connect(sched.node, workerID))

	out := controlMsg(workerID, message.CmdBarrier)
	out.Meta.Control.BarrierGroup = 7
	n, err := sched.Send(out)
	require.NoError(t, err)
	assert.Equal(t, len(message.EncodeMeta(&out.Meta)), n)
	got := vantest.MustRecv(t, worker.Transport)
	assert.Equal(t, int32(schedulerID), got.Meta.Sender)
	assert.Equal(t, int32(workerID), got.Meta.Recver)
	assert.Equal(t, message.CmdBarrier, got.Meta.Control.Cmd)
	assert.Equal(t, int32(7), got.Meta.Control.BarrierGroup)
	assert.Empty(t, got.Data)

	back := controlMsg(schedulerID, message.CmdAck)
	back.Meta.Control.MsgSig = 42
	_, err = worker.Send(back)
	require.NoError(t, err)
	got = vantest.MustRecv(t, sched.Transport)
	assert.Equal(t, int32(workerID), got.Meta.Sender)
	assert.Equal(t, uint64(42), got.Meta.Control.MsgSig)

	// An unregistered node: no Bind, no id, as the first ADD_NODE.
	anon, err := New(fabricConfig())
	require.NoError(t, err)
	defer func() { assert.NoError(t, anon.Close()) }()
	require.NoError(t, anon.Connect(sched.node, message.Empty))
	reg := controlMsg(schedulerID, message.CmdAddNode)
	me := message.NewNode(message.RoleServer)
	me.Hostname, me.Port = "127.0.0.1", 1234
	reg.Meta.Control.Nodes = []message.Node{me}
	_, err = anon.Send(reg)
	require.NoError(t, err)
	got = vantest.MustRecv(t, sched.Transport)
	assert.Equal(t, message.Empty, got.Meta.Sender, "anonymous peer")
	require.Len(t, got.Meta.Control.Nodes, 1)
	assert.Equal(t, me, got.Meta.Control.Nodes[0])

	// The same node, registered now, connects again with its id: the new
	// link replaces the anonymous one.
	require.NoError(t, anon.Connect(sched.node, 11))
	_, err = anon.Send(controlMsg(schedulerID, message.CmdHeartbeat))
	require.NoError(t, err)
	got = vantest.MustRecv(t, sched.Transport)
	assert.Equal(t, int32(11), got.Meta.Sender)
}

// TestKVRequestsUseCachedAndLandingSlots runs push/pull rounds over many
// one-key channels: after the first round of each, requests must go into
// cached slots and responses into landing slots, with no rendezvous.
func TestKVRequestsUseCachedAndLandingSlots(t *testing.T) {
	server, worker := pair(t, fabricConfig())
	const keys, rounds = 64, 6
	store := map[uint64][]byte{}
	ts := int32(0)
	for round := range rounds {
		if round == 2 {
			worker.stats.Rendezvous.Store(0)
			server.stats.Rendezvous.Store(0)
		}
		for k := range uint64(keys) {
			size := 512 + int(k)*97 // every key its own size
			val := pattern(size, byte(round)+byte(k))
			// push
			_, err := worker.Send(kvMsg(serverID, ts, true, false, u64s(k), val, nil))
			require.NoError(t, err)
			req := vantest.MustRecv(t, server.Transport)
			require.Equal(t, int32(workerID), req.Meta.Sender)
			require.Equal(t, u64s(k), req.Data[0])
			require.Equal(t, val, req.Data[1])
			store[k] = req.Data[1]
			_, err = server.Send(response(req))
			require.NoError(t, err)
			ack := vantest.MustRecv(t, worker.Transport)
			require.False(t, ack.Meta.Request)
			require.Equal(t, ts, ack.Meta.Timestamp)
			ts++
			// pull: empty vals frame out, values back
			_, err = worker.Send(kvMsg(serverID, ts, false, true, u64s(k), nil, nil))
			require.NoError(t, err)
			req = vantest.MustRecv(t, server.Transport)
			require.Empty(t, req.Data[1])
			require.NotNil(t, req.Data[1])
			_, err = server.Send(response(req, u64s(k), store[k]))
			require.NoError(t, err)
			got := vantest.MustRecv(t, worker.Transport)
			require.Equal(t, val, got.Data[1], "key %d round %d", k, round)
			ts++
		}
	}
	assert.Zero(t, worker.stats.Rendezvous.Load(), "worker requests after warm-up")
	assert.Zero(t, server.stats.Rendezvous.Load(), "server responses after warm-up")
	assert.Positive(t, worker.stats.Cached.Load())
	assert.Positive(t, server.stats.Landed.Load())
	assert.Zero(t, worker.stats.BadWrites.Load()+server.stats.BadWrites.Load())
}

// TestBufferReuse: the caller may change its buffer as soon as Send
// returns, copied or written zero-copy from a registered buffer.
func TestBufferReuse(t *testing.T) {
	for _, registered := range []bool{false, true} {
		t.Run(fmt.Sprintf("registered=%v", registered), func(t *testing.T) {
			server, worker := pair(t, fabricConfig())
			buf := make([]byte, 256<<10)
			if registered {
				require.NoError(t, worker.RegisterBuffer(buf))
				defer worker.UnregisterBuffer(buf)
			}
			for i := range 8 {
				copy(buf, pattern(len(buf), byte(i)))
				_, err := worker.Send(kvMsg(serverID, int32(i), true, false, u64s(5), buf, nil))
				require.NoError(t, err)
				clear(buf) // what a careless caller does right after Send
			}
			for i := range 8 {
				got := vantest.MustRecv(t, server.Transport)
				require.Equal(t, int32(i), got.Meta.Timestamp)
				require.True(t, bytes.Equal(pattern(len(buf), byte(i)), got.Data[1]), "message %d", i)
			}
			if registered {
				assert.Equal(t, int64(8), worker.stats.ZeroCopy.Load())
			} else {
				assert.Zero(t, worker.stats.ZeroCopy.Load())
			}
		})
	}
}

func TestEmptyAndOddFrames(t *testing.T) {
	server, worker := pair(t, fabricConfig())
	cases := []*message.Message{
		kvMsg(serverID, 1, false, true, u64s(1), nil, nil),             // pull: empty vals
		kvMsg(serverID, 2, true, false, nil, nil, []byte{}),            // all frames empty
		kvMsg(serverID, 3, true, false, u64s(1, 2, 3), []byte{7}, nil), // odd length
	}
	noFrames := controlMsg(serverID, message.CmdTerminate)
	cases = append(cases, noFrames)
	for _, m := range cases {
		_, err := worker.Send(m)
		require.NoError(t, err)
	}
	for _, want := range cases {
		got := vantest.MustRecv(t, server.Transport)
		require.Len(t, got.Data, len(want.Data))
		for i := range want.Data {
			assert.Equal(t, len(want.Data[i]), len(got.Data[i]))
			assert.NotNil(t, got.Data[i], "empty frames are non-nil")
			assert.True(t, bytes.Equal(want.Data[i], got.Data[i]))
			if len(got.Data[i]) > 0 {
				assert.Zero(t, uintptrOf(got.Data[i])%8, "frames are 8-byte aligned")
			}
		}
		assert.Equal(t, want.Meta.DataType, got.Meta.DataType)
	}
}

// TestOrderAcrossPaths sends from one goroutine a mix of messages that take
// different paths (cached one-key requests, rendezvous multi-key ones,
// control messages, big ones) and from several goroutines at once: each
// sender's messages must arrive in its order.
func TestOrderAcrossPaths(t *testing.T) {
	server, worker := pair(t, fabricConfig())
	const senders, per = 4, 150
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range per {
				var m *message.Message
				switch i % 4 {
				case 0:
					m = kvMsg(serverID, int32(i), true, false, u64s(uint64(s)), pattern(100+i, byte(s)), nil)
				case 1:
					m = kvMsg(serverID, int32(i), true, false, u64s(1, 2), pattern(2000, byte(s)), nil)
				case 2:
					m = controlMsg(serverID, message.CmdHeartbeat)
					m.Meta.Timestamp = int32(i)
				case 3:
					m = kvMsg(serverID, int32(i), true, false, u64s(uint64(s)), pattern(300<<10, byte(i)), nil)
				}
				m.Meta.CustomerID = int32(s)
				if _, err := worker.Send(m); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	next := make([]int32, senders)
	for range senders * per {
		got := vantest.MustRecv(t, server.Transport)
		c := got.Meta.CustomerID
		require.Equal(t, next[c], got.Meta.Timestamp, "sender %d", c)
		next[c]++
	}
	wg.Wait()
}

func TestBigMessagesAndLimits(t *testing.T) {
	cfg := fabricConfig()
	cfg.Limits = van.Limits{MaxMessageBytes: 8 << 20}
	server, worker := pair(t, cfg)
	big := pattern(7<<20, 3)
	_, err := worker.Send(kvMsg(serverID, 1, true, false, u64s(9), big, nil))
	require.NoError(t, err)
	got := vantest.MustRecv(t, server.Transport)
	require.True(t, bytes.Equal(big, got.Data[1]))

	_, err = worker.Send(kvMsg(serverID, 2, true, false, u64s(9), make([]byte, 9<<20), nil))
	require.ErrorContains(t, err, "exceeds")

	// The receiver's limit is lower than the sender's: the rendezvous
	// refuses, and the link stays usable.
	server.cfg.Limits.MaxMessageBytes = 1 << 20
	_, err = worker.Send(kvMsg(serverID, 3, true, false, u64s(1, 2), make([]byte, 2<<20), nil))
	require.ErrorContains(t, err, "refuses")
	_, err = vantest.RecvWithin(t, server.Transport)
	var fe *van.FrameError
	require.ErrorAs(t, err, &fe, "the receiver reports what it refused")
	assert.Equal(t, "ps9", fe.Peer)
	_, err = worker.Send(controlMsg(serverID, message.CmdHeartbeat))
	require.NoError(t, err)
	assert.Equal(t, message.CmdHeartbeat, vantest.MustRecv(t, server.Transport).Meta.Control.Cmd)
}

// TestGarbageOnBootstrapPort: junk on the TCP bootstrap port is rejected,
// counted and logged; the node keeps working.
func TestGarbageOnBootstrapPort(t *testing.T) {
	server, worker := pair(t, fabricConfig())
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(server.node.Port)))
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.0\r\n\r\n"),
		append([]byte(bootMagic), 9, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8),                                             // bad version
		append([]byte(bootMagic), 1, 0, 0xff, 0xff),                                                               // huge address, cut short
		append(append([]byte(bootMagic), 1, 0, 4, 0, 9, 0, 0, 0, 1, 0, 0, 0), 1, 2, 3, 4),                         // short fabric address
		append(append([]byte(bootMagic), 1, 0, 16, 0, 9, 0, 0, 0, 1, 0, 0, 0), bytes.Repeat([]byte{0xee}, 16)...), // wrong format
	} {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, _ = c.Write(junk)
		c.Close()
	}
	require.Eventually(t, func() bool { return server.stats.Garbage.Load() >= 5 }, 15*time.Second, 10*time.Millisecond)
	_, err := worker.Send(controlMsg(serverID, message.CmdHeartbeat))
	require.NoError(t, err)
	assert.Equal(t, message.CmdHeartbeat, vantest.MustRecv(t, server.Transport).Meta.Control.Cmd)
}

// TestMalformedImageIsAFrameError writes a corrupt image into a slot the
// receiver granted: Recv reports a FrameError and goes on.
func TestMalformedImageIsAFrameError(t *testing.T) {
	server, worker := pair(t, fabricConfig())
	for i, corrupt := range []func(b []byte){
		func(b []byte) { b[0] ^= 0xff },                                         // magic
		func(b []byte) { binary.LittleEndian.PutUint32(b[16:], 1<<20) },         // meta length
		func(b []byte) { binary.LittleEndian.PutUint32(b[hdrSize+2:], 0xffff) }, // frame length
		func(b []byte) { binary.LittleEndian.PutUint32(b[8:], 12345) },          // link id
	} {
		// The link a corrupt image came on is torn down (its numbering
		// has a hole): wait for the worker to have a working one again.
		require.Eventually(t, func() bool {
			_, err := worker.Send(controlMsg(serverID, message.CmdHeartbeat))
			return err == nil
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, message.CmdHeartbeat, vantest.MustRecv(t, server.Transport).Meta.Control.Cmd)
		l, err := worker.linkTo(serverID)
		require.NoError(t, err)

		m := kvMsg(serverID, 1, true, false, u64s(1, 2), pattern(100, 1), nil)
		meta := message.EncodeMeta(&m.Meta)
		pl := &sendPlan{}
		pl.hdr.link = l.remote
		total := hdrSize + 8*2 + len(meta) + 116
		target, err := worker.rendezvous(l, pl, total)
		require.NoError(t, err)
		worker.mu.Lock()
		buf, err := worker.pool.get(total)
		worker.mu.Unlock()
		require.NoError(t, err)
		b := buf.bytes()
		pl.hdr.metaLen, pl.hdr.nframes, pl.hdr.total = uint32(len(meta)), 2, uint64(total)
		pl.hdr.put(b)
		binary.LittleEndian.PutUint64(b[hdrSize:], 16)
		binary.LittleEndian.PutUint64(b[hdrSize+8:], 100)
		copy(b[hdrSize+16:], meta)
		corrupt(b)
		o := &op{link: l, buf: buf}
		require.NoError(t, worker.post(l, o, []sge{{addr: uintptr(buf.p), len: uint64(total), desc: buf.mr.desc}}, target))
		_, err = vantest.RecvWithin(t, server.Transport)
		var fe *van.FrameError
		require.ErrorAs(t, err, &fe, "case %d", i)
		assert.Equal(t, "ps9", fe.Peer)
	}
	assert.Equal(t, int64(4), server.stats.BadWrites.Load())
}

func TestCloseUnblocksRecvAndSend(t *testing.T) {
	cfg := fabricConfig()
	cfg.ConnectTimeout = time.Second // for the worker's attempts to dial again
	server, worker := pair(t, cfg)
	errs := make(chan error, 1)
	go func() {
		_, err := server.Recv()
		errs <- err
	}()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, server.Close())
	err := testutil.Recv(t, errs, 5*time.Second, func() string { return "Recv still blocked after Close" })
	assert.ErrorIs(t, err, van.ErrClosed)
	_, err = server.Send(controlMsg(workerID, message.CmdHeartbeat))
	assert.ErrorIs(t, err, van.ErrClosed)
	require.NoError(t, server.Close(), "Close is idempotent")

	// The worker sees the link gone and fails instead of hanging.
	require.Eventually(t, func() bool {
		_, err := worker.Send(controlMsg(serverID, message.CmdHeartbeat))
		return err != nil
	}, 15*time.Second, 20*time.Millisecond)
}

func TestSendErrors(t *testing.T) {
	tr, err := New(fabricConfig())
	require.NoError(t, err)
	defer tr.Close()
	_, err = tr.Send(controlMsg(77, message.CmdHeartbeat))
	assert.ErrorContains(t, err, "no connection to node 77")

	bad := controlMsg(77, message.CmdHeartbeat)
	bad.Data = [][]byte{{1}}
	_, err = tr.Send(bad)
	assert.ErrorIs(t, err, message.ErrFrameCount)

	assert.Error(t, tr.Connect(message.Node{ID: message.Empty, Hostname: "127.0.0.1", Port: 1}, 1))
	assert.Error(t, tr.Connect(message.Node{ID: 3, Hostname: "127.0.0.1", Port: 0}, 1))

	// Nobody listens there: the dial gives up after ConnectTimeout.
	cfg := fabricConfig()
	cfg.ConnectTimeout = 300 * time.Millisecond
	tr2, err := New(cfg)
	require.NoError(t, err)
	defer tr2.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	require.NoError(t, tr2.Connect(message.Node{ID: 3, Hostname: "127.0.0.1", Port: int32(port)}, 1))
	_, err = tr2.Send(controlMsg(3, message.CmdHeartbeat))
	assert.ErrorContains(t, err, "connect to node 3")
}

func TestConfigValidation(t *testing.T) {
	_, err := New(Config{})
	assert.ErrorContains(t, err, "Backend is empty")
	_, err = New(Config{Backend: "carrier-pigeon"})
	assert.ErrorContains(t, err, "unknown backend")
	_, err = New(Config{Backend: Fabric, SendDepth: -1})
	assert.Error(t, err)
	_, err = New(Config{Options: van.Options{Host: "127.0.0.1"}, Backend: Fabric, Provider: "no-such-provider"})
	assert.ErrorContains(t, err, "fi_getinfo")
}

func TestParseBackendAndEnv(t *testing.T) {
	for in, want := range map[string]Backend{"ibverbs": Verbs, "1": Verbs, "fabric": Fabric, "FABRIC": Fabric} {
		b, on, err := ParseBackend(in)
		require.NoError(t, err)
		assert.True(t, on)
		assert.Equal(t, want, b)
	}
	for _, in := range []string{"", "0", "zmq"} {
		_, on, err := ParseBackend(in)
		require.NoError(t, err)
		assert.False(t, on)
	}
	_, _, err := ParseBackend("ucx")
	assert.Error(t, err)

	env := map[string]string{"BYTEPS_RDMA_START_DEPTH": "64", "BYTEPS_RDMA_RX_DEPTH": "100",
		"BYTEPS_ADDRESS_POOL_SIZE": "99", "PS_RDMA_MAX_RECV_MB": "10", "FI_PROVIDER": "efa", "DMLC_INTERFACE": "ib0"}
	get := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := ConfigFromEnv(Fabric, get)
	require.NoError(t, err)
	assert.Equal(t, Config{Backend: Fabric, SendDepth: 64, RxDepth: 100, AddressPoolSize: 99, MaxRecvMemory: 10 << 20,
		Provider: "efa", Interface: "ib0"}, cfg)
	env["BYTEPS_RDMA_RX_DEPTH"] = "zero"
	_, err = ConfigFromEnv(Fabric, get)
	assert.ErrorContains(t, err, "BYTEPS_RDMA_RX_DEPTH")
}

func TestClassSize(t *testing.T) {
	for _, c := range []struct{ in, want int }{
		{1, 4096}, {4096, 4096}, {4097, 8192}, {65536, 65536}, {65537, 73728},
		{1<<20 + 300, 1<<20 + 128<<10}, {3 << 20, 3 << 20},
	} {
		assert.Equal(t, c.want, classSize(c.in), "classSize(%d)", c.in)
		assert.GreaterOrEqual(t, classSize(c.in), c.in)
	}
}

func TestWireRoundTrip(t *testing.T) {
	h := header{flags: flagLanding | flagGrant, link: 3, seq: 77, metaLen: 20, nframes: 2, total: 999,
		landing: remoteSlot{1, 2, 3, 4}, grant: remoteSlot{5, 6, 7, 8}, grantLink: 9}
	b := make([]byte, hdrSize)
	h.put(b)
	got, err := parseHeader(b)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	_, err = parseHeader(b[:10])
	assert.Error(t, err)

	for _, m := range []ctrlMsg{
		{typ: ctrlStart, flags: startWantCache, link: 4, token: 5, size: 6, key: chanKey{7, 3}, replace: 8},
		{typ: ctrlReply, flags: replyCached, link: 4, token: 5, status: replyTooBig, slot: remoteSlot{1, 2, 3, 4}},
	} {
		var b [ctrlSize]byte
		m.put(&b)
		got, err := parseCtrl(b[:])
		require.NoError(t, err)
		assert.Equal(t, m, got)
	}
	var junk [ctrlSize]byte
	_, err = parseCtrl(junk[:])
	assert.Error(t, err)
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafePointer(b)) }

var _ = errors.New

//go:build cgo

package zmq

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	zmq4 "github.com/pebbe/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

var jobSecret = &van.Encryption{Secret: []byte("the job's token")}

// jobKeys are the keys every node of the jobSecret job derives.
func jobKeys(t testing.TB) curveKeys {
	k, err := loadCurveKeys(jobSecret)
	require.NoError(t, err)
	return k
}

// rawDealer is a pebbe/zmq4 DEALER (an independent ZeroMQ) to port, as
// identity ps<id>; with keys it is a CURVE client of server key
// serverKey, else plaintext.
func rawDealer(t testing.TB, port int32, id int32, keys *curveKeys, serverKey *[32]byte) func(frames ...[]byte) {
	ctx, err := zmq4.NewContext()
	require.NoError(t, err)
	s, err := ctx.NewSocket(zmq4.DEALER)
	require.NoError(t, err)
	require.NoError(t, s.SetLinger(0))
	if id != message.Empty {
		require.NoError(t, s.SetIdentity("ps"+strconv.Itoa(int(id))))
	}
	if keys != nil {
		require.NoError(t, s.SetCurveServerkey(string(serverKey[:])))
		require.NoError(t, s.SetCurvePublickey(string(keys.public[:])))
		require.NoError(t, s.SetCurveSecretkey(string(keys.secret[:])))
	}
	require.NoError(t, s.Connect(fmt.Sprintf("tcp://127.0.0.1:%d", port)))
	t.Cleanup(func() {
		assert.NoError(t, s.Close())
		assert.NoError(t, ctx.Term())
	})
	return func(frames ...[]byte) {
		for i, f := range frames {
			flag := zmq4.SNDMORE
			if i == len(frames)-1 {
				flag = 0
			}
			_, err := s.SendBytes(f, flag)
			require.NoError(t, err)
		}
	}
}

// curveFactory runs the conformance suite with CURVE on; its raw peer is a
// pebbe/zmq4 CURVE client with the job's keys.
var curveFactory = vantest.Factory{
	New: func(t testing.TB, opt van.Options) van.Transport {
		opt.Encryption = jobSecret
		tr, err := New(Config{Options: opt})
		require.NoError(t, err)
		return tr
	},
	Raw: func(t testing.TB, to message.Node, id int32) func(frames ...[]byte) {
		k := jobKeys(t)
		return rawDealer(t, to.Port, id, &k, &k.public)
	},
	// Bytes that are not ZeroMQ at all: libzmq drops the connection before
	// any handshake, as without encryption.
	GarbageReported: false,
}

func TestCurveConformance(t *testing.T) {
	vantest.Run(t, curveFactory)
	assert.Zero(t, pinnedFrames(), "every zero-copy frame was released")
}

// TestCurveKeysAreZeroMQs: the public key derived in Go is the one libzmq
// computes from the secret (zmq_curve_public).
func TestCurveKeysAreZeroMQs(t *testing.T) {
	k := jobKeys(t)
	pub, err := zmq4.AuthCurvePublic(zmq4.Z85encode(string(k.secret[:])))
	require.NoError(t, err)
	assert.Equal(t, pub, zmq4.Z85encode(string(k.public[:])))
}

// TestCurveRefusesStrangers: a plaintext ZeroMQ peer, a CURVE client with
// another job's keys, one that knows the job's server key but has a key
// pair of its own (refused by the ZAP handler, which names its address),
// and bytes that are not ZeroMQ (dropped by libzmq, not counted): none
// gets a message delivered, the ZeroMQ ones are refused and counted, and
// the job's own peer keeps being served.
func TestCurveRefusesStrangers(t *testing.T) {
	server := newNode(t, Config{Options: van.Options{Encryption: jobSecret}}, message.RoleServer, serverID)
	good := newNode(t, Config{Options: van.Options{Encryption: jobSecret}}, message.RoleWorker, workerID)
	require.NoError(t, good.Connect(server.node, workerID))

	kv := func(ts int32) [][]byte {
		m := vantest.KVMsg(serverID, ts, true, false, vantest.U64s(1), []byte("v"), nil)
		return [][]byte{message.EncodeMeta(&m.Meta), m.Data[0], m.Data[1]}
	}
	job := jobKeys(t)
	other, err := loadCurveKeys(&van.Encryption{Secret: []byte("another job")})
	require.NoError(t, err)
	const strangerTS = 666
	rawDealer(t, server.node.Port, workerID, nil, nil)(kv(strangerTS)...)              // plaintext
	rawDealer(t, server.node.Port, workerID, &other, &other.public)(kv(strangerTS)...) // another server key
	rawDealer(t, server.node.Port, workerID, &other, &job.public)(kv(strangerTS)...)   // the server key, not the client's
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(server.node.Port))))
	require.NoError(t, err)
	_, err = c.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 8))
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()

	// Every refusal surfaces from Recv; nothing the strangers sent does.
	refusals := map[string]int{}
	testutil.WaitFor(t, vantest.RecvTimeout, func() bool {
		m, err := vantest.RecvWithin(t, server.Transport)
		if err != nil {
			var fe *van.FrameError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, van.ReasonEncrypt, fe.Reason, "%v", fe)
			refusals[fe.Peer]++
		} else {
			assert.NotEqual(t, int32(strangerTS), m.Meta.Timestamp, "a stranger's message was delivered")
			server.Release(m)
		}
		return refusals["127.0.0.1"] >= 1 && refusals["unknown peer"] >= 2
	}, func() string { return fmt.Sprintf("refusals so far: %v", refusals) })
	assert.GreaterOrEqual(t, server.EncryptionRefusals(), int64(3))

	// The job's own peer is served throughout.
	_, err = good.Send(vantest.KVMsg(serverID, 7, true, false, vantest.U64s(1), []byte("v"), nil))
	require.NoError(t, err)
	testutil.WaitFor(t, vantest.RecvTimeout, func() bool {
		m, err := vantest.RecvWithin(t, server.Transport)
		if err != nil {
			return false // more refusals: the strangers redial
		}
		defer server.Release(m)
		assert.Equal(t, int32(workerID), m.Meta.Sender)
		return m.Meta.Timestamp == 7
	}, func() string { return "the job's message did not arrive" })
}

// probe is a payload no encrypted stream shows in the clear.
var probe = bytes.Repeat([]byte("ELASTICPS-PLAINTEXT-PROBE "), 2000)

// TestCurveWireIsEncrypted: an eavesdropper between a worker and a server
// sees the payload with encryption off and not with it on.
func TestCurveWireIsEncrypted(t *testing.T) {
	for _, enc := range []*van.Encryption{nil, jobSecret} {
		t.Run(fmt.Sprint("encrypted=", enc != nil), func(t *testing.T) {
			cfg := Config{Options: van.Options{Encryption: enc}}
			server := newNode(t, cfg, message.RoleServer, serverID)
			worker := newNode(t, cfg, message.RoleWorker, workerID)
			rec := vantest.NewRecorder(t, fmt.Sprintf("127.0.0.1:%d", server.node.Port))
			via := server.node
			via.Port = rec.Port()
			require.NoError(t, worker.Connect(via, workerID))
			_, err := worker.Send(vantest.KVMsg(serverID, 5, true, false, vantest.U64s(1), probe, nil))
			require.NoError(t, err)
			m := vantest.MustRecv(t, server.Transport)
			assert.Equal(t, probe, m.Data[1], "the payload arrives intact")
			server.Release(m)
			seen, n := rec.Seen(probe[:64])
			assert.Greater(t, n, len(probe), "the payload crossed the recorder")
			assert.Equal(t, enc == nil, seen, "plaintext on the wire")
		})
	}
}

// TestCurveKeyFile: a key given as a file (Z85 or raw) is the job's key
// pair; a node with it talks to a node with the same key in the other
// format, and bad files are refused at New with the variable named.
func TestCurveKeyFile(t *testing.T) {
	_, secZ85, err := zmq4.NewCurveKeypair()
	require.NoError(t, err)
	dir := t.TempDir()
	z85File := filepath.Join(dir, "job.key")
	require.NoError(t, os.WriteFile(z85File, []byte(secZ85+"\n"), 0o600))
	rawFile := filepath.Join(dir, "job.raw")
	require.NoError(t, os.WriteFile(rawFile, []byte(zmq4.Z85decode(secZ85)), 0o600))

	server := newNode(t, Config{Options: van.Options{Encryption: &van.Encryption{CurveSecretKeyFile: z85File}}}, message.RoleServer, serverID)
	worker := newNode(t, Config{Options: van.Options{Encryption: &van.Encryption{CurveSecretKeyFile: rawFile}}}, message.RoleWorker, workerID)
	require.NoError(t, worker.Connect(server.node, workerID))
	_, err = worker.Send(vantest.KVMsg(serverID, 5, true, false, vantest.U64s(1), []byte("v"), nil))
	require.NoError(t, err)
	assert.Equal(t, int32(5), vantest.MustRecv(t, server.Transport).Meta.Timestamp)

	bad := filepath.Join(dir, "bad.key")
	require.NoError(t, os.WriteFile(bad, []byte("not a key"), 0o600))
	badChars := filepath.Join(dir, "badchars.key")
	require.NoError(t, os.WriteFile(badChars, []byte(secZ85[:39]+"~"), 0o600))
	for file, want := range map[string]string{
		filepath.Join(dir, "missing"): "cannot read",
		bad:                           "40 Z85 characters or 32 raw bytes, the file has 9 bytes",
		badChars:                      "not a Z85 character",
	} {
		_, err := New(Config{Options: van.Options{Encryption: &van.Encryption{CurveSecretKeyFile: file}}})
		require.Error(t, err, file)
		assert.Contains(t, err.Error(), "PS_CURVE_SECRET_KEY_FILE")
		assert.Contains(t, err.Error(), want)
	}
	_, err = New(Config{Options: van.Options{Encryption: &van.Encryption{}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "PS_AUTH_TOKEN")
}

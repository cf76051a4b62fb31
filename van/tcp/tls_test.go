package tcp

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
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

var jobSecret = &van.Encryption{Secret: []byte("the job's token")}

// tlsDial opens a TLS connection to port with cfg and sends the hello of id.
func tlsDial(t testing.TB, port int32, cfg *tls.Config, id int32) net.Conn {
	c, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, writeHello(c, id, nil))
	return c
}

func jobClient(t testing.TB, enc *van.Encryption) *tls.Config {
	j, err := newJobTLS(enc, nil)
	require.NoError(t, err)
	return j.client
}

// tlsFactory runs the conformance suite with TLS on; its raw peer is a TLS
// client with the job's key.
var tlsFactory = vantest.Factory{
	New: func(t testing.TB, opt van.Options) van.Transport {
		opt.Encryption = jobSecret
		tr, err := New(Config{Options: opt})
		require.NoError(t, err)
		return tr
	},
	Raw: func(t testing.TB, to message.Node, id int32) func(frames ...[]byte) {
		c := tlsDial(t, to.Port, jobClient(t, jobSecret), id)
		return func(frames ...[]byte) {
			// No error check: a message refused from its header makes the
			// node hang up while TLS still writes the rest in records.
			_, _ = c.Write(rawMessage(frames...))
		}
	},
	GarbageReported: true, // as a failed TLS handshake
}

func TestTLSConformance(t *testing.T) { vantest.Run(t, tlsFactory) }

type tlsNode struct {
	*Transport
	node message.Node
}

func newTLSNode(t *testing.T, enc *van.Encryption, id int32) *tlsNode {
	tr, err := New(Config{Options: van.Options{Encryption: enc}})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	node := message.Node{ID: id, Hostname: "127.0.0.1"}
	port, err := tr.Bind(node, 0)
	require.NoError(t, err)
	node.Port = int32(port)
	return &tlsNode{tr, node}
}

// TestTLSRefusesStrangers: a plaintext peer speaking the tcp van's own
// protocol, a TLS client with another job's key and one without a
// certificate: none gets a message delivered, each is refused and
// counted, and the job's own peer keeps being served.
func TestTLSRefusesStrangers(t *testing.T) {
	const serverID, workerID, strangerTS = 8, 9, 666
	server := newTLSNode(t, jobSecret, serverID)
	good := newTLSNode(t, jobSecret, workerID)
	require.NoError(t, good.Connect(server.node, workerID))

	plain, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(server.node.Port))))
	require.NoError(t, err)
	defer func() { _ = plain.Close() }()
	require.NoError(t, writeHello(plain, workerID, nil))
	writeMsg(t, plain, pushMeta(strangerTS), []byte("v"))

	other := jobClient(t, &van.Encryption{Secret: []byte("another job")})
	_, err = tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(server.node.Port))), other)
	require.Error(t, err, "the job's server does not carry another job's key")
	noCert := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}
	if c, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(server.node.Port))), noCert); err == nil {
		// TLS 1.3: the client learns of the refusal only when it reads.
		_, _ = c.Write(rawMessage(pushMeta(strangerTS), []byte("v")))
		_, rerr := c.Read(make([]byte, 1))
		assert.Error(t, rerr, "a client without a certificate is cut off")
		_ = c.Close()
	}

	for range 3 {
		fe := recvRefusal(t, server.Transport)
		assert.Equal(t, van.ReasonEncrypt, fe.Reason, "%v", fe)
		assert.Equal(t, "127.0.0.1", fe.Peer)
	}
	assert.Equal(t, int64(3), server.EncryptionRefusals())

	_, err = good.Send(vantest.KVMsg(serverID, 7, true, false, vantest.U64s(1), []byte("v"), nil))
	require.NoError(t, err)
	m := vantest.MustRecv(t, server.Transport)
	assert.Equal(t, int32(7), m.Meta.Timestamp, "the job's message, not a stranger's")
	assert.Equal(t, int32(workerID), m.Meta.Sender)
}

// TestTLSDialerRefusesAnotherJob: a node never sends to a listener without
// the job's key (its messages stay queued while it redials).
func TestTLSDialerRefusesAnotherJob(t *testing.T) {
	stranger := newTLSNode(t, &van.Encryption{Secret: []byte("another job")}, 8)
	worker := newTLSNode(t, jobSecret, 9)
	require.NoError(t, worker.Connect(stranger.node, 9))
	_, err := worker.Send(vantest.KVMsg(8, 7, true, false, vantest.U64s(1), []byte("v"), nil))
	require.NoError(t, err)
	fe := recvRefusal(t, stranger.Transport)
	assert.Equal(t, van.ReasonEncrypt, fe.Reason)
}

var probe = []byte("ELASTICPS-PLAINTEXT-PROBE ")

// TestTLSWireIsEncrypted: an eavesdropper between a worker and a server
// sees the payload with encryption off and not with it on.
func TestTLSWireIsEncrypted(t *testing.T) {
	payload := make([]byte, 0, 52000)
	for len(payload)+len(probe) <= cap(payload) {
		payload = append(payload, probe...)
	}
	for _, enc := range []*van.Encryption{nil, jobSecret} {
		t.Run(fmt.Sprint("encrypted=", enc != nil), func(t *testing.T) {
			server := newTLSNode(t, enc, 8)
			worker := newTLSNode(t, enc, 9)
			rec := vantest.NewRecorder(t, fmt.Sprintf("127.0.0.1:%d", server.node.Port))
			via := server.node
			via.Port = rec.Port()
			require.NoError(t, worker.Connect(via, 9))
			_, err := worker.Send(vantest.KVMsg(8, 5, true, false, vantest.U64s(1), payload, nil))
			require.NoError(t, err)
			m := vantest.MustRecv(t, server.Transport)
			assert.Equal(t, payload, m.Data[1], "the payload arrives intact")
			seen, n := rec.Seen(probe)
			assert.Greater(t, n, len(payload), "the payload crossed the recorder")
			assert.Equal(t, enc == nil, seen, "plaintext on the wire")
		})
	}
}

// pemFiles writes a CA and a certificate it signed for one node; it
// returns the file names.
type pemFiles struct{ cert, key, ca string }

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return ca, key
}

func writeNodeCert(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) pemFiles {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	f := pemFiles{filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"), filepath.Join(dir, name+"-ca.crt")}
	require.NoError(t, os.WriteFile(f.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(f.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	require.NoError(t, os.WriteFile(f.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o600))
	return f
}

func (f pemFiles) enc() *van.Encryption {
	return &van.Encryption{TLSCertFile: f.cert, TLSKeyFile: f.key, TLSCAFile: f.ca}
}

// TestTLSFiles: nodes with certificates of the job's CA talk; a node whose
// certificate another CA signed is refused; incomplete or unreadable files
// are refused at New with the variable named.
func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	server := newTLSNode(t, writeNodeCert(t, dir, "server", ca, caKey).enc(), 8)
	worker := newTLSNode(t, writeNodeCert(t, dir, "worker", ca, caKey).enc(), 9)
	require.NoError(t, worker.Connect(server.node, 9))
	_, err := worker.Send(vantest.KVMsg(8, 5, true, false, vantest.U64s(1), []byte("v"), nil))
	require.NoError(t, err)
	assert.Equal(t, int32(5), vantest.MustRecv(t, server.Transport).Meta.Timestamp)

	ca2, caKey2 := newCA(t)
	rogue := writeNodeCert(t, dir, "rogue", ca2, caKey2)
	rogue.ca = filepath.Join(dir, "server-ca.crt") // trusts the job's CA, but its own cert is not from it
	intruder := newTLSNode(t, rogue.enc(), 10)
	require.NoError(t, intruder.Connect(server.node, 10))
	_, err = intruder.Send(vantest.KVMsg(8, 666, true, false, vantest.U64s(1), []byte("v"), nil))
	require.NoError(t, err)
	fe := recvRefusal(t, server.Transport)
	assert.Equal(t, van.ReasonEncrypt, fe.Reason)
	assert.Contains(t, fe.Err.Error(), "PS_TLS_CA_FILE")
	testutil.WaitFor(t, 10*time.Second, func() bool { return server.EncryptionRefusals() >= 1 }, nil)

	good := writeNodeCert(t, dir, "good", ca, caKey)
	for _, c := range []struct {
		enc  *van.Encryption
		want string
	}{
		{&van.Encryption{TLSCertFile: good.cert, TLSKeyFile: good.key}, "PS_TLS_CA_FILE is not set"},
		{&van.Encryption{TLSCertFile: good.cert, TLSCAFile: good.ca}, "PS_TLS_KEY_FILE is not set"},
		{&van.Encryption{TLSCertFile: filepath.Join(dir, "missing"), TLSKeyFile: good.key, TLSCAFile: good.ca}, "PS_TLS_CERT_FILE="},
		{&van.Encryption{TLSCertFile: good.cert, TLSKeyFile: good.key, TLSCAFile: good.key}, "PS_TLS_CA_FILE=" + good.key + " holds no PEM certificate"},
		{&van.Encryption{}, "PS_AUTH_TOKEN"},
	} {
		_, err := New(Config{Options: van.Options{Encryption: c.enc}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
	}
}

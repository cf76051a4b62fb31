package tcp

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/internal/ratelog"
	"github.com/elasticps/elasticps/van"
)

// jobTLS is a Transport's TLS state (Options.Encryption set): one
// configuration for accepted connections, one for dialled ones. Both ends
// present a certificate and verify the other's, so a connection carries
// data only between two holders of the job's key.
type jobTLS struct {
	server, client *tls.Config
	refused        atomic.Int64     // accepted connections whose handshake failed
	dialLog        *ratelog.Limiter // failed handshakes of dialled connections
}

// tlsServerName is the name dialers send; verification ignores it.
const tlsServerName = "elasticps"

// newJobTLS builds the configurations from the files enc names or, without
// files, from a key derived from the job's secret.
func newJobTLS(enc *van.Encryption, log *slog.Logger) (*jobTLS, error) {
	var (
		cert   tls.Certificate
		verify func(raw [][]byte, _ [][]*x509.Certificate) error
		err    error
	)
	files := enc.TLSCertFile != "" || enc.TLSKeyFile != "" || enc.TLSCAFile != ""
	if files {
		cert, verify, err = tlsFromFiles(enc)
	} else {
		cert, verify, err = tlsFromSecret(enc)
	}
	if err != nil {
		return nil, err
	}
	base := &tls.Config{
		MinVersion:            tls.VersionTLS13,
		Certificates:          []tls.Certificate{cert},
		VerifyPeerCertificate: verify,
	}
	srv := base.Clone()
	// Every peer proves it holds a job key; verify checks which.
	srv.ClientAuth = tls.RequireAnyClientCert
	srv.SessionTicketsDisabled = true
	cli := base.Clone()
	cli.ServerName = tlsServerName
	// The default verification wants a host name in the certificate;
	// verify replaces it (nodes dial addresses, not names).
	cli.InsecureSkipVerify = true
	return &jobTLS{server: srv, client: cli, dialLog: ratelog.New(log, 0)}, nil
}

// tlsFromSecret derives an ed25519 key from the job's secret and a
// self-signed certificate for it; a peer is accepted when its certificate
// carries the same public key, which only a holder of the secret can prove
// (TLS 1.3 makes each side sign the handshake with its key).
func tlsFromSecret(enc *van.Encryption) (tls.Certificate, func([][]byte, [][]*x509.Certificate) error, error) {
	seed, err := enc.Key("tls")
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("van/tcp: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed[:])
	pub := priv.Public().(ed25519.PublicKey)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "elasticps job"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(100, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("van/tcp: self-signed certificate: %w", err)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("the peer sent no certificate")
		}
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("the peer's certificate: %w", err)
		}
		if k, ok := c.PublicKey.(ed25519.PublicKey); !ok || !bytes.Equal(k, pub) {
			return errors.New("the peer's key is not the job's (every node needs the same PS_AUTH_TOKEN)")
		}
		return nil
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, verify, nil
}

// tlsFromFiles loads this node's certificate and key and the CA every
// peer's certificate must chain to.
func tlsFromFiles(enc *van.Encryption) (tls.Certificate, func([][]byte, [][]*x509.Certificate) error, error) {
	for _, f := range []struct{ env, path string }{
		{"PS_TLS_CERT_FILE", enc.TLSCertFile}, {"PS_TLS_KEY_FILE", enc.TLSKeyFile}, {"PS_TLS_CA_FILE", enc.TLSCAFile},
	} {
		if f.path == "" {
			return tls.Certificate{}, nil, fmt.Errorf("van/tcp: %s is not set: PS_TLS_CERT_FILE, PS_TLS_KEY_FILE and PS_TLS_CA_FILE go together (or set none, and keys are derived from PS_AUTH_TOKEN)", f.env)
		}
	}
	cert, err := tls.LoadX509KeyPair(enc.TLSCertFile, enc.TLSKeyFile)
	if err != nil {
		return cert, nil, fmt.Errorf("van/tcp: PS_TLS_CERT_FILE=%s, PS_TLS_KEY_FILE=%s: %w", enc.TLSCertFile, enc.TLSKeyFile, err)
	}
	pem, err := os.ReadFile(enc.TLSCAFile)
	if err != nil {
		return cert, nil, fmt.Errorf("van/tcp: PS_TLS_CA_FILE: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return cert, nil, fmt.Errorf("van/tcp: PS_TLS_CA_FILE=%s holds no PEM certificate", enc.TLSCAFile)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("the peer sent no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, r := range raw {
			if certs[i], err = x509.ParseCertificate(r); err != nil {
				return fmt.Errorf("the peer's certificate: %w", err)
			}
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fmt.Errorf("the peer's certificate is not signed by PS_TLS_CA_FILE: %w", err)
		}
		return nil
	}
	return cert, verify, nil
}

// accept runs the server handshake on an accepted connection, within
// timeout.
func (j *jobTLS) accept(c net.Conn, timeout time.Duration) (net.Conn, error) {
	tc := tls.Server(c, j.server)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		j.refused.Add(1)
		return nil, err
	}
	return tc, nil
}

// dial runs the client handshake on a dialled connection.
func (j *jobTLS) dial(ctx context.Context, c net.Conn) (net.Conn, error) {
	tc := tls.Client(c, j.client)
	ctx, cancel := context.WithTimeout(ctx, defaultHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tc, nil
}

// dialTLS runs the client handshake on c, a connection dialled to addr;
// on failure it closes c and logs why (rate-limited: the peer is
// redialled).
func (t *Transport) dialTLS(c net.Conn, addr string) (net.Conn, error) {
	tc, err := t.tls.dial(t.ctx, c)
	if err != nil {
		_ = c.Close()
		if !t.closed.Load() {
			t.tls.dialLog.Log(slog.LevelWarn, addr, van.ReasonEncrypt,
				"van/tcp: TLS handshake with a peer failed; redialling (PS_ENCRYPT=on: every node needs the same keys)", "err", err)
		}
		return nil, err
	}
	return tc, nil
}

// EncryptionRefusals is the number of accepted connections whose TLS
// handshake failed since New (0 without encryption): peers without the
// job's key.
func (t *Transport) EncryptionRefusals() int64 {
	if t.tls == nil {
		return 0
	}
	return t.tls.refused.Load()
}

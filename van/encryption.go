package van

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
)

// Encryption turns on encryption of every connection of a socket van
// (PS_ENCRYPT=on): CURVE for van/zmq, TLS 1.3 for van/tcp. Every node of
// a job must use the same keys; a peer without them cannot complete a
// handshake, so nothing it sends reaches the node. See docs/security.md.
type Encryption struct {
	// Secret is the job's shared secret (the auth token). Unless key
	// files are given, each van derives its keys from it (Key).
	Secret []byte

	// CurveSecretKeyFile holds the job's CURVE secret key (van/zmq;
	// PS_CURVE_SECRET_KEY_FILE): 40 Z85 characters or 32 raw bytes. Every
	// node binds as a CURVE server and connects as a client with this one
	// key pair; empty derives the pair from Secret.
	CurveSecretKeyFile string

	// TLSCertFile, TLSKeyFile and TLSCAFile (van/tcp; PS_TLS_CERT_FILE,
	// PS_TLS_KEY_FILE, PS_TLS_CA_FILE) are this node's PEM certificate and
	// key and the CA that must have signed every peer's certificate; all
	// three or none. None derives one key from Secret, which every peer's
	// certificate must carry.
	TLSCertFile, TLSKeyFile, TLSCAFile string
}

// Key derives 32 bytes for purpose (e.g. "curve", "tls") from the job's
// secret: HKDF-SHA256, so that keys of different purposes are unrelated
// and none reveals the secret.
func (e *Encryption) Key(purpose string) ([32]byte, error) {
	var k [32]byte
	if len(e.Secret) == 0 {
		return k, errors.New("van: encryption needs the job's secret (PS_AUTH_TOKEN or PS_AUTH_TOKEN_FILE) or key files")
	}
	b, err := hkdf.Key(sha256.New, e.Secret, nil, "elasticps-encrypt-v1 "+purpose, len(k))
	if err != nil {
		return k, err
	}
	copy(k[:], b)
	return k, nil
}

package zmq

import (
	"bytes"
	"crypto/ecdh"
	"fmt"
	"os"

	"github.com/elasticps/elasticps/van"
)

// curveKeys is the job's CURVE key pair. Every node holds it: ROUTERs are
// CURVE servers with it, DEALERs CURVE clients with it (and its public key
// as the server's), and the ZAP handler accepts only clients whose long-term
// key is its public key, so that knowing the server's public key is not
// enough to connect.
type curveKeys struct {
	secret, public [32]byte
}

// curveKeySecretEnv names the key file's variable in errors.
const curveKeySecretEnv = "PS_CURVE_SECRET_KEY_FILE"

// loadCurveKeys reads the key file enc names, or derives the pair from the
// job's secret.
func loadCurveKeys(enc *van.Encryption) (curveKeys, error) {
	var k curveKeys
	if enc.CurveSecretKeyFile == "" {
		var err error
		if k.secret, err = enc.Key("curve"); err != nil {
			return k, fmt.Errorf("van/zmq: %w", err)
		}
	} else {
		b, err := os.ReadFile(enc.CurveSecretKeyFile)
		if err != nil {
			return k, fmt.Errorf("van/zmq: %s: cannot read the job's CURVE secret key: %w", curveKeySecretEnv, err)
		}
		if k.secret, err = parseCurveKey(b); err != nil {
			return k, fmt.Errorf("van/zmq: %s=%s: %w", curveKeySecretEnv, enc.CurveSecretKeyFile, err)
		}
	}
	priv, err := ecdh.X25519().NewPrivateKey(k.secret[:])
	if err != nil {
		return k, fmt.Errorf("van/zmq: CURVE secret key: %w", err)
	}
	copy(k.public[:], priv.PublicKey().Bytes())
	return k, nil
}

// parseCurveKey accepts a key as ZeroMQ prints it (40 Z85 characters, as
// from zmq_curve_keypair; surrounding white space ignored) or as 32 raw
// bytes.
func parseCurveKey(b []byte) ([32]byte, error) {
	var k [32]byte
	if len(b) == len(k) {
		copy(k[:], b)
		return k, nil
	}
	t := bytes.TrimSpace(b)
	if len(t) != 40 {
		return k, fmt.Errorf("a CURVE key is 40 Z85 characters or 32 raw bytes, the file has %d bytes", len(b))
	}
	if err := z85Decode(k[:], t); err != nil {
		return k, err
	}
	return k, nil
}

// z85Alphabet is ZeroMQ's Z85 encoding (RFC 32/Z85).
const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

// z85Decode decodes src (a multiple of 5 characters) into dst (4 bytes per
// 5 characters).
func z85Decode(dst, src []byte) error {
	for i := 0; i < len(src); i += 5 {
		var v uint64
		for _, c := range src[i : i+5] {
			d := bytes.IndexByte([]byte(z85Alphabet), c)
			if d < 0 {
				return fmt.Errorf("%q is not a Z85 character", c)
			}
			v = v*85 + uint64(d)
		}
		if v > 0xffffffff {
			return fmt.Errorf("%q is not valid Z85", src[i:i+5])
		}
		o := i / 5 * 4
		dst[o], dst[o+1], dst[o+2], dst[o+3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	}
	return nil
}

// Package peerauth binds the node id a connection announces (van/zmq's
// "ps<id>" identity, van/tcp's hello) to the job's token, so that a peer
// without the token cannot announce a live node's id: it cannot take that
// node's ZeroMQ identity over (libzmq hands an identity only to an exact
// match), and what it sends is marked as coming from an unverified sender.
//
// The tag is deterministic per (token, id), so that a restarted node that
// takes its id back presents the same identity and libzmq's
// ZMQ_ROUTER_HANDOVER still gives it the id back from a connection of the
// dead process that is half-open. It is a bearer value: whoever reads a
// connection's handshake (the network without CURVE/TLS, a log line) can
// replay it, which is why the vans never log it.
package peerauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// TagLen is the length of Tag's result in bytes.
const TagLen = 16

// Tag is HMAC-SHA256(key, "elasticps-peer-id-v1" || id big-endian),
// truncated to TagLen bytes (128 bits: forging one is guessing).
func Tag(key []byte, id int32) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("elasticps-peer-id-v1"))
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(id)))
	return h.Sum(nil)[:TagLen]
}

// HexTag is Tag in lower-case hex (2*TagLen characters), for identities
// that are text.
func HexTag(key []byte, id int32) string { return hex.EncodeToString(Tag(key, id)) }

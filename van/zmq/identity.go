package zmq

import (
	"bytes"
	"strconv"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/internal/peerauth"
)

// Identities and the job's token (docs/security.md, threat model).
//
// Without a token a DEALER announces "ps<id>", as ps-lite's do, and the
// ROUTER believes it: anyone may connect under a live node's identity,
// and ZMQ_ROUTER_HANDOVER gives it that identity, cutting the real node's
// connection. With a token (van.Options.AuthKey) the identity is
// "ps<id>:<tag>", the tag a MAC of the id under the token
// (peerauth.HexTag). A stranger cannot make it, so its connection never
// matches a real node's identity (libzmq hands an identity over only to
// an exact match: the real connection stays), and Recv marks what it sends
// under an id Message.UnverifiedSender, which the postoffice refuses.
// Handover stays on: the identity is the same for every process of a node,
// so a restarted node still takes its id back from a connection of the
// dead one that the kernel has not closed (a half-open one).

// Identity is the ZMQ_IDENTITY of the DEALERs of node id in a job whose
// token is key (nil: an open job, ps-lite's "ps<id>").
func Identity(key []byte, id int32) string {
	s := "ps" + strconv.Itoa(int(id))
	if key == nil {
		return s
	}
	return s + ":" + peerauth.HexTag(key, id)
}

// idPart is an identity without its tag: what names the peer in logs (the
// tag is a credential).
func idPart(ident []byte) []byte {
	if i := bytes.IndexByte(ident, ':'); i >= 0 {
		return ident[:i]
	}
	return ident
}

// maxIdentCache bounds identCache: a stranger may claim any id.
const maxIdentCache = 4096

// identCache holds the identity each id must present, so that checking
// one costs a map lookup and a compare rather than a MAC per message.
type identCache map[int32]string

// sender maps a ROUTER identity frame to the sender id, and reports
// whether the id is only the peer's claim: with a token, an identity that
// names an id without that id's tag.
func (c *identCache) sender(key, ident []byte) (id int32, unverified bool) {
	id = parseIdentity(idPart(ident))
	if key == nil || id == message.Empty {
		return id, false
	}
	want, ok := (*c)[id]
	if !ok {
		if *c == nil || len(*c) >= maxIdentCache {
			*c = identCache{}
		}
		want = Identity(key, id)
		(*c)[id] = want
	}
	return id, string(ident) != want
}

package tcp

import (
	"crypto/hmac"
	"io"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/internal/peerauth"
)

// The hello and the job's token (docs/security.md, threat model). Every
// accepted connection is read on its own, so a stranger announcing a live
// node's id never cuts that node's connection; but without a token the
// listener believes the id, and what the stranger sends would be acted on
// under the real node's proof. With a token (van.Options.AuthKey) the
// dialer sets helloTagged in the hello's first reserved byte and follows
// the hello with peerauth.Tag of its id; the listener marks every message
// of a connection whose id came without that tag
// Message.UnverifiedSender, which the postoffice refuses.

// helloTagged, in hello byte 5, says that a peerauth.TagLen-byte tag
// follows the hello.
const helloTagged = 1

// helloTag is the tag a dialer sends after its hello for id (nil in an
// open job).
func (t *Transport) helloTag(id int32) []byte {
	if t.cfg.AuthKey == nil {
		return nil
	}
	return peerauth.Tag(t.cfg.AuthKey, id)
}

// readTag reads the tag that follows a hello flagged helloTagged.
func readTag(r io.Reader) ([]byte, error) {
	tag := make([]byte, peerauth.TagLen)
	_, err := io.ReadFull(r, tag)
	return tag, err
}

// unverified reports whether a connection that announced id with tag (nil
// if none) speaks for id only by its own claim: with a token, an id
// without its tag. An anonymous dialer claims nothing.
func (t *Transport) unverified(id int32, tag []byte) bool {
	if t.cfg.AuthKey == nil || id == message.Empty {
		return false
	}
	return !hmac.Equal(tag, peerauth.Tag(t.cfg.AuthKey, id))
}

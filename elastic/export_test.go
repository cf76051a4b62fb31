package elastic

import (
	"time"

	"github.com/elasticps/elasticps/message"
)

// ForwardForTest sends push m from n's server to server to as a primary
// forwards a push to its backups (MsgReplicate), and returns the answer.
func ForwardForTest(n *Node, to int32, m *message.Message) ([]byte, error) {
	return n.link.Call(to, MsgReplicate, encodeForward(m), 10*time.Second)
}

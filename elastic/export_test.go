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

// GoForTest sends n's link's request head to node without waiting
// (Link.Go); done gets the answer.
func GoForTest(n *Node, node, head int32, done func([]byte, error)) error {
	return n.link.Go(node, head, nil, done)
}

// WaitingForTest is the number of n's link's requests waiting for answers.
func WaitingForTest(n *Node) int {
	n.link.mu.Lock()
	defer n.link.mu.Unlock()
	return len(n.link.waiters)
}

package membership

import (
	"encoding/json"
	"fmt"
)

// NodeMeta is the Meta a ps node gossips, so that an Event can be mapped
// back to the node in the postoffice's node table.
type NodeMeta struct {
	// ID is the ps node id the scheduler assigned (message.Node.ID); a
	// member may join before it has one and SetMeta once it does.
	ID int32 `json:"id"`
	// Role is "scheduler", "server" or "worker".
	Role string `json:"role"`
	// Addr is the ps node's own host:port (not the gossip address), the
	// key the scheduler knows a node by before it has an id.
	Addr string `json:"addr,omitempty"`
}

// EncodeMeta encodes m for Config.Meta or SetMeta. JSON, because it is
// small, readable in logs, and ignores fields it does not know, so members
// of different versions can share a cluster.
func EncodeMeta(m NodeMeta) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("membership: encoding meta: %w", err)
	}
	if len(b) > MetaMaxSize {
		return nil, fmt.Errorf("membership: meta %s is %d bytes, more than memberlist's limit of %d", b, len(b), MetaMaxSize)
	}
	return b, nil
}

// DecodeMeta decodes what EncodeMeta produced.
func DecodeMeta(b []byte) (NodeMeta, error) {
	var m NodeMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return NodeMeta{}, fmt.Errorf("membership: decoding meta %q: %w", b, err)
	}
	return m, nil
}

package scheduler

import (
	"fmt"

	"github.com/elasticps/elasticps/message"
)

// Preferred ranks. A server or worker may ask for its rank (Node.WantRank:
// BytePS's StartPS(…, rank, …), DMLC_RANK). When the job is complete the
// scheduler gives every node that asked its rank first, and the others the
// lowest ranks left of their role, in rankOrder. The BytePS fork takes
// either every rank asked for or none and aborts on a duplicate; here a
// registration asking for a rank that is taken or out of range is refused
// when it arrives (the scheduler logs why), and the rest of the job still
// registers.
//
// With instance groups (Config.GroupSize > 1) every server and worker
// process runs GroupSize instances, instance i of the process of rank r
// asking for rank r*GroupSize+i, so that instance i of every process finds
// instance i of the others by rank. A registration without a rank cannot
// take part and is refused.

// checkWantedRank says why node, not yet registered, cannot register with
// the rank it asks for (nil: it can).
func (s *State) checkWantedRank(node message.Node) error {
	who := fmt.Sprintf("%s %s", node.Role, addrKey(node))
	r, ok := node.WantedRank()
	if !ok {
		if s.cfg.GroupSize > 1 {
			return fmt.Errorf("ADD_NODE from %s rejected: with DMLC_GROUP_SIZE=%d every instance must ask for its rank (pass StartPS a rank >= 0 or set DMLC_RANK on every server and worker process)", who, s.cfg.GroupSize)
		}
		return nil
	}
	if n := s.expected(node.Role); r >= n {
		return fmt.Errorf("ADD_NODE from %s rejected: it asks for rank %d, but the job has %d %s ranks (0 to %d); check DMLC_RANK (or StartPS's rank), DMLC_NUM_SERVER/DMLC_NUM_WORKER and DMLC_GROUP_SIZE", who, r, n, node.Role, n-1)
	}
	for _, p := range s.pending {
		if pr, ok := p.WantedRank(); ok && pr == r && p.Role == node.Role && addrKey(p) != addrKey(node) {
			return fmt.Errorf("ADD_NODE from %s rejected: rank %d is already taken by %s %s; give every %s its own rank (DMLC_RANK or StartPS's rank)", who, r, p.Role, addrKey(p), node.Role)
		}
	}
	return nil
}

// assignRanks returns the rank of each of nodes (in rankOrder, every one
// registered with checkWantedRank): the rank it asked for, or the lowest
// rank of its role that no node asked for and none got before it. A second
// registration from an address (another customer of the same process)
// takes a rank of its own, as in ps-lite, and its wish counts only if no
// earlier one from that address had it.
func assignRanks(nodes []message.Node) []int {
	ranks := make([]int, len(nodes))
	taken := map[message.Role]map[int]bool{message.RoleServer: {}, message.RoleWorker: {}}
	for i, n := range nodes {
		ranks[i] = -1
		if r, ok := n.WantedRank(); ok && !taken[n.Role][r] {
			ranks[i] = r
			taken[n.Role][r] = true
		}
	}
	next := map[message.Role]int{}
	for i, n := range nodes {
		if ranks[i] >= 0 {
			continue
		}
		r := next[n.Role]
		for taken[n.Role][r] {
			r++
		}
		ranks[i] = r
		taken[n.Role][r] = true
		next[n.Role] = r + 1
	}
	return ranks
}

// rankID is the node id of rank r of role.
func rankID(role message.Role, r int) int32 {
	if role == message.RoleServer {
		return int32(message.ServerRankToID(r))
	}
	return int32(message.WorkerRankToID(r))
}

package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/elasticps/elasticps/message"
)

// A restarted scheduler rebuilds its state from the running job's nodes.
//
// The rule that tells a restart from a fresh job: a fresh job's servers and
// workers register without an id (the scheduler assigns them); a node of a
// running job that lost its scheduler re-registers carrying the id, rank
// and address it has (Rejoin). So the first registration that carries an
// id turns a scheduler whose job is not complete into a rebuilding one;
// one whose job is complete sends that node the node list again (the
// scheduler was only unreachable for a while).

// abandonRebuild turns a rebuild back into a fresh job's registration when
// a whole job of new processes (DMLC_NUM_SERVER servers and
// DMLC_NUM_WORKER workers without ids) registered meanwhile: the nodes that
// re-registered with ids belong to another job that lost its scheduler at
// the same address. They are refused.
func (s *State) abandonRebuild(now time.Time, a *Actions) {
	servers, workers := 0, 0
	for _, n := range s.rebuild.deferred {
		switch {
		case n.Standby:
		case n.Role == message.RoleServer:
			servers++
		case n.Role == message.RoleWorker:
			workers++
		}
	}
	if servers < s.cfg.NumServers || workers < s.cfg.NumWorkers {
		return
	}
	rb := s.rebuild
	s.rebuild = nil
	for _, r := range rb.nodes {
		a.Errors = append(a.Errors, fmt.Errorf("ADD_NODE from %s re-registered with id %d, but a whole new job registered meanwhile: it belongs to another job that lost its scheduler at this address; refused", addrKey(r.Node), r.Node.ID))
	}
	for _, n := range rb.deferred {
		b := s.AddNode(now, message.Empty, n)
		mergeActions(a, b)
	}
}

func mergeActions(a *Actions, b Actions) {
	a.Connect = append(a.Connect, b.Connect...)
	a.Send = append(a.Send, b.Send...)
	a.Events = append(a.Events, b.Events...)
	a.Errors = append(a.Errors, b.Errors...)
	a.Gone = append(a.Gone, b.Gone...)
	a.Ready = a.Ready || b.Ready
}

// Rejoined is a node of a running job that re-registered with its id, and
// the opaque state it sent along (in an elastic job, its routing table).
type Rejoined struct {
	Node  message.Node
	State []byte
}

// rebuild is a restarted scheduler's collection of the running job's
// nodes.
type rebuild struct {
	start    time.Time
	nodes    map[int32]Rejoined
	deferred []message.Node // registrations without an id, handled once rebuilt
	// customers that re-registered, per node: a process with several
	// customers (each counted as a worker of the job) re-registers each
	// under its one id; the others get the ids no one re-registered, as
	// aliases (ps-lite's shared_node_mapping_)
	customers map[int32]map[int32]bool
}

func (s *State) rebuildWait() time.Duration {
	if w := s.cfg.RebuildWait; w > 0 {
		return w
	}
	return max(2*s.cfg.HeartbeatTimeout+s.cfg.HeartbeatInterval, time.Second)
}

// Rejoin handles an ADD_NODE carrying a node id: a server or worker of a
// running job re-registering after it found the scheduler lost, with the
// state it holds. A scheduler whose job is complete answers with the node
// list. One whose job is not (it was restarted) adopts the node with its
// id and address, and rebuilds the job once every server and worker of
// DMLC_NUM_SERVER/DMLC_NUM_WORKER has re-registered, or RebuildWait after
// the first did: then the missing ones are declared dead.
func (s *State) Rejoin(now time.Time, node message.Node, state []byte) Actions {
	var a Actions
	if err := s.checkRejoin(node); err != nil {
		a.Errors = append(a.Errors, err)
		return a
	}
	node.IsRecovery = false
	node.Standby = node.Role == message.RoleServer && message.IDToRank(int(node.ID)) >= s.cfg.NumServers
	if s.ready {
		s.rejoinRunning(now, node, &a)
		return a
	}
	if s.rebuild == nil {
		s.rebuild = &rebuild{start: now, nodes: map[int32]Rejoined{}, customers: map[int32]map[int32]bool{}}
		// Registrations without an id that came first are new processes
		// (a restarted server, a standby): they wait for the rebuilt job.
		s.rebuild.deferred = append(append(s.rebuild.deferred, s.pending...), s.early...)
		s.pending, s.early = nil, nil
		a.Events = append(a.Events, fmt.Sprintf("%s re-registered with its id: the scheduler was restarted; rebuilding the running job from its live nodes (waiting up to %s for all of them)", node, s.rebuildWait()))
	}
	if old, ok := s.rebuild.nodes[node.ID]; ok && addrKey(old.Node) != addrKey(node) {
		a.Errors = append(a.Errors, fmt.Errorf("ADD_NODE from %s claims id %d, which %s already re-registered with; two processes cannot share an id", addrKey(node), node.ID, addrKey(old.Node)))
		return a
	}
	customer := node.CustomerID
	node.CustomerID = 0
	if _, again := s.rebuild.nodes[node.ID]; !again || customer == 0 {
		s.rebuild.nodes[node.ID] = Rejoined{Node: node, State: slices.Clone(state)}
	}
	if s.rebuild.customers[node.ID] == nil {
		s.rebuild.customers[node.ID] = map[int32]bool{}
	}
	s.rebuild.customers[node.ID][customer] = true
	members := 0
	for id, r := range s.rebuild.nodes {
		if !r.Node.Standby {
			members += len(s.rebuild.customers[id])
		}
	}
	a.Events = append(a.Events, fmt.Sprintf("re-registered %s (%d/%d)", node, members, s.cfg.NumServers+s.cfg.NumWorkers))
	if members == s.cfg.NumServers+s.cfg.NumWorkers {
		s.finishRebuild(now, &a)
	}
	return a
}

// checkRejoin validates a re-registration's id against its role and the
// job's size.
func (s *State) checkRejoin(n message.Node) error {
	server := n.ID >= 8 && n.ID%2 == 0
	worker := n.ID >= 9 && n.ID%2 == 1
	rank := message.IDToRank(int(n.ID))
	switch {
	case n.Role == message.RoleServer && server, n.Role == message.RoleWorker && worker && rank < s.cfg.NumWorkers:
		return nil
	}
	return fmt.Errorf("ADD_NODE from %s %s re-registers with id %d, which no %s of this job (%d servers, %d workers) has: check that DMLC_NUM_SERVER/DMLC_NUM_WORKER are the job's", n.Role, addrKey(n), n.ID, n.Role, s.cfg.NumServers, s.cfg.NumWorkers)
}

// rejoinRunning handles a re-registration once the job is complete.
func (s *State) rejoinRunning(now time.Time, node message.Node, a *Actions) {
	if g, ok := s.dead[node.ID]; ok {
		// Declared dead meanwhile: the others no longer wait for it.
		a.Send = append(a.Send, goneNotice(node.ID, g))
		return
	}
	if s.left[node.ID] {
		return
	}
	if old, ok := s.node(node.ID); ok {
		if addrKey(old) != addrKey(node) {
			a.Errors = append(a.Errors, fmt.Errorf("ADD_NODE from %s re-registers with id %d, which belongs to %s", addrKey(node), node.ID, addrKey(old)))
			return
		}
		s.heartbeats[node.ID] = now
		a.Send = append(a.Send, s.nodeList(node.ID, s.liveNodes()))
		a.Events = append(a.Events, fmt.Sprintf("%s re-registered: sent it the node list again", node))
		return
	}
	if !node.Standby {
		// Only standbys can be unknown to a complete job: members are
		// all in its list, the missing ones declared dead.
		a.Errors = append(a.Errors, fmt.Errorf("ADD_NODE from %s re-registers with id %d, unknown to the job", addrKey(node), node.ID))
		return
	}
	// A standby the restarted scheduler did not wait for: it keeps its id.
	s.adoptStandby(now, node, a)
	all := s.liveNodes()
	a.Send = append(a.Send, s.nodeList(node.ID, all))
	for _, id := range s.liveIDs() {
		if id != node.ID {
			a.Send = append(a.Send, s.nodeList(id, []message.Node{node}))
		}
	}
}

func (s *State) adoptStandby(now time.Time, node message.Node, a *Actions) {
	s.standbys = append(s.standbys, node)
	slices.SortFunc(s.standbys, func(x, y message.Node) int { return int(x.ID - y.ID) })
	s.byAddr[addrKey(node)] = node.ID
	s.heartbeats[node.ID] = now
	a.Connect = append(a.Connect, node)
	a.Events = append(a.Events, fmt.Sprintf("standby server %s re-registered as node %d", addrKey(node), node.ID))
}

// liveNodes is the node list of the job's live nodes (standbys included),
// the scheduler last.
func (s *State) liveNodes() []message.Node {
	var out []message.Node
	for _, id := range s.liveIDs() {
		if n, ok := s.node(id); ok && n.Hostname != "" {
			out = append(out, n)
		}
	}
	return append(out, s.cfg.Self)
}

// finishRebuild makes the re-registered nodes the job: ids, ranks and
// addresses as they are, standbys included; every server and worker that
// did not re-register is declared dead (its id waits for a restarted
// process, as a dead node's does).
func (s *State) finishRebuild(now time.Time, a *Actions) {
	rb := s.rebuild
	s.rebuild = nil
	var nodes, missing []message.Node
	for _, id := range s.groups[message.ServerGroup|message.WorkerGroup] {
		if r, ok := rb.nodes[id]; ok {
			nodes = append(nodes, r.Node)
			continue
		}
		role := message.RoleWorker
		if id%2 == 0 {
			role = message.RoleServer
		}
		// Its address is unknown: it stays out of every node list.
		missing = append(missing, message.Node{Role: role, ID: id})
	}
	for _, r := range rb.nodes {
		if r.Node.Standby {
			s.adoptStandby(now, r.Node, a)
		}
	}
	for _, n := range nodes {
		s.byAddr[addrKey(n)] = n.ID
		s.heartbeats[n.ID] = now
		a.Connect = append(a.Connect, n)
	}
	// The further customers of multi-customer workers take the missing
	// worker ids as aliases: which ids they had is not known, and does
	// not matter (an alias is sent nothing; its rank only counts).
	for _, n := range slices.Clone(nodes) {
		for range len(rb.customers[n.ID]) - 1 {
			i := slices.IndexFunc(missing, func(m message.Node) bool { return m.Role == n.Role })
			if i < 0 {
				break
			}
			alias := missing[i].ID
			missing = slices.Delete(missing, i, i+1)
			s.shared[alias] = n.ID
			nodes = append(nodes, n)
			a.Events = append(a.Events, fmt.Sprintf("node %s shares id %d (alias %d): another customer of its process", addrKey(n), n.ID, alias))
		}
	}
	s.nodes = append(append(nodes, missing...), s.cfg.Self)
	s.ready = true
	a.Ready = true
	for _, id := range slices.Sorted(maps.Keys(rb.nodes)) {
		a.Rebuilt = append(a.Rebuilt, rb.nodes[id])
	}
	all := s.liveNodes()
	for _, r := range a.Rebuilt {
		a.Send = append(a.Send, s.nodeList(r.Node.ID, all))
	}
	a.Events = append(a.Events, fmt.Sprintf("rebuilt the running job from %d live nodes (%d standbys), %d missing", len(nodes), len(s.standbys), len(missing)))
	for _, n := range missing {
		s.declare(n.ID, fmt.Sprintf("did not re-register with the restarted scheduler within %s", s.rebuildWait()), a)
	}
	for _, n := range rb.deferred {
		mergeActions(a, s.AddNode(now, message.Empty, n))
	}
}

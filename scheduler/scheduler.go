// Package scheduler is the scheduler role's protocol logic: registration and
// rank assignment, barrier counting, heartbeats, dead-node detection and the
// recovery of restarted nodes. It does no IO and reads no clock: the caller
// feeds it received control messages with the current time and carries out
// the returned Actions (connect, then send), in order.
package scheduler

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/elasticps/elasticps/message"
)

// Config of the scheduler state machine.
type Config struct {
	NumServers, NumWorkers int
	// Self is the scheduler's own node (id 1); it is appended last to the
	// node list sent to everyone, as ps-lite does.
	Self message.Node
	// HeartbeatTimeout: a node silent for this long is dead; 0 = never.
	HeartbeatTimeout time.Duration
	// HeartbeatInterval is how often the nodes send heartbeats (the job's
	// PS_HEARTBEAT_INTERVAL). Tick declares silent nodes dead (and tells
	// everyone) only when it and HeartbeatTimeout are both set: without
	// heartbeats every node would look silent.
	HeartbeatInterval time.Duration
	// Gossip: failures are also reported by membership gossip (MarkFailed),
	// so restarted nodes may wait for a dead node to replace without
	// heartbeats.
	Gossip bool
	// Replicas is the job's PS_REPLICAS. With replicas a server that
	// registers after the job started (a restarted one included) joins as
	// a standby instead of taking over a dead server's id (rejoin).
	Replicas int
	// RebuildWait bounds how long a restarted scheduler waits, from the
	// first node that re-registers with its id, for the rest of the job's
	// servers and workers (see Rejoin); 0: 2*HeartbeatTimeout +
	// HeartbeatInterval, at least a second.
	RebuildWait time.Duration
	// GroupSize is the job's DMLC_GROUP_SIZE (0 or 1: no instance
	// groups): NumServers and NumWorkers count instances, GroupSize per
	// process, and every instance registers with its rank (ranks.go). A
	// BARRIER then counts processes, as the BytePS fork's does, while
	// INSTANCE_BARRIER counts instances (groupbarrier.go).
	GroupSize int
}

// Actions are what the caller must do after a Step, in this order: open
// Connect (replacing any previous path to that id), then send Send.
// Messages in Send have Recver set and Timestamp left to the caller's van
// counter (message.Empty).
type Actions struct {
	Connect []message.Node
	Send    []*message.Message
	// Ready is set once, when all expected nodes have registered.
	Ready bool
	// Events are human-readable notes for PS_VERBOSE=1 logging.
	Events []string
	// Errors are rejected inputs (logged and counted by the caller).
	Errors []error
	// Gone lists the nodes declared dead or that left the job in this
	// step. Send already holds the notices to every live node; the caller
	// tells its own subscribers.
	Gone []Gone
	// Rebuilt is set, with Ready, when the state was rebuilt from the
	// nodes of a running job (a restarted scheduler, see Rejoin): every
	// node that re-registered and the state it sent along.
	Rebuilt []Rejoined
}

// Gone is a node the scheduler declared dead, or that left the job.
type Gone struct {
	Node message.Node // as the job knew it (its last address)
	Dead bool         // false: it left the job (scale-in)
	// Reason says how the death was found (heartbeat timeout, gossip,
	// replaced by a restarted process).
	Reason string
}

// CmdNodeDead and CmdNodeLeft are elasticps control commands (ps-lite uses
// 0-5, its BytePS fork 6-9): the scheduler tells every live node that a
// node died or left the job. Control.Nodes holds that node, Meta.Body the
// reason. Only elasticps nodes get them (a job that uses them has no C++
// ps-lite node: every node runs this code, also behind the C++ bridge).
const (
	CmdNodeDead message.Command = 64
	CmdNodeLeft message.Command = 65
)

// CmdFailedOver and CmdStateLost are elasticps control commands of jobs
// with PS_REPLICAS: the scheduler tells every live node the outcome of a
// dead server's failover (Failover). CmdFailedOver: every interval the
// server held has a live copy, so nothing was lost; CmdStateLost: some
// had none, their values are lost. Control.Nodes holds the dead server,
// Meta.Body says what happened to its intervals.
const (
	CmdFailedOver message.Command = 66
	CmdStateLost  message.Command = 67
)

// CmdKeysLost is an elasticps control command of elastic jobs: the
// scheduler tells every live node that the values of a key range are lost
// (KeysLost): a move was interrupted with the scheduler, and no live
// server holds them. Meta.Body is the range's begin and end (8 bytes each,
// little endian), then what happened, as text.
const CmdKeysLost message.Command = 68

// State is the scheduler's state.
type State struct {
	cfg        Config
	start      time.Time
	pending    []message.Node // registrations before the job is complete
	nodes      []message.Node // full node list once ready, scheduler last
	ready      bool
	byAddr     map[string]int32 // host:port -> id
	shared     map[int32]int32  // alias id -> real id (multi-customer processes)
	heartbeats map[int32]time.Time
	barrier    map[int]map[arrival]bool // group -> who has arrived this round
	instance   map[arrival]bool         // waiting arrivals that came as INSTANCE_BARRIER
	groups     map[int][]int32
	waiting    []message.Node // restarted nodes waiting for a dead node to replace
	left       map[int32]bool // drained servers that left the job (scale-in)
	failed     map[int32]bool // reported failed by gossip before the heartbeat timeout
	standbys   []message.Node // servers that joined the running job (scale-out)
	early      []message.Node // standbys that registered before the job was complete
	dead       map[int32]Gone // declared dead and not replaced since
	lost       []Gone         // servers declared dead: their state is lost (no replicas)
	rebuild    *rebuild       // set while a restarted scheduler collects the running job's nodes
	finishing  bool           // the scheduler entered Finalize (Finishing)
	ended      bool           // the final barrier was released: nodes exit now
	// groupRounds: group -> who has arrived in this round of a group
	// barrier (groupbarrier.go), in arrival order
	groupRounds map[int][]arrival
}

// New returns the state at time now.
func New(cfg Config, now time.Time) *State {
	s := &State{
		cfg:        cfg,
		start:      now,
		byAddr:     map[string]int32{},
		shared:     map[int32]int32{},
		heartbeats: map[int32]time.Time{},
		barrier:    map[int]map[arrival]bool{},
		groups:     Groups(cfg.NumServers, cfg.NumWorkers),
		left:       map[int32]bool{},
		failed:     map[int32]bool{},
		dead:       map[int32]Gone{},
	}
	return s
}

// Groups returns the ids of each node group 1..7 and of each single id, in
// ps-lite's order: workers by rank, then servers, then the scheduler.
func Groups(numServers, numWorkers int) map[int][]int32 {
	g := map[int][]int32{}
	for r := range numWorkers {
		id := int32(message.WorkerRankToID(r))
		g[int(id)] = []int32{id}
		for _, grp := range []int{4, 6, 5, 7} {
			g[grp] = append(g[grp], id)
		}
	}
	for r := range numServers {
		id := int32(message.ServerRankToID(r))
		g[int(id)] = []int32{id}
		for _, grp := range []int{2, 6, 3, 7} {
			g[grp] = append(g[grp], id)
		}
	}
	for _, grp := range []int{1, 7, 5, 3} {
		g[grp] = append(g[grp], message.SchedulerID)
	}
	for grp := 1; grp <= 7; grp++ {
		if g[grp] == nil {
			g[grp] = []int32{}
		}
	}
	return g
}

// Ready reports whether every expected node has registered.
func (s *State) Ready() bool { return s.ready }

// Size is the number of nodes the scheduler holds: registered (standbys
// too, and itself), registering, and waiting for a rebuild; what
// PS_MAX_NODES bounds.
func (s *State) Size() int {
	n := len(s.nodes) + len(s.pending) + len(s.early)
	if s.rebuild != nil {
		n += len(s.rebuild.deferred)
	}
	return n
}

// Nodes returns the node list (scheduler last) once ready.
func (s *State) Nodes() []message.Node { return slices.Clone(s.nodes) }

// IsAlias reports whether id is a second customer's alias of another id
// (ps-lite's shared_node_mapping_): nothing is sent to aliases.
func (s *State) IsAlias(id int32) bool { _, ok := s.shared[id]; return ok }

func addrKey(n message.Node) string { return n.Hostname + ":" + strconv.Itoa(int(n.Port)) }

// rankOrder is ps-lite's rank comparator: hostnames descending, then ports
// ascending. (ps-lite writes it as (a.host.compare(b.host) | (a.port <
// b.port)) > 0; it orders the same way.) Keeping it makes a mixed job of Go
// and C++ nodes agree on ranks with either scheduler.
func rankOrder(a, b message.Node) int {
	if c := cmp.Compare(a.Hostname, b.Hostname); c != 0 {
		return -c
	}
	return cmp.Compare(a.Port, b.Port)
}

// AddNode handles an ADD_NODE request from sender (message.Empty for an
// unregistered node) carrying node.
func (s *State) AddNode(now time.Time, sender int32, node message.Node) Actions {
	var a Actions
	if sender != message.Empty {
		// A registered node re-announcing itself: ps-lite only updates its
		// own id from such lists; the scheduler has nothing to do.
		a.Events = append(a.Events, fmt.Sprintf("ignoring ADD_NODE from registered node %d", sender))
		return a
	}
	if node.Role != message.RoleServer && node.Role != message.RoleWorker {
		a.Errors = append(a.Errors, fmt.Errorf("ADD_NODE from %s:%d has role %s: only servers and workers register", node.Hostname, node.Port, node.Role))
		return a
	}
	if s.rebuild != nil {
		// A new process (a restarted server, a standby) while the
		// running job's nodes re-register: it is handled once the job
		// is rebuilt, as by the scheduler it replaces.
		s.rebuild.deferred = append(s.rebuild.deferred, node)
		a.Events = append(a.Events, fmt.Sprintf("%s %s registers while the job is rebuilt: handled once it is", node.Role, addrKey(node)))
		s.abandonRebuild(now, &a)
		return a
	}
	if node.Standby {
		if node.Role != message.RoleServer {
			a.Errors = append(a.Errors, fmt.Errorf("ADD_NODE from %s %s:%d asks to be a standby: only servers can (PS_STANDBY=1 on a server)", node.Role, node.Hostname, node.Port))
			return a
		}
		if !s.ready {
			// joins once the job is complete
			s.early = append(s.early, node)
			return a
		}
		s.join(now, node, &a)
		return a
	}
	if !s.ready {
		if node.Role == message.RoleServer && s.count(message.RoleServer) >= s.cfg.NumServers ||
			node.Role == message.RoleWorker && s.count(message.RoleWorker) >= s.cfg.NumWorkers {
			a.Errors = append(a.Errors, fmt.Errorf("ADD_NODE from %s %s:%d rejected: all %d %ss have already registered; check DMLC_NUM_SERVER/DMLC_NUM_WORKER", node.Role, node.Hostname, node.Port, s.expected(node.Role), node.Role))
			return a
		}
		if err := s.checkWantedRank(node); err != nil {
			a.Errors = append(a.Errors, err)
			return a
		}
		node.ID = message.Empty
		s.pending = append(s.pending, node)
		a.Events = append(a.Events, fmt.Sprintf("registered %s (%d/%d)", node, len(s.pending), s.cfg.NumServers+s.cfg.NumWorkers))
		if len(s.pending) == s.cfg.NumServers+s.cfg.NumWorkers {
			s.complete(now, &a)
		}
		return a
	}
	s.recover(now, node, &a)
	return a
}

func (s *State) expected(r message.Role) int {
	if r == message.RoleServer {
		return s.cfg.NumServers
	}
	return s.cfg.NumWorkers
}

func (s *State) count(r message.Role) int {
	n := 0
	for _, p := range s.pending {
		if p.Role == r {
			n++
		}
	}
	return n
}

// complete assigns ids and tells everyone the node list.
func (s *State) complete(now time.Time, a *Actions) {
	nodes := s.pending
	s.pending = nil
	slices.SortStableFunc(nodes, rankOrder)
	ranks := assignRanks(nodes)
	numServers, numWorkers := 0, 0
	for i := range nodes {
		n := &nodes[i]
		id := rankID(n.Role, ranks[i])
		if n.Role == message.RoleServer {
			numServers++
		} else {
			numWorkers++
		}
		key := addrKey(*n)
		if existing, ok := s.byAddr[key]; ok {
			// A second customer of the same process: same id, and the rank
			// it consumed becomes an alias.
			s.shared[id] = existing
			n.ID = existing
			a.Events = append(a.Events, fmt.Sprintf("node %s shares id %d (alias %d)", key, existing, id))
			continue
		}
		n.ID = id
		s.byAddr[key] = id
		s.heartbeats[id] = now
		a.Connect = append(a.Connect, *n)
		a.Events = append(a.Events, fmt.Sprintf("assign id %d (rank %d) to %s", id, message.IDToRank(int(id)), key))
	}
	nodes = append(nodes, s.cfg.Self)
	s.nodes = nodes
	for _, id := range s.groups[message.ServerGroup|message.WorkerGroup] {
		if s.IsAlias(id) {
			continue
		}
		a.Send = append(a.Send, s.nodeList(id, nodes))
	}
	s.ready = true
	a.Ready = true
	a.Events = append(a.Events, fmt.Sprintf("the scheduler is connected to %d workers and %d servers", numWorkers, numServers))
	early := s.early
	s.early = nil
	for _, n := range early {
		s.join(now, n, a)
	}
}

// join adds a standby server to the running job (scale-out): it gets the
// next server id after the job's own, the full node list, and every other
// node learns it. It belongs to no group, so barriers do not wait for it;
// it only serves the keys the coordinator moves to it.
func (s *State) join(now time.Time, node message.Node, a *Actions) {
	for _, sb := range s.standbys {
		if addrKey(sb) == addrKey(node) && !s.isDead(sb.ID) && !s.left[sb.ID] {
			return // a repeated registration
		}
	}
	node.ID = int32(message.ServerRankToID(s.cfg.NumServers + len(s.standbys)))
	for s.Addr(node.ID) != "" || s.left[node.ID] {
		node.ID += 2 // a rebuilt job's standbys keep their ids, which may have gaps
	}
	s.standbys = append(s.standbys, node)
	s.byAddr[addrKey(node)] = node.ID
	s.heartbeats[node.ID] = now
	a.Connect = append(a.Connect, node)
	a.Events = append(a.Events, fmt.Sprintf("standby server %s joined as node %d", addrKey(node), node.ID))
	all := append(slices.Clone(s.nodes), s.standbys...)
	a.Send = append(a.Send, s.nodeList(node.ID, all))
	for _, id := range s.groups[message.ServerGroup|message.WorkerGroup] {
		if s.IsAlias(id) || s.left[id] {
			continue
		}
		a.Send = append(a.Send, s.nodeList(id, []message.Node{node}))
	}
	for _, sb := range s.standbys[:len(s.standbys)-1] {
		a.Send = append(a.Send, s.nodeList(sb.ID, []message.Node{node}))
	}
}

// Standbys lists the servers that joined the running job.
func (s *State) Standbys() []int32 {
	var ids []int32
	for _, n := range s.standbys {
		if !s.left[n.ID] {
			ids = append(ids, n.ID)
		}
	}
	return ids
}

func (s *State) nodeList(recver int32, nodes []message.Node) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = recver
	m.Meta.Control.Cmd = message.CmdAddNode
	m.Meta.Control.Nodes = slices.Clone(nodes)
	return m
}

// recover handles a registration after the job is complete: the node takes
// over the id of a dead node of the same role (but see rejoin).
func (s *State) recover(now time.Time, node message.Node, a *Actions) {
	if node.Role == message.RoleServer && s.cfg.Replicas > 0 {
		s.rejoin(now, node, a)
		return
	}
	dead := s.DeadNodes(now, s.cfg.HeartbeatTimeout)
	deadSet := map[int32]bool{}
	for _, id := range dead {
		deadSet[id] = true
	}
	idx := -1
	for i, n := range s.nodes[:len(s.nodes)-1] {
		if n.Role == node.Role && deadSet[n.ID] && !s.IsAlias(n.ID) {
			idx = i
			break
		}
	}
	if idx < 0 {
		if s.cfg.HeartbeatTimeout <= 0 && !s.cfg.Gossip {
			a.Errors = append(a.Errors, fmt.Errorf("ADD_NODE from %s %s:%d after the job started: a restarted node can take over a dead node's id only with PS_HEARTBEAT_INTERVAL and PS_HEARTBEAT_TIMEOUT set", node.Role, node.Hostname, node.Port))
			return
		}
		// The node it replaces may not have timed out yet (a quick
		// restart): keep the registration and retry on Tick, instead of
		// leaving the new process waiting forever as ps-lite does.
		for _, w := range s.waiting {
			if addrKey(w) == addrKey(node) {
				return
			}
		}
		s.waiting = append(s.waiting, node)
		a.Events = append(a.Events, fmt.Sprintf("%s %s:%d waits for a dead %s to replace", node.Role, node.Hostname, node.Port, node.Role))
		return
	}
	old := s.nodes[idx]
	// Everyone learns of the death before the replacement: an operation
	// waiting on the old process fails, never answered by the new one.
	s.declare(old.ID, fmt.Sprintf("replaced by a restarted process at %s", addrKey(node)), a)
	delete(s.dead, old.ID)
	node.ID = old.ID
	node.IsRecovery = true
	delete(s.failed, node.ID)
	delete(s.byAddr, addrKey(old))
	s.byAddr[addrKey(node)] = node.ID
	s.nodes[idx] = node
	s.heartbeats[node.ID] = now
	a.Connect = append(a.Connect, node)
	a.Events = append(a.Events, fmt.Sprintf("replace dead node %s by %s", old, node))
	// Every other node learns the new address, those that look dead too:
	// a node whose heartbeats are only late (a loaded machine) would
	// otherwise never hear of it and keep sending to the dead address. One
	// message queued for a node that is really dead is harmless; its
	// replacement gets the whole list when it registers.
	for _, id := range s.groups[message.ServerGroup|message.WorkerGroup] {
		if s.IsAlias(id) {
			continue
		}
		if id == node.ID {
			a.Send = append(a.Send, s.nodeList(id, s.nodes))
		} else {
			a.Send = append(a.Send, s.nodeList(id, []message.Node{node}))
		}
	}
	// The new process learns which servers' state is lost, its own
	// predecessor's included: it holds none of it.
	for _, g := range s.lost {
		a.Send = append(a.Send, goneNotice(node.ID, g))
	}
}

// rejoin admits a server that registers after the job started, in a job
// with replicas, as a standby (as if PS_STANDBY=1): it holds nothing at
// first and takes new backup copies first (replica.Place). Taking over a
// dead server's id would serve that server's intervals from an empty store;
// the failover gave them to its backups instead. The same applies whether
// the process came back at the dead server's address or at a new one, and
// whether or not that server has been declared dead yet: two processes
// cannot listen on one address, so the old one is gone, and it will be
// declared dead by its silence; joining at once makes the standby a live
// server by the time its predecessor's failover places new backups.
func (s *State) rejoin(now time.Time, node message.Node, a *Actions) {
	if id, ok := s.byAddr[addrKey(node)]; ok && !s.isDead(id) && !s.left[id] && slices.ContainsFunc(s.standbys, func(n message.Node) bool { return n.ID == id }) {
		return // a repeated registration of a standby that joined
	}
	node.Standby = true
	a.Events = append(a.Events, fmt.Sprintf("server %s registered after the job started: it joins as a standby (PS_REPLICAS=%d)", addrKey(node), s.cfg.Replicas))
	s.join(now, node, a)
}

// declare records that node id is dead (reason: how it was found), tells
// every live node and releases the barriers that waited only for it. A
// server's state is lost with it (there are no replicas). Declaring a node
// twice, or one that left, does nothing.
func (s *State) declare(id int32, reason string, a *Actions) {
	if !s.ready || s.left[id] || s.isDead(id) || s.IsAlias(id) {
		return
	}
	n, ok := s.node(id)
	if !ok {
		return
	}
	if s.ended {
		// Every node finished its work before the final barrier let it
		// go: one that is gone now exited (gossip may not have heard its
		// leave), and nothing it held is needed any more.
		s.left[id] = true
		a.Events = append(a.Events, fmt.Sprintf("node %s is gone after the job's final barrier (%s): not a loss", n, reason))
		return
	}
	g := Gone{Node: n, Dead: true, Reason: reason}
	s.dead[id] = g
	if n.Role == message.RoleServer {
		s.lost = append(s.lost, g)
	}
	a.Gone = append(a.Gone, g)
	a.Events = append(a.Events, fmt.Sprintf("node %s is dead: %s", n, reason))
	s.tellLive(g, a)
	s.releaseWaiting(a)
}

// tellLive queues the notice of g for every live server and worker but g's
// node.
func (s *State) tellLive(g Gone, a *Actions) {
	for _, id := range s.liveIDs() {
		if id != g.Node.ID {
			a.Send = append(a.Send, goneNotice(id, g))
		}
	}
}

// liveIDs lists the servers and workers (standbys included) that have not
// left, are not declared dead and are no aliases, in id order.
func (s *State) liveIDs() []int32 {
	var ids []int32
	for _, id := range s.groups[message.ServerGroup|message.WorkerGroup] {
		if !s.IsAlias(id) && !s.left[id] && !s.isDead(id) {
			ids = append(ids, id)
		}
	}
	for _, n := range s.standbys {
		if !s.left[n.ID] && !s.isDead(n.ID) {
			ids = append(ids, n.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

func goneNotice(recver int32, g Gone) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = recver
	m.Meta.Control.Cmd = CmdNodeLeft
	if g.Dead {
		m.Meta.Control.Cmd = CmdNodeDead
	}
	m.Meta.Control.Nodes = []message.Node{g.Node}
	m.Meta.Body = []byte(g.Reason)
	return m
}

// node returns the job's record of server or worker id.
func (s *State) node(id int32) (message.Node, bool) {
	if s.ready {
		for _, n := range s.nodes[:len(s.nodes)-1] {
			if n.ID == id {
				return n, true
			}
		}
	}
	for _, n := range s.standbys {
		if n.ID == id {
			return n, true
		}
	}
	return message.Node{}, false
}

// Dead reports whether id is declared dead (and not replaced since).
func (s *State) Dead(id int32) bool { return s.isDead(id) }

func (s *State) isDead(id int32) bool { _, ok := s.dead[id]; return ok }

// Lost lists the servers declared dead, in the order they died: their
// key ranges' values are lost (but for those Failover found a live copy
// of everything for).
func (s *State) Lost() []Gone { return slices.Clone(s.lost) }

// Failover tells every live server and worker the outcome of dead server
// id's failover (PS_REPLICAS; the coordinator computes it): nothingLost
// when every interval it held has a live copy (CmdFailedOver; it leaves
// Lost), else CmdStateLost. detail says what happened to its intervals.
// A node never declared dead is refused.
func (s *State) Failover(id int32, nothingLost bool, detail string) Actions {
	var a Actions
	g, ok := s.dead[id]
	if !ok || g.Node.Role != message.RoleServer {
		a.Errors = append(a.Errors, fmt.Errorf("failover of node %d: it is no server declared dead", id))
		return a
	}
	cmd := CmdStateLost
	if nothingLost {
		cmd = CmdFailedOver
		s.lost = slices.DeleteFunc(s.lost, func(l Gone) bool { return l.Node.ID == id })
	}
	a.Events = append(a.Events, fmt.Sprintf("server %d failed over (nothing lost: %t): %s", id, nothingLost, detail))
	for _, to := range s.liveIDs() {
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.Recver = to
		m.Meta.Control.Cmd = cmd
		m.Meta.Control.Nodes = []message.Node{g.Node}
		m.Meta.Body = []byte(detail)
		a.Send = append(a.Send, m)
	}
	return a
}

// KeysLost tells every live server and worker that the values of keys
// [begin, end) are lost (CmdKeysLost); detail says how. The coordinator
// calls it (postoffice.ReportKeysLost) when a restarted scheduler finds
// a move its predecessor left half-done whose keys no live server holds.
func (s *State) KeysLost(begin, end uint64, detail string) Actions {
	var a Actions
	if end <= begin {
		a.Errors = append(a.Errors, fmt.Errorf("lost keys [%d, %d): the range is empty", begin, end))
		return a
	}
	a.Events = append(a.Events, fmt.Sprintf("keys [%d, %d) lost: %s", begin, end, detail))
	body := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, begin), end)
	body = append(body, detail...)
	for _, to := range s.liveIDs() {
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.Recver = to
		m.Meta.Control.Cmd = CmdKeysLost
		m.Meta.Body = body
		a.Send = append(a.Send, m)
	}
	return a
}

// Barrier handles a BARRIER request from sender for group. When every member
// has arrived, a response goes to each (non-alias) member. With instance
// groups (Config.GroupSize > 1) it is a barrier of processes instead
// (groupBarrier).
func (s *State) Barrier(sender int32, appID, customerID int32, group int32) Actions {
	if s.cfg.GroupSize > 1 {
		return s.groupBarrier(sender, appID, customerID, group)
	}
	return s.memberBarrier(sender, appID, customerID, group)
}

// barrierValid checks a barrier request from sender for group: false
// with the Actions to return when it is not counted.
func (s *State) barrierValid(sender, group int32) (Actions, bool) {
	var a Actions
	_, ok := s.groups[int(group)]
	if !ok || group < 1 || group > 7 {
		a.Errors = append(a.Errors, fmt.Errorf("BARRIER from node %d names group %d: valid groups are 1-7", sender, group))
		return a, false
	}
	if !s.ready {
		// Only a restarted scheduler gets these (a node enters barriers
		// after it is started): requests queued for the old one. The
		// nodes send their waiting barriers again once they have the
		// rebuilt node list.
		a.Events = append(a.Events, fmt.Sprintf("dropped BARRIER from node %d before the job is complete: it is sent again", sender))
		return a, false
	}
	return a, true
}

// memberBarrier is a barrier of every member of group: a BARRIER without
// instance groups, an INSTANCE_BARRIER always.
func (s *State) memberBarrier(sender int32, appID, customerID int32, group int32) Actions {
	a, ok := s.barrierValid(sender, group)
	if !ok {
		return a
	}
	// Arrivals are a set: a repeated request from the same node and
	// customer in one round (a resend, or a restarted node re-entering the
	// barrier its dead predecessor had already reached) counts once. ps-lite
	// counts it twice and releases the barrier early.
	round := s.barrier[int(group)]
	if round == nil {
		round = map[arrival]bool{}
		s.barrier[int(group)] = round
	}
	if !s.isMember(int(group), sender) {
		// A node outside the group (a standby server that joined the
		// running job) does not take part in the group's barriers: it is
		// released at once. Holding it until the group's next round could
		// hold it forever when that round was the last.
		a.Send = append(a.Send, s.barrierRelease(sender, appID, customerID, group))
		return a
	}
	round[arrival{sender, customerID}] = true
	return s.releaseIfComplete(int(group), appID, customerID, a)
}

func (s *State) barrierRelease(to, appID, customerID, group int32) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = to
	m.Meta.AppID = appID
	m.Meta.CustomerID = customerID
	m.Meta.Control.Cmd = s.releaseCmd(to, customerID)
	// ps-lite sends uninitialised memory here; we send the group.
	m.Meta.Control.BarrierGroup = group
	return m
}

func (s *State) isMember(group int, id int32) bool { return slices.Contains(s.groups[group], id) }

// releaseIfComplete releases group's barrier when every member that has not
// left has arrived.
func (s *State) releaseIfComplete(group int, appID, customerID int32, a Actions) Actions {
	members := s.groups[group]
	round := s.barrier[group]
	need, have := 0, 0
	for _, id := range members {
		if s.left[id] || s.isDead(id) {
			continue
		}
		need++
	}
	for arr := range round {
		if !s.left[arr.node] && !s.isDead(arr.node) {
			have++
		}
	}
	a.Events = append(a.Events, fmt.Sprintf("barrier count for group %d: %d/%d", group, have, need))
	if have < need || round == nil {
		return a
	}
	delete(s.barrier, group)
	if s.finishing && group == int(message.AllGroup) && customerID == 0 {
		s.ended = true
	}
	for _, id := range s.releaseOrder(members) {
		if s.IsAlias(id) || s.left[id] || s.isDead(id) {
			continue
		}
		a.Send = append(a.Send, s.barrierRelease(id, appID, customerID, int32(group)))
	}
	return a
}

type arrival struct{ node, customer int32 }

// Heartbeat records a heartbeat from node id and answers it. A node
// declared dead whose heartbeats come back (it was only late) is told it
// is out of the job: the others no longer wait for it, and it must not
// wait for them.
//
// A heartbeat from a node the state does not know (a restarted scheduler
// before the job re-registered) is not answered: the node then finds the
// scheduler lost and re-registers (Rejoin).
func (s *State) Heartbeat(now time.Time, id int32) Actions {
	if _, known := s.node(id); !known {
		return Actions{Events: []string{fmt.Sprintf("heartbeat from node %d, which has not re-registered: not answered", id)}}
	}
	s.heartbeats[id] = now
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = id
	m.Meta.Control.Cmd = message.CmdHeartbeat
	m.Meta.Control.Nodes = []message.Node{s.cfg.Self}
	a := Actions{Send: []*message.Message{m}}
	if g, ok := s.dead[id]; ok {
		a.Send = append(a.Send, goneNotice(id, g))
	}
	return a
}

// DeadNodes lists the servers and workers silent for longer than timeout
// (none when timeout is 0 or before the job is complete), as GetDeadNodes.
func (s *State) DeadNodes(now time.Time, timeout time.Duration) []int32 {
	if !s.ready {
		return nil
	}
	expired := timeout > 0 && now.After(s.start.Add(timeout))
	var dead []int32
	for _, id := range s.groups[message.ServerGroup|message.WorkerGroup] {
		last, ok := s.heartbeats[id]
		if s.IsAlias(id) || s.left[id] {
			continue
		}
		if s.failed[id] || expired && (!ok || now.After(last.Add(timeout))) {
			dead = append(dead, id)
		}
	}
	return dead
}

// MarkFailed records that gossip (package membership) saw node id fail: it
// is dead at once, without waiting for the heartbeat timeout, so a
// restarted process takes its id on the next Tick.
func (s *State) MarkFailed(id int32) Actions {
	var a Actions
	if !s.ready || s.left[id] || s.failed[id] {
		return a
	}
	s.failed[id] = true
	a.Events = append(a.Events, fmt.Sprintf("node %d failed (gossip)", id))
	s.declare(id, "membership gossip: its probes failed", &a)
	return a
}

// Tick declares the nodes silent for longer than the heartbeat timeout
// dead (with heartbeats on, see Config.HeartbeatInterval) and lets
// registrations that wait for a dead node retry; the caller calls it
// periodically (e.g. every second) with the current time.
func (s *State) Tick(now time.Time) Actions {
	var a Actions
	if s.rebuild != nil && !now.Before(s.rebuild.start.Add(s.rebuildWait())) {
		s.finishRebuild(now, &a)
	}
	if !s.ready {
		return a
	}
	if t := s.cfg.HeartbeatTimeout; t > 0 && s.cfg.HeartbeatInterval > 0 && now.After(s.start.Add(t)) {
		for _, id := range s.liveIDs() {
			if last, ok := s.heartbeats[id]; !ok || now.After(last.Add(t)) {
				s.declare(id, fmt.Sprintf("no heartbeat for %s (PS_HEARTBEAT_TIMEOUT)", t), &a)
			}
		}
	}
	if len(s.waiting) == 0 {
		return a
	}
	waiting := s.waiting
	s.waiting = nil
	for _, n := range waiting {
		s.recover(now, n, &a)
	}
	return a
}

// Registered is the number of nodes of role r that registered while the
// job is incomplete (0 once it is complete).
func (s *State) Registered(r message.Role) int { return s.count(r) }

// Waiting is the number of restarted nodes waiting for a dead node.
func (s *State) Waiting() int { return len(s.waiting) }

// Finishing records that the scheduler entered Finalize: the next release
// of the job barrier (every node, customer 0) is the job's last, after
// which a node that goes away is no longer a loss.
func (s *State) Finishing() { s.finishing = true }

// Ended reports whether the job's final barrier was released.
func (s *State) Ended() bool { return s.ended }

// Leave records that server id left the job after being drained
// (scale-in): barriers stop waiting for it, it is never reported dead, and
// barriers it was the last one missing from are released now.
func (s *State) Leave(id int32) Actions {
	var a Actions
	if s.left[id] {
		return a
	}
	n, known := s.node(id)
	wasDead := s.isDead(id)
	s.left[id] = true
	a.Events = append(a.Events, fmt.Sprintf("node %d left the job", id))
	if known && !wasDead {
		g := Gone{Node: n, Reason: "drained: it left the job"}
		a.Gone = append(a.Gone, g)
		s.tellLive(g, &a)
	}
	s.releaseWaiting(&a)
	return a
}

// releaseWaiting releases the barriers that no longer wait for anyone
// (after a node left or died).
func (s *State) releaseWaiting(a *Actions) {
	groups := slices.Sorted(maps.Keys(s.barrier))
	for _, group := range groups {
		var appID, customerID int32
		for arr := range s.barrier[group] {
			customerID = arr.customer
		}
		*a = s.releaseIfComplete(group, appID, customerID, *a)
	}
}

// Left reports whether id left the job.
func (s *State) Left(id int32) bool { return s.left[id] }

// Addr is the host:port node id currently has ("" if unknown).
func (s *State) Addr(id int32) string {
	for _, n := range append(slices.Clone(s.nodes), s.standbys...) {
		if n.ID == id {
			return addrKey(n)
		}
	}
	return ""
}

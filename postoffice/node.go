// Package postoffice is a node's control plane: it registers with the
// scheduler, keeps the node table and groups, runs barriers and heartbeats,
// recovers restarted nodes, dispatches data messages to customers, and owns
// the routing table. The transport underneath (van.Transport) only moves
// bytes; the scheduler's decisions come from package scheduler.
//
// Unlike ps-lite there is no process-wide singleton: a process may run
// several nodes (tests run whole jobs in one process), each with its own
// Postoffice.
package postoffice

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/membership"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/metrics"
	"github.com/elasticps/elasticps/scheduler"
	"github.com/elasticps/elasticps/van"
)

// Customer receives the data messages addressed to one (app id, customer id).
// Accept is called from the receive loop and must not block.
type Customer interface {
	Accept(msg *message.Message)
}

// ErrStopped is returned by operations on a stopped node.
var ErrStopped = errors.New("postoffice: node is stopped")

type customerKey struct{ app, customer int32 }

type parked struct {
	msg      *message.Message
	deadline time.Time
}

// Postoffice is one node's control plane.
type Postoffice struct {
	cfg Config
	log *slog.Logger
	tr  van.Transport

	startMu    sync.Mutex
	started    bool // transport bound, receive loop running
	ready      chan struct{}
	readyOnce  sync.Once
	stopped    chan struct{}
	stopOnce   sync.Once
	loopDone   chan struct{}
	hbDone     chan struct{}
	startTime  time.Time
	timestamp  atomic.Int32
	numStarted atomic.Int32 // customers that called Start
	myID       atomic.Int32 // myNode.ID, read on the send path without the lock
	elasticOn  atomic.Bool  // elastic mode: routing tables change while the job runs
	left       atomic.Bool  // drained out of the job (scale-in)

	mu        sync.Mutex
	myNode    message.Node
	connected map[string]int32 // host:port -> id
	numSeen   [2]int           // servers, workers learnt from ADD_NODE
	customers map[customerKey]Customer
	parked    map[customerKey][]parked
	exitFns   []func()
	// barrier waiters: customer id -> channel closed on release
	barrierWait map[int32]chan struct{}

	hbMu       sync.Mutex
	heartbeats map[int32]time.Time // scheduler: per node; others: the scheduler

	sched    *scheduler.State // scheduler role only; touched by the receive loop
	groups   map[int][]int32
	routing  *RoutingTable
	resender *resender
	inline   *handOver // nil when Config.InlineHandOver < 0
	cpus     cpuShare

	// Stats counts what the node saw; read with Stats().
	stats Stats

	reg     *metrics.Registry
	elastic *metrics.ElasticMetrics

	memberMu sync.Mutex
	member   *membership.Member
}

// Stats are monotonically increasing counters.
type Stats struct {
	MsgsSent, MsgsRecv   atomic.Int64
	BytesSent, BytesRecv atomic.Int64
	Malformed            atomic.Int64 // messages rejected by the transport
	Dropped              atomic.Int64 // valid messages that had nowhere to go
	Rejected             atomic.Int64 // control requests the scheduler refused
	// HandOvers counts the times a customer's handler held the receive
	// goroutine longer than Config.InlineHandOver, so that the receive
	// loop went on in a new goroutine.
	HandOvers atomic.Int64
}

// New creates a node from cfg over tr. Nothing happens on the network until
// Start.
func New(cfg Config, tr van.Transport) (*Postoffice, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if tr == nil {
		return nil, errors.New("postoffice: nil transport")
	}
	p := &Postoffice{
		cfg:         cfg,
		log:         cfg.logger().With("role", cfg.Role.String()),
		tr:          tr,
		ready:       make(chan struct{}),
		stopped:     make(chan struct{}),
		loopDone:    make(chan struct{}),
		hbDone:      make(chan struct{}),
		connected:   map[string]int32{},
		customers:   map[customerKey]Customer{},
		parked:      map[customerKey][]parked{},
		barrierWait: map[int32]chan struct{}{},
		heartbeats:  map[int32]time.Time{},
		groups:      scheduler.Groups(cfg.NumServers, cfg.NumWorkers),
		routing:     NewIdentityRouting(cfg.NumServers),
	}
	p.reg = metrics.NewRegistry()
	st := &p.stats
	if err := metrics.NodeMetrics(p.reg, cfg.Role.String(), metrics.StatsFuncs{
		MsgsSent: st.MsgsSent.Load, MsgsRecv: st.MsgsRecv.Load, BytesSent: st.BytesSent.Load,
		BytesRecv: st.BytesRecv.Load, Malformed: st.Malformed.Load, Dropped: st.Dropped.Load,
		Rejected: st.Rejected.Load, HandOvers: st.HandOvers.Load, Twice: van.ReleasedTwice}); err != nil {
		return nil, fmt.Errorf("postoffice: metrics: %w", err)
	}
	em, err := metrics.NewElasticMetrics(p.reg)
	if err != nil {
		return nil, fmt.Errorf("postoffice: metrics: %w", err)
	}
	p.elastic = em
	p.myNode = message.NewNode(cfg.Role)
	p.myID.Store(message.Empty)
	if cfg.Role == message.RoleScheduler {
		p.myID.Store(message.SchedulerID)
		p.myNode.ID = message.SchedulerID
		p.myNode.Hostname = cfg.SchedulerHost
		p.myNode.Port = int32(cfg.SchedulerPort)
		p.myNode.CustomerID = 0
	} else {
		p.myNode.Hostname = cfg.NodeHost
		p.myNode.Port = int32(cfg.Port)
	}
	return p, nil
}

func (p *Postoffice) schedulerNode() message.Node {
	n := message.NewNode(message.RoleScheduler)
	n.ID = message.SchedulerID
	n.Hostname = p.cfg.SchedulerHost
	n.Port = int32(p.cfg.SchedulerPort)
	n.CustomerID = 0
	return n
}

// Start registers customer customerID of this node with the job and blocks
// until every node has registered (ps::StartAsync; ps::Start adds a barrier
// on group 7, see StartWithBarrier). The first call binds the transport and
// starts the receive loop; every call sends its own ADD_NODE, as a process
// with several customers does in ps-lite.
func (p *Postoffice) Start(customerID int) error {
	if err := p.startOnce(); err != nil {
		return err
	}
	if p.cfg.Role != message.RoleScheduler {
		p.mu.Lock()
		n := p.myNode
		p.mu.Unlock()
		n.ID = message.Empty
		n.CustomerID = int32(customerID)
		n.Standby = p.cfg.Standby
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.Recver = message.SchedulerID
		m.Meta.Control.Cmd = message.CmdAddNode
		m.Meta.Control.Nodes = []message.Node{n}
		if err := p.sendControl(m); err != nil {
			return fmt.Errorf("postoffice: cannot register with the scheduler at %s:%d: %w", p.cfg.SchedulerHost, p.cfg.SchedulerPort, err)
		}
	}
	p.numStarted.Add(1)
	select {
	case <-p.ready:
	case <-p.stopped:
		return ErrStopped
	}
	p.startHeartbeat()
	if p.cfg.Role == message.RoleServer {
		if err := p.startGossip(p.MyNode()); err != nil {
			p.log.Warn("membership gossip not started; failures are detected by heartbeats only", "err", err)
		}
	}
	return nil
}

// StartWithBarrier is ps::Start: Start, then a barrier on all nodes.
func (p *Postoffice) StartWithBarrier(customerID int) error {
	if err := p.Start(customerID); err != nil {
		return err
	}
	return p.Barrier(customerID, message.AllGroup)
}

func (p *Postoffice) startOnce() error {
	p.startMu.Lock()
	defer p.startMu.Unlock()
	if p.started {
		return nil
	}
	select {
	case <-p.stopped:
		return ErrStopped
	default:
	}
	retries := 40
	if p.cfg.Role == message.RoleScheduler {
		retries = 0
	}
	bindNode := p.myNode
	port, err := p.tr.Bind(bindNode, retries)
	if err != nil {
		return fmt.Errorf("postoffice: %s cannot listen on %s:%d: %w", p.cfg.Role, bindNode.Hostname, bindNode.Port, err)
	}
	p.mu.Lock()
	p.myNode.Port = int32(port)
	me := p.myNode
	p.mu.Unlock()
	p.vlog(1, "bound", "node", me.String())
	p.startTime = time.Now()
	if p.cfg.MetricsAddr != "" {
		srv, err := metrics.Serve(p.cfg.MetricsAddr, p.reg, p.log)
		if err != nil {
			return fmt.Errorf("postoffice: PS_METRICS_ADDR=%s: %w", p.cfg.MetricsAddr, err)
		}
		p.log.Info("metrics endpoint (Prometheus)", "addr", "http://"+srv.Addr()+"/metrics")
		p.RegisterExitCallback(func() { _ = srv.Close() })
	}
	if p.cfg.Role == message.RoleScheduler {
		p.sched = scheduler.New(scheduler.Config{
			NumServers: p.cfg.NumServers, NumWorkers: p.cfg.NumWorkers,
			Self: me, HeartbeatTimeout: p.cfg.HeartbeatTimeout, Gossip: p.cfg.GossipPort > 0,
		}, p.startTime)
		if err := p.startGossip(me); err != nil {
			return err
		}
		// The scheduler talks to itself (its own barrier requests) over a
		// self-connection, as ps-lite does.
		if err := p.tr.Connect(me, message.SchedulerID); err != nil {
			return fmt.Errorf("postoffice: scheduler cannot connect to itself: %w", err)
		}
	} else if err := p.tr.Connect(p.schedulerNode(), message.Empty); err != nil {
		return fmt.Errorf("postoffice: cannot connect to the scheduler at %s:%d: %w", p.cfg.SchedulerHost, p.cfg.SchedulerPort, err)
	}
	if p.cfg.Resend {
		p.resender = newResender(p, p.cfg.ResendTimeout, 10)
	}
	p.started = true
	if p.cfg.InlineHandOver > 0 {
		p.inline = newHandOver(p.cfg.InlineHandOver, func() { go p.receiveLoop() }, func(held time.Duration) {
			p.stats.HandOvers.Add(1)
			p.vlog(1, "a customer's handler held the receive loop; receiving goes on in a new goroutine", "held_at_least", held, "hand_overs", p.stats.HandOvers.Load())
		})
		go p.inline.watch(p.stopped)
	}
	go p.receiveLoop()
	go p.parkedLoop()
	if p.sched != nil && (p.cfg.HeartbeatTimeout > 0 || p.cfg.GossipPort > 0) {
		go p.schedulerTickLoop()
	}
	return nil
}

// Finalize is ps::Finalize: an optional barrier on all nodes, then, for
// customer 0, the node stops.
//
// A standby server (scale-out) is in no barrier group: its final barrier
// would return at once and the node would leave while it may hold keys, so
// it waits instead until the scheduler lets it go (at the end of the job,
// or by draining it). A node drained out of the job finalizes without
// error: its barrier ends when it leaves, which is what it was asked to do.
func (p *Postoffice) Finalize(customerID int, barrier bool) error {
	var err error
	switch {
	case barrier && p.cfg.Standby && p.isStarted():
		<-p.stopped
		err = ErrStopped
	case barrier:
		err = p.Barrier(customerID, message.AllGroup)
	}
	if customerID == 0 {
		p.Stop()
	}
	if p.Left() {
		return nil
	}
	return err
}

func (p *Postoffice) isStarted() bool {
	p.startMu.Lock()
	defer p.startMu.Unlock()
	return p.started
}

// Stop shuts the node down: the receive loop ends, heartbeats stop, the
// transport closes and exit callbacks run. It is idempotent.
func (p *Postoffice) Stop() {
	p.stopOnce.Do(func() {
		p.startMu.Lock()
		started := p.started
		p.startMu.Unlock()
		if p.resender != nil {
			p.resender.stop() // before the transport goes: no resend after close
		}
		p.memberMu.Lock()
		if m := p.member; m != nil {
			// a clean stop is a Leave for the others, not a failure
			_ = m.Leave(time.Second)
			_ = m.Shutdown()
			p.member = nil
		}
		p.memberMu.Unlock()
		if started {
			// TERMINATE to ourselves ends the receive loop after everything
			// already queued (ps-lite's shutdown path).
			me := p.MyNode()
			m := &message.Message{Meta: message.NewMeta()}
			m.Meta.Control.Cmd = message.CmdTerminate
			m.Meta.Recver = me.ID
			m.Meta.CustomerID = 0
			sent := false
			if me.ID != message.Empty {
				if _, err := p.tr.Send(m); err == nil {
					sent = true
				}
			}
			close(p.stopped)
			if sent {
				select {
				case <-p.loopDone:
				case <-time.After(2 * time.Second):
					p.log.Warn("receive loop did not see TERMINATE in 2s; closing the transport")
				}
			}
		} else {
			close(p.stopped)
		}
		_ = p.tr.Close()
		if started {
			<-p.loopDone
		}
		p.mu.Lock()
		fns := p.exitFns
		for _, ch := range p.barrierWait {
			close(ch)
		}
		p.barrierWait = map[int32]chan struct{}{}
		p.mu.Unlock()
		for _, f := range fns {
			f()
		}
		p.vlog(1, "stopped", "node", p.MyNode().String())
	})
}

// Done is closed when the node stops.
func (p *Postoffice) Done() <-chan struct{} { return p.stopped }

// RegisterExitCallback runs f after the node stops.
func (p *Postoffice) RegisterExitCallback(f func()) {
	p.mu.Lock()
	p.exitFns = append(p.exitFns, f)
	p.mu.Unlock()
}

// AddCustomer registers c for data messages to (appID, customerID).
// Messages that arrived before registration are delivered now.
func (p *Postoffice) AddCustomer(appID, customerID int, c Customer) error {
	k := customerKey{int32(appID), int32(customerID)}
	p.mu.Lock()
	if _, ok := p.customers[k]; ok {
		p.mu.Unlock()
		return fmt.Errorf("postoffice: customer %d of app %d already exists: use a distinct customer id per KVWorker/SimpleApp", customerID, appID)
	}
	// Parked messages go first, under the lock, so that a newer message the
	// receive loop dispatches right after cannot overtake them (Accept does
	// not block).
	for _, pm := range p.parked[k] {
		c.Accept(pm.msg)
	}
	delete(p.parked, k)
	p.customers[k] = c
	p.mu.Unlock()
	return nil
}

// RemoveCustomer unregisters a customer.
func (p *Postoffice) RemoveCustomer(appID, customerID int) {
	p.mu.Lock()
	delete(p.customers, customerKey{int32(appID), int32(customerID)})
	p.mu.Unlock()
}

// Send sends a data message: it fills in Sender, counts, logs at
// PS_VERBOSE=2 and hands it to the resender when enabled.
func (p *Postoffice) Send(m *message.Message) (int, error) {
	select {
	case <-p.stopped:
		return 0, ErrStopped
	default:
	}
	m.Meta.Sender = p.myID.Load()
	n, err := p.tr.Send(m)
	if err != nil {
		return n, err
	}
	p.stats.MsgsSent.Add(1)
	p.stats.BytesSent.Add(int64(n))
	if p.resender != nil {
		p.resender.addOutgoing(m)
	}
	if p.cfg.Verbose >= 2 {
		p.log.Info("send", "msg", m.Meta.String())
	}
	return n, nil
}

// KeepsSent reports whether Send keeps the messages it sent after it
// returns (PS_RESEND keeps them until acknowledged, to send them again).
// Without it, a caller may reuse a Message once Send returned.
func (p *Postoffice) KeepsSent() bool { return p.resender != nil }

// sendControl stamps a control message with the van timestamp and sends it.
func (p *Postoffice) sendControl(m *message.Message) error {
	if m.Meta.Timestamp == message.Empty {
		m.Meta.Timestamp = p.timestamp.Add(1) - 1
	}
	_, err := p.Send(m)
	return err
}

// NextTimestamp returns the van-level counter (ps::Van::GetTimestamp).
func (p *Postoffice) NextTimestamp() int32 { return p.timestamp.Add(1) - 1 }

// Barrier blocks until every node of group has called Barrier
// (ps::Postoffice::Barrier). One response releases every customer of this
// process that is waiting, not only customer 0.
func (p *Postoffice) Barrier(customerID int, group int) error {
	ids := p.NodeIDs(group)
	if len(ids) <= 1 {
		return nil
	}
	role := p.cfg.Role
	if role == message.RoleScheduler && group&message.SchedulerGroup == 0 ||
		role == message.RoleWorker && group&message.WorkerGroup == 0 ||
		role == message.RoleServer && group&message.ServerGroup == 0 {
		return fmt.Errorf("postoffice: a %s cannot join a barrier on group %d, which does not include it", role, group)
	}
	ch := make(chan struct{})
	p.mu.Lock()
	if old, ok := p.barrierWait[int32(customerID)]; ok {
		p.mu.Unlock()
		_ = old
		return fmt.Errorf("postoffice: customer %d is already in a barrier", customerID)
	}
	p.barrierWait[int32(customerID)] = ch
	p.mu.Unlock()
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = message.SchedulerID
	m.Meta.Request = true
	m.Meta.AppID = 0
	m.Meta.CustomerID = int32(customerID)
	m.Meta.Control.Cmd = message.CmdBarrier
	m.Meta.Control.BarrierGroup = int32(group)
	if err := p.sendControl(m); err != nil {
		p.mu.Lock()
		delete(p.barrierWait, int32(customerID))
		p.mu.Unlock()
		return fmt.Errorf("postoffice: barrier on group %d: %w", group, err)
	}
	select {
	case <-ch:
	case <-p.stopped:
		return ErrStopped
	}
	select {
	case <-p.stopped:
		return ErrStopped
	default:
		return nil
	}
}

func (p *Postoffice) releaseBarrier() {
	p.mu.Lock()
	for c, ch := range p.barrierWait {
		close(ch)
		delete(p.barrierWait, c)
	}
	p.mu.Unlock()
}

// NodeIDs returns the ids of a group (1-7) or of a single node id; nil for
// an unknown id.
func (p *Postoffice) NodeIDs(group int) []int32 {
	if ids, ok := p.groups[group]; ok {
		return ids
	}
	// A node outside the job's fixed groups (a standby server) is known
	// once connected.
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range p.connected {
		if int(id) == group {
			return []int32{id}
		}
	}
	return nil
}

// ServerKeyRanges is ps-lite's GetServerKeyRanges (never changes for a job).
func (p *Postoffice) ServerKeyRanges() []Range { return p.routing.Ranges() }

// Routing returns the routing table that maps key ranges to servers.
func (p *Postoffice) Routing() *RoutingTable { return p.routing }

// MyNode returns this node (ID is message.Empty before registration).
func (p *Postoffice) MyNode() message.Node {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.myNode
}

// MyRank is the rank of this node.
func (p *Postoffice) MyRank() int { return message.IDToRank(int(p.MyNode().ID)) }

// Role is this node's role.
func (p *Postoffice) Role() message.Role { return p.cfg.Role }

// NumWorkers and NumServers are the job's counts.
func (p *Postoffice) NumWorkers() int { return p.cfg.NumWorkers }

// NumServers is the number of servers.
func (p *Postoffice) NumServers() int { return p.cfg.NumServers }

// IsRecovery reports whether this node replaced a dead one.
func (p *Postoffice) IsRecovery() bool { return p.MyNode().IsRecovery }

// Verbose is PS_VERBOSE.
func (p *Postoffice) Verbose() int { return p.cfg.Verbose }

// Config returns the node's configuration.
func (p *Postoffice) Config() Config { return p.cfg }

// Logger is the node's logger.
func (p *Postoffice) Logger() *slog.Logger { return p.log }

// Stats returns the node's counters.
func (p *Postoffice) Stats() *Stats { return &p.stats }

// Release hands a received message back to the transport for reuse, when
// it pools them (van/zmq and van/tcp recycle its buffers and the Message
// itself): nothing of m may be read afterwards, and m is released at most
// once.
func (p *Postoffice) Release(m *message.Message) {
	if r, ok := p.tr.(interface{ Release(*message.Message) }); ok {
		r.Release(m)
	}
}

// Detach makes m safe to keep without Release: a transport that delivers
// large frames as views of its own (C) memory (van/zmq) copies them into Go
// memory and frees the originals. Every received message that goes to a
// consumer not known to Release it must pass through here.
func (p *Postoffice) Detach(m *message.Message) {
	if d, ok := p.tr.(interface{ Detach(*message.Message) }); ok {
		d.Detach(m)
	}
}

// ReleasingCustomer is a Customer that promises to Release (or Detach)
// every message it Accepts, and to read none of its data afterwards; only
// such customers get messages whose frames are views of transport memory.
type ReleasingCustomer interface {
	Customer
	ReleasesMessages() bool
}

// Ready is closed once the node is registered and connected.
func (p *Postoffice) Ready() <-chan struct{} { return p.ready }

// DeadNodes is ps-lite's GetDeadNodes(t): on the scheduler, the servers and
// workers silent for longer than timeout; elsewhere, the scheduler if it is.
func (p *Postoffice) DeadNodes(timeout time.Duration) []int32 {
	select {
	case <-p.ready:
	default:
		return nil
	}
	if timeout <= 0 {
		return nil
	}
	now := time.Now()
	if p.cfg.Role == message.RoleScheduler {
		var out []int32
		p.schedCall(func(s *scheduler.State) { out = s.DeadNodes(now, timeout) })
		return out
	}
	if !now.After(p.startTime.Add(timeout)) {
		return nil
	}
	p.hbMu.Lock()
	last, ok := p.heartbeats[message.SchedulerID]
	p.hbMu.Unlock()
	if !ok || now.After(last.Add(timeout)) {
		return []int32{message.SchedulerID}
	}
	return nil
}

// schedCall runs f on the scheduler state under the node lock; the receive
// loop takes the same lock for its steps.
func (p *Postoffice) schedCall(f func(*scheduler.State)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sched != nil {
		f(p.sched)
	}
}

func (p *Postoffice) vlog(level int, msg string, args ...any) {
	if p.cfg.Verbose >= level {
		p.log.Info(msg, args...)
	}
}

func addrOf(n message.Node) string { return n.Hostname + ":" + strconv.Itoa(int(n.Port)) }

// receiveLoop is the only reader of the transport: one goroutine at a time
// runs it, the one Start starts and then, each time a customer's handler
// held it too long (see InlineCustomer), a new one.
func (p *Postoffice) receiveLoop() {
	movedOn := false
	defer func() {
		if !movedOn {
			close(p.loopDone)
		}
	}()
	for {
		m, err := p.tr.Recv()
		if err != nil {
			var fe *van.FrameError
			if errors.As(err, &fe) {
				p.stats.Malformed.Add(1)
				p.log.Error("dropped a malformed message; the node keeps serving", "err", err, "malformed_total", p.stats.Malformed.Load())
				continue
			}
			if errors.Is(err, van.ErrClosed) {
				return
			}
			p.log.Error("receive failed; the node stops receiving", "err", err)
			return
		}
		size := messageBytes(m)
		p.stats.MsgsRecv.Add(1)
		p.stats.BytesRecv.Add(int64(size))
		if p.cfg.DropPercent > 0 && p.isReady() && rand.IntN(100) < p.cfg.DropPercent {
			p.log.Warn("PS_DROP_MSG: dropping", "msg", m.Meta.String())
			p.Release(m)
			continue
		}
		if p.cfg.Verbose >= 2 {
			p.log.Info("recv", "msg", m.Meta.String())
		}
		if p.resender != nil && p.resender.addIncoming(m) {
			p.Release(m) // a duplicate or an ACK: nothing keeps it
			continue
		}
		if m.Meta.Control.Cmd == message.CmdTerminate {
			p.vlog(1, "received TERMINATE", "node", p.MyNode().String())
			p.Release(m)
			return
		}
		if m.Meta.Control.Cmd == message.CmdEmpty {
			if !p.dispatch(m, size) {
				movedOn = true // a newer goroutine receives now
				return
			}
			continue
		}
		p.Detach(m) // control handling keeps no promise to Release
		p.handle(m)
	}
}

func messageBytes(m *message.Message) int {
	n := 0
	for _, d := range m.Data {
		n += len(d)
	}
	return n
}

func (p *Postoffice) isReady() bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

func (p *Postoffice) handle(m *message.Message) {
	switch m.Meta.Control.Cmd {
	case message.CmdAddNode:
		if p.cfg.Role == message.RoleScheduler {
			p.schedulerAddNode(m)
		} else {
			p.nodeAddNode(m)
		}
	case message.CmdBarrier:
		if m.Meta.Request {
			if p.cfg.Role != message.RoleScheduler {
				p.reject(fmt.Errorf("BARRIER request from node %d reached a %s; only the scheduler counts barriers", m.Meta.Sender, p.cfg.Role))
				return
			}
			var a scheduler.Actions
			p.schedCall(func(s *scheduler.State) {
				a = s.Barrier(m.Meta.Sender, m.Meta.AppID, m.Meta.CustomerID, m.Meta.Control.BarrierGroup)
			})
			p.apply(a)
		} else {
			p.releaseBarrier()
		}
	case message.CmdHeartbeat:
		now := time.Now()
		if p.cfg.Role == message.RoleScheduler {
			if m.Meta.Sender == message.Empty {
				p.reject(errors.New("HEARTBEAT from an unregistered node"))
				return
			}
			var a scheduler.Actions
			p.schedCall(func(s *scheduler.State) { a = s.Heartbeat(now, m.Meta.Sender) })
			p.apply(a)
		} else {
			p.hbMu.Lock()
			p.heartbeats[message.SchedulerID] = now
			p.hbMu.Unlock()
		}
	case message.CmdAck:
		// handled by the resender; an ACK without a resender is harmless
	default:
		p.reject(fmt.Errorf("unknown control command %d from node %d", m.Meta.Control.Cmd, m.Meta.Sender))
	}
}

func (p *Postoffice) reject(err error) {
	p.stats.Rejected.Add(1)
	p.log.Error("rejected a control message; the node keeps serving", "err", err)
}

// apply carries out the scheduler's actions: connect first, then send.
func (p *Postoffice) apply(a scheduler.Actions) {
	for _, e := range a.Events {
		p.vlog(1, e)
	}
	for _, err := range a.Errors {
		p.reject(err)
	}
	for _, n := range a.Connect {
		if err := p.tr.Connect(n, message.SchedulerID); err != nil {
			p.log.Error("scheduler cannot connect to node", "node", n.String(), "err", err)
			continue
		}
		p.mu.Lock()
		p.connected[addrOf(n)] = n.ID
		p.mu.Unlock()
		p.hbMu.Lock()
		p.heartbeats[n.ID] = time.Now()
		p.hbMu.Unlock()
	}
	for _, m := range a.Send {
		if err := p.sendControl(m); err != nil {
			p.log.Error("scheduler cannot send", "to", m.Meta.Recver, "cmd", m.Meta.Control.Cmd.String(), "err", err)
		}
	}
	if a.Ready {
		p.markReady()
	}
}

func (p *Postoffice) markReady() {
	p.readyOnce.Do(func() {
		close(p.ready)
		p.vlog(1, "node is ready", "node", p.MyNode().String())
	})
}

func (p *Postoffice) schedulerAddNode(m *message.Message) {
	if len(m.Meta.Control.Nodes) != 1 {
		p.reject(fmt.Errorf("ADD_NODE from node %d carries %d nodes; a registration carries exactly 1", m.Meta.Sender, len(m.Meta.Control.Nodes)))
		return
	}
	var a scheduler.Actions
	now := time.Now()
	p.schedCall(func(s *scheduler.State) { a = s.AddNode(now, m.Meta.Sender, m.Meta.Control.Nodes[0]) })
	p.apply(a)
}

// nodeAddNode handles the scheduler's node list on a server or worker.
func (p *Postoffice) nodeAddNode(m *message.Message) {
	if m.Meta.Sender != message.SchedulerID {
		p.reject(fmt.Errorf("ADD_NODE node list from node %d; only the scheduler (id 1) sends node lists", m.Meta.Sender))
		return
	}
	p.mu.Lock()
	for _, n := range m.Meta.Control.Nodes {
		if n.Hostname == p.myNode.Hostname && n.Port == p.myNode.Port {
			if p.myNode.ID == message.Empty || n.IsRecovery {
				p.myNode = n
				p.myID.Store(n.ID)
			}
		}
	}
	me := p.myNode
	var toConnect []message.Node
	for _, n := range m.Meta.Control.Nodes {
		a := addrOf(n)
		if _, ok := p.connected[a]; !ok {
			p.connected[a] = n.ID
			toConnect = append(toConnect, n)
		}
		if !n.IsRecovery && n.Role == message.RoleServer {
			p.numSeen[0]++
		}
		if !n.IsRecovery && n.Role == message.RoleWorker {
			p.numSeen[1]++
		}
	}
	p.mu.Unlock()
	if me.ID == message.Empty {
		p.reject(fmt.Errorf("ADD_NODE node list does not contain this node (%s:%d)", me.Hostname, me.Port))
		return
	}
	for _, n := range toConnect {
		// Workers never talk to workers, nor servers to servers.
		if n.Role == me.Role && n.ID != me.ID {
			continue
		}
		if err := p.tr.Connect(n, me.ID); err != nil {
			p.log.Error("cannot connect to peer", "peer", n.String(), "err", err)
			continue
		}
		p.vlog(1, "connected", "peer", n.String())
	}
	if p.isReady() {
		p.vlog(1, "peer list updated (recovery)", "nodes", fmt.Sprint(m.Meta.Control.Nodes))
		return
	}
	p.hbMu.Lock()
	p.heartbeats[message.SchedulerID] = time.Now()
	p.hbMu.Unlock()
	p.shareHostCPUs(me, m.Meta.Control.Nodes)
	p.vlog(1, "node is connected to others", "node", me.String())
	p.markReady()
}

// dispatch hands a data message to its customer. Workers route by
// (app_id, customer_id); servers and the scheduler by (app_id, app_id).
// It is called by the receive loop only, and returns false when the receive
// loop moved to another goroutine while a customer handled m on this one.
func (p *Postoffice) dispatch(m *message.Message, size int) bool {
	if m.Meta.AppID == message.Empty || m.Meta.Sender == message.Empty {
		p.stats.Dropped.Add(1)
		p.log.Error("dropped a data message without app_id or from an unregistered sender", "msg", m.Meta.String())
		p.Release(m)
		return true
	}
	cid := m.Meta.AppID
	if p.cfg.Role == message.RoleWorker {
		cid = m.Meta.CustomerID
	}
	k := customerKey{m.Meta.AppID, cid}
	p.mu.Lock()
	c, ok := p.customers[k]
	if !ok {
		// Not blocking the receive loop: park it until the customer
		// registers or CustomerWait passes. Parked messages may be
		// dropped and their customer may not release: no views.
		p.Detach(m)
		p.parked[k] = append(p.parked[k], parked{msg: m, deadline: time.Now().Add(p.cfg.CustomerWait)})
		p.mu.Unlock()
		return true
	}
	p.mu.Unlock()
	if rc, ok := c.(ReleasingCustomer); !ok || !rc.ReleasesMessages() {
		p.Detach(m)
	}
	if ic, ok := c.(InlineCustomer); ok && p.inline != nil && size <= inlineMaxBytes {
		s := p.inline.begin()
		ic.AcceptInline(m)
		return p.inline.end(s)
	}
	c.Accept(m)
	return true
}

// parkedLoop drops parked messages whose customer never appeared.
func (p *Postoffice) parkedLoop() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stopped:
			return
		case now := <-t.C:
			p.mu.Lock()
			for k, list := range p.parked {
				keep := list[:0]
				for _, pm := range list {
					if now.After(pm.deadline) {
						p.stats.Dropped.Add(1)
						p.log.Error("dropped a message: no customer registered for it", "app_id", k.app, "customer_id", k.customer, "waited", p.cfg.CustomerWait, "msg", pm.msg.Meta.String())
						continue
					}
					keep = append(keep, pm)
				}
				if len(keep) == 0 {
					delete(p.parked, k)
				} else {
					p.parked[k] = keep
				}
			}
			p.mu.Unlock()
		}
	}
}

func (p *Postoffice) startHeartbeat() {
	if p.cfg.Role == message.RoleScheduler || p.cfg.HeartbeatInterval <= 0 {
		return
	}
	p.startMu.Lock()
	defer p.startMu.Unlock()
	if p.hbDone == nil {
		return
	}
	done := p.hbDone
	p.hbDone = nil
	go func() {
		defer close(done)
		t := time.NewTicker(p.cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-p.stopped:
				return
			case <-t.C:
				m := &message.Message{Meta: message.NewMeta()}
				m.Meta.Recver = message.SchedulerID
				m.Meta.Control.Cmd = message.CmdHeartbeat
				m.Meta.Control.Nodes = []message.Node{p.MyNode()}
				if err := p.sendControl(m); err != nil && !errors.Is(err, ErrStopped) {
					p.log.Warn("heartbeat not sent", "err", err)
				}
			}
		}
	}()
}

// GroupContains reports whether id is in group.
func (p *Postoffice) GroupContains(group int, id int32) bool {
	return slices.Contains(p.groups[group], id)
}

// schedulerTickLoop gives the scheduler state its clock: parked recoveries
// retry once the node they replace has timed out.
func (p *Postoffice) schedulerTickLoop() {
	every := time.Second
	if p.cfg.HeartbeatTimeout > 0 {
		every = min(p.cfg.HeartbeatTimeout/4, every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stopped:
			return
		case now := <-t.C:
			var a scheduler.Actions
			p.schedCall(func(s *scheduler.State) { a = s.Tick(now) })
			p.apply(a)
		}
	}
}

// Members returns the ids of group that are real nodes: on the scheduler,
// without the aliases of multi-customer processes (which share another
// id and receive nothing) and without servers that left the job.
func (p *Postoffice) Members(group int) []int32 {
	ids := p.groups[group]
	var out []int32
	for _, id := range ids {
		skip := false
		p.schedCall(func(s *scheduler.State) { skip = s.IsAlias(id) || s.Left(id) })
		if !skip {
			out = append(out, id)
		}
	}
	return out
}

// SetElastic switches elastic mode on (kv.EnableElastic does): workers then
// count pushes per key for migrations.
func (p *Postoffice) SetElastic(on bool) { p.elasticOn.Store(on) }

// Elastic reports whether elastic mode is on.
func (p *Postoffice) Elastic() bool { return p.elasticOn.Load() }

// Leave records on the scheduler that server id left the job after being
// drained: barriers stop waiting for it and it is never reported dead.
func (p *Postoffice) Leave(id int32) error {
	if p.cfg.Role != message.RoleScheduler {
		return errors.New("postoffice: only the scheduler records that a node left")
	}
	var a scheduler.Actions
	p.schedCall(func(s *scheduler.State) { a = s.Leave(id) })
	p.apply(a)
	return nil
}

// LeaveJob stops this node because the scheduler drained it out of the job
// (scale-in). Left then reports true, so the process can exit cleanly.
func (p *Postoffice) LeaveJob() {
	p.left.Store(true)
	p.Stop()
}

// Left reports whether this node left the job on the scheduler's request.
func (p *Postoffice) Left() bool { return p.left.Load() }

// HasLeft reports, on the scheduler, whether node id left the job.
func (p *Postoffice) HasLeft(id int32) bool {
	left := false
	p.schedCall(func(s *scheduler.State) { left = s.Left(id) })
	return left
}

// Standbys lists, on the scheduler, the servers that joined the running job
// (scale-out).
func (p *Postoffice) Standbys() []int32 {
	var ids []int32
	p.schedCall(func(s *scheduler.State) { ids = s.Standbys() })
	return ids
}

// IsStandby reports whether this node joined the running job as a standby
// server.
func (p *Postoffice) IsStandby() bool { return p.cfg.Standby }

// Metrics is the node's metrics registry (served at PS_METRICS_ADDR).
func (p *Postoffice) Metrics() *metrics.Registry { return p.reg }

// ElasticMetrics are the node's load, migration and routing metrics.
func (p *Postoffice) ElasticMetrics() *metrics.ElasticMetrics { return p.elastic }

// startGossip joins the scheduler and servers' membership (hashicorp
// memberlist) when GossipPort is set: the scheduler listens there, servers
// join it. Once per node.
func (p *Postoffice) startGossip(me message.Node) error {
	if p.cfg.GossipPort <= 0 {
		return nil
	}
	p.memberMu.Lock()
	defer p.memberMu.Unlock()
	if p.member != nil {
		return nil
	}
	meta, err := membership.EncodeMeta(membership.NodeMeta{ID: me.ID, Role: me.Role.String(), Addr: addrOf(me)})
	if err != nil {
		return err
	}
	cfg := membership.Config{
		NodeName:     me.Role.String() + "-" + addrOf(me),
		ClusterLabel: fmt.Sprintf("elasticps/%s:%d", p.cfg.SchedulerHost, p.cfg.SchedulerPort),
		Logger:       p.log,
		Meta:         meta,
		Local:        isLoopback(me.Hostname),
	}
	host := me.Hostname
	if ips, err := net.LookupIP(host); err == nil && len(ips) > 0 {
		host = ips[0].String()
	}
	if p.cfg.Role == message.RoleScheduler {
		cfg.BindAddr, cfg.BindPort = host, p.cfg.GossipPort
		if p.cfg.BindAll {
			cfg.BindAddr, cfg.AdvertiseAddr = "0.0.0.0", host
		}
		cfg.Events = p.onMembership
	} else {
		cfg.BindAddr = host
		cfg.Seeds = []string{net.JoinHostPort(p.cfg.SchedulerHost, strconv.Itoa(p.cfg.GossipPort))}
	}
	m, err := membership.Start(cfg)
	if err != nil {
		return fmt.Errorf("postoffice: membership gossip (PS_GOSSIP_PORT=%d): %w", p.cfg.GossipPort, err)
	}
	p.member = m
	p.vlog(1, "membership gossip started", "addr", m.Addr())
	return nil
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// onMembership runs on the scheduler for gossip events: a server seen to
// fail is dead at once (a restarted process then takes its id).
func (p *Postoffice) onMembership(ev membership.Event) {
	meta, err := membership.DecodeMeta(ev.Meta)
	if err != nil || meta.Role != message.RoleServer.String() {
		return
	}
	switch ev.Kind {
	case membership.Fail:
		// Ignore a stale member whose id a recovered process already holds.
		current := ""
		p.schedCall(func(s *scheduler.State) { current = s.Addr(meta.ID) })
		if current != "" && current != meta.Addr {
			return
		}
		p.log.Warn("membership: server failed", "node", meta.ID, "addr", meta.Addr)
		var a scheduler.Actions
		p.schedCall(func(s *scheduler.State) { a = s.MarkFailed(meta.ID) })
		p.apply(a)
	case membership.Leave:
		p.vlog(1, "membership: server left", "node", meta.ID)
	}
}

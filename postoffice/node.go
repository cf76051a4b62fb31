// Package postoffice is a node's control plane: it registers with the
// scheduler, keeps the node table and groups, runs barriers and heartbeats,
// recovers restarted nodes and dispatches data messages to customers. The transport underneath (van.Transport) only moves
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
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/internal/ratelog"
	"github.com/elasticps/elasticps/membership"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/metrics"
	"github.com/elasticps/elasticps/routing"
	"github.com/elasticps/elasticps/scheduler"
	"github.com/elasticps/elasticps/van"
)

// ErrStopped is returned by operations on a stopped node.
var ErrStopped = errors.New("postoffice: node is stopped")

// Postoffice is one node's control plane.
type Postoffice struct {
	cfg Config
	log *slog.Logger
	tr  van.Transport
	// registered: the customers that sent ADD_NODE (Start), under mu
	registered []int32
	// van names the transport in the node's logs: cfg.VanType, or
	// "samehost" where PS_SHM_AUTO / BYTEPS_ENABLE_IPC turned tcp into it.
	van string

	startMu   sync.Mutex
	started   bool // transport bound, receive loop running
	ready     chan struct{}
	readyOnce sync.Once
	stopped   chan struct{}
	stopOnce  sync.Once
	loopDone  chan struct{}
	hbDone    chan struct{}
	startTime time.Time
	timestamp atomic.Int32
	myID      atomic.Int32 // myNode.ID, read on the send path without the lock
	left      atomic.Bool  // drained out of the job (scale-in)

	mu        sync.Mutex
	myNode    message.Node
	connected map[string]int32 // host:port -> id
	customers map[customerKey]Customer
	parked    map[customerKey][]parked
	// parkedBytes are the bytes parked per sender, which
	// Limits.MaxPendingBytes bounds. Guarded by mu.
	parkedBytes map[int32]int64

	ratelog *ratelog.Limiter // refusals a stranger can trigger (limits.go)
	refused refusals
	exitFns []func()
	// barrier waiters: customer id -> its barrier
	barrierWait map[int32]barrierWaiter
	barrierErr  error // set: every barrier fails with it (the scheduler will not release it)

	hbMu      sync.Mutex
	schedBeat time.Time // server, worker: when the scheduler was last heard (zero: never)

	driver   *schedulerDriver // scheduler role only: owns the scheduler state
	groups   map[int][]int32
	ranges   []routing.Range
	resender *resender
	// dropFilter, set by tests before Start, drops the received messages
	// it returns true for, as PS_DROP_MSG drops at random.
	dropFilter func(*message.Message) bool
	inline     *handOver // nil when Config.InlineHandOver < 0
	cpus       cpuShare

	// Stats counts what the node saw; read with Stats().
	stats Stats

	reg  *metrics.Registry
	auth *authGate // auth.go: who may send what
	kvm  *metrics.KVMetrics

	memberMu sync.Mutex
	member   *membership.Member

	gone  goneTable // nodes the job lost (gone.go)
	sched schedLink // a lost scheduler, a rebuilt one (heartbeat.go)

	waitReport waitReport   // when to report a long wait for the job (wait.go)
	startFail  startFailure // a peer speaks another wire (wire.go)
}

// Stats are monotonically increasing counters.
type Stats struct {
	// Every message the transport took or delivered, data and control
	// (acknowledgements, resends and a node's TERMINATE to itself too);
	// bytes are meta and payload.
	MsgsSent, MsgsRecv   atomic.Int64
	BytesSent, BytesRecv atomic.Int64
	Malformed            atomic.Int64 // messages rejected by the transport
	Dropped              atomic.Int64 // valid messages that had nowhere to go
	Rejected             atomic.Int64 // control messages the node refused
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
		parkedBytes: map[int32]int64{},
		barrierWait: map[int32]barrierWaiter{},
		groups:      scheduler.Groups(cfg.NumServers*cfg.groupSize(), cfg.NumWorkers*cfg.groupSize()),
		ranges:      routing.KeyRanges(cfg.NumServers),
		waitReport:  waitReport{waitReportFirst, waitReportMax},
	}
	p.tr = countingTransport{Transport: tr, stats: &p.stats, wire: cfg.Wire}
	p.van = vanName(cfg)
	p.ratelog = ratelog.New(p.log, LogInterval)
	p.reg = metrics.NewNodeRegistry(cfg.Role.String())
	st := &p.stats
	if err := metrics.NodeMetrics(p.reg, cfg.Role.String(), metrics.StatsFuncs{
		MsgsSent: st.MsgsSent.Load, MsgsRecv: st.MsgsRecv.Load, BytesSent: st.BytesSent.Load,
		BytesRecv: st.BytesRecv.Load, Malformed: st.Malformed.Load, Dropped: st.Dropped.Load,
		Rejected: st.Rejected.Load, HandOvers: st.HandOvers.Load, Twice: van.ReleasedTwice}); err != nil {
		return nil, fmt.Errorf("postoffice: metrics: %w", err)
	}
	var key []byte
	if cfg.AuthToken != "" {
		key = []byte(cfg.AuthToken)
	}
	lease := 30 * time.Second
	if cfg.HeartbeatTimeout > 0 {
		lease = cfg.HeartbeatTimeout / 2 // so that a dead node's proof ends before it is declared dead
	}
	p.auth = newAuthGate(key, cfg.Role.String(), lease)
	if err := p.reg.Register(p.auth.refused); err != nil {
		return nil, fmt.Errorf("postoffice: metrics: %w", err)
	}
	if err := metrics.LimitRefusals(p.reg, cfg.Role.String(), refusalReasons[:], p.refusalCount); err != nil {
		return nil, fmt.Errorf("postoffice: metrics: %w", err)
	}
	km, err := metrics.NewKVMetrics(p.reg)
	if err != nil {
		return nil, fmt.Errorf("postoffice: metrics: %w", err)
	}
	p.kvm = km
	p.myNode = message.NewNode(cfg.Role)
	p.myID.Store(message.Empty)
	if cfg.Role == message.RoleScheduler {
		p.driver = newSchedulerDriver(p)
		p.myID.Store(message.SchedulerID)
		p.myNode.ID = message.SchedulerID
		p.myNode.Hostname = cfg.SchedulerHost
		p.myNode.Port = int32(cfg.SchedulerPort)
		p.myNode.CustomerID = 0
	} else {
		p.myNode.Hostname = cfg.NodeHost
		p.myNode.Port = int32(cfg.Port)
		if cfg.Port != 0 {
			p.myNode.Port += int32(cfg.Instance)
		}
		p.myNode.WantRank = cfg.wantedInstanceRank()
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

// serveMetrics serves the metrics at PS_METRICS_ADDR, if set, until the
// node stops.
func (p *Postoffice) serveMetrics() error {
	if p.cfg.MetricsAddr == "" {
		return nil
	}
	srv, err := metrics.Serve(p.cfg.MetricsAddr, p.reg, p.log)
	if err != nil {
		return fmt.Errorf("postoffice: PS_METRICS_ADDR=%s: %w", p.cfg.MetricsAddr, err)
	}
	p.log.Info("metrics endpoint (Prometheus)", "addr", "http://"+srv.Addr()+"/metrics")
	p.RegisterExitCallback(func() { _ = srv.Close() })
	return nil
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
func (p *Postoffice) ServerKeyRanges() []routing.Range { return p.ranges }

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

// NumWorkers and NumServers are the job's counts (of processes, with
// instance groups).
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

// Release hands a received message back to the transport (see
// van.Transport.Release): nothing of m may be read afterwards, and m is
// released at most once.
func (p *Postoffice) Release(m *message.Message) { p.tr.Release(m) }

// Detach makes m safe to keep without Release (see van.Transport.Detach).
// Every received message that goes to a consumer not known to Release it
// must pass through here.
func (p *Postoffice) Detach(m *message.Message) { p.tr.Detach(m) }

// ReleasingCustomer is a Customer that promises to Release (or Detach)
// every message it Accepts, and to read none of its data afterwards; only
// such customers get messages whose frames are views of transport memory.
type ReleasingCustomer interface {
	Customer
	ReleasesMessages() bool
}

func (p *Postoffice) vlog(level int, msg string, args ...any) {
	if p.cfg.Verbose >= level {
		p.log.Info(msg, args...)
	}
}

func addrOf(n message.Node) string { return n.Hostname + ":" + strconv.Itoa(int(n.Port)) }

// GroupContains reports whether id is in group.
func (p *Postoffice) GroupContains(group int, id int32) bool {
	return slices.Contains(p.groups[group], id)
}

// Members returns the ids of group that are real nodes: on the scheduler,
// without the aliases of multi-customer processes (which share another
// id and receive nothing) and without servers that left the job. Elsewhere
// it is the group without aliases once the node is connected (an alias
// shares its address with the id the node connected to), and the whole
// group before that; on the scheduler before Start and after Stop, the
// whole group.
func (p *Postoffice) Members(group int) []int32 {
	var out []int32
	if p.driver.query(func(s *scheduler.State) {
		for _, id := range p.groups[group] {
			if !s.IsAlias(id) && !s.Left(id) {
				out = append(out, id)
			}
		}
	}) {
		return out
	}
	if !p.isReady() {
		return append(out, p.groups[group]...)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	live := make(map[int32]bool, len(p.connected))
	for _, id := range p.connected {
		live[id] = true
	}
	for _, id := range p.groups[group] {
		if live[id] {
			out = append(out, id)
		}
	}
	return out
}

// IsStandby reports whether this node joined the running job as a standby
// server: with PS_STANDBY=1, or, in a job with PS_REPLICAS, as a server
// that registered after the job started (a restarted one).
func (p *Postoffice) IsStandby() bool { return p.cfg.Standby || p.MyNode().Standby }

// Metrics is the node's metrics registry (served at PS_METRICS_ADDR).
func (p *Postoffice) Metrics() *metrics.Registry { return p.reg }

// KVMetrics are the node's per-request latency metrics, observed by its kv
// workers and servers.
func (p *Postoffice) KVMetrics() *metrics.KVMetrics { return p.kvm }

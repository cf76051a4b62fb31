package elastic

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
	"github.com/elasticps/elasticps/syncctl"
)

// Node is one node's elastic side: its end of the elastic control messages
// (Link), the routing table its workers follow, and, on a server, the agent
// that gates requests and carries out migrations. It belongs to whoever
// owns the node's Postoffice; there is no process-wide state, so several
// nodes may run in one process.
//
// On a node of a job that is not elastic (Open gives one), Node creates
// plain kv workers and servers and nothing moves, so a program runs the
// same code in both modes.
type Node struct {
	po     *postoffice.Postoffice
	on     bool // elastic mode: the link is registered
	link   *Link
	table  *routing.Table
	server atomic.Pointer[serverAgent]
	every  time.Duration // between load reports
}

// Open returns po's elastic side. It takes part in migrations when the job
// is elastic (PS_ELASTIC=1 in po's configuration) and po is a server or a
// worker; otherwise (the scheduler's elastic side is the coordinator,
// package elastic/coord) it only creates plain kv workers and servers.
// Call it once per Postoffice, before creating the node's workers and
// servers.
func Open(po *postoffice.Postoffice) (*Node, error) {
	if po == nil {
		return nil, errors.New("elastic: nil postoffice")
	}
	if !po.Config().Elastic || po.Role() == message.RoleScheduler {
		return &Node{po: po, table: routing.NewIdentityTable(po.NumServers())}, nil
	}
	return Attach(po)
}

// Enabled reports whether the node takes part in migrations.
func (n *Node) Enabled() bool { return n.on }

// Attach makes po a node of an elastic job whatever its configuration says
// (tests and tools that switch elastic mode on by hand). Once per
// Postoffice: a second Attach fails, because the elastic app is registered
// already.
func Attach(po *postoffice.Postoffice) (*Node, error) {
	if po.Role() == message.RoleScheduler {
		return nil, errors.New("elastic: the scheduler runs the coordinator (package elastic/coord), not a node agent")
	}
	l, err := NewLink(po)
	if err != nil {
		return nil, fmt.Errorf("elastic: %w", err)
	}
	n := &Node{po: po, on: true, link: l, table: routing.NewIdentityTable(po.NumServers()), every: reportInterval(po)}
	l.Handle(n.handle)
	// A restarted scheduler takes the newest table any node holds
	// (coord.Coordinator's rebuild).
	po.SetRejoinState(func() []byte { return n.table.Current().Marshal() })
	return n, nil
}

// handle answers the scheduler's elastic messages: a server's agent takes
// them all; a worker node only follows routing tables.
func (n *Node) handle(from int32, head int32, body []byte) ([]byte, error) {
	if a := n.server.Load(); a != nil {
		return a.handle(from, head, body)
	}
	if head != MsgRoutes {
		return nil, fmt.Errorf("a worker does not handle elastic message %s", MessageName(head))
	}
	r, err := routing.UnmarshalRoutes(body)
	if err != nil {
		return nil, err
	}
	n.table.Update(r)
	return nil, nil
}

// Table is the node's routing table (the identity until the scheduler
// moves keys).
func (n *Node) Table() *routing.Table { return n.table }

// NewWorker creates a worker of this node (kv.NewWorker); in elastic mode
// it routes by the node's table, numbers its pushes for cut-overs and reports its round
// trips to the scheduler every PS_REPORT_INTERVAL, which the balancer uses
// as the job's iteration-time signal.
func (n *Node) NewWorker(appID, customerID int) (*kv.Worker, error) {
	if !n.on {
		return kv.NewWorker(n.po, appID, customerID)
	}
	r := &workerRouter{node: n}
	w, err := kv.NewWorkerWith(n.po, appID, customerID, kv.WorkerOptions{Router: r})
	if err != nil {
		return nil, err
	}
	go r.reportLoop(w)
	return w, nil
}

// NewServer creates a server of this node (kv.NewServerWith); in elastic
// mode the scheduler may move its keys: requests pass its gate first. mig hands key-range
// state over (kv.DefaultHandler implements it); with nil, and until
// SetMigrator, keys move by the generic hand-over (see fallback.go). With
// a sync mode (PS_SYNC_MODE), the server's sync gate (kv.NewSyncGate) is
// chained after the elastic one, and a moving block's sync state and
// parked requests go with it (docs/elastic.md). One server per node.
func (n *Node) NewServer(appID int, opts kv.ServerOptions, mig Migrator) (*kv.Server, error) {
	if !n.on {
		return kv.NewServerWith(n.po, appID, opts)
	}
	if n.server.Load() != nil {
		return nil, errors.New("elastic: this node has a server already; a node serves one key range set")
	}
	var agent *serverAgent
	var syncErr error
	opts.Gate = func(s *kv.Server) kv.RequestGate {
		// Stored before the server registers: from its first request on,
		// the scheduler's elastic messages reach this agent, not the
		// worker-node handling in handle.
		agent = newServerAgent(n, s, mig)
		if n.po.Config().Sync.Mode != syncctl.ASP {
			// The job's sync mode applies to what this gate lets run.
			agent.sync, syncErr = kv.NewSyncGate(s)
		}
		n.server.Store(agent)
		return agent
	}
	s, err := kv.NewServerWith(n.po, appID, opts)
	if syncErr != nil {
		err = fmt.Errorf("elastic: %w", syncErr)
		if s != nil {
			s.Close()
		}
	}
	if err != nil {
		n.server.CompareAndSwap(agent, nil)
		return nil, err
	}
	go agent.tickLoop()
	go agent.reportLoop(n.every)
	return s, nil
}

// SetMigrator sets the state hand-over of the node's server. Outside
// elastic mode nothing moves: it does nothing.
func (n *Node) SetMigrator(m Migrator) error {
	if !n.on {
		return nil
	}
	a := n.server.Load()
	if a == nil {
		return errors.New("elastic: SetMigrator on a node without an elastic server (PS_ELASTIC=1 and Node.NewServer)")
	}
	a.mig.Store(&m)
	return nil
}

// Redirected counts the requests the node's server answered with a
// redirect during migrations.
func (n *Node) Redirected() int64 {
	if a := n.server.Load(); a != nil {
		return a.redirected.Load()
	}
	return 0
}

// DuplicatePushes counts the pushes the node's server acknowledged
// without applying them, because it had applied them before (PS_REPLICAS:
// a worker re-sent them after a failover).
func (n *Node) DuplicatePushes() int64 {
	if a := n.server.Load(); a != nil && a.rep != nil {
		return a.rep.dupes.Load()
	}
	return 0
}

func newServerAgent(n *Node, s *kv.Server, mig Migrator) *serverAgent {
	a := &serverAgent{s: s, po: n.po, node: n, routes: n.table.Current(), hist: map[uint64]*keyState{},
		inflight: map[*inflightReq]struct{}{}, exportTimeout: 2 * time.Second}
	if mig != nil {
		a.mig.Store(&mig)
	}
	if n.po.Config().Replicas > 0 {
		a.rep = newReplication()
		a.rep.bsp = n.po.Config().Sync.Mode == syncctl.BSP
		if v, ok := n.po.Config().LookupEnv("ELASTICPS_TEST_SEED_HALT"); ok {
			p, b, _ := strings.Cut(v, ":")
			primary, err1 := strconv.Atoi(p)
			backup, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil {
				n.po.Logger().Error("elastic: ELASTICPS_TEST_SEED_HALT is not PRIMARY:BACKUP (two node ids); ignored", "value", v)
			} else {
				a.rep.seedHalt = [2]int32{int32(primary), int32(backup)}
			}
		}
		n.po.OnNodeGone(a.serverGone)
	}
	return a
}

// workerRouter is a worker's kv.Router in an elastic job.
type workerRouter struct {
	node *Node
	// round trips of completed operations since the last report
	ops, rttNanos, handleNanos atomic.Int64
}

func (r *workerRouter) Table() *routing.Table { return r.node.table }
func (r *workerRouter) NumbersPushes() bool   { return true }

func (r *workerRouter) OperationDone(rtt, handling time.Duration) {
	r.ops.Add(1)
	r.rttNanos.Add(int64(rtt))
	r.handleNanos.Add(int64(handling))
}

func (r *workerRouter) reportLoop(w *kv.Worker) {
	if !joined(r.node.po) {
		return
	}
	t := time.NewTicker(r.node.every)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-r.node.po.Done():
			return
		case <-w.Customer().Closed():
			return
		case now := <-t.C:
			ops, rtt, handle := r.ops.Swap(0), r.rttNanos.Swap(0), r.handleNanos.Swap(0)
			rep := WorkerReport{Interval: now.Sub(last), Ops: ops}
			if ops > 0 {
				rep.MeanRTT, rep.MeanHandling = time.Duration(rtt/ops), time.Duration(handle/ops)
			}
			last = now
			if err := r.node.link.Post(message.SchedulerID, MsgReport, rep.Marshal()); err != nil {
				r.node.po.Logger().Debug("elastic: worker report not sent", "err", err)
			}
		}
	}
}

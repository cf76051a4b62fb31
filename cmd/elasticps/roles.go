package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/paramstore"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/snapshot"
)

// statsHead is the SimpleApp head a worker sends to ask a server for its
// traffic counters; the reply body is "requests bytes_in bytes_out".
const statsHead = -7301

// roleEnv is the part of the roles' help that lists the variables a node
// reads (postoffice.ConfigFromEnv, the balancer and the control API).
const roleEnv = `
environment (ps-lite's names; * = required, default in brackets):
  DMLC_ROLE *            scheduler, server or worker: the role of this process
  DMLC_NUM_WORKER *      number of workers in the job
  DMLC_NUM_SERVER *      number of servers in the job
  DMLC_PS_ROOT_URI *     the scheduler's IP address or host name, e.g. 127.0.0.1
  DMLC_PS_ROOT_PORT *    the scheduler's TCP port
  DMLC_NODE_HOST         address a server or worker advertises [DMLC_INTERFACE's,
                         else the first non-loopback IPv4, else 127.0.0.1]
  DMLC_INTERFACE         network interface whose IPv4 address to advertise
  PORT                   listen port of a server or worker [any free port]
  DMLC_PS_VAN_TYPE       transport: zmq, tcp (all nodes elasticps), ibverbs, fabric [zmq]
  DMLC_LOCAL             1: ipc:// endpoints instead of TCP [0]
  DMLC_USE_KUBERNETES    1: the scheduler binds 0.0.0.0 [0]
  PS_VERBOSE             1: connections and control events; 2: every message [0]
  PS_HEARTBEAT_INTERVAL  seconds between heartbeats to the scheduler [0: off]
  PS_HEARTBEAT_TIMEOUT   seconds of silence after which a node is dead [0: never]
  PS_RESEND              1: acknowledge and resend every message [0]
  PS_RESEND_TIMEOUT      ms before a resend [1000]
  PS_ELASTIC             1: elastic load distribution (docs/elastic.md) [0]
  PS_STANDBY             1 on a server: join a running elastic job [0]
  PS_CTL_ADDR            the elastic scheduler's control API (elasticps ctl)
                         [the scheduler's host, DMLC_PS_ROOT_PORT+1]
  PS_BALANCE_INTERVAL    ms between rebalancing plans of an elastic scheduler [2000]
  PS_REPORT_INTERVAL     ms between load reports of elastic servers [1000]
  PS_METRICS_ADDR        serve Prometheus metrics at http://ADDR/metrics [off]
  PS_SYNC_MODE           how a server synchronizes workers: asp, bsp, ssp, fluent [asp]
  PS_STALENESS           the bound s of ssp and fluent [3]
  PS_PAUSE_PROB          fluent's pause probability: 0 to 1, or sigmoid [sigmoid]
  PS_SYNC_SEED           seed of fluent's pause draws [0]
  PS_REPLICAS            backups of every key interval (needs PS_ELASTIC=1) [0]
  PS_SNAPSHOT_DIR        a server snapshots its store here and resumes from it [off]
  PS_SNAPSHOT_INTERVAL   seconds between a server's snapshots [60]
  PS_GOSSIP_PORT         the scheduler's failure-detection port
                         [DMLC_PS_ROOT_PORT+2 if elastic, else off]
  PS_GOSSIP_PROBE_INTERVAL
                         ms between a member's probes of another [200]
  PS_GOSSIP_PROBE_TIMEOUT
                         ms a probe waits for its answer [100]
  PS_GOSSIP_SUSPICION_MULT
                         probe intervals a suspected member has to refute
                         the suspicion before it is dead [3]
The README's table lists every variable.
`

// schedulerUsage is the help of 'elasticps scheduler'.
const schedulerUsage = `usage: elasticps scheduler

Runs the scheduler of a ps-lite job, configured by the environment below
(DMLC_ROLE=scheduler). It can stand in for a C++ program's scheduler. With
PS_ELASTIC=1 it also runs the balancer and serves the control API that
'elasticps ctl' talks to. It takes no flags.
` + roleEnv

// serverUsage is the help of 'elasticps server'.
const serverUsage = `usage: elasticps server [flags]

Runs a server from the environment below (DMLC_ROLE=server) with the
training store (paramstore): the first push of a key initializes it, later
pushes are gradients. With no flags it is the element-wise sum store
(ps-lite's KVServerDefaultHandle). Under PS_ELASTIC=1 moving keys carry
their optimizer state. Workers are your own programs (DMLC_ROLE=worker).
` + roleEnv + `
flags:
`

// runScheduler runs the scheduler role; it takes no flags.
func runScheduler(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("elasticps scheduler", flag.ContinueOnError)
	if err := cli.Parse(fs, schedulerUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("scheduler: unexpected argument %q: the scheduler takes no arguments; it reads DMLC_* variables (see elasticps scheduler --help)", fs.Arg(0))
	}
	return runRole(ctx, "scheduler")
}

// runServer parses the server's flags and runs the server role with them.
func runServer(ctx context.Context, args []string) error {
	store, err := parseServerFlags(args)
	if err != nil {
		return err
	}
	return runRoleWith(ctx, "server", store)
}

// storeFlags is 'elasticps server”s flag values, before they are checked.
type storeFlags struct {
	optimizer, aggregate string
	cfg                  paramstore.Config
	round                int
}

// parseServerFlags turns the server's flags into a store configuration
// whose Workers and RoundSize runRoleWith fills in from the node.
func parseServerFlags(args []string) (serverStore, error) {
	var f storeFlags
	f.cfg = paramstore.DefaultConfig()
	fs := flag.NewFlagSet("elasticps server", flag.ContinueOnError)
	fs.StringVar(&f.optimizer, "optimizer", "none", "server-side optimizer: none (sum the pushes), sgd, momentum, adam")
	fs.Float64Var(&f.cfg.LR, "lr", f.cfg.LR, "learning rate of sgd, momentum and adam")
	fs.Float64Var(&f.cfg.Momentum, "momentum", f.cfg.Momentum, "momentum's mu, in [0, 1)")
	fs.Float64Var(&f.cfg.Beta1, "beta1", f.cfg.Beta1, "adam's first-moment decay, in [0, 1)")
	fs.Float64Var(&f.cfg.Beta2, "beta2", f.cfg.Beta2, "adam's second-moment decay, in [0, 1)")
	fs.Float64Var(&f.cfg.Epsilon, "epsilon", f.cfg.Epsilon, "adam's epsilon, > 0")
	fs.Float64Var(&f.cfg.WeightDecay, "weight-decay", 0, "L2 weight decay added to every gradient (needs an optimizer)")
	fs.StringVar(&f.aggregate, "aggregate", "sum", "how gradients combine: sum, or mean (divided by DMLC_NUM_WORKER)")
	fs.IntVar(&f.round, "round-size", 0, "accumulate this many pushes of a key, then apply their sum once (MXNet dist_sync);\n"+
		"0 applies every push at once (dist_async); -1 means DMLC_NUM_WORKER")
	if err := cli.Parse(fs, serverUsage, args); err != nil {
		return serverStore{}, err
	}
	if fs.NArg() > 0 {
		return serverStore{}, fmt.Errorf("server: unexpected argument %q (flags only; see elasticps server --help)", fs.Arg(0))
	}
	var err error
	if f.cfg.Optimizer, err = paramstore.ParseOptimizer(f.optimizer); err != nil {
		return serverStore{}, fmt.Errorf("server: --optimizer: %w", err)
	}
	if f.cfg.Aggregate, err = paramstore.ParseAggregate(f.aggregate); err != nil {
		return serverStore{}, fmt.Errorf("server: --aggregate: %w", err)
	}
	if f.round < -1 {
		return serverStore{}, fmt.Errorf("server: --round-size %d: use a number of pushes >= 0, or -1 for the number of workers", f.round)
	}
	// checked now, with placeholders for what the node supplies, so a bad
	// value stops the server before it joins the job
	probe := f.cfg
	probe.Workers = func() int { return 1 }
	if err := probe.Validate(); err != nil {
		return serverStore{}, fmt.Errorf("server: %w", err)
	}
	return serverStore{cfg: f.cfg, round: f.round}, nil
}

// serverStore is the server's store configuration; round is --round-size
// (-1: the number of workers).
type serverStore struct {
	cfg   paramstore.Config
	round int
}

// runRole runs a scheduler or a server the way ps-lite's test programs do
// (ps::Start with its barrier, then ps::Finalize with its barrier), so it
// can stand in for a C++ scheduler or server in a mixed job. The server
// uses the training store without an optimizer: the element-wise sum store.
func runRole(ctx context.Context, role string) error {
	return runRoleWith(ctx, role, serverStore{cfg: paramstore.DefaultConfig()})
}

// runRoleWith is runRole with the server's store configuration.
func runRoleWith(ctx context.Context, role string, ss serverStore) error {
	cfg, err := nodeproc.Config(role)
	if err != nil {
		return err
	}
	po, release, err := nodeproc.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer release()
	var keeper func() // resumes the store, then snapshots it
	if cfg.Role == message.RoleServer {
		en, err := elastic.Open(po)
		if err != nil {
			return err
		}
		sc := ss.cfg
		sc.Logger, sc.Workers = po.Logger(), po.NumWorkers
		if ss.round == -1 {
			sc.RoundSize = po.NumWorkers
		} else if ss.round > 0 {
			sc.RoundSize = func() int { return ss.round }
		}
		store, err := paramstore.New(sc)
		if err != nil {
			return fmt.Errorf("server: %w", err)
		}
		// the store copies what it keeps; in an elastic job it hands key
		// ranges over itself, optimizer state included
		srv, err := en.NewServer(0, kv.ServerOptions{Handler: store.Handle, ReleaseRequests: true}, store)
		if err != nil {
			return err
		}
		defer srv.Close()
		serveStats(po, srv.Simple())
		if cfg.SnapshotDir != "" {
			keeper = func() { startSnapshots(ctx, po, en, store) }
		}
	}
	var bal *coord.Balancer
	if cfg.Role == message.RoleScheduler && cfg.Elastic {
		if bal, err = coord.StartScheduler(ctx, po, postoffice.OSEnv); err != nil {
			return err
		}
	}
	if err := po.Start(0); err != nil {
		return fmt.Errorf("%s start: %w", role, err)
	}
	if keeper != nil {
		// after Start (the rank is known), before the start barrier (no
		// worker has pushed yet)
		keeper()
	}
	// A node that replaced a dead one, or joined as a standby, skips the
	// start barrier, which the others passed long ago (MXNet and BytePS do
	// the same after a recovery).
	if !po.IsRecovery() && !po.IsStandby() {
		if err := po.JobBarrier(0); err != nil {
			return fmt.Errorf("%s start barrier: %w", role, err)
		}
	}
	if po.Verbose() >= 1 {
		po.Logger().Info("started", "node", po.MyNode().String())
	}
	if po.IsStandby() {
		// A standby is in no barrier group: it serves until the scheduler
		// releases it at the end of the job (or drains it).
		select {
		case <-po.Done():
		case <-ctx.Done():
		}
		if po.Left() {
			return nil
		}
		return ctx.Err()
	}
	if bal != nil {
		if err := po.FinalBarrier(0); err != nil {
			return fmt.Errorf("%s finalize: %w", role, err)
		}
		bal.Coordinator().ReleaseStandbys()
		po.Stop()
		if err := po.Failure(); err != nil {
			return fmt.Errorf("%s finalize: %w", role, err)
		}
		return ctx.Err()
	}
	if err := po.Finalize(0, true); err != nil {
		if po.Left() {
			po.Logger().Info("drained by the scheduler; leaving the job")
			return nil
		}
		return fmt.Errorf("%s finalize: %w", role, err)
	}
	return ctx.Err()
}

// startSnapshots resumes store from the latest complete snapshot of this
// server's rank in PS_SNAPSHOT_DIR and snapshots it every
// PS_SNAPSHOT_INTERVAL until ctx is done (docs/fault-tolerance.md,
// "Snapshots"). Snapshots hold ps-lite's static partition only: an elastic
// job's server skips them once its routing has moved keys (epoch > 0).
func startSnapshots(ctx context.Context, po *postoffice.Postoffice, en *elastic.Node, store *paramstore.Store) {
	log := po.Logger()
	if po.IsRecovery() || po.IsStandby() {
		log.Warn("snapshot: a restarted or standby server does not resume from snapshots: its range is the job's to report", "dir", po.Config().SnapshotDir)
		return
	}
	rank := po.MyRank()
	r := po.ServerKeyRanges()[rank]
	k := &snapshot.Keeper{
		Dir: po.Config().SnapshotDir, Rank: rank, Begin: r.Begin, End: r.End,
		Interval: po.Config().SnapshotInterval, Log: log,
	}
	if po.Config().Elastic {
		k.Skip = func() string {
			if e := en.Table().Epoch(); e != 0 {
				return fmt.Sprintf("the elastic job's routing is at epoch %d: keys may have moved off the static partition, which is all a snapshot holds", e)
			}
			return ""
		}
	}
	if k.Skip != nil && k.Skip() != "" {
		log.Warn("snapshot: not resuming from snapshots", "reason", k.Skip())
	} else if _, err := k.Resume(store); err != nil {
		log.Error("snapshot: cannot resume; the server starts empty", "err", err)
	}
	go k.Run(ctx, store)
}

// serveStats answers statsHead requests with the node's traffic counters;
// other SimpleApp requests get ps-lite's default empty reply.
func serveStats(po *postoffice.Postoffice, app *kv.SimpleApp) {
	app.SetRequestHandler(func(d kv.SimpleData, a *kv.SimpleApp) {
		body := ""
		if d.Head == statsHead {
			st := po.Stats()
			body = strconv.FormatInt(st.MsgsRecv.Load(), 10) + " " +
				strconv.FormatInt(st.BytesRecv.Load(), 10) + " " +
				strconv.FormatInt(st.BytesSent.Load(), 10)
		}
		if err := a.Response(d, []byte(body)); err != nil {
			po.Logger().Error("cannot answer a command", "err", err)
		}
	})
}

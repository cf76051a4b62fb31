// Package jobtest runs a whole job (a scheduler, servers and workers)
// inside one test process, on 127.0.0.1, over the van that
// anyvan.TestEnvVar selects. Every package's whole-job tests start their
// jobs with it, so a job is set up, started, retried on a port clash,
// checked for double releases, logged and stopped the same way everywhere.
package jobtest

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/anyvan"
	"github.com/stretchr/testify/require"
)

// LogEnvVar switches the nodes' logs on (to stderr) when set to anything:
//
//	ELASTICPS_TEST_LOG=1 go test -run TestScaleOutAndIn ./elastic/coord
//
// The names it replaced, KV_TEST_LOG and COORD_TEST_LOG, work too.
const LogEnvVar = "ELASTICPS_TEST_LOG"

// Logger is the nodes' logger: silent unless LogEnvVar is set.
func Logger() *slog.Logger {
	for _, name := range []string{LogEnvVar, "KV_TEST_LOG", "COORD_TEST_LOG"} {
		if os.Getenv(name) != "" {
			return slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// StartMode is how Start starts the nodes.
type StartMode int

const (
	// StartEach calls Start on every node (ps::StartAsync), Start(0) to
	// Start(CustomersPerWorker-1) on a worker node, all at once.
	StartEach StartMode = iota
	// StartWithBarrier calls StartWithBarrier(0) on every node at once
	// (ps::Start), as ps-lite programs do.
	StartWithBarrier
)

// DefaultTimeout is how long Start waits for the nodes to start when
// Options.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// Options describe a job.
type Options struct {
	// Servers and Workers are the numbers of server and worker nodes.
	Servers, Workers int
	// CustomersPerWorker > 1 gives each worker node that many customers,
	// started from separate goroutines; the job then counts
	// Workers*CustomersPerWorker workers, as ps-lite counts registrations.
	CustomersPerWorker int
	// GroupSize > 1 runs instance groups (DMLC_GROUP_SIZE): Servers and
	// Workers count processes, each of GroupSize nodes; process p's
	// instance i is Servers[p*GroupSize+i] (Workers likewise) and asks
	// for rank p.
	GroupSize int
	// Configure, if set, changes every node's config (the scheduler's
	// too) before the node is created.
	Configure func(*postoffice.Config)
	// Setup, if set, runs once the nodes exist and before they start
	// (install servers, workers, a coordinator). When a start fails on a
	// port clash it runs again, on the new job's nodes.
	Setup func(*Job) error
	// Start is how the nodes start; StartEach by default.
	Start StartMode
	// Van is the transport (an anyvan.Open kind); anyvan.TestKind() by
	// default. A job with its own van is the same job whatever
	// anyvan.TestEnvVar says, so Start skips it when that is set: it runs
	// in the suites' run without it (make unit), not once more per van.
	Van string
	// Timeout bounds the start; DefaultTimeout by default.
	Timeout time.Duration
}

// Job is a running job. Its nodes stop when the test ends.
type Job struct {
	Scheduler *postoffice.Postoffice
	Servers   []*postoffice.Postoffice
	Workers   []*postoffice.Postoffice

	t    testing.TB
	opts Options
	base postoffice.Config // every node's config but the role
}

// Start creates the job's nodes, runs opts.Setup, starts the nodes and
// returns once every one has started. The scheduler's port is picked free
// and bound a moment later; when another process took it in between (seen
// under go test ./..., which runs packages at once), the job is stopped
// and created again on another port (porttest.StartRetrying). When the
// test ends, its nodes stop, and the test fails if a received message was
// released twice meanwhile (van.ReleasedTwice).
func Start(t testing.TB, opts Options) *Job {
	t.Helper()
	if opts.Van != "" && os.Getenv(anyvan.TestEnvVar) != "" {
		t.Skipf("this job runs on the %s van whatever %s says: it runs when %s is unset (make unit), not again per van", opts.Van, anyvan.TestEnvVar, anyvan.TestEnvVar)
	}
	// Registered before the job's stop, so it runs after it: a message
	// released twice shows here, whatever the test itself checks.
	twice := van.ReleasedTwice()
	t.Cleanup(func() {
		if n := van.ReleasedTwice() - twice; n > 0 {
			t.Errorf("%d received messages were released twice during this test (see the van's error log)", n)
		}
	})
	return porttest.StartRetrying(t, func() (*Job, error) { return tryStart(t, opts) }, (*Job).Stop)
}

func tryStart(t testing.TB, opts Options) (*Job, error) {
	t.Helper()
	per := max(opts.CustomersPerWorker, 1)
	kind := opts.Van
	if kind == "" {
		kind = anyvan.TestKind()
	}
	wire, werr := anyvan.TestWire()
	require.NoError(t, werr)
	if kind != "zmq" {
		wire = message.WireDmlc // the other vans speak only dmlc's
	}
	j := &Job{t: t, opts: opts, base: postoffice.Config{
		Wire:          wire,
		NumWorkers:    opts.Workers * per,
		NumServers:    opts.Servers,
		SchedulerHost: "127.0.0.1",
		SchedulerPort: porttest.Free(t),
		NodeHost:      "127.0.0.1",
		VanType:       kind,
		GroupSize:     opts.GroupSize,
		Logger:        Logger(),
	}}
	j.Scheduler = j.NewNode(message.RoleScheduler, nil)
	g := max(opts.GroupSize, 1)
	instance := func(p, i int) func(*postoffice.Config) {
		if g == 1 {
			return nil
		}
		return func(c *postoffice.Config) { c.WantRank, c.Instance = p+1, i }
	}
	for p := range opts.Servers {
		for i := range g {
			j.Servers = append(j.Servers, j.NewNode(message.RoleServer, instance(p, i)))
		}
	}
	for p := range opts.Workers {
		for i := range g {
			j.Workers = append(j.Workers, j.NewNode(message.RoleWorker, instance(p, i)))
		}
	}
	if opts.Setup != nil {
		if err := opts.Setup(j); err != nil {
			return j, err
		}
	}

	type startCall struct {
		po       *postoffice.Postoffice
		customer int
	}
	var calls []startCall
	for _, po := range j.All() {
		n := 1
		if po.Role() == message.RoleWorker {
			n = per
		}
		for c := range n {
			calls = append(calls, startCall{po, c})
		}
	}
	errs := make(chan error, len(calls))
	for _, c := range calls {
		go func() {
			start := c.po.Start
			if opts.Start == StartWithBarrier {
				start = c.po.StartWithBarrier
			}
			if err := start(c.customer); err != nil {
				errs <- fmt.Errorf("%s customer %d: %w", c.po.Role(), c.customer, err)
				return
			}
			errs <- nil
		}()
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	// The first error returns at once: the other nodes may wait for the
	// one that failed, until the retry stops them.
	err := testutil.Within(t, timeout, func() error {
		for range calls {
			if err := <-errs; err != nil {
				return err
			}
		}
		return nil
	}, func() string {
		return fmt.Sprintf("the job of %d servers and %d workers did not start", opts.Servers, opts.Workers)
	})
	return j, err
}

// All returns the scheduler, the servers and the workers, in that order.
func (j *Job) All() []*postoffice.Postoffice {
	out := []*postoffice.Postoffice{j.Scheduler}
	out = append(out, j.Servers...)
	return append(out, j.Workers...)
}

// Config returns the config the job gives a node of the given role, with
// Options.Configure applied.
func (j *Job) Config(role message.Role) postoffice.Config {
	cfg := j.base
	cfg.Role = role
	if j.opts.Configure != nil {
		j.opts.Configure(&cfg)
	}
	return cfg
}

// NewNode creates (and does not start) a node of the job with the given
// role, say a replacement for a node that died or a standby; configure, if
// set, changes its config after Options.Configure. Its transport is the
// job's van (Options.Van) whatever the config's VanType. The node stops
// when the test ends.
func (j *Job) NewNode(role message.Role, configure func(*postoffice.Config)) *postoffice.Postoffice {
	j.t.Helper()
	cfg := j.Config(role)
	if configure != nil {
		configure(&cfg)
	}
	// The job's van, whatever cfg.VanType says (a test may set it for what
	// else it changes, such as the CPU share's floor).
	tcfg := cfg
	tcfg.VanType = j.base.VanType
	tr, err := postoffice.NewTransport(tcfg)
	require.NoError(j.t, err)
	po, err := postoffice.New(cfg, tr)
	if err != nil {
		_ = tr.Close()
	}
	require.NoError(j.t, err)
	j.t.Cleanup(po.Stop)
	return po
}

// Stop stops every node, at once. It may be called more than once.
func (j *Job) Stop() {
	var wg sync.WaitGroup
	for _, po := range j.All() {
		if po != nil {
			wg.Go(po.Stop)
		}
	}
	wg.Wait()
}

// BarrierTimeout bounds Barrier.
const BarrierTimeout = 30 * time.Second

// Barrier runs Barrier(0, group) on every one of nodes at once and
// requires that all return, without error, within BarrierTimeout.
func Barrier(t testing.TB, nodes []*postoffice.Postoffice, group int) {
	t.Helper()
	errs := make(chan error, len(nodes))
	for _, po := range nodes {
		go func() { errs <- po.Barrier(0, group) }()
	}
	for i := range nodes {
		err := testutil.Recv(t, errs, BarrierTimeout, func() string {
			return fmt.Sprintf("the barrier on group %d: %d of %d nodes returned", group, i, len(nodes))
		})
		require.NoError(t, err, "barrier on group %d", group)
	}
}

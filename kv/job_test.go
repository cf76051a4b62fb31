package kv

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/anyvan"
)

// job is a whole ps-lite job (scheduler, servers, workers) running in this
// test process over real ZeroMQ sockets on 127.0.0.1.
type job struct {
	t       testing.TB
	sched   *postoffice.Postoffice
	servers []*postoffice.Postoffice
	workers []*postoffice.Postoffice
}

// jobOptions tweak startJob.
type jobOptions struct {
	// customersPerWorker > 1 starts each worker node with that many
	// customers (Start(0), Start(1), ... from separate goroutines); the job
	// is then configured with numWorkers*customersPerWorker workers, as
	// ps-lite counts registrations.
	customersPerWorker int
	// inlineHandOver is postoffice.Config.InlineHandOver for every node.
	inlineHandOver time.Duration
}

func testLogger() *slog.Logger {
	if os.Getenv("KV_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startJob starts a scheduler, numServers servers and numWorkers worker
// nodes and returns once every node is ready. Cleanup stops them all.
//
// The scheduler's port is picked free and bound a moment later; when
// another test's node took it in between (seen under go test ./..., which
// runs packages at once), the job is started again on another port.
func startJob(t testing.TB, numServers, numWorkers int, opt jobOptions) *job {
	t.Helper()
	// Registered before the job's stop, so it runs after it: a message
	// released twice shows here, whatever the test itself checks.
	twice := van.ReleasedTwice()
	t.Cleanup(func() {
		if n := van.ReleasedTwice() - twice; n > 0 {
			t.Errorf("%d received messages were released twice during this test (see the van's error log)", n)
		}
	})
	return porttest.StartRetrying(t, func() (*job, error) { return tryStartJob(t, numServers, numWorkers, opt) }, (*job).stop)
}

func tryStartJob(t testing.TB, numServers, numWorkers int, opt jobOptions) (*job, error) {
	t.Helper()
	per := max(opt.customersPerWorker, 1)
	base := postoffice.Config{
		NumWorkers:    numWorkers * per,
		NumServers:    numServers,
		SchedulerHost: "127.0.0.1",
		SchedulerPort: porttest.Free(t),
		NodeHost:      "127.0.0.1",
		Logger:        testLogger(),

		InlineHandOver: opt.inlineHandOver,
	}
	newNode := func(role message.Role) *postoffice.Postoffice {
		t.Helper()
		tr, err := anyvan.FromTestEnv(base.Logger)
		if err != nil {
			t.Fatal(err)
		}
		cfg := base
		cfg.Role = role
		po, err := postoffice.New(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		return po
	}
	j := &job{t: t, sched: newNode(message.RoleScheduler)}
	for range numServers {
		j.servers = append(j.servers, newNode(message.RoleServer))
	}
	for range numWorkers {
		j.workers = append(j.workers, newNode(message.RoleWorker))
	}
	t.Cleanup(j.stop)

	type startCall struct {
		po       *postoffice.Postoffice
		customer int
	}
	calls := []startCall{{j.sched, 0}}
	for _, s := range j.servers {
		calls = append(calls, startCall{s, 0})
	}
	for _, w := range j.workers {
		for c := range per {
			calls = append(calls, startCall{w, c})
		}
	}
	errs := make(chan error, len(calls))
	for _, c := range calls {
		go func() {
			if err := c.po.Start(c.customer); err != nil {
				errs <- fmt.Errorf("%s customer %d: %w", c.po.Role(), c.customer, err)
				return
			}
			errs <- nil
		}()
	}
	timeout := time.After(30 * time.Second)
	for range calls {
		select {
		case err := <-errs:
			if err != nil {
				return j, err
			}
		case <-timeout:
			t.Fatal("job did not start within 30s")
		}
	}
	return j, nil
}

func (j *job) all() []*postoffice.Postoffice {
	out := append([]*postoffice.Postoffice{}, j.workers...)
	out = append(out, j.servers...)
	return append(out, j.sched)
}

func (j *job) stop() {
	var wg sync.WaitGroup
	for _, po := range j.all() {
		wg.Go(po.Stop)
	}
	wg.Wait()
}

// startDefaultServers installs a DefaultHandler on every server for app 0.
func (j *job) startDefaultServers() []*DefaultHandler {
	var hs []*DefaultHandler
	j.startServersWith(func(s *Server) {
		h := NewDefaultHandler()
		s.SetRequestHandler(h.Handle)
		hs = append(hs, h)
	})
	return hs
}

// startServers installs handler h on every server for app 0.
func (j *job) startServers(h ServerHandler) []*Server {
	return j.startServersWith(func(s *Server) { s.SetRequestHandler(h) })
}

// startServersWith starts a server for app 0 on every server node and lets
// setup configure it (handler, options).
func (j *job) startServersWith(setup func(*Server)) []*Server {
	j.t.Helper()
	var out []*Server
	for _, po := range j.servers {
		srv, err := NewServer(po, 0)
		if err != nil {
			j.t.Fatal(err)
		}
		j.t.Cleanup(srv.Close)
		setup(srv)
		out = append(out, srv)
	}
	return out
}

func (j *job) newWorker(i, customer int) *Worker {
	j.t.Helper()
	w, err := NewWorker(j.workers[i], 0, customer)
	if err != nil {
		j.t.Fatal(err)
	}
	j.t.Cleanup(w.Close)
	return w
}

// waitTimeout fails the test if wait does not return within d (so a lost
// response shows up as a failure, not a hung test binary).
func waitTimeout(t testing.TB, d time.Duration, what string, wait func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- wait() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("%s: no completion within %v", what, d)
		return nil
	}
}

package kv

import (
	"testing"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/stretchr/testify/require"
)

// job is a whole job (jobtest) with kv's helpers.
type job struct {
	*jobtest.Job
	t testing.TB
}

// startJob starts a job of numServers servers and numWorkers workers
// (jobtest.Start); cleanup stops it.
func startJob(t testing.TB, numServers, numWorkers int) *job {
	t.Helper()
	return startJobWith(t, jobtest.Options{Servers: numServers, Workers: numWorkers})
}

// startJobWith starts the job that opts describe.
func startJobWith(t testing.TB, opts jobtest.Options) *job {
	t.Helper()
	return &job{Job: jobtest.Start(t, opts), t: t}
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
	for _, po := range j.Servers {
		srv, err := NewServer(po, 0)
		require.NoError(j.t, err)
		j.t.Cleanup(srv.Close)
		setup(srv)
		out = append(out, srv)
	}
	return out
}

func (j *job) newWorker(i, customer int) *Worker {
	j.t.Helper()
	w, err := NewWorker(j.Workers[i], 0, customer)
	require.NoError(j.t, err)
	j.t.Cleanup(w.Close)
	return w
}

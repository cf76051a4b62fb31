package postoffice_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// each runs f on every node at once and requires that all return nil.
func each(t *testing.T, nodes []*postoffice.Postoffice, what string, f func(*postoffice.Postoffice) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, po := range nodes {
		wg.Go(func() { errs[i] = f(po) })
	}
	testutil.Within(t, 30*time.Second, func() struct{} { wg.Wait(); return struct{}{} },
		func() string { return what + ": not every node returned" })
	for i, err := range errs {
		require.NoError(t, err, "%s: node %d (%s)", what, i, nodes[i].Role())
	}
}

// suspendPhase pushes (rank+1)*(phase+1) from every worker to every key,
// then pulls and checks the store's exact value, want.
func suspendPhase(t *testing.T, servers, workers []*postoffice.Postoffice, h *kv.DefaultHandler, phase int, want float32) {
	t.Helper()
	for _, po := range servers {
		srv, err := kv.NewServer(po, 0)
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		srv.SetRequestHandler(h.Handle)
	}
	keys := []uint64{3, 1 << 40, 1<<63 + 7}
	ws := make([]*kv.Worker, len(workers))
	for i, po := range workers {
		var err error
		ws[i], err = kv.NewWorker(po, 0, 0)
		require.NoError(t, err)
		t.Cleanup(ws[i].Close)
	}
	each(t, workers, fmt.Sprintf("phase %d push", phase), func(po *postoffice.Postoffice) error {
		w := ws[0]
		for i := range workers {
			if workers[i] == po {
				w = ws[i]
			}
		}
		v := float32((po.MyRank() + 1) * (phase + 1))
		ts, err := kv.Push(w, keys, []float32{v, v, v}, nil, kv.Options{})
		if err != nil {
			return err
		}
		return w.Wait(ts)
	})
	for i, w := range ws {
		var got []float32
		ts, err := kv.Pull(w, keys, &got, nil, kv.Options{})
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts))
		assert.Equal(t, []float32{want, want, want}, got, "phase %d worker %d", phase, i)
	}
}

// BytePS's elastic suspend/resume: every node of a job of 2 workers
// finalizes, and the job starts again at the same scheduler address with 3
// workers (the scheduler too accepts the new count); the servers' store
// outlives the suspension. A third cycle goes back to 2 workers.
func TestSuspendResumeWithNewCounts(t *testing.T) {
	j := startJob(t, 2, 2, nil)
	h := kv.NewDefaultHandler()
	suspendPhase(t, j.Servers, j.Workers, h, 0, 1+2)
	each(t, j.All(), "suspend", func(po *postoffice.Postoffice) error { return po.Finalize(0, true) })

	want := float32(1 + 2)
	for phase, nw := range []int{3, 2} {
		phase++
		counts := func(c *postoffice.Config) { c.NumWorkers = nw }
		sched := j.NewNode(message.RoleScheduler, counts)
		var servers, workers []*postoffice.Postoffice
		for range 2 {
			servers = append(servers, j.NewNode(message.RoleServer, counts))
		}
		for range nw {
			workers = append(workers, j.NewNode(message.RoleWorker, counts))
		}
		all := append(append([]*postoffice.Postoffice{sched}, servers...), workers...)
		each(t, all, fmt.Sprintf("resume %d", phase), func(po *postoffice.Postoffice) error { return po.StartWithBarrier(0) })
		for _, po := range all {
			require.Equal(t, nw, po.NumWorkers(), "phase %d: the %s's worker count", phase, po.Role())
		}
		want += float32((phase + 1) * nw * (nw + 1) / 2)
		suspendPhase(t, servers, workers, h, phase, want)
		each(t, all, fmt.Sprintf("suspend %d", phase), func(po *postoffice.Postoffice) error { return po.Finalize(0, true) })
	}
}

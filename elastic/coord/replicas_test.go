package coord

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
)

func replicated(k int) func(*postoffice.Config) {
	return func(c *postoffice.Config) {
		c.Elastic = true
		c.Replicas = k
		c.HeartbeatInterval = 100 * time.Millisecond
		c.HeartbeatTimeout = 500 * time.Millisecond
	}
}

// waitReplicated waits until every node holds a table in which each
// interval has k backups.
func (j *elasticJob) waitReplicated(t *testing.T, k int, dead ...*postoffice.Postoffice) *routing.Routes {
	t.Helper()
	var r *routing.Routes
	testutil.WaitFor(t, 20*time.Second, func() bool {
		r = j.coord.Table().Current()
		for _, iv := range r.Intervals {
			if len(iv.Backups) != k {
				return false
			}
		}
		for i, en := range append(slices.Clone(j.srvEl), j.wrkEl...) {
			if i < len(j.servers) && slices.Contains(dead, j.servers[i]) {
				continue
			}
			if en.Table().Epoch() < r.Epoch {
				return false
			}
		}
		return true
	}, func() string { return "the backups were not placed: " + describe(j.coord.Table().Current()) })
	return r
}

// A job of 3 servers and 2 workers with PS_REPLICAS=1: the workers push
// integer values (several pushes outstanding each) while server rank 1
// stops abruptly. Every push is acknowledged (the ones that waited on
// the dead server went to the backup promoted in its place), the dead
// server's interval is served by its backup, the backups are topped up
// again, and the pulled values are the exact sums of every push.
func TestReplicatedJobSurvivesAServerDeath(t *testing.T) {
	const ns, nw, rounds, window = 3, 2, 600, 4
	j := startJobWith(t, ns, nw, jobOpts{configure: replicated(1)})
	r0 := j.waitReplicated(t, 1)
	for _, iv := range r0.Intervals {
		require.NotContains(t, iv.Backups, iv.Node)
	}
	ranges := j.workers[0].ServerKeyRanges()
	keys := []uint64{ranges[0].Begin + 1, ranges[1].Begin + 1, ranges[1].Begin + 2, ranges[2].Begin + 1}
	victim := j.servers[1]
	dead := victim.MyNode().ID

	var killOnce sync.Once
	var wg sync.WaitGroup
	errs := make([][]error, nw)
	for wi, w := range j.kvw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pending []int32
			for i := range rounds {
				if wi == 0 && i == rounds/3 {
					killOnce.Do(victim.Stop)
				}
				v := float32(i%5 + 1)
				ts, err := kv.Push(w, keys, []float32{v, 2 * v, 3 * v, 4 * v}, nil, kv.Options{})
				if err != nil {
					errs[wi] = append(errs[wi], err)
					continue
				}
				pending = append(pending, ts)
				if len(pending) == window {
					if err := w.Wait(pending[0]); err != nil {
						errs[wi] = append(errs[wi], err)
					}
					pending = pending[1:]
				}
			}
			for _, ts := range pending {
				if err := w.Wait(ts); err != nil {
					errs[wi] = append(errs[wi], err)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	testutil.Recv(t, done, 40*time.Second, func() string { return "the workers did not finish" })
	for wi, e := range errs {
		require.Empty(t, len(e), "worker %d: every push is acknowledged; the first failure: %v", wi, append(e, nil)[0])
	}

	var sum float32
	for i := range rounds {
		sum += float32(i%5 + 1)
	}
	sum *= nw
	want := []float32{sum, 2 * sum, 3 * sum, 4 * sum}
	for wi, w := range j.kvw {
		var got []float32
		ts, err := kv.Pull(w, keys, &got, nil, kv.Options{})
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts))
		assert.Equal(t, want, got, "worker %d: exact sums of every push", wi)
	}

	r := j.coord.Table().Current()
	for _, iv := range r.Intervals {
		assert.NotEqual(t, dead, iv.Node, "no interval stays on the dead server")
		assert.NotContains(t, iv.Backups, dead)
	}
	// k copies again: each interval has a live backup other than its owner
	j.waitReplicated(t, 1, victim)
}

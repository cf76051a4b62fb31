package coord

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
)

// gatedImport is a DefaultHandler whose Import and Replace (a backup's
// install of a copy) first run the test's gate (nil: none), which may hold
// or fail them.
type gatedImport struct {
	*kv.DefaultHandler
	gate *atomic.Pointer[func(*kv.DefaultHandler) error]
}

func (g gatedImport) Import(state []byte) error {
	if f := g.gate.Load(); f != nil {
		if err := (*f)(g.DefaultHandler); err != nil {
			return err
		}
	}
	return g.DefaultHandler.Import(state)
}

func (g gatedImport) Replace(begin, end uint64, state []byte) error {
	if f := g.gate.Load(); f != nil {
		if err := (*f)(g.DefaultHandler); err != nil {
			return err
		}
	}
	return g.DefaultHandler.Replace(begin, end, state)
}

// drainSetup is a replicated job (PS_REPLICAS=1, 3 servers) with gated
// imports, the server to drain, an interval it backs up and the server
// that is to take that copy over (neither its primary nor the drained
// one).
type drainSetup struct {
	j       *elasticJob
	gate    *atomic.Pointer[func(*kv.DefaultHandler) error]
	drained int32
	backed  routing.Interval
	heir    int32
}

func startDrainSetup(t *testing.T, workers int, timeout time.Duration) *drainSetup {
	gate := &atomic.Pointer[func(*kv.DefaultHandler) error]{}
	j := startJobWith(t, 3, workers, jobOpts{configure: replicated(1), timeout: timeout,
		migrator: func(h *kv.DefaultHandler) elastic.Migrator { return gatedImport{h, gate} }})
	r0 := j.waitReplicated(t, 1)
	d := &drainSetup{j: j, gate: gate, drained: r0.Intervals[0].Node}
	i := slices.IndexFunc(r0.Intervals, func(iv routing.Interval) bool { return iv.HasBackup(d.drained) })
	require.GreaterOrEqual(t, i, 0, "server %d backs up an interval: %s", d.drained, describe(r0))
	d.backed = r0.Intervals[i]
	for _, po := range j.servers {
		if id := po.MyNode().ID; id != d.drained && id != d.backed.Node {
			d.heir = id
		}
	}
	return d
}

// heirSeeding reports whether h is the heir's store and the coordinator's
// table names the heir a backup of the interval the drained server backed
// up: an import there is the heir's seeding of it.
func (d *drainSetup) heirSeeding(h *kv.DefaultHandler) bool {
	i := slices.IndexFunc(d.j.servers, func(po *postoffice.Postoffice) bool { return po.MyNode().ID == d.heir })
	r := d.j.coord.Table().Current()
	return h == d.j.stores[i] && r.Intervals[r.Find(d.backed.Begin)].HasBackup(d.heir)
}

// A drained server is released only once the new holder of the copy it
// held is seeded: the heir's seeding is held for a while, and the drain
// must not have returned when it goes on. Then the interval's primary
// stops right after the drain, while a worker pushes: its failover
// promotes the heir and loses no acknowledged push.
func TestDrainWaitsForTheNewHoldersSeeding(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	d := startDrainSetup(t, 1, 0)
	j := d.j
	drained := make(chan struct{})
	seeded := make(chan bool, 16) // per held seeding: the drain had not returned when it went on
	gate := func(h *kv.DefaultHandler) error {
		if !d.heirSeeding(h) {
			return nil
		}
		select {
		case <-drained:
			seeded <- false
		case <-time.After(5 * time.Second): // longer than a table waits for a node (PublishWait)
			seeded <- true
		}
		return nil
	}
	d.gate.Store(&gate)
	keys := []uint64{d.backed.Begin, d.backed.Begin + 1, d.backed.Begin + 2, d.backed.Begin + 3}
	load := startPushLoad(j, keys)
	load.atLeast(t, 20)
	_, err := j.coord.Drain(d.drained)
	close(drained)
	require.NoError(t, err)
	before := testutil.Recv(t, seeded, 10*time.Second, func() string {
		return fmt.Sprintf("the heir %d was not seeded with the keys [%d, %d)", d.heir, d.backed.Begin, d.backed.End)
	})
	require.True(t, before, "the drain of %d returned before the heir %d held its copy of [%d, %d)", d.drained, d.heir, d.backed.Begin, d.backed.End)
	r := j.coord.Table().Current()
	assert.Equal(t, []int32{d.heir}, r.Intervals[r.Find(d.backed.Begin)].Backups, "routes %s", describe(r))

	victim := j.servers[slices.IndexFunc(j.servers, func(po *postoffice.Postoffice) bool { return po.MyNode().ID == d.backed.Node })]
	victim.Stop()
	load.atLeast(t, 20)
	want := load.halt(t)
	j.assertPulled(t, keys, want)
	assert.NoError(t, j.workers[0].Failure())
}

// A drain whose heir never takes its copy fails within the coordinator's
// Timeout, naming the interval; the drained server keeps its copy and
// stays in the job.
func TestDrainFailsWhenTheNewHolderIsNotSeeded(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	d := startDrainSetup(t, 1, 3*time.Second)
	j := d.j
	gate := func(h *kv.DefaultHandler) error {
		if d.heirSeeding(h) {
			return errors.New("test: this server takes no copy")
		}
		return nil
	}
	d.gate.Store(&gate)
	_, err := j.coord.Drain(d.drained)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("keeps its copy of keys [%d, %d)", d.backed.Begin, d.backed.End))
	assert.Contains(t, err.Error(), fmt.Sprintf("new backup %d (primary %d) was not seeded", d.heir, d.backed.Node))
	assert.False(t, j.Scheduler.HasLeft(d.drained), "the drained server is not released")
	r := j.coord.Table().Current()
	assert.Equal(t, []int32{d.drained}, r.Intervals[r.Find(d.backed.Begin)].Backups, "routes %s", describe(r))
}

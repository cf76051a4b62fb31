package coord

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/postoffice"
)

// refusingImport is a server's Migrator that refuses to install copies
// (Import and Replace) while refuse is set: a backup placed then is never seeded.
type refusingImport struct {
	*kv.DefaultHandler
	refuse *atomic.Bool
}

func (m refusingImport) Import(state []byte) error {
	if m.refuse.Load() {
		return errors.New("refusingImport: this test keeps the backup unseeded")
	}
	return m.DefaultHandler.Import(state)
}

func (m refusingImport) Replace(begin, end uint64, state []byte) error {
	if m.refuse.Load() {
		return errors.New("refusingImport: this test keeps the backup unseeded")
	}
	return m.DefaultHandler.Replace(begin, end, state)
}

// allSeeded reports whether the coordinator counts every backup of its
// table as a seeded copy.
func (c *Coordinator) allSeeded() bool {
	r := c.table.Current()
	c.cmu.Lock()
	defer c.cmu.Unlock()
	for _, iv := range r.Intervals {
		for _, b := range iv.Backups {
			if !c.copies[b].Covers(iv.Begin, iv.End) {
				return false
			}
		}
	}
	return true
}

// 3 servers, PS_REPLICAS=1 (rank i's interval backed up on rank i+1).
// Server rank 1 dies: its interval goes to rank 2, whose new backup
// (rank 0) cannot install its copy. Then rank 2 dies before that backup is
// seeded: the interval rank 2 took over is lost (the backup holds none of
// its values), reported so on every node, while rank 2's own interval,
// whose backup was seeded at the start, fails over.
func TestUnseededBackupIsNoCopy(t *testing.T) {
	t.Parallel() // waits on death detection and move timers, not the CPU
	var refuse atomic.Bool
	j := startJobWith(t, 3, 1, jobOpts{configure: replicated(1), migrator: func(h *kv.DefaultHandler) elastic.Migrator {
		return refusingImport{h, &refuse}
	}})
	j.waitReplicated(t, 1)
	testutil.WaitFor(t, 20*time.Second, j.coord.allSeeded, func() string { return "the backups were not reported seeded: " + describe(j.coord.Table().Current()) })
	ranges := j.workers[0].ServerKeyRanges()
	rank := func(r int) *postoffice.Postoffice {
		for _, po := range j.servers {
			if po.MyRank() == r {
				return po
			}
		}
		t.Fatalf("no server of rank %d", r)
		return nil
	}
	zero, first, second := rank(0), rank(1), rank(2)
	ts, err := kv.Push(j.kvw[0], []uint64{ranges[1].Begin, ranges[2].Begin}, []float32{3, 4}, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, j.kvw[0].Wait(ts))

	refuse.Store(true)
	first.Stop()
	live := []*postoffice.Postoffice{j.Scheduler, zero, second, j.workers[0]}
	for _, po := range live {
		testutil.WaitFor(t, 10*time.Second, func() bool { g, ok := po.Gone(first.MyNode().ID); return ok && g.FailedOver },
			func() string {
				return fmt.Sprintf("%s %d was not told the first failover lost nothing", po.Role(), po.MyNode().ID)
			})
	}
	r := j.coord.Table().Current()
	i := r.Find(ranges[1].Begin)
	require.Equal(t, second.MyNode().ID, r.Intervals[i].Node, "rank 2 took over rank 1's interval: %s", describe(r))
	require.Equal(t, []int32{zero.MyNode().ID}, r.Intervals[i].Backups, "rank 0 is its new backup: %s", describe(r))
	require.False(t, j.coord.allSeeded(), "rank 0 refused its copy")

	second.Stop()
	dead := second.MyNode().ID
	want := fmt.Sprintf("the values of its intervals [%d, %d) are lost: none had a live backup holding a seeded copy", ranges[1].Begin, ranges[1].End)
	for _, po := range []*postoffice.Postoffice{j.Scheduler, zero, j.workers[0]} {
		testutil.WaitFor(t, 10*time.Second, func() bool { err := po.Failure(); return err != nil && strings.Contains(err.Error(), want) },
			func() string {
				return fmt.Sprintf("%s %d was not told the second failover lost values: %v", po.Role(), po.MyNode().ID, po.Failure())
			})
		g, ok := po.Gone(dead)
		require.True(t, ok)
		assert.False(t, g.FailedOver, "%s %d", po.Role(), po.MyNode().ID)
		assert.ErrorIs(t, po.Failure(), postoffice.ErrNodesLost)
	}
	// the lost interval stays on the dead server without backups: nobody
	// can seed one, and workers would wait for a failover that cannot come
	r = j.coord.Table().Current()
	assert.Empty(t, r.Intervals[r.Find(ranges[1].Begin)].Backups, describe(r))
	// rank 2's own interval had a seeded backup: rank 0 serves its values
	assert.Equal(t, zero.MyNode().ID, r.Intervals[r.Find(ranges[2].Begin)].Node, describe(r))
	var got []float32
	ts, err = kv.Pull(j.kvw[0], []uint64{ranges[2].Begin}, &got, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, j.kvw[0].Wait(ts))
	assert.Equal(t, []float32{4}, got)
}

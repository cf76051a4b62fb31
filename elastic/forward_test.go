package elastic_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
)

// TestForwardToANonBackupIsRefused: a server applies a forwarded push
// (MsgReplicate) only where its routing table names it a backup of the
// push's keys and the sender their primary. Forwarded by the primary to
// the third server of a PS_REPLICAS=1 job, the push is answered "not a
// backup" (the primary goes on without it) and changes nothing there;
// forwarded to the backup, it is applied; forwarded by a server that is
// not the keys' primary, it is an error.
func TestForwardToANonBackupIsRefused(t *testing.T) {
	var srvEl []*elastic.Node
	var cd *coord.Coordinator
	job := jobtest.Start(t, jobtest.Options{Servers: 3, Workers: 1, Start: jobtest.StartWithBarrier,
		Configure: func(c *postoffice.Config) { c.Elastic, c.Replicas = true, 1 },
		Setup: func(job *jobtest.Job) error {
			var err error
			if cd, err = coord.New(job.Scheduler); err != nil {
				return err
			}
			for _, po := range job.Servers {
				en, err := elastic.Attach(po)
				if err != nil {
					return err
				}
				h := kv.NewDefaultHandler()
				if _, err := en.NewServer(0, kv.ServerOptions{Handler: h.Handle}, h); err != nil {
					return err
				}
				srvEl = append(srvEl, en)
			}
			return nil
		}})
	var r *routing.Routes
	testutil.WaitFor(t, 20*time.Second, func() bool {
		r = cd.Table().Current()
		for _, iv := range r.Intervals {
			if len(iv.Backups) != 1 {
				return false
			}
		}
		for _, en := range srvEl {
			if en.Table().Epoch() < r.Epoch {
				return false
			}
		}
		return true
	}, func() string { return "the backups were not placed" })

	iv := r.Intervals[0]
	byID := map[int32]*elastic.Node{}
	var third int32
	for i, po := range job.Servers {
		id := po.MyNode().ID
		byID[id] = srvEl[i]
		if id != iv.Node && !slices.Contains(iv.Backups, id) {
			third = id
		}
	}
	require.NotZero(t, third)
	push := &message.Message{
		Meta: message.Meta{Sender: job.Workers[0].MyNode().ID, Timestamp: 1000, Request: true, Push: true},
		Data: [][]byte{kv.KeysToBytes([]uint64{iv.Begin}), kv.AsBytes([]float32{5})},
	}

	ans, err := elastic.ForwardForTest(byID[iv.Node], third, push)
	require.NoError(t, err)
	assert.Equal(t, []byte{1}, ans, "the third server answers: not a backup")
	assert.EqualValues(t, 1, byID[third].ForwardsNotBackup())

	ans, err = elastic.ForwardForTest(byID[iv.Node], iv.Backups[0], push)
	require.NoError(t, err)
	assert.Empty(t, ans, "the backup applies it")
	assert.EqualValues(t, 0, byID[iv.Backups[0]].ForwardsNotBackup())

	push.Meta.Timestamp++
	_, err = elastic.ForwardForTest(byID[third], iv.Backups[0], push)
	assert.ErrorContains(t, err, "as the primary of key")
}

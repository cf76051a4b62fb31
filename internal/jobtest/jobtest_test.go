package jobtest

import (
	"errors"
	"testing"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A job of two servers and one worker node with two customers: the job
// counts two workers, every node has its rank's id, Configure reached
// every node, and a barrier on the scheduler and servers completes.
func TestStartEach(t *testing.T) {
	j := Start(t, Options{Servers: 2, Workers: 1, CustomersPerWorker: 2, Van: "mem",
		Configure: func(c *postoffice.Config) { c.Verbose = 1 }})
	require.Len(t, j.Servers, 2)
	require.Len(t, j.Workers, 1)
	all := j.All()
	require.Len(t, all, 4)
	assert.Same(t, j.Scheduler, all[0], "All lists the scheduler first")
	assert.Equal(t, int32(message.SchedulerID), j.Scheduler.MyNode().ID)
	ids := map[int32]bool{}
	for _, po := range j.Servers {
		ids[po.MyNode().ID] = true
	}
	assert.Equal(t, map[int32]bool{int32(message.ServerRankToID(0)): true, int32(message.ServerRankToID(1)): true}, ids)
	for _, po := range all {
		assert.Equal(t, 2, po.NumWorkers(), "%s counts a registration per customer", po.Role())
		assert.Equal(t, 1, po.Config().Verbose, "%s: Configure", po.Role())
	}
	// (a barrier with the worker would need both its customers)
	Barrier(t, all[:3], message.SchedulerGroup|message.ServerGroup)
}

// Setup runs once, on the created nodes, before they start; with
// StartWithBarrier the job is past its first barrier when Start returns.
func TestSetupBeforeStartWithBarrier(t *testing.T) {
	calls := 0
	var seen *Job
	j := Start(t, Options{Servers: 1, Workers: 1, Van: "mem", Start: StartWithBarrier, Setup: func(j *Job) error {
		calls++
		seen = j
		assert.Len(t, j.Servers, 1, "Setup sees the servers")
		assert.Len(t, j.Workers, 1, "Setup sees the workers")
		return nil
	}})
	assert.Equal(t, 1, calls)
	assert.Same(t, j, seen)
	Barrier(t, j.All(), message.AllGroup)
}

// A Setup error fails the test; NewNode gives a node of the job's config
// with its own changes on top.
func TestSetupErrorAndNewNode(t *testing.T) {
	f := testutil.CatchFailure(t, func(tb testing.TB) {
		Start(tb, Options{Servers: 1, Workers: 1, Van: "mem", Setup: func(*Job) error { return errors.New("no setup") }})
		tb.Error("Start returned")
	})
	assert.True(t, f.Stopped)
	assert.Contains(t, f.Message, "no setup")

	j := Start(t, Options{Servers: 1, Workers: 1, Van: "mem", Configure: func(c *postoffice.Config) { c.Verbose = 2 }})
	po := j.NewNode(message.RoleServer, func(c *postoffice.Config) { c.Standby = true })
	cfg := po.Config()
	assert.Equal(t, message.RoleServer, cfg.Role)
	assert.True(t, cfg.Standby)
	assert.Equal(t, 2, cfg.Verbose)
	assert.Equal(t, j.Scheduler.Config().SchedulerPort, cfg.SchedulerPort)
}

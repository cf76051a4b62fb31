package postoffice_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// resendTimeout is the PS_RESEND timeout of the resend tests: a node gives
// up on a message after 10 resends, and 10 timeouts must outlast the
// scheduling delays of a loaded 2-core machine, or a slow ACK reads as a
// lost one.
const resendTimeout = 200 * time.Millisecond

// resendJob starts a 2x2 job with PS_RESEND at resendTimeout and drop percent
// of PS_DROP_MSG; setup, if set, runs before the nodes start.
func resendJob(t *testing.T, drop int, setup func(*jobtest.Job)) *jobtest.Job {
	t.Helper()
	return jobtest.Start(t, jobtest.Options{Servers: 2, Workers: 2,
		Configure: func(c *postoffice.Config) {
			c.Resend, c.ResendTimeout, c.DropPercent = true, resendTimeout, drop
		},
		Setup: func(j *jobtest.Job) error {
			if setup != nil {
				setup(j)
			}
			return nil
		},
	})
}

// finalizeAll runs Finalize(0, true) on every node at once and requires
// that every one returns nil within 30 s.
func finalizeAll(t *testing.T, j *jobtest.Job) {
	t.Helper()
	nodes := j.All()
	errs := make(chan error, len(nodes))
	for _, p := range nodes {
		go func() { errs <- p.Finalize(0, true) }()
	}
	for i := range nodes {
		err := testutil.Recv(t, errs, 30*time.Second, func() string {
			return fmt.Sprintf("Finalize: %d of %d nodes returned", i, len(nodes))
		})
		require.NoError(t, err)
	}
}

// assertNoResendFailure checks that no node gave up on a message or
// stopped with an end-critical message unacknowledged.
func assertNoResendFailure(t *testing.T, j *jobtest.Job) {
	t.Helper()
	for _, p := range j.All() {
		gaveUp, unsettled := p.ResendFailures()
		assert.Zero(t, gaveUp, "%s gave up on messages", p.MyNode())
		assert.Zero(t, unsettled, "%s stopped with unacknowledged releases", p.MyNode())
	}
}

// waitAcknowledged waits until no node of j has a message unacknowledged.
func waitAcknowledged(t *testing.T, j *jobtest.Job) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() bool {
		for _, p := range j.All() {
			if p.Unacknowledged() != 0 {
				return false
			}
		}
		return true
	}, func() string {
		s := ""
		for _, p := range j.All() {
			s += fmt.Sprintf("%s: %d unacknowledged; ", p.MyNode(), p.Unacknowledged())
		}
		return s
	})
}

// Every registration, sent before the node has an id, and every node list,
// received before it, is acknowledged: once the job runs, nothing is left
// to resend anywhere.
func TestResendRegistrationAcknowledged(t *testing.T) {
	j := resendJob(t, 0, nil)
	waitAcknowledged(t, j)
	finalizeAll(t, j)
	assertNoResendFailure(t, j)
}

// The scheduler receives resends of the registrations while it waits for
// the last node (held back here): it counts each node once, and the job
// gets the ids of its ranks.
func TestResendRegistrationDuplicatesCountOnce(t *testing.T) {
	j := resendJob(t, 0, func(j *jobtest.Job) {
		var mu sync.Mutex
		copies := map[int32]int{} // ADD_NODE receipts by port
		var held int32            // the port of the node held back
		j.Scheduler.DropReceived(func(m *message.Message) bool {
			if m.Meta.Control.Cmd != message.CmdAddNode || len(m.Meta.Control.Nodes) != 1 {
				return false
			}
			port := m.Meta.Control.Nodes[0].Port
			mu.Lock()
			defer mu.Unlock()
			if held == 0 && m.Meta.Control.Nodes[0].Role == message.RoleWorker {
				held = port
			}
			if port != held {
				copies[port]++
				return false
			}
			// Held until each of the three others was received thrice.
			for _, n := range copies {
				if n < 3 {
					return true
				}
			}
			return len(copies) < 3
		})
	})
	ids := map[int32]bool{}
	for _, p := range append(j.Servers, j.Workers...) {
		ids[p.MyNode().ID] = true
	}
	assert.Equal(t, map[int32]bool{8: true, 9: true, 10: true, 11: true}, ids)
	finalizeAll(t, j)
	assertNoResendFailure(t, j)
}

// dropOnce returns a filter that drops the first message match accepts
// once armed is set, and sets dropped then.
func dropOnce(armed, dropped *atomic.Bool, match func(*message.Message) bool) func(*message.Message) bool {
	return func(m *message.Message) bool {
		return armed.Load() && match(m) && dropped.CompareAndSwap(false, true)
	}
}

func isRelease(m *message.Message) bool {
	return m.Meta.Control.Cmd == message.CmdBarrier && !m.Meta.Request
}

// finalizeLosingOne starts a job, makes the node at(j) drop the first
// message match accepts once the start's messages are acknowledged, and
// finalizes every node: all return, nothing is given up.
func finalizeLosingOne(t *testing.T, at func(*jobtest.Job) *postoffice.Postoffice, match func(*message.Message) bool) {
	t.Helper()
	var armed, dropped atomic.Bool
	j := resendJob(t, 0, func(j *jobtest.Job) { at(j).DropReceived(dropOnce(&armed, &dropped, match)) })
	waitAcknowledged(t, j)
	armed.Store(true)
	finalizeAll(t, j)
	require.True(t, dropped.Load(), "the message to lose was never received")
	assertNoResendFailure(t, j)
}

// issue 24: a worker loses the scheduler's final barrier release. The
// scheduler, released itself, waits for the acknowledgement before it
// stops, and resends: the worker finalizes too.
func TestResendFinalReleaseLost(t *testing.T) {
	finalizeLosingOne(t, func(j *jobtest.Job) *postoffice.Postoffice { return j.Workers[0] }, isRelease)
}

// The scheduler loses a worker's ACK of the final release: it resends the
// release, and the worker, which lingers after its release, acknowledges
// it again, so that the scheduler stops without giving up.
func TestResendFinalReleaseAckLost(t *testing.T) {
	finalizeLosingOne(t, func(j *jobtest.Job) *postoffice.Postoffice { return j.Scheduler }, func(m *message.Message) bool {
		return m.Meta.Control.Cmd == message.CmdAck && m.Meta.Sender == int32(message.WorkerRankToID(0))
	})
}

// A node loses the scheduler's ACK of its barrier request and sends it
// again: the scheduler counts it once, so that the barrier still waits for
// the others (the other worker is released only with everyone).
func TestResendBarrierRequestAckLost(t *testing.T) {
	var armed, dropped atomic.Bool
	w0 := int32(message.WorkerRankToID(0))
	j := resendJob(t, 0, func(j *jobtest.Job) {
		j.Workers[0].DropReceived(dropOnce(&armed, &dropped, func(m *message.Message) bool {
			return m.Meta.Control.Cmd == message.CmdAck && m.Meta.Sender == message.SchedulerID
		}))
	})
	waitAcknowledged(t, j) // the ACK dropped is the barrier request's
	armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- j.Workers[0].Barrier(0, message.WorkerGroup) }()
	// Its resent request reaches the scheduler and is dropped there.
	testutil.WaitFor(t, 10*time.Second, func() bool { return dropped.Load() && j.Workers[0].Unacknowledged() == 0 }, func() string {
		return fmt.Sprintf("worker %d: %d unacknowledged", w0, j.Workers[0].Unacknowledged())
	})
	select {
	case err := <-done:
		t.Fatalf("worker 0 was released alone from a barrier of two workers: %v", err)
	default:
	}
	require.NoError(t, j.Workers[1].Barrier(0, message.WorkerGroup))
	require.NoError(t, testutil.Recv(t, done, 10*time.Second, func() string { return "worker 0's barrier" }))
	finalizeAll(t, j)
	assertNoResendFailure(t, j)
}

// Stress (issue 24): short jobs, each started, put through barriers and
// finalized under 10% loss. Every job ends,
// and no node gives up on a message.
func TestResendStressJobs(t *testing.T) {
	t.Parallel() // waits on heartbeat and resend timers, not the CPU
	jobs := 8
	if testing.Short() {
		jobs = 3
	}
	for i := range jobs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			j := resendJob(t, 10, nil)
			for range 5 {
				jobtest.Barrier(t, j.All(), message.AllGroup)
			}
			finalizeAll(t, j)
			assertNoResendFailure(t, j)
		})
	}
}

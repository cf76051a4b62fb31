package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// startHaltedMove starts an elastic job of servers servers whose scheduler stops
// moving keys [0, 1000) from server 8 to server 10 after phase
// (ELASTICPS_TEST_MOVE_HALT), and waits until it has stopped there.
func startHaltedMove(t *testing.T, phase string, servers int, extra ...string) *schedRestartJob {
	j := startSchedRestartJob(t, true, servers, append([]string{"ELASTICPS_TEST_MOVE_HALT=" + phase}, extra...)...)
	// The move never answers: its scheduler dies in the middle of it.
	mv := exec.Command(elasticpsBin, "ctl", "--addr", j.ctlAddr, "move", "0", "1000", "10")
	require.NoError(t, mv.Start())
	t.Cleanup(func() { _ = mv.Process.Kill(); _ = mv.Wait() })
	j.sched.waitFor(t, "coord: halted the move after its phase")
	require.Contains(t, lastLine(j.sched.output(), "coord: halted the move"), "phase="+phase)
	return j
}

// restartScheduler kills the scheduler with SIGKILL and starts it again
// 2 s later with the same environment (without the halt), then waits
// until it rebuilt the job and resolved the move it was in the middle of.
func (j *schedRestartJob) restartScheduler(t *testing.T) string {
	kill9(t, j.sched)
	time.Sleep(2 * time.Second)
	j.sched = j.add(start(t, "scheduler-restarted", j.env("DMLC_ROLE=scheduler", "ELASTICPS_TEST_MOVE_HALT="), elasticpsBin, "scheduler"))
	j.sched.waitFor(t, "restarted into a running job")
	j.sched.waitFor(t, "coord: resolved a move the previous scheduler left half-done")
	return lastLine(j.sched.output(), "coord: resolved a move")
}

// The scheduler dies between the phases of a move and is restarted: it
// learns from the servers how far the move got and ends it, rolled back
// when the new owner had not installed the keys (the old owner's export,
// which only the dead scheduler had received, goes back to it), completed
// when it had; also with PS_REPLICAS=1 (3 servers). The workers push all
// along; their sums are exact and every process exits 0. In "lost-*", the
// old owner (after its export) or the new owner (after its install) is
// killed too: no live server holds the keys, so they are routed to the
// dead server (requests for them fail instead of being answered empty)
// and reported lost, naming the range, and the job exits non-zero.
func TestInterruptedMoveResolvedAfterRestart(t *testing.T) {
	t.Parallel() // kills the scheduler and waits 2 s and on heartbeats, not the CPU; its own ports
	for _, tc := range []struct {
		phase, oldOwner, outcome string
		owner                    string // server of [0, 1000) afterwards
		replicas                 bool   // PS_REPLICAS=1, 3 servers
	}{
		{"export", "exported", "rolled back", "8", false},
		{"import", "exported", "completed", "10", false},
		{"export", "exported", "rolled back", "8", true},
		{"import", "exported", "completed", "10", true},
	} {
		name, servers, extra := tc.phase, 2, []string(nil)
		if tc.replicas {
			name, servers, extra = tc.phase+"-replicated", 3, []string{"PS_REPLICAS=1"}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // a job of its own that waits 2 s and on heartbeats
			j := startHaltedMove(t, tc.phase, servers, extra...)
			resolved := j.restartScheduler(t)
			assert.Contains(t, resolved, "old_owner="+tc.oldOwner, resolved)
			assert.Contains(t, resolved, tc.outcome, resolved)
			status := j.ctl("status")
			require.Regexp(t, regexp.MustCompile(`(?m)^0\s+\d+\s+`+tc.owner+`\s*$`), status, "keys [0, 1000) should be on server %s, moving no more:\n%s", tc.owner, status)
			j.pushOn(t, "after the move was resolved")
			if tc.replicas && tc.owner == "10" {
				// the completed move's keys have their backups: the new
				// owner's death loses nothing
				victim := j.serverWithID(t, 10)
				kill9(t, victim)
				j.sched.waitFor(t, "coord: failover")
				assert.Contains(t, lastLine(j.sched.output(), "coord: failover"), "lost=0 ")
				j.servers = slices.DeleteFunc(j.servers, func(p *proc) bool { return p == victim })
				j.pushOn(t, "after the failover")
			}
			j.finish(t)
			assert.NotContains(t, j.sched.output(), "are lost")
		})
	}
	// No live server holds the keys: the old owner died after its export,
	// or the new owner, which may have applied pushes since it installed
	// them, died.
	for _, tc := range []struct {
		name, phase string
		victim      int32
	}{{"lost-old-owner", "export", 8}, {"lost-new-owner", "import", 10}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a job of its own that waits 2 s and on heartbeats
			j := startHaltedMove(t, tc.phase, 2)
			victim := j.serverWithID(t, tc.victim)
			other := j.servers[0]
			if other == victim {
				other = j.servers[1]
			}
			kill9(t, victim)
			resolved := j.restartScheduler(t)
			assert.Contains(t, resolved, "outcome=lost", resolved)
			status := j.ctl("status")
			require.Regexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^0\s+\d+\s+%d\s*$`, tc.victim)), status, "keys [0, 1000) should be routed to the dead server %d:\n%s", tc.victim, status)
			require.NoError(t, os.WriteFile(j.signal, nil, 0o644))
			for _, p := range append([]*proc{j.sched, other}, j.workers...) {
				assert.NotZero(t, p.exitCode(t), "%s exited 0:\n%s", p.name, p.output())
			}
			for _, p := range []*proc{j.sched, other} {
				assert.Contains(t, p.output(), "the values of keys [0, 1000) are lost", p.name)
			}
			for _, w := range j.workers {
				assert.Contains(t, w.output(), fmt.Sprintf("server %d (rank %d", tc.victim, (tc.victim-8)/2), w.name)
			}
		})
	}
}

// The same deaths with PS_REPLICAS=1 (3 servers) lose nothing. The old
// owner died after its export: its backup holds every push it applied
// (pushes for the keys were parked on the new owner since the cut), so the
// keys go back to it and its failover promotes the backup. The new owner
// died after its install: it applied nothing before the move's commit
// table, so the old owner's export is whole and goes back to it. The
// workers push on, their sums are exact and every live process exits 0.
func TestInterruptedReplicatedMoveWithADeadOwner(t *testing.T) {
	t.Parallel() // kills the scheduler and waits 2 s and on heartbeats, not the CPU; its own ports
	for _, tc := range []struct {
		name, phase, outcome string
		victim               int32
	}{
		{"old-owner", "export", "for its failover", 8},
		{"new-owner", "import", "rolled back (the export went back to the old owner)", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a job of its own that waits 2 s and on heartbeats
			j := startHaltedMove(t, tc.phase, 3, "PS_REPLICAS=1")
			victim := j.serverWithID(t, tc.victim)
			kill9(t, victim)
			j.servers = slices.DeleteFunc(j.servers, func(p *proc) bool { return p == victim })
			resolved := j.restartScheduler(t)
			assert.Contains(t, resolved, tc.outcome, resolved)
			if tc.victim == 8 {
				j.sched.waitFor(t, "coord: failover")
				assert.Contains(t, lastLine(j.sched.output(), "coord: failover"), "lost=0 ")
			}
			status := j.ctl("status")
			require.Regexp(t, regexp.MustCompile(`(?m)^0\s+\d+\s+(8|10|12)\s*$`), status, "keys [0, 1000) moving no more:\n%s", status)
			require.NotRegexp(t, regexp.MustCompile(fmt.Sprintf(`(?m)^0\s+\d+\s+%d\s*$`, tc.victim)), status, "keys [0, 1000) still on the dead server:\n%s", status)
			j.pushOn(t, "after the move was resolved")
			j.finish(t)
			assert.NotContains(t, j.sched.output(), "are lost")
		})
	}
}

// serverWithID is the server process that has node id id.
func (j *schedRestartJob) serverWithID(t *testing.T, id int32) *proc {
	t.Helper()
	for _, p := range j.servers {
		if strings.Contains(p.output(), fmt.Sprintf(" id=%d ", id)) {
			return p
		}
	}
	require.Failf(t, "no such server", "no server process has id %d", id)
	return nil
}

// pushOn waits until every worker pushed a few more rounds; when says
// after what.
func (j *schedRestartJob) pushOn(t *testing.T, when string) {
	t.Helper()
	for _, w := range j.workers {
		n := rounds(w)
		testutil.WaitFor(t, 30*time.Second, func() bool { return rounds(w) > n+2 },
			func() string { return w.name + " does not push " + when + ":\n" + w.output() })
	}
}

// The scheduler dies while it publishes a move's last table: the servers
// have it, the workers still hold the move's cut-over table. Restarted,
// it takes the newest table (the servers') over from the running job and
// sends it to the workers, which re-registered with the older one. The
// keys stay on the new owner, the workers push on, their sums are exact
// and every process exits 0; also with PS_REPLICAS=1 (3 servers).
func TestMoveCommitThatReachedOnlyTheServers(t *testing.T) {
	t.Parallel() // waits on the restart delay and heartbeat timers, not the CPU
	for _, replicas := range []bool{false, true} {
		name, servers, extra := "unreplicated", 2, []string(nil)
		if replicas {
			name, servers, extra = "replicated", 3, []string{"PS_REPLICAS=1"}
		}
		t.Run(name, func(t *testing.T) {
			j := startHaltedMove(t, "commit", servers, extra...)
			kill9(t, j.sched)
			time.Sleep(2 * time.Second)
			j.sched = j.add(start(t, "scheduler-restarted", j.env("DMLC_ROLE=scheduler", "ELASTICPS_TEST_MOVE_HALT="), elasticpsBin, "scheduler"))
			j.sched.waitFor(t, "coord: routing table taken over from the running job")
			assert.Contains(t, lastLine(j.sched.output(), "coord: routing table taken over"), "[0,1000)->10", "the servers' table, the move's last")
			assert.Contains(t, j.sched.output(), "re-registered holding routing epoch", "a worker re-registered with the move's earlier table")
			status := j.ctl("status")
			require.Regexp(t, regexp.MustCompile(`(?m)^0\s+\d+\s+10\s*$`), status, "keys [0, 1000) should be on server 10, moving no more:\n%s", status)
			j.pushOn(t, "after the restart")
			j.finish(t)
			assert.NotContains(t, j.sched.output(), "are lost")
		})
	}
}

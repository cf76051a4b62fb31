package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// startHaltedMove starts an elastic job of 2 servers whose scheduler stops
// moving keys [0, 1000) from server 8 to server 10 after phase
// (ELASTICPS_TEST_MOVE_HALT), and waits until it has stopped there.
func startHaltedMove(t *testing.T, phase string) *schedRestartJob {
	j := startSchedRestartJob(t, true, 2, "ELASTICPS_TEST_MOVE_HALT="+phase)
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
// when it had. The workers push all along; their sums are exact and every
// process exits 0. In "lost", the old owner is killed too after it exported
// the keys: no live server holds them, so they are routed to the dead
// server (requests for them fail instead of being answered empty) and
// reported lost, naming the range, and the job exits non-zero.
func TestInterruptedMoveResolvedAfterRestart(t *testing.T) {
	for _, tc := range []struct {
		phase, oldOwner, outcome string
		owner                    string // server of [0, 1000) afterwards
	}{
		{"export", "exported", "rolled back", "8"},
		{"import", "exported", "completed", "10"},
	} {
		t.Run(tc.phase, func(t *testing.T) {
			j := startHaltedMove(t, tc.phase)
			resolved := j.restartScheduler(t)
			assert.Contains(t, resolved, "old_owner="+tc.oldOwner, resolved)
			assert.Contains(t, resolved, tc.outcome, resolved)
			status := j.ctl("status")
			require.Regexp(t, regexp.MustCompile(`(?m)^0\s+\d+\s+`+tc.owner+`\s*$`), status, "keys [0, 1000) should be on server %s, moving no more:\n%s", tc.owner, status)
			for _, w := range j.workers {
				n := rounds(w)
				testutil.WaitFor(t, 30*time.Second, func() bool { return rounds(w) > n+2 },
					func() string { return w.name + " does not push after the move was resolved:\n" + w.output() })
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
			j := startHaltedMove(t, tc.phase)
			victim, other := j.servers[0], j.servers[1]
			if !strings.Contains(victim.output(), fmt.Sprintf(" id=%d ", tc.victim)) {
				victim, other = other, victim
			}
			require.Contains(t, victim.output(), fmt.Sprintf(" id=%d ", tc.victim))
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

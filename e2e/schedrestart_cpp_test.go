package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/internal/testutil"
)

// kill -9 of the scheduler of a job of C++ servers (KVServerDefaultHandle)
// and C++ workers through the bridge (compat_tests' test_replicated,
// without replicas), restarted 2 s later with the same environment: the
// C++ nodes re-register with it, the workers push on all along, the final
// barrier works, the sums are exact and every process exits 0.
func TestSchedulerKilledAndRestartedCpp(t *testing.T) {
	t.Parallel() // waits on the restart delay and heartbeat timers, not the CPU
	prog := compatProgram(t, "test_replicated")
	port := porttest.Free(t)
	signal := filepath.Join(t.TempDir(), "done")
	env := func(extra ...string) []string {
		return append([]string{"DMLC_NUM_SERVER=2", "DMLC_NUM_WORKER=2", "DMLC_PS_ROOT_URI=127.0.0.1",
			fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1",
			"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=4", "PS_VERBOSE=1",
			"REPL_SERVER=default", "REPL_SIGNAL=" + signal}, extra...)
	}
	add := newE2EJob(t).add
	sched := add(start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler"))
	var servers, workers []*proc
	for i := range 2 {
		servers = append(servers, add(start(t, fmt.Sprintf("server%d", i), env("DMLC_ROLE=server"), prog)))
	}
	for i := range 2 {
		workers = append(workers, add(start(t, fmt.Sprintf("worker%d", i), env("DMLC_ROLE=worker"), prog)))
	}
	for _, w := range workers {
		w.waitFor(t, "pushed 100 rounds")
	}

	kill9(t, sched)
	pushed := make([]int, len(workers))
	for i, w := range workers {
		pushed[i] = strings.Count(w.output(), " rounds\n")
	}
	time.Sleep(2 * time.Second)
	for i, w := range workers {
		assert.Greater(t, strings.Count(w.output(), " rounds\n"), pushed[i], "%s pushed on while the scheduler was down", w.name)
	}
	sched = add(start(t, "scheduler-restarted", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler"))
	sched.waitFor(t, "restarted into a running job")
	for _, w := range workers {
		n := strings.Count(w.output(), " rounds\n")
		testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Count(w.output(), " rounds\n") > n+1 },
			func() string { return w.name + " stopped pushing after the restart" })
	}
	require.NoError(t, os.WriteFile(signal, nil, 0o644))
	for _, w := range workers {
		w.waitFor(t, "exact sums")
	}
	for _, p := range append(append([]*proc{sched}, servers...), workers...) {
		assert.Zero(t, p.exitCode(t), "%s exited non-zero:\n%s", p.name, p.output())
		assert.NotContains(t, p.output(), "COMPAT FAIL", p.name)
		assert.NotContains(t, p.output(), "lost nodes", p.name)
	}
}

// The same with a worker process of two customers, counted as the job's
// two workers (ps-lite's multi-customer processes): it re-registers both
// with the restarted scheduler, which makes the second customer's rank an
// alias of its id again instead of declaring a worker dead; both push on,
// pass the final barriers and pull exact sums, and every process exits 0.
func TestSchedulerKilledAndRestartedMultiCustomer(t *testing.T) {
	t.Parallel() // waits on the restart delay and heartbeat timers, not the CPU
	port := porttest.Free(t)
	signal := filepath.Join(t.TempDir(), "done")
	env := func(extra ...string) []string {
		return append([]string{"DMLC_NUM_SERVER=1", "DMLC_NUM_WORKER=2", "DMLC_PS_ROOT_URI=127.0.0.1",
			fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1",
			"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=4", "PS_VERBOSE=1"}, extra...)
	}
	add := newE2EJob(t).add
	sched := add(start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler"))
	server := add(start(t, "server", env("DMLC_ROLE=server"), elasticpsBin, "server"))
	worker := add(start(t, "worker", env("DMLC_ROLE=worker", "ELASTICPS_E2E_NODE=two-customers", "E2E_SIGNAL_FILE="+signal), selfExe(t)))
	worker.waitFor(t, "customer 0 rounds=")
	worker.waitFor(t, "customer 1 rounds=")

	kill9(t, sched)
	time.Sleep(2 * time.Second)
	sched = add(start(t, "scheduler-restarted", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler"))
	sched.waitFor(t, "rebuilt the running job")
	assert.Contains(t, sched.output(), "shares id 9 (alias 11): another customer of its process")
	assert.NotContains(t, sched.output(), "did not re-register")
	n := strings.Count(worker.output(), "rounds=")
	testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Count(worker.output(), "rounds=") > n+2 },
		func() string { return "the worker stopped pushing after the restart" })
	require.NoError(t, os.WriteFile(signal, nil, 0o644))
	worker.waitFor(t, "customer 0 OK after")
	worker.waitFor(t, "customer 1 OK after")
	for _, p := range []*proc{sched, server, worker} {
		assert.Zero(t, p.exitCode(t), "%s exited non-zero:\n%s", p.name, p.output())
		assert.NotContains(t, p.output(), "lost nodes", p.name)
	}
}

// The same with the BytePS fork's instance groups (DMLC_GROUP_SIZE=2:
// compat_tests' test_instance_groups, one server process and two worker
// processes of two instances each, every instance its own node): each
// instance re-registers with its id, the workers push on, the group and
// instance barriers after the restart work, the sums are exact and every
// process exits 0.
func TestSchedulerKilledAndRestartedInstanceGroups(t *testing.T) {
	t.Parallel() // waits on the restart delay and heartbeat timers, not the CPU
	prog := compatProgram(t, "test_instance_groups")
	env := roundsJobEnv(t, "DMLC_NUM_SERVER=1", "DMLC_NUM_WORKER=2", "DMLC_GROUP_SIZE=2",
		fmt.Sprintf("IG_ROUNDS=%d", restartRounds), "IG_ROUND_SLEEP_MS=5")
	add := newE2EJob(t).add
	sched := add(start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler"))
	server := add(start(t, "server", env("DMLC_ROLE=server", "DMLC_RANK=0"), prog))
	var workers []*proc
	for i := range 2 {
		workers = append(workers, add(start(t, fmt.Sprintf("worker%d", i), env("DMLC_ROLE=worker", fmt.Sprintf("DMLC_RANK=%d", i)), prog)))
	}
	sched = restartDuringRounds(t, add, env, sched, workers, fmt.Sprintf("exact sums after %d rounds", restartRounds), server)
	assert.Contains(t, sched.output(), "rebuilt the running job from 6 live nodes", "all six instances re-registered")
}

// The same with the BytePS fork's joint processes (DMLC_ROLE=joint:
// compat_tests' test_joint, two processes each a server and a worker
// node): both nodes of each process re-register with their ids, the
// workers push on, the barriers after the restart work, the sums are
// exact and every process exits 0.
func TestSchedulerKilledAndRestartedJoint(t *testing.T) {
	t.Parallel() // waits on the restart delay and heartbeat timers, not the CPU
	prog := compatProgram(t, "test_joint")
	env := roundsJobEnv(t, "DMLC_NUM_SERVER=2", "DMLC_NUM_WORKER=2",
		fmt.Sprintf("JOINT_ROUNDS=%d", restartRounds), "JOINT_ROUND_SLEEP_MS=5")
	add := newE2EJob(t).add
	sched := add(start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler"))
	var joints []*proc
	for i := range 2 {
		joints = append(joints, add(start(t, fmt.Sprintf("joint%d", i), env("DMLC_ROLE=joint"), prog)))
	}
	sched = restartDuringRounds(t, add, env, sched, joints, "exact sums")
	assert.Contains(t, sched.output(), "rebuilt the running job from 4 live nodes", "both nodes of both processes re-registered")
}

// restartRounds is how often the programs of restartDuringRounds push,
// 5 ms apart: past the scheduler's restart.
const restartRounds = 1500

// roundsJobEnv is the environment of a job of compat programs on a port of
// its own, with heartbeats (the nodes find the scheduler lost), plus
// extra; the function adds a process's own variables.
func roundsJobEnv(t *testing.T, extra ...string) func(...string) []string {
	port := porttest.Free(t)
	base := append([]string{"DMLC_PS_ROOT_URI=127.0.0.1", fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1",
		"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=4", "PS_VERBOSE=1"}, extra...)
	return func(own ...string) []string { return append(slices.Clone(base), own...) }
}

// restartDuringRounds kills sched with SIGKILL once every pusher printed
// "pushed 100 rounds", starts it again 2 s later with env and returns it,
// after checking that the job went on through the restart: no pusher had
// pushed all restartRounds rounds before it, each prints done, and every
// process (others too) exits 0 without a COMPAT FAIL or a lost node.
func restartDuringRounds(t *testing.T, add func(*proc) *proc, env func(...string) []string, sched *proc, pushers []*proc, done string, others ...*proc) *proc {
	t.Helper()
	for _, p := range pushers {
		p.waitFor(t, "pushed 100 rounds")
	}
	kill9(t, sched)
	time.Sleep(2 * time.Second)
	sched = add(start(t, "scheduler-restarted", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler"))
	sched.waitFor(t, "restarted into a running job")
	for _, p := range pushers {
		assert.NotContains(t, p.output(), fmt.Sprintf("pushed %d rounds", restartRounds), "%s finished before the restart: make the run longer", p.name)
	}
	for _, p := range pushers {
		p.waitFor(t, done)
	}
	for _, p := range slices.Concat([]*proc{sched}, others, pushers) {
		assert.Zero(t, p.exitCode(t), "%s exited non-zero:\n%s", p.name, p.output())
		assert.NotContains(t, p.output(), "COMPAT FAIL", p.name)
		assert.NotContains(t, p.output(), "lost nodes", p.name)
	}
	return sched
}

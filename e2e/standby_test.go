package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/internal/testutil"
)

// replicatedEnv gives the environment of a job of 3 servers and 2 workers
// with PS_REPLICAS=1 whose scheduler listens on port, heartbeats 1 s / 2 s,
// plus extra.
func replicatedEnv(port int) func(extra ...string) []string {
	return func(extra ...string) []string {
		return append([]string{"DMLC_NUM_SERVER=3", "DMLC_NUM_WORKER=2", "DMLC_PS_ROOT_URI=127.0.0.1",
			fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1", "PS_ELASTIC=1", "PS_REPLICAS=1",
			"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=2", "PS_CTL_ADDR=127.0.0.1:0", "PS_VERBOSE=1"}, extra...)
	}
}

// kill -9 of one of three servers mid-run with PS_REPLICAS=1, and the same
// command started again at once (the same port): the new process joins as
// a standby under a new id (it takes over no dead server's id, so it never
// serves the dead server's intervals from an empty store), the failover
// puts backup copies on it and they are seeded, the workers' sums are
// exact, and every process exits 0.
//
// The restarted process must register before the death is found, or the
// failover happens without a standby to place copies on. With the
// defaults the scheduler finds a SIGKILLed server in about 0.4 s (its
// gossip lifeline breaks), about what a loaded machine takes to start a
// process; so here the lifeline's direct probes go on for their 2 s
// maximum (1 s probe timeouts) and the heartbeats time out after 10 s.
func TestRestartedServerRejoinsAsStandby(t *testing.T) {
	t.Parallel() // kills and restarts a server and waits for it to rejoin, not the CPU; its own ports
	signal := filepath.Join(t.TempDir(), "done")
	replicated := replicatedEnv(porttest.Free(t))
	env := func(extra ...string) []string {
		return replicated(append([]string{"PS_GOSSIP_PROBE_INTERVAL=2000", "PS_HEARTBEAT_TIMEOUT=10"}, extra...)...)
	}
	var srvPorts []string
	for range 3 {
		srvPorts = append(srvPorts, fmt.Sprintf("PORT=%d", porttest.Free(t)))
	}
	j := startJob(t, jobSpec{env: env, servers: 3, serverEnv: func(i int) []string { return []string{srvPorts[i]} },
		workers: 2, node: "replicated", signal: signal, pushing: "replicated worker pushing"})
	sched, srvs, workers := j.sched, j.servers, j.workers
	sched.waitFor(t, "coord: backups placed")
	for _, w := range workers {
		w.waitFor(t, "pushed 200 rounds")
	}
	victim := srvs[1]
	var dead int
	testutil.WaitFor(t, 30*time.Second, func() bool {
		m := anyNodeIDRE.FindStringSubmatch(victim.output())
		if m != nil {
			dead, _ = strconv.Atoi(m[1])
		}
		return m != nil
	}, func() string { return victim.name + " never logged its node id" })

	kill9(t, victim)
	restarted := j.add(start(t, "server1-restarted", env("DMLC_ROLE=server", srvPorts[1]), elasticpsBin, "server"))
	const standby = 14 // the first id after the job's three servers
	restarted.waitFor(t, fmt.Sprintf(`msg="node is ready" role=server node="server[id=%d,`, standby))
	sched.waitFor(t, "it joins as a standby (PS_REPLICAS=1)")
	assert.NotContains(t, restarted.output(), "took over the id of a dead server")

	sched.waitFor(t, fmt.Sprintf("dead=%d ", dead))
	out := sched.output()
	require.Less(t, strings.Index(out, "it joins as a standby"), strings.Index(out, "coord: failover"),
		"the restarted server registered only after the failover; the scheduler:\n%s", out)
	failover := lastLine(out, "coord: failover")
	require.Contains(t, failover, fmt.Sprintf("dead=%d ", dead))
	require.Contains(t, failover, "lost=0 ")
	holders, copies := parseRoutes(failover)
	require.NotContains(t, holders, dead, "the dead server holds nothing: %s", failover)
	var onStandby []copyOf
	for _, c := range copies {
		if c.backup == standby {
			onStandby = append(onStandby, c)
		}
	}
	require.NotEmpty(t, onStandby, "the failover puts backup copies on the standby first: %s", failover)
	for _, c := range onStandby {
		testutil.WaitFor(t, 30*time.Second, func() bool {
			for _, p := range []*proc{srvs[0], srvs[2]} {
				for _, s := range anySeededRE.FindAllStringSubmatch(p.output(), -1) {
					if s[1] == c.begin && s[2] == c.end && s[3] == strconv.Itoa(standby) {
						return true
					}
				}
			}
			return false
		}, func() string {
			return fmt.Sprintf("the copy of [%s,%s) on the standby was never seeded", c.begin, c.end)
		})
	}
	finishReplicated(t, signal, workers, sched, srvs[0], srvs[2], restarted)
}

// finishReplicated lets the replicated workers push 200 rounds after the
// failover, stops them (signal) and requires that their sums are exact and
// that they and the survivors exit 0: the failover lost nothing, so no
// Finalize reports a lost node.
func finishReplicated(t *testing.T, signal string, workers []*proc, survivors ...*proc) {
	t.Helper()
	for _, w := range workers {
		w.waitFor(t, "pushed 200 rounds after the failover")
	}
	require.NoError(t, os.WriteFile(signal, nil, 0o644))
	for _, w := range workers {
		w.waitFor(t, "replicated OK after")
		require.Zero(t, w.exitCode(t), "%s:\n%s", w.name, w.output())
	}
	for _, p := range survivors {
		assert.Zero(t, p.exitCode(t), "%s:\n%s", p.name, p.output())
		assert.False(t, strings.Contains(p.output(), "the job lost nodes"), "%s reports a lost node:\n%s", p.name, p.output())
	}
}

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/internal/testutil"
)

// Moves and a drain in a PS_REPLICAS=1 job of processes while two workers
// push (3 servers and a standby): `elasticps ctl move` gives keys of server
// 8 to server 10, the server that backs them up (so they need a new
// backup), `elasticps ctl drain 12` moves server 12's keys and the copies
// it held away and it leaves, and then server 10, the moved keys' new
// primary, is killed with SIGKILL. The failover loses nothing, every push
// is acknowledged, the pulled values are the exact sums of the
// acknowledged pushes, and every process left exits 0.
func TestReplicatedMoveAndDrainThenKill(t *testing.T) {
	t.Parallel() // waits on moves, a drain and a failover, not the CPU; its own ports
	port, ctlPort := porttest.Free(t), porttest.Free(t)
	for ctlPort == port {
		ctlPort = porttest.Free(t)
	}
	signal := filepath.Join(t.TempDir(), "done")
	base := replicatedEnv(port)
	env := func(extra ...string) []string {
		// the balancer would move keys on its own: only the test's moves here
		return base(append([]string{fmt.Sprintf("PS_CTL_ADDR=127.0.0.1:%d", ctlPort), "PS_BALANCE_INTERVAL=600000"}, extra...)...)
	}
	sched := start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler")
	var srvs []*proc
	for i := range 3 {
		srvs = append(srvs, start(t, fmt.Sprintf("server%d", i), env("DMLC_ROLE=server"), elasticpsBin, "server"))
	}
	var workers []*proc
	for i := range 2 {
		workers = append(workers, start(t, fmt.Sprintf("worker%d", i), env("DMLC_ROLE=worker", "ELASTICPS_E2E_NODE=chaos", "E2E_SIGNAL_FILE="+signal), selfExe(t)))
	}
	var standby *proc
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range append(append([]*proc{sched, standby}, srvs...), workers...) {
				if p != nil {
					t.Logf("%s:\n%s", p.name, p.output())
				}
			}
		}
	})
	for _, w := range workers {
		w.waitFor(t, "chaos worker pushing")
	}
	sched.waitFor(t, "coord: backups placed")
	byID := map[string]*proc{} // the servers by node id (ids go by registration order)
	for _, p := range srvs {
		var m []string
		testutil.WaitFor(t, 30*time.Second, func() bool { m = anyNodeIDRE.FindStringSubmatch(p.output()); return m != nil },
			func() string { return p.name + " never logged its node id" })
		byID[m[1]] = p
	}
	require.Len(t, byID, 3)
	standby = start(t, "standby", env("DMLC_ROLE=server", "PS_STANDBY=1"), elasticpsBin, "server")
	standby.waitFor(t, "id=14")
	pushOn := func(what string) {
		t.Helper()
		for _, w := range workers {
			n := strings.Count(w.output(), "chaos pushed")
			testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Count(w.output(), "chaos pushed") >= n+2 },
				func() string { return w.name + " stopped pushing " + what })
		}
	}
	ctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(elasticpsBin, append([]string{"ctl", "--addr", fmt.Sprintf("127.0.0.1:%d", ctlPort)}, args...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "ctl %v: %s", args, out)
		return string(out)
	}
	pushOn("before the move")
	// server 8's first keys go to server 10, their backup
	out := ctl("--json", "move", "0", "1000", "10")
	require.Contains(t, out, `"to": 10`)
	require.NotContains(t, out, `"error"`)
	var st struct {
		Intervals []struct {
			Begin   uint64  `json:"begin"`
			Server  int32   `json:"server"`
			Backups []int32 `json:"backups"`
		} `json:"intervals"`
	}
	require.NoError(t, json.Unmarshal([]byte(ctl("--json", "status")), &st))
	require.NotEmpty(t, st.Intervals)
	moved := st.Intervals[0]
	require.Equal(t, int32(10), moved.Server, "%+v", st)
	require.Len(t, moved.Backups, 1, "the moved keys keep one backup: %+v", st)
	require.NotEqual(t, int32(10), moved.Backups[0], "%+v", st)
	pushOn("after the move")
	out = ctl("drain", "12")
	require.Contains(t, out, "server 12 drained")
	status := ctl("--json", "status")
	require.NotContains(t, status, `"server": 12`, "no interval may stay on server 12:\n%s", status)
	pushOn("after the drain")

	failovers := strings.Count(sched.output(), "coord: failover")
	kill9(t, byID["10"]) // the moved keys' primary
	testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Count(sched.output(), "coord: failover") > failovers },
		func() string { return "no failover of server 10" })
	routes := lastLine(sched.output(), "coord: failover")
	require.Contains(t, routes, "dead=10 ")
	require.Contains(t, routes, "lost=0 ")
	holders, _ := parseRoutes(routes)
	require.NotContains(t, holders, 10)
	require.NotContains(t, holders, 12)
	pushOn("after the failover")

	require.NoError(t, os.WriteFile(signal, nil, 0o644))
	for _, w := range workers {
		w.waitFor(t, "chaos OK after")
		assert.Zero(t, w.exitCode(t), "%s:\n%s", w.name, w.output())
	}
	for _, p := range []*proc{sched, byID["8"], byID["12"], standby} {
		assert.Zero(t, p.exitCode(t), "%s:\n%s", p.name, p.output())
		assert.NotContains(t, p.output(), "the job lost nodes", p.name)
	}
}

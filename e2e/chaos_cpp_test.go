package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/internal/testutil"
)

// chaosCppSeed fixes the moments and victims of TestChaosReplicatedCppServers.
const chaosCppSeed = 21

// The log lines the chaos tests read, in either log format: the elasticps
// binary's (msg="...") and the bridge's (the message unquoted).
var (
	anySeededRE = regexp.MustCompile(`elastic: backup seeded"? .*begin=(\d+) end=(\d+) backup=(\d+)`)
	anyNodeIDRE = regexp.MustCompile(`node is ready"? role=server node="server\[id=(\d+),`)
)

// compatProgram is a program of ../compat_tests built against the bridge
// (make -C compat_tests), from COMPAT_BIN_DIR if set; without it the test
// is skipped.
func compatProgram(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("COMPAT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join("..", "compat_tests", "build")
	}
	path, err := filepath.Abs(filepath.Join(dir, name))
	require.NoError(t, err)
	if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		if os.Getenv("ELASTICPS_REQUIRE_CPP") != "" {
			t.Fatalf("%s is not built, and ELASTICPS_REQUIRE_CPP is set (make compat builds it first)", path)
		}
		t.Skipf("%s is not built: run 'make -C compat_tests' (or set COMPAT_BIN_DIR to the directory of the compat programs) to run the C++ server test", path)
	}
	return path
}

// TestChaosReplicatedCppServers is TestChaosReplicatedServers with C++
// servers through the bridge (compat_tests' test_replicated, serving with
// KVServerDefaultHandle, replicated through its state hook): 3 servers, 2
// Go chaos workers, PS_REPLICAS=1, 3 seeded SIGKILLs one at a time, a C++
// standby joined before each and the next kill only once every new backup
// was seeded. No push fails and the pulled values are the exact sums of
// the acknowledged pushes.
func TestChaosReplicatedCppServers(t *testing.T) {
	runChaos(t, chaosCppSeed, chaosServers{
		cmd: []string{compatProgram(t, "test_replicated")},
		env: []string{"REPL_SERVER=default"},
		survived: func(t *testing.T, p *proc, _ bool) {
			// the program logs what Finalize reports (the job lost
			// nodes) and exits 0
			p.wait(t)
			assert.NotContains(t, p.output(), "COMPAT FAIL", p.name)
		},
	})
}

// chaosServers are the servers of a chaos job.
type chaosServers struct {
	cmd, env []string // command, and environment beyond the job's
	// survived checks a server or standby that was not killed, once the
	// workers are done
	survived func(t *testing.T, p *proc, standby bool)
}

// runChaos runs the chaos job of TestChaosReplicatedServers with the given
// servers (the standbys too) and checks it.
func runChaos(t *testing.T, seed uint64, srv chaosServers) {
	const kills = 3
	rng := rand.New(rand.NewPCG(seed, 0))
	port := porttest.Free(t)
	signal := filepath.Join(t.TempDir(), "done")
	env := func(extra ...string) []string {
		return append([]string{"DMLC_NUM_SERVER=3", "DMLC_NUM_WORKER=2", "DMLC_PS_ROOT_URI=127.0.0.1",
			fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1", "PS_ELASTIC=1", "PS_REPLICAS=1",
			"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=2", "PS_CTL_ADDR=127.0.0.1:0", "PS_VERBOSE=1"}, extra...)
	}
	serverProc := func(name string, extra ...string) *proc {
		return start(t, name, env(append(append([]string{"DMLC_ROLE=server"}, srv.env...), extra...)...), srv.cmd...)
	}
	sched := start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler")
	all := []*proc{sched}
	for i := range 3 {
		all = append(all, serverProc(fmt.Sprintf("server%d", i)))
	}
	var workers []*proc
	for i := range 2 {
		workers = append(workers, start(t, fmt.Sprintf("worker%d", i),
			env("DMLC_ROLE=worker", "ELASTICPS_E2E_NODE=chaos", "E2E_SIGNAL_FILE="+signal), selfExe(t)))
	}
	all = append(all, workers...)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range all {
				t.Logf("%s:\n%s", p.name, p.output())
			}
		}
	})
	for _, w := range workers {
		w.waitFor(t, "chaos worker pushing")
	}
	sched.waitFor(t, "coord: backups placed")

	byID := map[int]*proc{}
	learnID := func(p *proc) {
		var id int
		testutil.WaitFor(t, 30*time.Second, func() bool {
			m := anyNodeIDRE.FindStringSubmatch(p.output())
			if m != nil {
				id, _ = strconv.Atoi(m[1])
			}
			return m != nil
		}, func() string { return p.name + " never logged its node id:\n" + p.output() })
		byID[id] = p
	}
	for _, p := range all[1:4] {
		learnID(p)
	}
	// seedings counts, per backup copy, the servers' "backup seeded" lines
	seedings := func() map[copyOf]int {
		n := map[copyOf]int{}
		for _, p := range byID {
			for _, m := range anySeededRE.FindAllStringSubmatch(p.output(), -1) {
				b, _ := strconv.Atoi(m[3])
				n[copyOf{m[1], m[2], b}]++
			}
		}
		return n
	}

	routes := lastLine(sched.output(), "coord: backups placed")
	dead := map[int]bool{}
	for k := range kills {
		standby := serverProc(fmt.Sprintf("standby%d", k), "PS_STANDBY=1")
		all = append(all, standby)
		learnID(standby)
		holders, before := parseRoutes(routes)
		require.NotEmpty(t, holders, "no routes in %q", routes)
		seededBefore := seedings()
		time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond) // a random moment of the pushes
		victim := holders[rng.IntN(len(holders))]
		require.Contains(t, byID, victim, "routes %q; servers %v", routes, byID)
		failovers := strings.Count(sched.output(), "coord: failover")
		t.Logf("kill %d: server %d (%s)", k+1, victim, byID[victim].name)
		kill9(t, byID[victim])
		dead[victim] = true
		testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Count(sched.output(), "coord: failover") > failovers },
			func() string { return fmt.Sprintf("no failover of server %d", victim) })
		routes = lastLine(sched.output(), "coord: failover")
		require.Contains(t, routes, fmt.Sprintf("dead=%d ", victim))
		require.Contains(t, routes, "lost=0 ")
		holders, after := parseRoutes(routes)
		require.NotContains(t, holders, victim)
		for _, c := range after {
			if !slices.Contains(before, c) {
				testutil.WaitFor(t, 30*time.Second, func() bool { return seedings()[c] > seededBefore[c] },
					func() string {
						return fmt.Sprintf("kill %d: the copy of [%s,%s) on server %d was never seeded", k+1, c.begin, c.end, c.backup)
					})
			}
		}
	}
	for _, w := range workers {
		n := strings.Count(w.output(), "chaos pushed")
		testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Count(w.output(), "chaos pushed") >= n+2 },
			func() string { return w.name + " stopped pushing after the last failover" })
	}
	require.NoError(t, os.WriteFile(signal, nil, 0o644))
	for _, w := range workers {
		w.waitFor(t, "chaos OK after")
		assert.Zero(t, w.exitCode(t), "%s:\n%s", w.name, w.output())
	}
	for id, p := range byID {
		if !dead[id] {
			srv.survived(t, p, strings.HasPrefix(p.name, "standby"))
		}
	}
	assert.Zero(t, sched.exitCode(t), "scheduler:\n%s", sched.output())
	t.Logf("failovers: %d", strings.Count(sched.output(), "coord: failover"))
}

package e2e

import (
	"errors"
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
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// chaosSeed fixes the moments and victims of TestChaosReplicatedServers.
const chaosSeed = 20

var (
	routeRE      = regexp.MustCompile(`\[(\d+),(\d+)\)->(\d+)\[([\d ]*)\]`)
	chaosRoundRE = regexp.MustCompile(`chaos pushed (\d+) rounds`)
)

// copyOf is one backup copy in a routing table: an interval and the
// server holding the copy.
type copyOf struct {
	begin, end string
	backup     int
}

// parseRoutes reads a coordinator log line's routes: the servers that
// hold any copy (primaries and backups) and the backup copies.
func parseRoutes(line string) (holders []int, copies []copyOf) {
	for _, m := range routeRE.FindAllStringSubmatch(line, -1) {
		p, _ := strconv.Atoi(m[3])
		holders = append(holders, p)
		for _, f := range strings.Fields(m[4]) {
			b, _ := strconv.Atoi(f)
			holders = append(holders, b)
			copies = append(copies, copyOf{m[1], m[2], b})
		}
	}
	slices.Sort(holders)
	return slices.Compact(holders), copies
}

// lastLine is the last line of s that contains text.
func lastLine(s, text string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], text) {
			return lines[i]
		}
	}
	return ""
}

// Servers of a PS_REPLICAS=1 job are killed with SIGKILL one at a time at
// seeded random moments while two workers push: 3 servers, a standby
// joined before each kill, the next kill only once every new backup was
// seeded (at most one failure at a time). No push fails, the pulled values
// are the exact sums of the acknowledged pushes, and no worker hangs.
// Asynchronous (pushes forwarded one by one) and BSP (PS_SYNC_MODE=bsp:
// the workers push and pull in rounds, and each round's state is shipped
// to the backups once).
func TestChaosReplicatedServers(t *testing.T) {
	t.Parallel() // sleeps to seeded moments and waits for failovers, not the CPU; its own ports
	goServers := chaosServers{
		cmd: []string{elasticpsBin, "server"},
		survived: func(t *testing.T, p *proc, standby bool) {
			// every failover lost nothing, so no Finalize reports a lost
			// node: the surviving servers and the standbys exit 0
			assert.Zero(t, p.exitCode(t), "%s:\n%s", p.name, p.output())
			if !standby {
				assert.NotContains(t, p.output(), "the job lost nodes", p.name)
			}
		},
	}
	for _, mode := range []string{"asp", "bsp"} {
		t.Run(mode, func(t *testing.T) { runChaos(t, chaosSeed, mode, goServers) })
	}
}

// The log lines the chaos tests read, in either log format: the elasticps
// binary's (msg="...") and the bridge's (the message unquoted).
var (
	anySeededRE = regexp.MustCompile(`elastic: backup seeded"? .*begin=(\d+) end=(\d+) backup=(\d+)`)
	anyNodeIDRE = regexp.MustCompile(`node is ready"? role=server node="server\[id=(\d+),`)
)

// chaosServers are the servers of a chaos job.
type chaosServers struct {
	cmd, env []string // command, and environment beyond the job's
	// survived checks a server or standby that was not killed, once the
	// workers are done
	survived func(t *testing.T, p *proc, standby bool)
}

// runChaos runs a chaos job in sync mode mode (asp or bsp) with the given
// servers (the standbys too) and checks it.
func runChaos(t *testing.T, seed uint64, mode string, srv chaosServers) {
	const kills = 3
	rng := rand.New(rand.NewPCG(seed, 0))
	port := porttest.Free(t)
	signal := filepath.Join(t.TempDir(), "done")
	env := func(extra ...string) []string {
		return append([]string{"DMLC_NUM_SERVER=3", "DMLC_NUM_WORKER=2", "DMLC_PS_ROOT_URI=127.0.0.1",
			fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1", "PS_ELASTIC=1", "PS_REPLICAS=1",
			"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=2", "PS_CTL_ADDR=127.0.0.1:0", "PS_VERBOSE=1",
			// only failovers and placements change the tables the test
			// reads from the log (moves: TestReplicatedMoveAndDrainThenKill)
			"PS_BALANCE_INTERVAL=600000",
			"PS_SYNC_MODE=" + mode}, extra...)
	}
	serverProc := func(name string, extra ...string) *proc {
		return start(t, name, env(append(append([]string{"DMLC_ROLE=server"}, srv.env...), extra...)...), srv.cmd...)
	}
	sched := start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler")
	all := []*proc{sched}
	for i := range 3 {
		all = append(all, serverProc(fmt.Sprintf("server%d", i)))
	}
	kind := "chaos"
	if mode == "bsp" {
		kind = "chaos-bsp"
	}
	var workers []*proc
	for i := range 2 {
		workers = append(workers, start(t, fmt.Sprintf("worker%d", i),
			env("DMLC_ROLE=worker", "ELASTICPS_E2E_NODE="+kind, "E2E_SIGNAL_FILE="+signal), selfExe(t)))
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
	// the workers push on after the last failover
	for _, w := range workers {
		n := strings.Count(w.output(), "chaos pushed")
		testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Count(w.output(), "chaos pushed") >= n+2 },
			func() string { return w.name + " stopped pushing after the last failover" })
	}
	// BSP workers stop at one round, a little after the latest either
	// reported (they are at most a round apart); asynchronous ones at once.
	stop := ""
	if mode == "bsp" {
		n := 0
		for _, w := range workers {
			for _, m := range chaosRoundRE.FindAllStringSubmatch(w.output(), -1) {
				r, _ := strconv.Atoi(m[1])
				n = max(n, r+3*chaosBSPEvery)
			}
		}
		stop = strconv.Itoa(n)
	}
	require.NoError(t, os.WriteFile(signal, []byte(stop), 0o644))
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
	for _, w := range workers {
		t.Logf("%s: %s", w.name, lastLine(w.output(), "finalize:"))
	}
	t.Logf("failovers: %d", strings.Count(sched.output(), "coord: failover"))
}

// chaosBSPEvery is how often (in rounds) a BSP chaos worker says how far
// it is.
const chaosBSPEvery = 20

// chaosBSPWorker is the chaos worker of a BSP job: round t pushes t%3+1
// times a fixed value to keys every worker shares (under BSP a key that
// one worker never pushes holds every round), waits for the push, then
// pulls them (BSP answers once every worker pushed round t). Once the
// signal file exists it runs up to the round the file names, as the other
// worker does, then checks the exact sums: every push was acknowledged.
func chaosBSPWorker(po *postoffice.Postoffice) error {
	w, do, err := startedWorker(po)
	if err != nil {
		return err
	}
	defer w.Close()
	var keys []uint64
	var base []float32
	for s, r := range po.ServerKeyRanges() {
		keys = append(keys, r.Begin, r.Begin+1)
		base = append(base, float32(s*10+1), float32(s*10+2))
	}
	signal := os.Getenv("E2E_SIGNAL_FILE")
	var acked float32
	stop := -1
	fmt.Println("chaos worker pushing")
	rounds := 0
	for deadline := time.Now().Add(80 * time.Second); stop < 0 || rounds < stop; rounds++ {
		if rounds%chaosBSPEvery == 0 {
			fmt.Printf("chaos pushed %d rounds\n", rounds)
		}
		if b, err := os.ReadFile(signal); stop < 0 && err == nil && len(b) > 0 {
			if stop, err = strconv.Atoi(string(b)); err != nil || stop < rounds {
				return fmt.Errorf("signal file holds %q: want a round >= %d", b, rounds)
			}
		}
		if time.Now().After(deadline) {
			return errors.New("no signal within 80s")
		}
		c := float32(rounds%3 + 1)
		vals := scaled(base, c)
		if err := do(kv.Push(w, keys, vals, nil, kv.Options{})); err != nil {
			return fmt.Errorf("push of round %d failed after %d acknowledged: %w", rounds, rounds, err)
		}
		acked += c
		var got []float32
		if err := do(kv.Pull(w, keys, &got, nil, kv.Options{})); err != nil {
			return fmt.Errorf("pull of round %d: %w", rounds, err)
		}
	}
	fmt.Printf("chaos pushed %d rounds, all acknowledged (sum %v)\n", rounds, acked)
	if err := po.Barrier(0, message.WorkerGroup); err != nil {
		return err
	}
	var got []float32
	if err := do(kv.Pull(w, keys, &got, nil, kv.Options{})); err != nil {
		return err
	}
	nw := float32(po.NumWorkers())
	for i, b := range base {
		if got[i] != b*acked*nw {
			return fmt.Errorf("key %d: pulled %v, want exactly %v (%v times %v rounds' sum %v of each of %v workers)", keys[i], got[i], b*acked*nw, b, rounds, acked, nw)
		}
	}
	fmt.Printf("chaos OK after %d rounds, %d re-sent\n", rounds, w.Redirects())
	return finalizeChaos(po)
}

// scaled is base times c.
func scaled(base []float32, c float32) []float32 {
	vals := make([]float32, len(base))
	for i, b := range base {
		vals[i] = b * c
	}
	return vals
}

// finalizeChaos finalizes a chaos worker and prints the outcome: every
// failover lost nothing, so the job lost no node (Finalize returns nil).
func finalizeChaos(po *postoffice.Postoffice) error {
	err := po.Finalize(0, true)
	fmt.Printf("finalize: %v\n", err)
	return err
}

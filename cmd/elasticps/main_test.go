package main

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// asMain makes the test binary behave as elasticps itself (TestMain), so
// that the tests run the real command lines as a user would, in processes
// of their own, and a local job's node processes (this binary again) are
// elasticps too.
const asMain = "ELASTICPS_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	skipRaceExitSleep()
	os.Exit(m.Run())
}

// skipRaceExitSleep adds atexit_sleep_ms=0 to GORACE in this process's
// environment, for the processes the tests start (this binary again, as
// elasticps and as a local job's nodes): a process built with -race
// sleeps 1 s before it exits, which was most of each help or hint test's
// time (1.1 s instead of 0.1 s). Races are detected and reported as
// before, and the test process itself is unaffected (its runtime read
// GORACE at start). A GORACE that sets atexit_sleep_ms is left alone.
func skipRaceExitSleep() {
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		_ = os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
}

type result struct {
	stdout, stderr string
	code           int
}

// elasticps runs the command line args with only env (plus PATH and
// GORACE) set.
func elasticps(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{asMain + "=1", "PATH=" + os.Getenv("PATH"), "GORACE=" + os.Getenv("GORACE")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &ee, "elasticps %q", args)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// singleDashLong finds a long flag written with one dash, "-iters", in a
// help text; every help writes "--iters" (and "-s" for one-letter flags).
var singleDashLong = regexp.MustCompile(`(^|[\s\[(,])-[a-z][a-z-]+`)

func TestEveryHelpPrintsUsageAndExitsZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // start of stdout
	}{
		{[]string{"local"}, "usage: elasticps local -s NUM_SERVERS"},
		{[]string{"demo"}, "usage: elasticps demo [flags]"},
		{[]string{"ctl"}, "usage: elasticps ctl [--addr HOST:PORT] [--json] COMMAND"},
		{[]string{"bench"}, "usage: elasticps bench [flags]"},
		{[]string{"bench", "straggler"}, "usage: elasticps bench straggler [flags]"},
		{[]string{"bench", "failover"}, "usage: elasticps bench failover"},
		{[]string{"scheduler"}, "usage: elasticps scheduler"},
		{[]string{"server"}, "usage: elasticps server [flags]"},
		{[]string{"train"}, "usage: elasticps train [flags]"},
		{[]string{"demo-node"}, "elasticps demo-node is one process of the jobs that 'elasticps demo' starts"},
		{[]string{"bench-node"}, "elasticps bench-node is one process of the jobs that 'elasticps bench' starts"},
		{[]string{"straggler-node"}, "elasticps straggler-node is one process of the jobs that 'elasticps bench straggler' starts"},
		{[]string{"train-node"}, "elasticps train-node is one process of the jobs that 'elasticps train' starts"},
		{nil, "usage: elasticps COMMAND [ARGS]"},
	} {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string(nil), tc.args...), h)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel() // a process of its own that only prints; no ports, no shared state
				// DMLC_ROLE set wrong on purpose: help must not look at it
				r := elasticps(t, []string{"DMLC_ROLE=worker"}, args...)
				assert.Equal(t, 0, r.code, "exit status; stderr:\n%s", r.stderr)
				assert.Empty(t, r.stderr)
				assert.True(t, strings.HasPrefix(r.stdout, tc.want), "stdout starts with %q:\n%s", tc.want, r.stdout)
				assert.Empty(t, singleDashLong.FindAllString(r.stdout, -1), "long flags with one dash")
			})
		}
	}
	// the roles list the variables they read, with defaults
	for _, role := range []string{"scheduler", "server"} {
		r := elasticps(t, nil, role, "--help")
		for _, v := range []string{"DMLC_ROLE *", "DMLC_PS_ROOT_URI *", "DMLC_NODE_HOST", "PS_ELASTIC", "PS_CTL_ADDR", "DMLC_PS_ROOT_PORT+1]", "PS_METRICS_ADDR"} {
			assert.Contains(t, r.stdout, v, role)
		}
	}
	r := elasticps(t, nil, "help", "bench", "straggler")
	assert.Equal(t, 0, r.code)
	assert.True(t, strings.HasPrefix(r.stdout, "usage: elasticps bench straggler [flags]"), r.stdout)
}

// internalNames are what a user never types: Go field names and context
// errors.
var internalNames = regexp.MustCompile(`NumServers|NumWorkers|Command|Timeout|RootPort|KillGrace|context canceled|bad command`)

func TestHintsSayWhatToDo(t *testing.T) {
	job := []string{"DMLC_PS_ROOT_URI=127.0.0.1", "DMLC_PS_ROOT_PORT=1", "DMLC_NUM_WORKER=1", "DMLC_NUM_SERVER=1"}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string // the whole stderr
	}{
		{"worker env for the server", append([]string{"DMLC_ROLE=worker"}, job...), []string{"server"},
			"elasticps: DMLC_ROLE=worker but 'elasticps server' runs a server: set DMLC_ROLE=server, or start your worker program instead (elasticps has no worker command)\n"},
		{"server env for the scheduler", append([]string{"DMLC_ROLE=server"}, job...), []string{"scheduler"},
			"elasticps: DMLC_ROLE=server but 'elasticps scheduler' runs a scheduler: set DMLC_ROLE=scheduler, or run 'elasticps server'\n"},
		{"scheduler argument", nil, []string{"scheduler", "now"},
			"elasticps: scheduler: unexpected argument \"now\": the scheduler takes no arguments; it reads DMLC_* variables (see elasticps scheduler --help)\n"},
		{"ctl without an address", nil, []string{"ctl", "status"},
			"elasticps: ctl: which scheduler? give its control API address with --addr HOST:PORT (elasticps local prints it: \"control API at ...\"; a scheduler logs it at start), or set PS_CTL_ADDR, or the job's DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT (the API is at DMLC_PS_ROOT_PORT+1)\n"},
		{"ctl flag after the command", nil, []string{"ctl", "status", "--addr", "127.0.0.1:1"},
			"elasticps: ctl: cannot reach the scheduler's control API at 127.0.0.1:1: nothing listens there; is the job running, with PS_ELASTIC=1, and is this its address (--addr)?\n"},
		{"ctl address without a port", nil, []string{"ctl", "status", "--addr", "localhost"},
			"elasticps: ctl: the control API address \"localhost\" is not HOST:PORT, e.g. 127.0.0.1:9092 (elasticps local prints it: \"control API at ...\")\n"},
		{"ctl address from the environment without a port", []string{"PS_CTL_ADDR=10.0.0.1"}, []string{"ctl", "status"},
			"elasticps: ctl: the control API address \"10.0.0.1\" is not HOST:PORT, e.g. 127.0.0.1:9092 (elasticps local prints it: \"control API at ...\")\n"},
		{"server bad flag value", append([]string{"DMLC_ROLE=server"}, job...), []string{"server", "--lr", "x"},
			"elasticps: server: invalid value \"x\" for flag --lr: parse error (see elasticps server --help)\n"},
		{"local unknown flag", nil, []string{"local", "--bogus", "-s", "1", "-w", "1", "--", "prog"},
			"elasticps: launcher: flag provided but not defined: --bogus (see elasticps local --help)\n"},
		{"ctl move short", nil, []string{"ctl", "--addr", "127.0.0.1:1", "move", "1", "2"},
			"elasticps: ctl move takes BEGIN END TO: the keys [BEGIN, END) and the server node id TO, e.g. move 0 1000 10; got [\"1\" \"2\"]\n"},
		{"ctl move not numbers", nil, []string{"ctl", "--addr", "127.0.0.1:1", "move", "a", "2", "3"},
			"elasticps: ctl move: BEGIN \"a\" is not a non-negative integer; move takes BEGIN END TO: the keys [BEGIN, END) and the server node id TO, e.g. move 0 1000 10\n"},
		{"ctl unknown", nil, []string{"ctl", "stats"},
			"elasticps: ctl: unknown command \"stats\": use status, move BEGIN END TO, drain NODE or add (see elasticps ctl --help)\n"},
		{"ctl status with an argument", nil, []string{"ctl", "status", "now"},
			"elasticps: ctl status takes no arguments, got [\"now\"]\n"},
		{"local without counts", nil, []string{"local", "--", "prog"},
			"elasticps: launcher: -s is required: the number of servers (use -s 0 for none) (see elasticps local --help)\n"},
		{"local negative", nil, []string{"local", "-s", "-1", "-w", "1", "--", "prog"},
			"elasticps: launcher: the number of servers (-s) is -1; it must be 0 or more (see elasticps local --help)\n"},
		{"local without a command", nil, []string{"local", "-s", "1", "-w", "1"},
			"elasticps: launcher: no command to run; put the program and its arguments after --, e.g. elasticps local -s 1 -w 2 -- ./prog (see elasticps local --help)\n"},
		{"demo argument", nil, []string{"demo", "fast"},
			"elasticps: demo: unexpected argument \"fast\" (flags only; see elasticps demo --help)\n"},
		{"demo bad flag", nil, []string{"demo", "--iterations", "5"},
			"elasticps: demo: flag provided but not defined: --iterations (see elasticps demo --help)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a process of its own that fails at once (ctl only dials 127.0.0.1:1, where nothing listens)
			r := elasticps(t, tc.env, tc.args...)
			assert.Equal(t, 1, r.code)
			assert.Equal(t, tc.want, r.stderr)
			assert.Empty(t, internalNames.FindAllString(r.stderr, -1))
		})
	}
}

// `elasticps local ... | head -3`: the reader of stdout goes away; the
// launcher drops the output, says so, and the job ends as it would have.
func TestLocalSurvivesAClosedStdout(t *testing.T) {
	cmd := exec.Command(os.Args[0], "local", "-s", "0", "-w", "2", "--",
		"sh", "-c", `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done`)
	cmd.Env = append(os.Environ(), asMain+"=1")
	r, w, err := os.Pipe()
	require.NoError(t, err)
	require.NoError(t, r.Close()) // the reader is gone before the first line
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	err = cmd.Run()
	w.Close()
	require.NoError(t, err, "stderr:\n%s", &stderr)
	assert.Contains(t, stderr.String(), "[launcher] stdout is closed (broken pipe): the job runs on, its stdout is dropped\n")
}

// A real job of elasticps nodes: each worker's lines carry the rank the
// scheduler gave it, which the demo worker prints itself.
func TestLocalPrefixShowsTheRank(t *testing.T) {
	t.Parallel() // waits on a job's start-up and barriers, on ports the launcher picks
	r := elasticps(t, []string{"ELASTICPS_DEMO_FEATURES=8", "ELASTICPS_DEMO_SAMPLES=20", "ELASTICPS_DEMO_BATCH=10",
		"ELASTICPS_DEMO_ITERS=3", "ELASTICPS_DEMO_LR=1", "DMLC_PS_VAN_TYPE=tcp"},
		"local", "-s", "1", "-w", "2", "--timeout", "60s", "--", os.Args[0], "demo-node")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	lines := regexp.MustCompile(`(?m)^\[worker (\d) rank (\d)\] rank (\d) +iteration`).FindAllStringSubmatch(r.stdout, -1)
	require.NotEmpty(t, lines, "no worker line with its rank:\n%s", r.stdout)
	ranks := map[string]string{} // launch index -> rank
	for _, l := range lines {
		assert.Equal(t, l[3], l[2], "the prefix's rank is the rank the worker prints: %q", l[0])
		ranks[l[1]] = l[2]
	}
	assert.Len(t, ranks, 2, "both workers printed")
	assert.NotEqual(t, ranks["0"], ranks["1"])
	assert.Contains(t, r.stderr, "[launcher] scheduler at 127.0.0.1:")
}

// A node command started by hand, without its launcher's plan, says which
// command starts it, and fails.
func TestNodeCommandsWithoutAPlanSayWhoStartsThem(t *testing.T) {
	t.Parallel() // processes of their own that fail at once, without a plan; no ports
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train-node"}, "ELASTICPS_TRAIN_PLAN: unexpected end of JSON input (train-node is started by 'elasticps train')"},
		{[]string{"bench-node"}, "ELASTICPS_BENCH_PLAN: unexpected end of JSON input (bench-node is started by 'elasticps bench')"},
		{[]string{"straggler-node"}, "(straggler-node is started by 'elasticps bench straggler')"},
		{[]string{"bench", "failover-node"}, "(failover-node is started by 'elasticps bench failover')"},
	} {
		r := elasticps(t, nil, tc.args...)
		assert.Equal(t, 1, r.code, "%v: exit status", tc.args)
		assert.Contains(t, r.stderr, tc.want, "%v", tc.args)
	}
}

//go:build unix

package launcher

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/ports"
	"github.com/elasticps/elasticps/internal/testutil"
)

// safetyTimeout bounds every job in these tests: a launcher bug that fails
// to kill a `sleep 60` then shows up as a timeout error well under the
// sleep, instead of a hung test binary.
const safetyTimeout = 20 * time.Second

func requireSh(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh in PATH")
	}
}

// waitLines polls until the output holds n lines that contain word,
// failing the test after a generous deadline.
func waitLines(t *testing.T, b *testutil.SyncBuffer, n int, word string) {
	t.Helper()
	testutil.WaitFor(t, safetyTimeout, func() bool { return strings.Count(b.String(), word) == n },
		func() string {
			return "waiting for " + strconv.Itoa(n) + " " + word + " lines; output so far:\n" + b.String()
		})
}

func sortedLines(s string) []string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	slices.Sort(lines)
	return lines
}

func sh(script string) []string { return []string{"sh", "-c", script} }

// runAsync starts job.Run in the background and returns a channel with its
// result, so a test can act (cancel) while the job runs.
func runAsync(ctx context.Context, j *Job) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- j.Run(ctx) }()
	return ch
}

func waitRun(t *testing.T, ch <-chan error) error {
	t.Helper()
	return testutil.Recv(t, ch, 2*safetyTimeout, func() string { return "Run did not return" })
}

// processGone reports whether pid no longer runs. A killed orphan is
// reparented to PID 1, which may be slow (or, in some containers, fail) to
// reap it, so a zombie counts as gone.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	if runtime.GOOS != "linux" {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// Format: pid (comm) state ...; comm may contain spaces, so look after
	// the last ')'.
	s := string(stat)
	rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(rest) > 0 && (rest[0] == "Z" || rest[0] == "X")
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	if !testutil.Until(10*time.Second, func() bool { return processGone(pid) }) {
		syscall.Kill(pid, syscall.SIGKILL) // do not leak it past the test
		require.Failf(t, "process left behind", "process %d still runs after Run returned", pid)
	}
}

// grabPid extracts the number after tag in the output.
func grabPid(t *testing.T, out, tag string) int {
	t.Helper()
	_, after, ok := strings.Cut(out, tag)
	require.True(t, ok, "no %q in output:\n%s", tag, out)
	fields := strings.Fields(after)
	require.NotEmpty(t, fields, "no pid after %q in output:\n%s", tag, out)
	pid, err := strconv.Atoi(fields[0])
	require.NoError(t, err, "bad pid after %q in output:\n%s", tag, out)
	return pid
}

func TestRunAllSucceedEnvAndPrefixes(t *testing.T) {
	requireSh(t)
	t.Setenv("ELASTICPS_TEST_PARENT", "inherited")
	t.Setenv("FOO", "parent")
	// A stale DMLC_RANK in the parent must not be invented by the launcher;
	// make sure none is inherited so "unset" below tests the launcher.
	t.Setenv("DMLC_RANK", "")
	os.Unsetenv("DMLC_RANK")

	var stdout, stderr testutil.SyncBuffer
	j := &Job{
		NumServers: 2,
		NumWorkers: 2,
		Command: sh(`echo "role=$DMLC_ROLE s=$DMLC_NUM_SERVER w=$DMLC_NUM_WORKER ` +
			`uri=$DMLC_PS_ROOT_URI port=$DMLC_PS_ROOT_PORT idx=$ELASTICPS_LOCAL_INDEX ` +
			`rank=${DMLC_RANK-unset} parent=$ELASTICPS_TEST_PARENT foo=$FOO extra=${EXTRA-none}"; ` +
			`echo "to stderr" >&2`),
		Env:      []string{"FOO=job"},
		RootPort: 45678,
		ExtraEnv: func(role string, index int) []string {
			if role == RoleWorker && index == 1 {
				return []string{"FOO=w1", "EXTRA=yes"}
			}
			return nil
		},
		Stdout:  &stdout,
		Stderr:  &stderr,
		Timeout: safetyTimeout,
	}
	require.NoError(t, j.Run(context.Background()), "stdout:\n%s\nstderr:\n%s", &stdout, &stderr)

	const common = " s=2 w=2 uri=127.0.0.1 port=45678 "
	const tail = " rank=unset parent=inherited "
	want := []string{
		"[scheduler] role=scheduler" + common + "idx=0" + tail + "foo=job extra=none",
		"[server 0] role=server" + common + "idx=0" + tail + "foo=job extra=none",
		"[server 1] role=server" + common + "idx=1" + tail + "foo=job extra=none",
		"[worker 0] role=worker" + common + "idx=0" + tail + "foo=job extra=none",
		"[worker 1] role=worker" + common + "idx=1" + tail + "foo=w1 extra=yes",
	}
	slices.Sort(want)
	assert.Equal(t, want, sortedLines(stdout.String()), "stdout lines")
	wantErr := []string{
		"[scheduler] to stderr",
		"[server 0] to stderr",
		"[server 1] to stderr",
		"[worker 0] to stderr",
		"[worker 1] to stderr",
	}
	assert.Equal(t, wantErr, sortedLines(stderr.String()), "stderr lines")
}

func TestRunPicksOneFreePortForAll(t *testing.T) {
	requireSh(t)
	var out testutil.SyncBuffer
	j := &Job{
		NumServers: 1, NumWorkers: 1,
		Command: sh(`echo "$DMLC_PS_ROOT_PORT"`),
		Stdout:  &out, Stderr: &out, NoPrefix: true,
		Timeout: safetyTimeout,
	}
	require.NoError(t, j.Run(context.Background()))
	lines := sortedLines(out.String())
	require.Len(t, lines, 3, "want the port printed by each process")
	require.Equal(t, lines[0], lines[2], "want the same port printed 3 times, got %q", lines)
	p, err := strconv.Atoi(lines[0])
	require.NoError(t, err, "port %q", lines[0])
	assert.True(t, p > 0 && p <= 65535, "port %d is not a valid TCP port", p)
}

func TestRunOverridesAndWorkerProcesses(t *testing.T) {
	requireSh(t)
	var out testutil.SyncBuffer
	j := &Job{
		NumServers: 1, NumWorkers: 2, WorkerProcesses: 1,
		Command:          sh(`echo "default role=$DMLC_ROLE w=$DMLC_NUM_WORKER"`),
		SchedulerCommand: sh(`echo sched`),
		ServerCommand:    []string{"echo", "server", "cmd"},
		Stdout:           &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	require.NoError(t, j.Run(context.Background()))
	want := []string{"[scheduler] sched", "[server 0] server cmd", "[worker 0] default role=worker w=2"}
	assert.Equal(t, want, sortedLines(out.String()))
}

// With instance groups every process must ask for its rank, so the
// launcher gives each server and worker process its launch index as
// DMLC_RANK (the scheduler none), unless the user chose the ranks.
func TestRunGroupSizeSetsRankByIndex(t *testing.T) {
	requireSh(t)
	t.Setenv("DMLC_RANK", "")
	os.Unsetenv("DMLC_RANK")
	cmd := sh(`echo "rank=${DMLC_RANK-unset}"`)
	cases := []struct {
		name   string
		env    []string
		parent string // DMLC_GROUP_SIZE in the launcher's environment
		extra  func(role string, index int) []string
		want   []string
	}{
		{"group of 2", []string{"DMLC_GROUP_SIZE=2"}, "", nil,
			[]string{"[scheduler] rank=unset", "[server 0] rank=0", "[server 1] rank=1", "[worker 0] rank=0", "[worker 1] rank=1"}},
		{"group size in the parent environment", nil, "3", nil,
			[]string{"[scheduler] rank=unset", "[server 0] rank=0", "[server 1] rank=1", "[worker 0] rank=0", "[worker 1] rank=1"}},
		{"no groups", []string{"DMLC_GROUP_SIZE=1"}, "", nil,
			[]string{"[scheduler] rank=unset", "[server 0] rank=unset", "[server 1] rank=unset", "[worker 0] rank=unset", "[worker 1] rank=unset"}},
		{"user's DMLC_RANK wins", []string{"DMLC_GROUP_SIZE=2", "DMLC_RANK=7"}, "", nil,
			[]string{"[scheduler] rank=7", "[server 0] rank=7", "[server 1] rank=7", "[worker 0] rank=7", "[worker 1] rank=7"}},
		{"ExtraEnv's DMLC_RANK wins", []string{"DMLC_GROUP_SIZE=2"}, "", func(role string, index int) []string {
			if role == RoleWorker {
				return []string{"DMLC_RANK=" + strconv.Itoa(1-index)}
			}
			return nil
		}, []string{"[scheduler] rank=unset", "[server 0] rank=0", "[server 1] rank=1", "[worker 0] rank=1", "[worker 1] rank=0"}},
		{"group size not a number: left to the nodes", []string{"DMLC_GROUP_SIZE=two"}, "", nil,
			[]string{"[scheduler] rank=unset", "[server 0] rank=unset", "[server 1] rank=unset", "[worker 0] rank=unset", "[worker 1] rank=unset"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.parent != "" {
				t.Setenv("DMLC_GROUP_SIZE", c.parent)
			}
			var out, info testutil.SyncBuffer
			j := &Job{
				NumServers: 2, NumWorkers: 2, Command: cmd, Env: c.env, ExtraEnv: c.extra,
				Stdout: &out, Stderr: &out, Info: &info, Timeout: safetyTimeout,
			}
			require.NoError(t, j.Run(context.Background()), "output:\n%s", &out)
			slices.Sort(c.want)
			assert.Equal(t, c.want, sortedLines(out.String()))
			told := strings.Contains(info.String(), "gets DMLC_RANK = its launch index")
			assert.Equal(t, c.want[1] == "[server 0] rank=0", told, "the launcher says when it sets DMLC_RANK; its lines:\n%s", &info)
		})
	}
}

func TestRunNoPrefix(t *testing.T) {
	requireSh(t)
	var out testutil.SyncBuffer
	j := &Job{NumWorkers: 1, Command: []string{"echo", "plain"}, Stdout: &out, Stderr: &out, NoPrefix: true, Timeout: safetyTimeout}
	require.NoError(t, j.Run(context.Background()))
	assert.Equal(t, "plain\nplain\n", out.String(), "want two unprefixed lines")
}

func TestRunWorkerFailureKillsJob(t *testing.T) {
	requireSh(t)
	var out testutil.SyncBuffer
	j := &Job{
		NumServers: 1, NumWorkers: 2,
		// Worker 1 fails; everyone else would sleep for a minute unless
		// the launcher kills them.
		Command: sh(`if [ "$DMLC_ROLE $ELASTICPS_LOCAL_INDEX" = "worker 1" ]; then echo failing; exit 3; fi; exec sleep 60`),
		Stdout:  &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	err := waitRun(t, runAsync(context.Background(), j))
	var pe *ProcessError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, RoleWorker, pe.Role)
	assert.Equal(t, 1, pe.Index)
	assert.Equal(t, 3, pe.ExitCode())
	assert.Positive(t, pe.Pid)
	assert.EqualError(t, err, "worker 1 (pid "+strconv.Itoa(pe.Pid)+") exited with status 3")
	assert.Contains(t, out.String(), "[worker 1] failing\n", "the failing worker's line")
}

func TestRunReportsSignalDeath(t *testing.T) {
	requireSh(t)
	j := &Job{
		NumWorkers: 1,
		Command:    sh(`if [ "$DMLC_ROLE" = worker ]; then kill -KILL $$; fi; exec sleep 60`),
		Stdout:     &testutil.SyncBuffer{}, Stderr: &testutil.SyncBuffer{},
		Timeout: safetyTimeout,
	}
	err := waitRun(t, runAsync(context.Background(), j))
	var pe *ProcessError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, RoleWorker, pe.Role, "want worker 0 killed by a signal: %v", err)
	require.Equal(t, -1, pe.ExitCode(), "want worker 0 killed by a signal: %v", err)
	assert.ErrorContains(t, err, "worker 0 (pid ")
	assert.ErrorContains(t, err, "killed by signal 9")
}

func TestRunContextCancelKillsAll(t *testing.T) {
	requireSh(t)
	var out testutil.SyncBuffer
	j := &Job{
		NumServers: 1, NumWorkers: 2,
		Command: sh(`echo "ready $$"; exec sleep 60`),
		Stdout:  &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := runAsync(ctx, j)
	waitLines(t, &out, 4, "ready")
	cancel()
	require.ErrorIs(t, waitRun(t, ch), context.Canceled)
	for _, role := range []string{"[scheduler] ", "[server 0] ", "[worker 0] ", "[worker 1] "} {
		waitGone(t, grabPid(t, out.String(), role+"ready "))
	}
}

func TestRunKillsGrandchildren(t *testing.T) {
	requireSh(t)
	var out testutil.SyncBuffer
	j := &Job{
		NumWorkers: 1,
		// The shell is the group leader; the sleep is its child. Killing
		// only the shell would leave the sleep behind.
		Command: sh(`sleep 60 & echo "grandchild $!"; wait`),
		Stdout:  &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := runAsync(ctx, j)
	waitLines(t, &out, 2, "grandchild")
	cancel()
	require.ErrorIs(t, waitRun(t, ch), context.Canceled)
	waitGone(t, grabPid(t, out.String(), "[scheduler] grandchild "))
	waitGone(t, grabPid(t, out.String(), "[worker 0] grandchild "))
}

func TestRunKillsStraysOfSuccessfulJob(t *testing.T) {
	requireSh(t)
	var out testutil.SyncBuffer
	j := &Job{
		NumWorkers: 1,
		// Exits 0 at once but leaves a sleep holding its stdout pipe open.
		// Run must neither wait for it nor leave it running.
		Command: sh(`sleep 60 & echo "stray $!"`),
		Stdout:  &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	require.NoError(t, waitRun(t, runAsync(context.Background(), j)))
	waitGone(t, grabPid(t, out.String(), "[scheduler] stray "))
	waitGone(t, grabPid(t, out.String(), "[worker 0] stray "))
}

func TestRunEscalatesToSIGKILL(t *testing.T) {
	requireSh(t)
	var out testutil.SyncBuffer
	j := &Job{
		NumWorkers: 1,
		// Ignores SIGTERM (and its sleeps inherit that), so only SIGKILL
		// after KillGrace ends it.
		Command: sh(`trap '' TERM; echo "ready $$"; while :; do sleep 0.05; done`),
		Stdout:  &out, Stderr: &out,
		KillGrace: 200 * time.Millisecond,
		Timeout:   safetyTimeout,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := runAsync(ctx, j)
	waitLines(t, &out, 2, "ready")
	cancel()
	require.ErrorIs(t, waitRun(t, ch), context.Canceled)
	waitGone(t, grabPid(t, out.String(), "[worker 0] ready "))
}

func TestRunTimeout(t *testing.T) {
	requireSh(t)
	j := &Job{
		NumWorkers: 1,
		Command:    []string{"sleep", "60"},
		Stdout:     &testutil.SyncBuffer{}, Stderr: &testutil.SyncBuffer{},
		Timeout: 300 * time.Millisecond,
	}
	err := waitRun(t, runAsync(context.Background(), j))
	require.ErrorIs(t, err, ErrTimeout)
	assert.ErrorContains(t, err, "did not finish within 300ms (--timeout)", "the error says how long the timeout was")
}

func TestRunPartialLastLine(t *testing.T) {
	requireSh(t)
	var stdout, stderr testutil.SyncBuffer
	j := &Job{
		NumWorkers: 1,
		Command:    sh(`printf 'first\nno newline'; printf 'err partial' >&2`),
		Stdout:     &stdout, Stderr: &stderr,
		Timeout: safetyTimeout,
	}
	require.NoError(t, j.Run(context.Background()))
	wantOut := []string{"[scheduler] first", "[scheduler] no newline", "[worker 0] first", "[worker 0] no newline"}
	assert.Equal(t, wantOut, sortedLines(stdout.String()), "stdout")
	assert.True(t, strings.HasSuffix(stdout.String(), "\n"), "stdout %q does not end with a newline", &stdout)
	assert.Equal(t, []string{"[scheduler] err partial", "[worker 0] err partial"}, sortedLines(stderr.String()), "stderr")
}

func TestRunLinesDoNotInterleave(t *testing.T) {
	requireSh(t)
	const n = 300
	var out testutil.SyncBuffer
	// Long lines written by several processes at once to one writer, both
	// streams, so any mid-line mixing would corrupt the format checked
	// below.
	pad := strings.Repeat("x", 200)
	j := &Job{
		NumServers: 1, NumWorkers: 3,
		Command: sh(`i=0; while [ $i -lt ` + strconv.Itoa(n) + ` ]; do ` +
			`echo "$DMLC_ROLE$ELASTICPS_LOCAL_INDEX ` + pad + ` $i"; ` +
			`echo "$DMLC_ROLE$ELASTICPS_LOCAL_INDEX ` + pad + ` $i" >&2; i=$((i+1)); done`),
		Stdout: &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	require.NoError(t, j.Run(context.Background()))
	prefixes := map[string]string{
		"[scheduler] ": "scheduler0", "[server 0] ": "server0",
		"[worker 0] ": "worker0", "[worker 1] ": "worker1", "[worker 2] ": "worker2",
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		prefix, body, ok := strings.Cut(line, "] ")
		tag := prefixes[prefix+"] "]
		fields := strings.Fields(body)
		require.True(t, ok && tag != "" && len(fields) == 3 && fields[0] == tag && fields[1] == pad, "mangled line %q", line)
		counts[tag]++
	}
	for _, tag := range prefixes {
		assert.Equal(t, 2*n, counts[tag], "%s: lines", tag)
	}
}

func TestCopyLinesSplitsOverlongLines(t *testing.T) {
	var out bytes.Buffer
	in := strings.Repeat("y", 2*maxLine+10) + "\nshort"
	(&lineOutput{}).copyLines(&sink{w: &out}, strings.NewReader(in), func() string { return "[p] " })
	lines := strings.Split(out.String(), "\n")
	// 3 pieces of the long line, "short" and the empty string after the
	// final newline.
	require.Len(t, lines, 5)
	require.Equal(t, []string{"[p] short", ""}, lines[3:])
	total := 0
	for _, l := range lines[:3] {
		require.True(t, strings.HasPrefix(l, "[p] "), "piece without prefix: %.20q", l)
		total += len(l) - len("[p] ")
	}
	assert.Equal(t, 2*maxLine+10, total, "bytes in the pieces")
}

func TestRunStartFailureStopsStartedProcesses(t *testing.T) {
	requireSh(t)
	j := &Job{
		NumServers: 1, NumWorkers: 1,
		Command:       []string{"sleep", "60"},
		WorkerCommand: []string{"/nonexistent/elasticps-test-prog"},
		Stdout:        &testutil.SyncBuffer{}, Stderr: &testutil.SyncBuffer{},
		Timeout: safetyTimeout,
	}
	err := waitRun(t, runAsync(context.Background(), j))
	require.ErrorContains(t, err, "cannot start worker 0")
	assert.NotErrorIs(t, err, ErrTimeout)
}

func TestRunCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out testutil.SyncBuffer
	j := &Job{NumWorkers: 1, Command: []string{"echo", "should not run"}, Stdout: &out, Stderr: &out}
	require.ErrorIs(t, j.Run(ctx), context.Canceled)
	assert.Empty(t, out.String(), "a process ran")
}

func TestRunBadExtraEnvStartsNothing(t *testing.T) {
	var out testutil.SyncBuffer
	j := &Job{
		NumWorkers: 1, Command: []string{"echo", "should not run"}, Stdout: &out, Stderr: &out,
		ExtraEnv: func(role string, _ int) []string {
			if role == RoleWorker {
				return []string{"NOEQUALS"}
			}
			return nil
		},
	}
	require.ErrorContains(t, j.Run(context.Background()), `ExtraEnv("worker", 0) entry "NOEQUALS"`)
	assert.Empty(t, out.String(), "a process ran")
}

// TestSchedulerPortIsBelowTheEphemeralRange: the scheduler's port (and
// its successor, the control API's) is free and outside the range the
// kernel picks the other nodes' ports from (they bind port 0), so that a
// node started before the scheduler cannot be given it.
func TestSchedulerPortIsBelowTheEphemeralRange(t *testing.T) {
	lo := ports.EphemeralLow()
	if lo <= 2048 {
		t.Skipf("the ephemeral port range starts at %d (or cannot be read): no room below it", lo)
	}
	for range 20 {
		port, err := freePortPair()
		require.NoError(t, err)
		assert.Less(t, port+1, lo, "port pair %d, %d", port, port+1)
		assert.GreaterOrEqual(t, port, 1024)
	}
}

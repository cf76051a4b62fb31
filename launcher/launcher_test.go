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
	"sync"
	"syscall"
	"testing"
	"time"
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

// syncBuffer lets a test read output while Run is still writing it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls until cond holds for the output, failing the test after a
// generous deadline.
func waitFor(t *testing.T, b *syncBuffer, what string, cond func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(safetyTimeout)
	for !cond(b.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; output so far:\n%s", what, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	select {
	case err := <-ch:
		return err
	case <-time.After(2 * safetyTimeout):
		t.Fatal("Run did not return")
		return nil
	}
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
	deadline := time.Now().Add(10 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) // do not leak it past the test
			t.Fatalf("process %d still runs after Run returned", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// grabPid extracts the number after tag in the output.
func grabPid(t *testing.T, out, tag string) int {
	t.Helper()
	_, after, ok := strings.Cut(out, tag)
	if !ok {
		t.Fatalf("no %q in output:\n%s", tag, out)
	}
	pid, err := strconv.Atoi(strings.Fields(after)[0])
	if err != nil {
		t.Fatalf("bad pid after %q in output:\n%s", tag, out)
	}
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

	var stdout, stderr syncBuffer
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
	if err := j.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}

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
	if got := sortedLines(stdout.String()); !slices.Equal(got, want) {
		t.Errorf("stdout lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantErr := []string{
		"[scheduler] to stderr",
		"[server 0] to stderr",
		"[server 1] to stderr",
		"[worker 0] to stderr",
		"[worker 1] to stderr",
	}
	if got := sortedLines(stderr.String()); !slices.Equal(got, wantErr) {
		t.Errorf("stderr lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantErr, "\n"))
	}
}

func TestRunPicksOneFreePortForAll(t *testing.T) {
	requireSh(t)
	var out syncBuffer
	j := &Job{
		NumServers: 1, NumWorkers: 1,
		Command: sh(`echo "$DMLC_PS_ROOT_PORT"`),
		Stdout:  &out, Stderr: &out, NoPrefix: true,
		Timeout: safetyTimeout,
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines := sortedLines(out.String())
	if len(lines) != 3 || lines[0] != lines[2] {
		t.Fatalf("want the same port printed 3 times, got %q", lines)
	}
	if p, err := strconv.Atoi(lines[0]); err != nil || p <= 0 || p > 65535 {
		t.Fatalf("port %q is not a valid TCP port", lines[0])
	}
}

func TestRunOverridesAndWorkerProcesses(t *testing.T) {
	requireSh(t)
	var out syncBuffer
	j := &Job{
		NumServers: 1, NumWorkers: 2, WorkerProcesses: 1,
		Command:          sh(`echo "default role=$DMLC_ROLE w=$DMLC_NUM_WORKER"`),
		SchedulerCommand: sh(`echo sched`),
		ServerCommand:    []string{"echo", "server", "cmd"},
		Stdout:           &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"[scheduler] sched", "[server 0] server cmd", "[worker 0] default role=worker w=2"}
	if got := sortedLines(out.String()); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRunNoPrefix(t *testing.T) {
	requireSh(t)
	var out syncBuffer
	j := &Job{NumWorkers: 1, Command: []string{"echo", "plain"}, Stdout: &out, Stderr: &out, NoPrefix: true, Timeout: safetyTimeout}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "plain\nplain\n" {
		t.Errorf("output %q, want two unprefixed lines", got)
	}
}

func TestRunWorkerFailureKillsJob(t *testing.T) {
	requireSh(t)
	var out syncBuffer
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
	if !errors.As(err, &pe) {
		t.Fatalf("Run returned %v (%T), want a *ProcessError", err, err)
	}
	if pe.Role != RoleWorker || pe.Index != 1 || pe.ExitCode() != 3 || pe.Pid <= 0 {
		t.Errorf("ProcessError = %+v (exit %d), want worker 1 exit 3", pe, pe.ExitCode())
	}
	msg := err.Error()
	wantMsg := "worker 1 (pid " + strconv.Itoa(pe.Pid) + ") exited with status 3"
	if msg != wantMsg {
		t.Errorf("error %q, want %q", msg, wantMsg)
	}
	if !strings.Contains(out.String(), "[worker 1] failing\n") {
		t.Errorf("output lacks the failing worker's line:\n%s", out.String())
	}
}

func TestRunReportsSignalDeath(t *testing.T) {
	requireSh(t)
	j := &Job{
		NumWorkers: 1,
		Command:    sh(`if [ "$DMLC_ROLE" = worker ]; then kill -KILL $$; fi; exec sleep 60`),
		Stdout:     &syncBuffer{}, Stderr: &syncBuffer{},
		Timeout: safetyTimeout,
	}
	err := waitRun(t, runAsync(context.Background(), j))
	var pe *ProcessError
	if !errors.As(err, &pe) || pe.Role != RoleWorker || pe.ExitCode() != -1 {
		t.Fatalf("Run returned %v, want worker 0 killed by a signal", err)
	}
	if !strings.Contains(err.Error(), "worker 0 (pid ") || !strings.Contains(err.Error(), "killed by signal 9") {
		t.Errorf("error %q does not say worker 0 was killed by signal 9", err)
	}
}

func TestRunContextCancelKillsAll(t *testing.T) {
	requireSh(t)
	var out syncBuffer
	j := &Job{
		NumServers: 1, NumWorkers: 2,
		Command: sh(`echo "ready $$"; exec sleep 60`),
		Stdout:  &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := runAsync(ctx, j)
	waitFor(t, &out, "4 ready lines", func(s string) bool { return strings.Count(s, "ready") == 4 })
	cancel()
	err := waitRun(t, ch)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	for _, role := range []string{"[scheduler] ", "[server 0] ", "[worker 0] ", "[worker 1] "} {
		waitGone(t, grabPid(t, out.String(), role+"ready "))
	}
}

func TestRunKillsGrandchildren(t *testing.T) {
	requireSh(t)
	var out syncBuffer
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
	waitFor(t, &out, "2 grandchild lines", func(s string) bool { return strings.Count(s, "grandchild") == 2 })
	cancel()
	if err := waitRun(t, ch); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	waitGone(t, grabPid(t, out.String(), "[scheduler] grandchild "))
	waitGone(t, grabPid(t, out.String(), "[worker 0] grandchild "))
}

func TestRunKillsStraysOfSuccessfulJob(t *testing.T) {
	requireSh(t)
	var out syncBuffer
	j := &Job{
		NumWorkers: 1,
		// Exits 0 at once but leaves a sleep holding its stdout pipe open.
		// Run must neither wait for it nor leave it running.
		Command: sh(`sleep 60 & echo "stray $!"`),
		Stdout:  &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	if err := waitRun(t, runAsync(context.Background(), j)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	waitGone(t, grabPid(t, out.String(), "[scheduler] stray "))
	waitGone(t, grabPid(t, out.String(), "[worker 0] stray "))
}

func TestRunEscalatesToSIGKILL(t *testing.T) {
	requireSh(t)
	var out syncBuffer
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
	waitFor(t, &out, "2 ready lines", func(s string) bool { return strings.Count(s, "ready") == 2 })
	cancel()
	if err := waitRun(t, ch); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	waitGone(t, grabPid(t, out.String(), "[worker 0] ready "))
}

func TestRunTimeout(t *testing.T) {
	requireSh(t)
	j := &Job{
		NumWorkers: 1,
		Command:    []string{"sleep", "60"},
		Stdout:     &syncBuffer{}, Stderr: &syncBuffer{},
		Timeout: 300 * time.Millisecond,
	}
	err := waitRun(t, runAsync(context.Background(), j))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run returned %v, want ErrTimeout", err)
	}
	if !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Errorf("error %q does not say how long the timeout was", err)
	}
}

func TestRunPartialLastLine(t *testing.T) {
	requireSh(t)
	var stdout, stderr syncBuffer
	j := &Job{
		NumWorkers: 1,
		Command:    sh(`printf 'first\nno newline'; printf 'err partial' >&2`),
		Stdout:     &stdout, Stderr: &stderr,
		Timeout: safetyTimeout,
	}
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantOut := []string{"[scheduler] first", "[scheduler] no newline", "[worker 0] first", "[worker 0] no newline"}
	if got := sortedLines(stdout.String()); !slices.Equal(got, wantOut) {
		t.Errorf("stdout %q, want %q", got, wantOut)
	}
	if !strings.HasSuffix(stdout.String(), "\n") {
		t.Errorf("stdout %q does not end with a newline", stdout.String())
	}
	if got, want := sortedLines(stderr.String()), []string{"[scheduler] err partial", "[worker 0] err partial"}; !slices.Equal(got, want) {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func TestRunLinesDoNotInterleave(t *testing.T) {
	requireSh(t)
	const n = 300
	var out syncBuffer
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
	if err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	prefixes := map[string]string{
		"[scheduler] ": "scheduler0", "[server 0] ": "server0",
		"[worker 0] ": "worker0", "[worker 1] ": "worker1", "[worker 2] ": "worker2",
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		prefix, body, ok := strings.Cut(line, "] ")
		tag := prefixes[prefix+"] "]
		fields := strings.Fields(body)
		if !ok || tag == "" || len(fields) != 3 || fields[0] != tag || fields[1] != pad {
			t.Fatalf("mangled line %q", line)
		}
		counts[tag]++
	}
	for _, tag := range prefixes {
		if counts[tag] != 2*n {
			t.Errorf("%s: %d lines, want %d", tag, counts[tag], 2*n)
		}
	}
}

func TestCopyLinesSplitsOverlongLines(t *testing.T) {
	var out bytes.Buffer
	in := strings.Repeat("y", 2*maxLine+10) + "\nshort"
	(&lineOutput{}).copyLines(&out, strings.NewReader(in), "[p] ")
	lines := strings.Split(out.String(), "\n")
	// 3 pieces of the long line, "short" and the empty string after the
	// final newline.
	if len(lines) != 5 || lines[4] != "" || lines[3] != "[p] short" {
		t.Fatalf("got %d lines, tail %q", len(lines), lines[len(lines)-2:])
	}
	total := 0
	for _, l := range lines[:3] {
		if !strings.HasPrefix(l, "[p] ") {
			t.Fatalf("piece without prefix: %.20q", l)
		}
		total += len(l) - len("[p] ")
	}
	if total != 2*maxLine+10 {
		t.Errorf("pieces hold %d bytes, want %d", total, 2*maxLine+10)
	}
}

func TestRunStartFailureStopsStartedProcesses(t *testing.T) {
	requireSh(t)
	j := &Job{
		NumServers: 1, NumWorkers: 1,
		Command:       []string{"sleep", "60"},
		WorkerCommand: []string{"/nonexistent/elasticps-test-prog"},
		Stdout:        &syncBuffer{}, Stderr: &syncBuffer{},
		Timeout: safetyTimeout,
	}
	err := waitRun(t, runAsync(context.Background(), j))
	if err == nil || !strings.Contains(err.Error(), "cannot start worker 0") || errors.Is(err, ErrTimeout) {
		t.Fatalf("Run returned %v, want a start error for worker 0", err)
	}
}

func TestRunCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out syncBuffer
	j := &Job{NumWorkers: 1, Command: []string{"echo", "should not run"}, Stdout: &out, Stderr: &out}
	if err := j.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	if out.String() != "" {
		t.Errorf("a process ran: %q", out.String())
	}
}

func TestRunBadExtraEnvStartsNothing(t *testing.T) {
	var out syncBuffer
	j := &Job{
		NumWorkers: 1, Command: []string{"echo", "should not run"}, Stdout: &out, Stderr: &out,
		ExtraEnv: func(role string, _ int) []string {
			if role == RoleWorker {
				return []string{"NOEQUALS"}
			}
			return nil
		},
	}
	err := j.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `ExtraEnv("worker", 0) entry "NOEQUALS"`) {
		t.Fatalf("Run returned %v, want an ExtraEnv error", err)
	}
	if out.String() != "" {
		t.Errorf("a process ran: %q", out.String())
	}
}

//go:build unix

package launcher

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// helperEnv makes the test binary run a job itself (TestMain) instead of
// the tests, so that a test can kill a real launcher process.
const helperEnv = "ELASTICPS_LAUNCHER_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		j := &Job{NumWorkers: 2, Command: sh(`echo "pid $$"; exec sleep 60`), Timeout: safetyTimeout}
		if err := j.Run(context.Background()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A launcher killed with SIGKILL runs no teardown; its children must die
// with it anyway instead of running on under PID 1.
func TestKilledLauncherTakesItsChildren(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux ties a child's life to its parent's (PR_SET_PDEATHSIG)")
	}
	requireSh(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// the scheduler and the worker each print their pid
	var pids []int
	sc := bufio.NewScanner(out)
	for len(pids) < 2 && sc.Scan() {
		_, after, ok := strings.Cut(sc.Text(), "] pid ")
		require.True(t, ok, "unexpected line %q", sc.Text())
		pid, err := strconv.Atoi(after)
		require.NoError(t, err, sc.Text())
		pids = append(pids, pid)
	}
	require.Len(t, pids, 2, "the helper's children did not start: %v", sc.Err())
	t.Cleanup(func() { // not to leak them if the test failed; gone pids may be reused
		if !t.Failed() {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	for _, pid := range pids {
		require.False(t, processGone(pid), "child %d is not running before the kill", pid)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	for _, pid := range pids {
		waitGone(t, pid)
	}
}

// A broken stdout (its reader went away) is dropped: the job runs to its
// end, stderr keeps its lines, and Info says what happened, once.
func TestRunBrokenStdoutIsDropped(t *testing.T) {
	requireSh(t)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	require.NoError(t, r.Close()) // every write to w now fails with EPIPE
	t.Cleanup(func() { w.Close() })
	var stderr, info testutil.SyncBuffer
	j := &Job{
		NumWorkers: 1,
		Command:    sh(`i=0; while [ $i -lt 200 ]; do echo "line $i"; i=$((i+1)); done; echo "the end" >&2`),
		Stdout:     w, Stderr: &stderr, Info: &info, NoPrefix: true,
		Timeout: safetyTimeout,
	}
	require.NoError(t, j.Run(context.Background()))
	assert.Equal(t, "the end\nthe end\n", stderr.String(), "stderr of the scheduler and the worker")
	assert.Equal(t, 1, strings.Count(info.String(), "stdout is closed (broken pipe): the job runs on, its stdout is dropped\n"), "info:\n%s", &info)
}

func TestRunNodeHostAndMetricsPorts(t *testing.T) {
	requireSh(t)
	var out, info testutil.SyncBuffer
	j := &Job{
		NumServers: 1, NumWorkers: 2,
		Command: sh(`echo "host=$DMLC_NODE_HOST metrics=$PS_METRICS_ADDR"`),
		Env:     []string{"PS_METRICS_ADDR=127.0.0.1:19400", "PS_ELASTIC=1"},
		ExtraEnv: func(role string, index int) []string {
			if role == RoleWorker && index == 1 {
				return []string{"DMLC_NODE_HOST=10.1.2.3"}
			}
			return nil
		},
		RootPort: 45679,
		Stdout:   &out, Stderr: &out, Info: &info,
		Timeout: safetyTimeout,
	}
	require.NoError(t, j.Run(context.Background()))
	assert.Equal(t, []string{
		"[scheduler] host=127.0.0.1 metrics=127.0.0.1:19400",
		"[server 0] host=127.0.0.1 metrics=127.0.0.1:19401",
		"[worker 0] host=127.0.0.1 metrics=127.0.0.1:19402",
		"[worker 1] host=10.1.2.3 metrics=127.0.0.1:19403",
	}, sortedLines(out.String()))
	assert.Equal(t, "[launcher] scheduler at 127.0.0.1:45679 (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT): 1 scheduler, 1 server, 2 worker processes\n"+
		"[launcher] control API at 127.0.0.1:45680: elasticps ctl --addr 127.0.0.1:45680 status\n"+
		"[launcher] metrics (PS_METRICS_ADDR, one port per process) at http://127.0.0.1:PORT/metrics: scheduler 19400, server 0 19401, worker 0 19402, worker 1 19403\n",
		info.String())

	// port 0: every node picks its own; a fixed port too close to 65535
	// cannot give every process one
	out = testutil.SyncBuffer{}
	j.Env, j.Info = []string{"PS_METRICS_ADDR=127.0.0.1:0"}, nil
	require.NoError(t, j.Run(context.Background()))
	assert.Equal(t, 4, strings.Count(out.String(), "metrics=127.0.0.1:0\n"), out.String())
	j.Env = []string{"PS_METRICS_ADDR=127.0.0.1:65534"}
	assert.EqualError(t, j.Run(context.Background()), "launcher: PS_METRICS_ADDR=127.0.0.1:65534: the job needs 4 metrics ports from 65534 on, one per process; use a base port of at most 65532, or port 0 for free ports")
}

// A node reports its rank on the pipe ELASTICPS_LAUNCHER_FD names; its
// later lines carry the rank in their prefix, and a ProcessError names it.
func TestRunPrefixShowsReportedRank(t *testing.T) {
	requireSh(t)
	release := t.TempDir() + "/release"
	var out testutil.SyncBuffer
	j := &Job{
		NumWorkers: 1,
		// fd 3 is the report pipe, checked against the variable as a node does
		Command: sh(`case "$ELASTICPS_LAUNCHER_FD" in 3:[0-9]*) ;; *) echo "bad $ELASTICPS_LAUNCHER_FD"; exit 1;; esac; ` +
			`[ "$DMLC_ROLE" = worker ] && echo "rank 3" >&3; ` +
			`while [ ! -e ` + release + ` ]; do echo tick; sleep 0.01; done; [ "$DMLC_ROLE" = scheduler ]`),
		Stdout: &out, Stderr: &out,
		Timeout: safetyTimeout,
	}
	ch := runAsync(context.Background(), j)
	testutil.WaitFor(t, safetyTimeout, func() bool { return strings.Contains(out.String(), "[worker 0 rank 3] tick") },
		func() string { return "no tick with the rank in its prefix; output:\n" + out.String() })
	require.NoError(t, os.WriteFile(release, nil, 0o600))
	err := waitRun(t, ch)
	var pe *ProcessError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 3, pe.Rank)
	assert.Regexp(t, `^worker 0 rank 3 \(pid \d+\) exited with status 1$`, pe.Error())
	assert.NotContains(t, out.String(), "[scheduler rank", "the scheduler reported nothing")
}

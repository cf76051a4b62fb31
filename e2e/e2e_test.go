package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/launcher"
)

// runJob runs a local job whose workers run this binary as node kind, with
// the elasticps CLI as scheduler and servers.
func runJob(t *testing.T, ns, nw int, kind string, mod func(*launcher.Job)) string {
	t.Helper()
	var out testutil.SyncBuffer
	job := &launcher.Job{
		NumServers: ns, NumWorkers: nw,
		Command:          []string{selfExe(t)},
		SchedulerCommand: []string{elasticpsBin, "scheduler"},
		ServerCommand:    []string{elasticpsBin, "server"},
		Env:              []string{"ELASTICPS_E2E_NODE=" + kind, "DMLC_NODE_HOST=127.0.0.1"},
		Stdout:           &out, Stderr: &out,
		Timeout: 60 * time.Second,
	}
	if mod != nil {
		mod(job)
	}
	err := job.Run(context.Background())
	require.NoError(t, err, "job output:\n%s", out.String())
	return out.String()
}

func TestConnectionProcesses(t *testing.T) {
	for _, sz := range [][2]int{{1, 1}, {2, 2}, {3, 2}, {1, 4}} {
		t.Run(fmt.Sprintf("%ds%dw", sz[0], sz[1]), func(t *testing.T) {
			out := runJob(t, sz[0], sz[1], "connection", nil)
			for r := range sz[1] {
				require.Contains(t, out, fmt.Sprintf("rank %d id %d of %d workers / %d servers", r, 9+2*r, sz[1], sz[0]))
			}
		})
	}
}

func TestKVProcesses(t *testing.T) {
	for _, sz := range [][2]int{{1, 1}, {2, 2}, {3, 2}} {
		t.Run(fmt.Sprintf("%ds%dw", sz[0], sz[1]), func(t *testing.T) {
			out := runJob(t, sz[0], sz[1], "kv", nil)
			require.Equal(t, sz[1], strings.Count(out, "KV OK"), out)
		})
	}
}

// PS_SYNC_MODE=bsp on the elasticps servers, over ZeroMQ and TCP: every
// worker process pulls exactly the sum of its round from both servers.
func TestBSPProcesses(t *testing.T) {
	for _, van := range []string{"zmq", "tcp"} {
		t.Run(van, func(t *testing.T) {
			out := runJob(t, 2, 3, "bsp", func(j *launcher.Job) {
				j.Env = append(j.Env, "PS_SYNC_MODE=bsp", "DMLC_PS_VAN_TYPE="+van)
			})
			require.Equal(t, 3, strings.Count(out, "BSP OK"), out)
		})
	}
}

// DMLC_LOCAL=1: ipc:// endpoints instead of TCP.
func TestKVProcessesLocalIPC(t *testing.T) {
	out := runJob(t, 2, 2, "kv", func(j *launcher.Job) { j.Env = append(j.Env, "DMLC_LOCAL=1") })
	require.Equal(t, 2, strings.Count(out, "KV OK"), out)
}

// Heartbeats on, the resend layer on, verbose logging: the same job passes.
func TestKVProcessesHeartbeatResendVerbose(t *testing.T) {
	t.Parallel() // waits on heartbeat and resend timers, not the CPU; its own ports
	out := runJob(t, 2, 2, "kv", func(j *launcher.Job) {
		j.Env = append(j.Env, "PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=5", "PS_RESEND=1", "PS_VERBOSE=2")
	})
	require.Equal(t, 2, strings.Count(out, "KV OK"), out)
	require.Contains(t, out, "msg=send")
}

// ps-lite's test_kv_app_multi_workers: DMLC_NUM_WORKER=2, one worker
// process with two customers.
func TestTwoCustomersOneProcess(t *testing.T) {
	out := runJob(t, 1, 2, "two-customers", func(j *launcher.Job) { j.WorkerProcesses = 1 })
	require.Contains(t, out, "customer 0 OK")
	require.Contains(t, out, "customer 1 OK")
}

// Missing or invalid variables stop a node with one message naming the
// variable and what to set.
func TestEnvErrors(t *testing.T) {
	cases := []struct {
		env  []string
		want string
	}{
		{nil, "environment variable DMLC_ROLE is not set: set it to worker, server or scheduler"},
		{[]string{"DMLC_ROLE=server"}, "environment variable DMLC_NUM_WORKER is not set"},
		{[]string{"DMLC_ROLE=server", "DMLC_NUM_WORKER=1", "DMLC_NUM_SERVER=x"}, `DMLC_NUM_SERVER="x" is invalid: expected the number of servers`},
		{[]string{"DMLC_ROLE=server", "DMLC_NUM_WORKER=1", "DMLC_NUM_SERVER=1"}, "DMLC_PS_ROOT_URI is not set"},
		{[]string{"DMLC_ROLE=worker", "DMLC_NUM_WORKER=1", "DMLC_NUM_SERVER=1", "DMLC_PS_ROOT_URI=127.0.0.1", "DMLC_PS_ROOT_PORT=1"}, "DMLC_ROLE=worker but 'elasticps server' runs a server: set DMLC_ROLE=server"},
		{[]string{"DMLC_ROLE=server", "DMLC_NUM_WORKER=1", "DMLC_NUM_SERVER=1", "DMLC_PS_ROOT_URI=127.0.0.1", "DMLC_PS_ROOT_PORT=1", "PS_SYNC_MODE=sync"}, `environment variable PS_SYNC_MODE="sync" is invalid: expected asp (the default: never wait), bsp, ssp or fluent`},
		{[]string{"DMLC_ROLE=server", "DMLC_NUM_WORKER=1", "DMLC_NUM_SERVER=1", "DMLC_PS_ROOT_URI=127.0.0.1", "DMLC_PS_ROOT_PORT=1", "PS_SYNC_MODE=fluent", "PS_PAUSE_PROB=2"}, `environment variable PS_PAUSE_PROB="2" is invalid: expected a probability from 0 to 1, or sigmoid`},
	}
	for _, tc := range cases {
		cmd := exec.Command(elasticpsBin, "server")
		cmd.Env = append(cleanEnv(), tc.env...)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "env %v", tc.env)
		require.Contains(t, string(out), tc.want)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(string(out)), "\n")+1, "one line: %s", out)
	}
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DMLC_") && !strings.HasPrefix(kv, "PS_") && !strings.HasPrefix(kv, "PORT=") {
			env = append(env, kv)
		}
	}
	return env
}

// proc is one process started by hand, its output collected and scanned.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder
	done chan error
}

func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(args[0], args[1:]...), done: make(chan error, 1)}
	p.cmd.Env = append(cleanEnv(), env...)
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	require.NoError(t, p.cmd.Start())
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			p.mu.Lock()
			p.out.WriteString(s.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	go func() { err := p.cmd.Wait(); w.Close(); p.done <- err }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) waitFor(t *testing.T, text string) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(p.output(), text) },
		func() string { return fmt.Sprintf("%s never printed %q; output:\n%s", p.name, text, p.output()) })
}

func (p *proc) wait(t *testing.T) {
	t.Helper()
	err := testutil.Recv(t, p.done, 60*time.Second, func() string {
		return fmt.Sprintf("%s did not exit; output:\n%s", p.name, p.output())
	})
	require.NoError(t, err, "%s failed:\n%s", p.name, p.output())
}

// exitCode waits for p to exit and returns its exit status.
func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	err := testutil.Recv(t, p.done, 60*time.Second, func() string {
		return fmt.Sprintf("%s did not exit; output:\n%s", p.name, p.output())
	})
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s: %s", p.name, p.output())
	return ee.ExitCode()
}

// faultRun is a job of faultJob's.
type faultRun struct {
	env               func(...string) []string // every node's environment, and extra
	sched, srv0, srv1 *proc
	workers           []*proc
	port, p1          int // the scheduler's port, server rank 1's port
}

// faultJob starts a scheduler, two servers (rank 1 on the higher port) and
// two fault workers with heartbeats on (1 s, dead after 2 s), and returns
// them once the workers push; extra is added to every node's environment.
func faultJob(t *testing.T, extra ...string) faultRun {
	port := porttest.Free(t)
	common := append([]string{"DMLC_NUM_SERVER=2", "DMLC_NUM_WORKER=2", "DMLC_PS_ROOT_URI=127.0.0.1",
		fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1",
		"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=2", "PS_VERBOSE=1"}, extra...)
	env := func(extra ...string) []string { return append(append([]string{}, common...), extra...) }
	p0, p1 := porttest.Free(t), porttest.Free(t)
	if p0 > p1 {
		p0, p1 = p1, p0 // server rank 1 is the higher port
	}
	sched := start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler")
	srv0 := start(t, "server0", env("DMLC_ROLE=server", fmt.Sprintf("PORT=%d", p0)), elasticpsBin, "server")
	srv1 := start(t, "server1", env("DMLC_ROLE=server", fmt.Sprintf("PORT=%d", p1)), elasticpsBin, "server")
	var workers []*proc
	for i := range 2 {
		workers = append(workers, start(t, fmt.Sprintf("worker%d", i), env("DMLC_ROLE=worker", "ELASTICPS_E2E_NODE=faults"), selfExe(t)))
	}
	for _, w := range workers {
		w.waitFor(t, "fault worker pushing")
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range append([]*proc{sched, srv0, srv1}, workers...) {
				t.Logf("%s:\n%s", p.name, p.output())
			}
		}
	})
	return faultRun{env: env, sched: sched, srv0: srv0, srv1: srv1, workers: workers, port: port, p1: p1}
}

// kill9 kills p with SIGKILL and waits until it is gone.
func kill9(t *testing.T, p *proc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	testutil.Recv(t, p.done, 10*time.Second, func() string { return p.name + " did not exit after SIGKILL" })
}

// kill -9 of one of two servers mid-run, heartbeats on: every worker's
// operation fails with an error naming the dead server, Finalize returns
// everywhere, and every process of the job exits non-zero.
func TestServerKilled(t *testing.T) {
	t.Parallel() // kills a server and waits on heartbeat timeouts, not the CPU; its own ports
	j := faultJob(t)
	kill9(t, j.srv1)
	dead := fmt.Sprintf("server 10 (rank 1, 127.0.0.1:%d)", j.p1)
	for _, w := range j.workers {
		w.waitFor(t, "operation failed: kv: request")
		w.waitFor(t, dead+" is dead (no heartbeat for 2s (PS_HEARTBEAT_TIMEOUT)): the values of its key range")
		w.waitFor(t, "finalize: postoffice: the job lost nodes: "+dead+" died")
	}
	for _, p := range append([]*proc{j.sched, j.srv0}, j.workers...) {
		require.NotZero(t, p.exitCode(t), "%s exited 0:\n%s", p.name, p.output())
		require.Contains(t, p.output(), dead+" died", p.name)
	}
}

// The killed server is restarted and takes the dead server's id
// (is_recovery): it is told its state is lost, and the workers' requests
// to its range fail naming the range as lost instead of reading the new
// process's empty store. A garbage frame sent to the scheduler on the way
// is rejected and the scheduler keeps serving.
func TestServerKilledAndRestarted(t *testing.T) {
	t.Parallel() // kills a server and waits on heartbeat timeouts, not the CPU; its own ports
	signal := filepath.Join(t.TempDir(), "recovered")
	j := faultJob(t, "E2E_SIGNAL_FILE="+signal)

	// garbage to the scheduler's port: raw bytes, not ZMTP
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", j.port))
	require.NoError(t, err)
	_, _ = c.Write(bytes.Repeat([]byte{0xff, 0x00, 0x13}, 100))
	c.Close()

	kill9(t, j.srv1)
	for _, w := range j.workers {
		w.waitFor(t, "operation failed: kv: request")
	}
	repl := start(t, "server1-restarted", j.env("DMLC_ROLE=server"), elasticpsBin, "server")
	repl.waitFor(t, "id=10")
	repl.waitFor(t, "this server took over the id of a dead server whose state is lost")
	j.sched.waitFor(t, "replace dead node")
	require.NoError(t, os.WriteFile(signal, nil, 0o644))
	lost := fmt.Sprintf("server 10 (rank 1, 127.0.0.1:%d) is dead", j.p1)
	for _, w := range j.workers {
		w.waitFor(t, "pull after the restart: [] kv: request")
		w.waitFor(t, lost)
		w.waitFor(t, "the restarted process that took its id holds none of them")
	}
	for _, p := range append([]*proc{j.sched, j.srv0, repl}, j.workers...) {
		require.NotZero(t, p.exitCode(t), "%s exited 0:\n%s", p.name, p.output())
	}
	require.Contains(t, repl.output(), fmt.Sprintf("server 10 (rank 1, 127.0.0.1:%d) died", j.p1), "the restarted server reports the lost range")
}

// Scale-out and scale-in through the CLI, in an elastic job of processes:
// `elasticps ctl add` starts a standby server that joins, `elasticps ctl
// move` gives it a range, then
// `elasticps ctl drain` moves a server's keys away while the worker pushes;
// the drained server leaves and exits cleanly, the standby is released at
// the end, the worker's sums are exact and the job finishes.
func TestElasticDrainWithCtl(t *testing.T) {
	t.Parallel() // waits on a drain and a standby's start, not the CPU; its own ports
	// Two ports the kernel handed out, not port and port+1: the next port
	// up may be the local end of a connection (seen: the control API
	// failed to bind, and the job never started).
	port, ctlPort := porttest.Free(t), porttest.Free(t)
	for ctlPort == port {
		ctlPort = porttest.Free(t)
	}
	signal := filepath.Join(t.TempDir(), "drained")
	env := func(extra ...string) []string {
		return append([]string{"DMLC_NUM_SERVER=2", "DMLC_NUM_WORKER=1", "DMLC_PS_ROOT_URI=127.0.0.1",
			fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1", "PS_ELASTIC=1",
			fmt.Sprintf("PS_CTL_ADDR=127.0.0.1:%d", ctlPort)}, extra...)
	}
	sched := start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler")
	s0 := start(t, "server0", env("DMLC_ROLE=server"), elasticpsBin, "server")
	s1 := start(t, "server1", env("DMLC_ROLE=server"), elasticpsBin, "server")
	worker := start(t, "worker", env("DMLC_ROLE=worker", "ELASTICPS_E2E_NODE=elastic", "E2E_SIGNAL_FILE="+signal), selfExe(t))
	worker.waitFor(t, "elastic worker pushing")
	ctl := func(args ...string) string {
		cmd := exec.Command(elasticpsBin, append([]string{"ctl", "--addr", fmt.Sprintf("127.0.0.1:%d", ctlPort)}, args...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "ctl %v: %s", args, out)
		return string(out)
	}
	// scale-out: `ctl add` starts a standby server that joins the job
	add := exec.Command(elasticpsBin, "ctl", "--addr", fmt.Sprintf("127.0.0.1:%d", ctlPort), "add")
	add.Env = append(cleanEnv(), env()...)
	addOut, err := add.CombinedOutput()
	require.NoError(t, err, "ctl add: %s", addOut)
	require.Contains(t, string(addOut), "standby server 12 joined")
	require.Contains(t, ctl("status"), "servers [8 10 12]")
	out := ctl("--json", "move", "0", "9223372036854775807", "12")
	require.Contains(t, out, `"to": 12`)
	// scale-in: server 10 is drained and leaves
	out = ctl("drain", "10")
	require.Contains(t, out, "server 10 drained")
	status := ctl("status")
	require.Contains(t, status, "routing epoch")
	require.Contains(t, status, "servers [8 12]", "server 10 still listed:\n%s", status)
	require.Regexp(t, `(?m)^0\s+\d+\s+12\s`, status, "the first range should be on server 12:\n%s", status)
	require.NotRegexp(t, `(?m)^\d+\s+\d+\s+10\s`, status, "no range may stay on server 10:\n%s", status)
	require.NoError(t, os.WriteFile(signal, nil, 0o644))
	worker.waitFor(t, "elastic OK")
	for _, p := range []*proc{worker, s0, s1, sched} {
		p.wait(t)
	}
	// the standby (not our child: ctl add detached it) was released at the
	// end of the job and exited
	var pid int
	_, _ = fmt.Sscanf(string(addOut[strings.Index(string(addOut), "pid "):]), "pid %d", &pid)
	require.Positive(t, pid)
	require.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 10*time.Second, 50*time.Millisecond, "standby %d still running", pid)
}

// kill -9 of one of three servers mid-run with PS_REPLICAS=1: the workers'
// pushes that waited on it go to the backups promoted in its place, every
// push is acknowledged, and the pulled values are the exact sums of every
// worker's pushes. A standby server that joined before takes the copies
// the dead server held.
func TestReplicatedServerKilled(t *testing.T) {
	t.Parallel() // kills a server and waits for the failover, not the CPU; its own ports
	signal := filepath.Join(t.TempDir(), "killed")
	env := replicatedEnv(porttest.Free(t))
	j := startJob(t, jobSpec{env: env, servers: 3, workers: 2, node: "replicated", signal: signal, pushing: "replicated worker pushing"})
	sched, srvs, workers := j.sched, j.servers, j.workers
	sched.waitFor(t, "coord: backups placed")
	standby := j.add(start(t, "standby", env("DMLC_ROLE=server", "PS_STANDBY=1"), elasticpsBin, "server"))
	standby.waitFor(t, "id=14")
	for _, w := range workers {
		w.waitFor(t, "pushed 200 rounds")
	}
	kill9(t, srvs[1])
	sched.waitFor(t, "coord: failover")
	sched.waitFor(t, "[14]") // a backup list naming the standby
	finishReplicated(t, signal, workers, sched, srvs[0], srvs[2], standby)
}

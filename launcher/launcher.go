// Package launcher runs a whole ps-lite job on the local machine: one
// scheduler, NumServers servers and NumWorkers workers, each a separate OS
// process configured through ps-lite's DMLC_* environment variables. It is
// the library behind `elasticps local` and plays the role of ps-lite's
// tests/local.sh, with two things local.sh lacks: every output line is
// prefixed with the process it came from, and a failing process (or a
// cancelled context, or a timeout) tears the whole job down instead of
// leaving its siblings blocked forever waiting for a peer that is gone.
package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/internal/ports"
)

// Role names, spelled as ps-lite's DMLC_ROLE expects them.
const (
	RoleScheduler = "scheduler"
	RoleServer    = "server"
	RoleWorker    = "worker"
)

// Defaults for the zero values of the corresponding Job fields.
const (
	DefaultRootURI   = "127.0.0.1"
	DefaultKillGrace = 3 * time.Second
)

// ErrTimeout is wrapped by the error Run returns when Job.Timeout expires.
var ErrTimeout = errors.New("launcher: job timed out")

// ReportFDEnv names the pipe on which a child may tell the launcher what it
// learns at run time, one line per fact. Its value is "FD:INODE": the
// child's descriptor (always 3) and the pipe's inode, so that a process
// which inherited the variable but not the pipe (its descriptor 3 is
// something else) can tell and writes nothing. The only fact so far is
// "rank R", written by an elasticps node (Go, or C++ through the bridge)
// once the scheduler has assigned its rank; the launcher then shows the
// rank in the process's output prefix. Programs that know nothing of it
// leave the descriptor alone.
const ReportFDEnv = "ELASTICPS_LAUNCHER_FD"

// reportFD is the descriptor ReportFDEnv names: the first of ExtraFiles.
const reportFD = 3

// Job describes a local ps-lite job. The zero value of every optional field
// means "use the default" so that a struct literal with only NumServers,
// NumWorkers and Command is a complete job.
type Job struct {
	// NumServers and NumWorkers become DMLC_NUM_SERVER and DMLC_NUM_WORKER.
	// One of them may be 0 (connection-only tests), not both.
	NumServers, NumWorkers int

	// Command is run for every role unless overridden below.
	Command []string
	// SchedulerCommand, ServerCommand and WorkerCommand, when non-empty,
	// replace Command for that role (e.g. a C++ scheduler with Go workers).
	SchedulerCommand, ServerCommand, WorkerCommand []string

	// Env holds extra KEY=VAL entries for every process. They override the
	// parent environment and the DMLC_* variables the launcher sets.
	Env []string
	// ExtraEnv, if set, returns KEY=VAL entries for one process; index is
	// the launch index within the role (always 0 for the scheduler). Its
	// entries override Env. It is called once per process, before any
	// process starts, so a bad entry fails the job without side effects.
	ExtraEnv func(role string, index int) []string

	// RootURI is the scheduler host (DMLC_PS_ROOT_URI); "" means 127.0.0.1.
	// Servers and workers advertise it too (DMLC_NODE_HOST), since the
	// whole job runs on this machine; Env can override that.
	RootURI string
	// RootPort is the scheduler port (DMLC_PS_ROOT_PORT); 0 picks a free
	// one whose successor is free too, for an elastic scheduler's control
	// API (PS_CTL_ADDR's default is DMLC_PS_ROOT_PORT+1).
	RootPort int

	// WorkerProcesses is the number of worker processes to launch when it
	// differs from NumWorkers: ps-lite counts worker *registrations*, and a
	// process with several customers registers several times (ps-lite's
	// multi-customer test starts 1 process with DMLC_NUM_WORKER=2). 0 means
	// NumWorkers.
	WorkerProcesses int

	// Stdout and Stderr receive the children's output, line by line; nil
	// means os.Stdout / os.Stderr. Writes are serialized, so a plain
	// bytes.Buffer is fine (read it after Run returns).
	Stdout, Stderr io.Writer
	// NoPrefix turns off the "[worker 1 rank 0] " line prefixes. (It is a
	// negative flag so that the zero Job gets the useful default of
	// prefixed lines.)
	NoPrefix bool
	// Info, if non-nil, receives the launcher's own lines, each starting
	// with "[launcher] ": the scheduler's address, the control API's in an
	// elastic job (PS_ELASTIC), every node's metrics endpoint (PS_METRICS_ADDR),
	// and a note if Stdout or Stderr breaks. `elasticps local` sets it to
	// stderr.
	Info io.Writer

	// KillGrace is how long processes get between SIGTERM and SIGKILL when
	// the job is torn down; 0 means DefaultKillGrace (3s).
	KillGrace time.Duration
	// Timeout, if > 0, bounds the whole job: when it expires every process
	// is killed and Run returns an error wrapping ErrTimeout. Tests set it
	// so that a hung job fails instead of hanging CI.
	Timeout time.Duration
}

// ProcessError reports the first process of a job that failed, which is
// what brought the rest of the job down.
type ProcessError struct {
	Role  string // RoleScheduler, RoleServer or RoleWorker
	Index int    // launch index within the role (not the ps-lite rank)
	Rank  int    // the ps-lite rank the process reported; -1 if none
	Pid   int
	// State is the process's exit state; nil only if waiting for it failed
	// (then Err says why).
	State *os.ProcessState
	Err   error
}

func (e *ProcessError) Error() string {
	name := procName(e.Role, e.Index, e.Rank)
	if e.State == nil {
		return fmt.Sprintf("%s (pid %d): %v", name, e.Pid, e.Err)
	}
	return fmt.Sprintf("%s (pid %d) %s", name, e.Pid, describeExit(e.State))
}

func (e *ProcessError) Unwrap() error { return e.Err }

// ExitCode is the process's exit status, or -1 if it was killed by a signal.
func (e *ProcessError) ExitCode() int {
	if e.State == nil {
		return -1
	}
	return e.State.ExitCode()
}

// Validate reports the first problem that would stop Run from starting the
// job. Messages say what is wrong in words and name the `elasticps local`
// flag; each Job field's comment names its flag too.
func (j *Job) Validate() error {
	switch {
	case j.NumServers < 0:
		return fmt.Errorf("launcher: the number of servers (-s) is %d; it must be 0 or more", j.NumServers)
	case j.NumWorkers < 0:
		return fmt.Errorf("launcher: the number of workers (-w) is %d; it must be 0 or more", j.NumWorkers)
	case j.NumServers+j.NumWorkers == 0:
		return errors.New("launcher: the job has no servers and no workers; give -s or -w a count of at least 1")
	case j.WorkerProcesses < 0:
		return fmt.Errorf("launcher: --worker-procs is %d; it must be 0 (one process per worker) or more", j.WorkerProcesses)
	case j.WorkerProcesses > j.NumWorkers:
		// Every worker process registers at least once, so the scheduler
		// would reject the surplus processes.
		return fmt.Errorf("launcher: --worker-procs is %d but -w is only %d; each worker process registers at least one worker, so use at most %d processes",
			j.WorkerProcesses, j.NumWorkers, j.NumWorkers)
	case j.RootPort < 0 || j.RootPort > 65535:
		return fmt.Errorf("launcher: --port is %d; it must be a TCP port 1-65535, or 0 to pick a free one", j.RootPort)
	case j.KillGrace < 0:
		return fmt.Errorf("launcher: --kill-grace is %v; it must be 0 (default %v) or positive", j.KillGrace, DefaultKillGrace)
	case j.Timeout < 0:
		return fmt.Errorf("launcher: --timeout is %v; it must be 0 (no timeout) or positive", j.Timeout)
	}
	if err := checkEnv(j.Env, "--env"); err != nil {
		return err
	}
	if len(j.Command) == 0 && len(j.SchedulerCommand) == 0 && len(j.ServerCommand) == 0 && len(j.WorkerCommand) == 0 {
		return errors.New("launcher: no command to run; put the program and its arguments after --, e.g. elasticps local -s 1 -w 2 -- ./prog")
	}
	for _, r := range []struct {
		role, flag string
		n          int
	}{
		{RoleScheduler, "--scheduler-cmd", 1},
		{RoleServer, "--server-cmd", j.NumServers},
		{RoleWorker, "--worker-cmd", j.NumWorkers},
	} {
		if r.n == 0 {
			continue // that role has no processes, so it needs no command
		}
		argv := j.command(r.role)
		if len(argv) == 0 {
			return fmt.Errorf("launcher: no command for the %s; put the program after -- or give %s", r.role, r.flag)
		}
		if argv[0] == "" {
			return fmt.Errorf("launcher: the %s command %q starts with an empty program name", r.role, argv)
		}
	}
	return nil
}

// checkEnv rejects entries that exec would silently pass on as garbage.
func checkEnv(env []string, what string) error {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("launcher: %s entry %q is not of the form KEY=VALUE", what, kv)
		}
	}
	return nil
}

// command returns the argv for role, honouring the per-role overrides.
func (j *Job) command(role string) []string {
	var override []string
	switch role {
	case RoleScheduler:
		override = j.SchedulerCommand
	case RoleServer:
		override = j.ServerCommand
	case RoleWorker:
		override = j.WorkerCommand
	}
	if len(override) > 0 {
		return override
	}
	return j.Command
}

// procName names a process in prefixes and errors: "scheduler", "server 0",
// or "worker 1 rank 0" once the worker has reported its rank (rank >= 0).
// The launch index stays first so a process keeps its place in the output.
func procName(role string, index, rank int) string {
	if role == RoleScheduler {
		return RoleScheduler // there is only ever one
	}
	name := role + " " + strconv.Itoa(index)
	if rank >= 0 {
		name += " rank " + strconv.Itoa(rank)
	}
	return name
}

// proc is one child process of a running job.
type proc struct {
	role  string
	index int
	name  string // "worker 1": used in errors until the rank is known
	argv  []string
	env   []string
	// rank is the ps-lite rank the process reported on its report pipe,
	// -1 until then; prefix is its output prefix. Both are written by the
	// report reader and read by the output copiers.
	rank   atomic.Int64
	prefix atomic.Pointer[string]

	cmd       *exec.Cmd
	pgid      int
	exited    bool // reaped by cmd.Wait
	groupGone bool // the process group is known to be empty; never signal it again
	stdoutR   *os.File
	stderrR   *os.File
	reportR   *os.File
}

// setRank records the rank the process reported and shows it in the
// prefix of its later lines.
func (p *proc) setRank(rank int, prefixed bool) {
	p.rank.Store(int64(rank))
	if prefixed {
		pre := "[" + procName(p.role, p.index, rank) + "] "
		p.prefix.Store(&pre)
	}
}

// readReports reads the process's report pipe (see ReportFDEnv) until every
// writer closed it. Lines it does not understand are ignored, so that newer
// nodes can report more.
func (p *proc) readReports(r io.Reader, prefixed bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "rank "); ok {
			if rank, err := strconv.Atoi(v); err == nil && rank >= 0 {
				p.setRank(rank, prefixed)
			}
		}
	}
}

type exitEvent struct {
	p   *proc
	err error
}

// pollInterval is how often a job being torn down is checked for whether
// all its process groups have exited, so Run returns soon after they do
// rather than always waiting the full KillGrace.
const pollInterval = 20 * time.Millisecond

// Run starts the scheduler, then the servers, then the workers, and waits
// for all of them. It returns nil only if every process exits with status 0.
//
// The first process to fail (non-zero status or killed by a signal) makes
// Run tear the job down and return a *ProcessError for it; the exits of the
// processes killed as a consequence are not reported. Cancelling ctx or
// hitting Timeout tears the job down the same way and returns an error
// wrapping ctx.Err() or ErrTimeout. Tearing down means SIGTERM to every
// process group, then SIGKILL to whatever is left after KillGrace.
//
// Each child runs in its own process group so that grandchildren (e.g. the
// real program behind an `sh -c` wrapper) are killed with it. A side effect
// is that a terminal's Ctrl-C reaches only the launcher, which is why the
// CLI must cancel ctx on SIGINT/SIGTERM. Leftover processes in a group whose
// leader exited successfully get the same SIGTERM/SIGKILL once every leader
// has exited (without changing the result), so Run leaves no strays behind
// and a stray holding an output pipe open cannot keep Run waiting.
//
// Children's stdin is /dev/null: many processes sharing a terminal's input
// cannot work, and ps-lite programs do not read it.
func (j *Job) Run(ctx context.Context) error {
	if !supported {
		return errUnsupported
	}
	if err := j.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return &stoppedError{cause: context.Cause(ctx), err: err, early: true}
	}
	port := j.RootPort
	if port == 0 {
		var err error
		if port, err = freePortPair(); err != nil {
			return err
		}
	}
	procs, info, err := j.plan(port)
	if err != nil {
		return err
	}
	stdout, stderr := j.Stdout, j.Stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	grace := j.KillGrace
	if grace == 0 {
		grace = DefaultKillGrace
	}
	r := &runner{
		procs:   procs,
		out:     &lineOutput{},
		stdout:  &sink{w: stdout, name: "stdout"},
		stderr:  &sink{w: stderr, name: "stderr"},
		prefix:  !j.NoPrefix,
		grace:   grace,
		timeout: j.Timeout,
	}
	if j.Info != nil {
		r.info = &sink{w: j.Info, name: "info"}
		r.out.onBroken = func(s *sink) {
			if s != r.info {
				r.out.write(r.info, []byte(infoPrefix+s.name+" is closed (broken pipe): the job runs on, its "+s.name+" is dropped\n"))
			}
		}
		r.out.mu.Lock()
		for _, line := range info {
			r.out.write(r.info, []byte(infoPrefix+line+"\n"))
		}
		r.out.mu.Unlock()
	}
	return r.run(ctx)
}

// infoPrefix starts every line the launcher itself writes to Job.Info.
const infoPrefix = "[launcher] "

// lookupEnv is the value a variable has for every process of the job: the
// last entry of Env, else the launcher's own environment.
func (j *Job) lookupEnv(key string) (string, bool) {
	for _, kv := range slices.Backward(j.Env) {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v, true
		}
	}
	return os.LookupEnv(key)
}

// ranksByIndex reports whether plan sets DMLC_RANK to the launch index of
// every server and worker process: with instance groups (DMLC_GROUP_SIZE
// > 1, in Env or the parent environment) every instance must ask for its
// rank, and programs written for the BytePS fork pass DMLC_RANK to
// StartPS. A non-empty DMLC_RANK in Env or the parent is left alone, as
// is a DMLC_GROUP_SIZE that is not an integer (the nodes report that).
func (j *Job) ranksByIndex() bool {
	gs, _ := j.lookupEnv("DMLC_GROUP_SIZE")
	if n, err := strconv.Atoi(strings.TrimSpace(gs)); err != nil || n <= 1 {
		return false
	}
	rank, _ := j.lookupEnv("DMLC_RANK")
	return rank == ""
}

// metricsAddrs gives each of n processes its own PS_METRICS_ADDR when the
// job has one with a fixed port: base port + launch position (scheduler
// first), since all of them bind on this machine. A port of 0 already gives
// every node a free port of its own, and an address that does not parse is
// left to the nodes to report; both yield nil.
func metricsAddrs(addr string, n int) ([]string, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil
	}
	base, err := strconv.Atoi(portStr)
	if err != nil || base == 0 {
		return nil, nil
	}
	if base < 0 || base+n-1 > 65535 {
		return nil, fmt.Errorf("launcher: PS_METRICS_ADDR=%s: the job needs %d metrics ports from %d on, one per process; use a base port of at most %d, or port 0 for free ports",
			addr, n, base, 65535-n+1)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = net.JoinHostPort(host, strconv.Itoa(base+i))
	}
	return out, nil
}

// plan builds every process's argv and environment before anything starts,
// so that a bad ExtraEnv entry fails the job without leaving half of it
// running. It also returns the lines that tell the user what it chose.
func (j *Job) plan(port int) ([]*proc, []string, error) {
	uri := j.RootURI
	if uri == "" {
		uri = DefaultRootURI
	}
	workerProcs := j.WorkerProcesses
	if workerProcs == 0 {
		workerProcs = j.NumWorkers
	}
	roles := []struct {
		role string
		n    int
	}{{RoleScheduler, 1}, {RoleServer, j.NumServers}, {RoleWorker, workerProcs}}
	total := 1 + j.NumServers + workerProcs
	shown := uri // what the nodes are told, which Env may override
	for _, kv := range j.Env {
		if v, ok := strings.CutPrefix(kv, "DMLC_PS_ROOT_URI="); ok {
			shown = v
		}
	}
	info := []string{fmt.Sprintf("scheduler at %s (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT): 1 scheduler, %s, %s",
		net.JoinHostPort(shown, strconv.Itoa(port)), count(j.NumServers, "server"), count(workerProcs, "worker process"))}
	if v, _ := j.lookupEnv("PS_ELASTIC"); v != "" && v != "0" {
		ctl, ok := j.lookupEnv("PS_CTL_ADDR")
		if !ok || ctl == "" {
			ctl = net.JoinHostPort(shown, strconv.Itoa(port+1))
		}
		info = append(info, fmt.Sprintf("control API at %s: elasticps ctl --addr %s status", ctl, ctl))
	}
	metricsAddr, _ := j.lookupEnv("PS_METRICS_ADDR")
	metrics, err := metricsAddrs(metricsAddr, total)
	if err != nil {
		return nil, nil, err
	}
	var endpoints []string
	rankByIndex := j.ranksByIndex()
	if rankByIndex {
		gs, _ := j.lookupEnv("DMLC_GROUP_SIZE")
		info = append(info, "DMLC_GROUP_SIZE="+gs+": every server and worker process gets DMLC_RANK = its launch index")
	}
	parent := os.Environ()
	var procs []*proc
	for _, r := range roles {
		for i := range r.n {
			// Later entries win (os/exec keeps the last value of a
			// duplicated key), giving the documented precedence:
			// parent < launcher's DMLC_* < Env < ExtraEnv.
			env := append([]string(nil), parent...)
			env = append(env,
				"DMLC_ROLE="+r.role,
				"DMLC_NUM_SERVER="+strconv.Itoa(j.NumServers),
				"DMLC_NUM_WORKER="+strconv.Itoa(j.NumWorkers),
				"DMLC_PS_ROOT_URI="+uri,
				"DMLC_PS_ROOT_PORT="+strconv.Itoa(port),
				// The job runs on this machine: without it a node would
				// advertise its first non-loopback address.
				"DMLC_NODE_HOST="+uri,
				// Informational only. DMLC_RANK is not set (except with
				// instance groups, below): ranks are assigned by the
				// scheduler at registration and need not match launch
				// order.
				"ELASTICPS_LOCAL_INDEX="+strconv.Itoa(i),
			)
			if rankByIndex && r.role != RoleScheduler {
				env = append(env, "DMLC_RANK="+strconv.Itoa(i))
			}
			env = append(env, j.Env...)
			if metrics != nil {
				addr := metrics[len(procs)]
				env = append(env, "PS_METRICS_ADDR="+addr)
				_, port, _ := net.SplitHostPort(addr)
				endpoints = append(endpoints, procName(r.role, i, -1)+" "+port)
			}
			if j.ExtraEnv != nil {
				extra := j.ExtraEnv(r.role, i)
				if err := checkEnv(extra, fmt.Sprintf("ExtraEnv(%q, %d)", r.role, i)); err != nil {
					return nil, nil, err
				}
				env = append(env, extra...)
			}
			p := &proc{
				role:  r.role,
				index: i,
				name:  procName(r.role, i, -1),
				argv:  j.command(r.role),
				env:   env,
			}
			p.rank.Store(-1)
			procs = append(procs, p)
		}
	}
	switch {
	case metrics != nil:
		host, _, _ := net.SplitHostPort(metrics[0])
		info = append(info, fmt.Sprintf("metrics (PS_METRICS_ADDR, one port per process) at http://%s/metrics: %s",
			net.JoinHostPort(host, "PORT"), strings.Join(endpoints, ", ")))
	case metricsAddr != "":
		info = append(info, "metrics (PS_METRICS_ADDR="+metricsAddr+"): every node logs the address it serves")
	}
	return procs, info, nil
}

// count words n things: "1 server", "2 servers".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	if strings.HasSuffix(thing, "s") {
		return strconv.Itoa(n) + " " + thing + "es"
	}
	return strconv.Itoa(n) + " " + thing + "s"
}

// freePortPair picks an unused port whose successor is unused too: the
// scheduler's, and its control API's in an elastic job, below the
// kernel's ephemeral range (package ports): within it, a server that
// started before the scheduler was once given the scheduler's port by
// bind(0). Another program may still grab one before the scheduler binds
// it; that shows up as a scheduler bind error, which fails the job
// visibly.
func freePortPair() (int, error) {
	if port := ports.Free(2); port != 0 {
		return port, nil
	}
	return 0, errors.New("launcher: cannot pick a free scheduler port on 127.0.0.1; give one with --port")
}

type runner struct {
	procs          []*proc
	out            *lineOutput
	stdout, stderr *sink
	info           *sink // nil: Job.Info not set
	prefix         bool
	grace, timeout time.Duration
	readers        sync.WaitGroup
}

// start launches one process with its output going to pipes we own. The
// pipes are ours rather than exec's (cmd.Stdout = non-*os.File writer) so
// that cmd.Wait returns when the process exits, even if a grandchild still
// holds the pipe open; the readers then run until the last writer is gone.
// A third pipe, the child's descriptor 3, carries its reports (ReportFDEnv).
func (r *runner) start(p *proc) error {
	var reads, writes []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	for range 3 {
		rd, wr, err := os.Pipe()
		if err != nil {
			closeAll(reads)
			closeAll(writes)
			return err
		}
		reads, writes = append(reads, rd), append(writes, wr)
	}
	p.cmd = exec.Command(p.argv[0], p.argv[1:]...)
	// Set last, so that a stale value from the environment cannot point
	// at another pipe.
	p.cmd.Env = append(p.env, ReportFDEnv+"="+strconv.Itoa(reportFD)+":"+pipeID(writes[2]))
	p.cmd.Stdout = writes[0]
	p.cmd.Stderr = writes[1]
	p.cmd.ExtraFiles = writes[2:] // becomes reportFD
	setProcessGroup(p.cmd)
	err := p.cmd.Start()
	// The child has its own copies now; ours must be closed or the readers
	// would never see EOF.
	closeAll(writes)
	if err != nil {
		closeAll(reads)
		return err
	}
	p.pgid = p.cmd.Process.Pid // Setpgid(0): the child leads a group with its own pid
	p.stdoutR, p.stderrR, p.reportR = reads[0], reads[1], reads[2]
	pre := ""
	if r.prefix {
		pre = "[" + p.name + "] "
	}
	p.prefix.Store(&pre)
	prefix := func() string { return *p.prefix.Load() }
	r.readers.Add(2)
	go func() { defer r.readers.Done(); r.out.copyLines(r.stdout, p.stdoutR, prefix) }()
	go func() { defer r.readers.Done(); r.out.copyLines(r.stderr, p.stderrR, prefix) }()
	// Not waited for: reports are optional, and a grandchild that keeps
	// the pipe open must not delay Run; closeReadEnds ends it.
	go p.readReports(p.reportR, r.prefix)
	return nil
}

// run is the job's event loop. All signalling happens on this goroutine, so
// the per-process group bookkeeping needs no locks.
func (r *runner) run(ctx context.Context) error {
	var timeoutC <-chan time.Time
	if r.timeout > 0 {
		t := time.NewTimer(r.timeout)
		defer t.Stop()
		timeoutC = t.C
	}

	var cause error // the first failure; everything after it is fallout
	exits := make(chan exitEvent, len(r.procs))
	running := 0
	for _, p := range r.procs {
		if err := r.start(p); err != nil {
			cause = fmt.Errorf("launcher: cannot start %s (%q): %w", p.name, p.argv, err)
			break
		}
		running++
		go func() { exits <- exitEvent{p, p.cmd.Wait()} }()
	}

	var (
		killing      bool // SIGTERM sent
		killed       bool // SIGKILL sent
		killDeadline time.Time
		tick         *time.Ticker
		tickC        <-chan time.Time
	)
	beginKill := func() {
		if killing {
			return
		}
		killing = true
		r.signalAll(sigTerm)
		killDeadline = time.Now().Add(r.grace)
		tick = time.NewTicker(pollInterval)
		tickC = tick.C
	}
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	if cause != nil {
		beginKill()
	}
	done := ctx.Done()

	for {
		if running == 0 {
			// Every leader has exited. Groups that still have running
			// members hold strays (or, while killing, processes still
			// dying), which get the same SIGTERM/SIGKILL treatment.
			if killed || !r.anyGroupAlive() {
				// What may remain: zombies waiting for PID 1 to reap
				// them, or a process forked while anyGroupAlive looked.
				// SIGKILL is harmless to the former and settles the
				// latter; after it nothing can resist, so stop here.
				r.signalAll(sigKill)
				break
			}
			beginKill()
		}
		select {
		case ev := <-exits:
			running--
			ev.p.exited = true
			// Probe right away: if the group is empty now, mark it so it
			// is never signalled later, when its id might be reused.
			r.probeGroup(ev.p)
			if err := exitError(ev.p, ev.err); err != nil && cause == nil {
				cause = err
				beginKill()
			}
		case <-done:
			done = nil
			if cause == nil {
				cause = &stoppedError{cause: context.Cause(ctx), err: ctx.Err()}
				beginKill()
			}
		case <-timeoutC:
			timeoutC = nil
			if cause == nil {
				cause = fmt.Errorf("%w: it did not finish within %v (--timeout); all processes were killed", ErrTimeout, r.timeout)
				beginKill()
			}
		case <-tickC:
			// Besides escalating, the tick makes the loop re-check at
			// the top whether the strays are gone.
			if !killed && time.Now().After(killDeadline) {
				r.signalAll(sigKill)
				killed = true
			}
		}
	}

	r.waitReaders()
	return cause
}

// waitReaders lets the output goroutines drain what the children wrote. By
// now every process group is empty or SIGKILLed, so the pipes normally hit
// EOF at once; the bound covers a process that escaped its group (setsid)
// and kept a pipe open, in which case we stop reading it.
func (r *runner) waitReaders() {
	done := make(chan struct{})
	go func() { r.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.grace):
		for _, p := range r.procs {
			r.closeReadEnds(p)
		}
		<-done
	}
	for _, p := range r.procs {
		r.closeReadEnds(p)
	}
}

func (r *runner) closeReadEnds(p *proc) {
	// Closing an *os.File pipe unblocks a concurrent Read; closing twice
	// just returns an error, which is irrelevant here.
	for _, f := range []*os.File{p.stdoutR, p.stderrR, p.reportR} {
		if f != nil {
			f.Close()
		}
	}
}

// stoppedError is Run's error when its context ends: it wraps ctx.Err()
// but says what stopped the job in words ("interrupt signal received")
// rather than "context canceled".
type stoppedError struct {
	cause, err error
	early      bool // before any process started
}

func (e *stoppedError) Error() string {
	msg := "launcher: the job was stopped"
	if e.early {
		msg = "launcher: the job was stopped before it started"
	}
	if e.cause != nil && e.cause != e.err {
		msg += " (" + e.cause.Error() + ")"
	} else if errors.Is(e.err, context.DeadlineExceeded) {
		msg += " (its deadline passed)"
	}
	if !e.early {
		msg += "; all processes were killed"
	}
	return msg
}

func (e *stoppedError) Unwrap() error { return e.err }

// exitError turns a process's exit into the error Run reports, or nil for
// a clean exit.
func exitError(p *proc, waitErr error) error {
	if waitErr == nil {
		return nil
	}
	pe := &ProcessError{Role: p.role, Index: p.index, Rank: int(p.rank.Load()), Pid: p.cmd.Process.Pid, State: p.cmd.ProcessState}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		pe.Err = waitErr
	}
	return pe
}

func (r *runner) signalAll(sig signal) {
	for _, p := range r.procs {
		if p.cmd == nil || p.cmd.Process == nil || p.groupGone {
			continue
		}
		if err := signalGroup(p.pgid, sig); err != nil {
			// ESRCH: the group is empty. Anything else (EPERM) means
			// it is nothing we can act on; either way stop trying.
			p.groupGone = true
		}
	}
	if sig == sigKill {
		// SIGKILL cannot be resisted; do not probe these ids again (see
		// the zombie note in run).
		for _, p := range r.procs {
			p.groupGone = true
		}
	}
}

func (r *runner) probeGroup(p *proc) {
	if !p.groupGone && !groupAlive(p.pgid) {
		p.groupGone = true
	}
}

// anyGroupAlive reports whether any of the job's process groups still has
// a member that is running, as opposed to a zombie. The distinction matters
// because orphaned grandchildren are reaped by PID 1, which in containers is
// often slow or (when the launcher itself is PID 1) never does it; counting
// zombies would make every teardown wait the full KillGrace.
func (r *runner) anyGroupAlive() bool {
	var orphaned []int // groups whose leader is reaped but which still exist
	for _, p := range r.procs {
		if p.cmd == nil || p.cmd.Process == nil || p.groupGone {
			continue
		}
		r.probeGroup(p)
		if p.groupGone {
			continue
		}
		if !p.exited {
			// The leader runs (or is a zombie cmd.Wait is about to reap):
			// alive without looking further.
			return true
		}
		orphaned = append(orphaned, p.pgid)
	}
	return len(orphaned) > 0 && anyRunning(orphaned)
}

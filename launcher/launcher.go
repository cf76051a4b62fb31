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
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
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
	RootURI string
	// RootPort is the scheduler port (DMLC_PS_ROOT_PORT); 0 picks a free one.
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
	// NoPrefix turns off the "[worker 1] " line prefixes. (It is a negative
	// flag so that the zero Job gets the useful default of prefixed lines.)
	NoPrefix bool

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
	Pid   int
	// State is the process's exit state; nil only if waiting for it failed
	// (then Err says why).
	State *os.ProcessState
	Err   error
}

func (e *ProcessError) Error() string {
	name := procName(e.Role, e.Index)
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
// job. Messages name both the Job field and the `elasticps local` flag so
// they are actionable from either side.
func (j *Job) Validate() error {
	switch {
	case j.NumServers < 0:
		return fmt.Errorf("launcher: NumServers (-s) is %d; it must be 0 or more", j.NumServers)
	case j.NumWorkers < 0:
		return fmt.Errorf("launcher: NumWorkers (-w) is %d; it must be 0 or more", j.NumWorkers)
	case j.NumServers+j.NumWorkers == 0:
		return errors.New("launcher: the job has no servers and no workers; set NumServers (-s) or NumWorkers (-w) to at least 1")
	case j.WorkerProcesses < 0:
		return fmt.Errorf("launcher: WorkerProcesses (--worker-procs) is %d; it must be 0 (one process per worker) or more", j.WorkerProcesses)
	case j.WorkerProcesses > j.NumWorkers:
		// Every worker process registers at least once, so the scheduler
		// would reject the surplus processes.
		return fmt.Errorf("launcher: WorkerProcesses (--worker-procs) is %d but NumWorkers (-w) is only %d; each worker process registers at least one worker, so use at most %d processes",
			j.WorkerProcesses, j.NumWorkers, j.NumWorkers)
	case j.RootPort < 0 || j.RootPort > 65535:
		return fmt.Errorf("launcher: RootPort (--port) is %d; it must be a TCP port 1-65535, or 0 to pick a free one", j.RootPort)
	case j.KillGrace < 0:
		return fmt.Errorf("launcher: KillGrace (--kill-grace) is %v; it must be 0 (default %v) or positive", j.KillGrace, DefaultKillGrace)
	case j.Timeout < 0:
		return fmt.Errorf("launcher: Timeout (--timeout) is %v; it must be 0 (no timeout) or positive", j.Timeout)
	}
	if err := checkEnv(j.Env, "Env (--env)"); err != nil {
		return err
	}
	if len(j.Command) == 0 && len(j.SchedulerCommand) == 0 && len(j.ServerCommand) == 0 && len(j.WorkerCommand) == 0 {
		return errors.New("launcher: no command to run; set Command (on the command line: put CMD ARGS after --)")
	}
	for _, r := range []struct {
		role, field, flag string
		n                 int
	}{
		{RoleScheduler, "SchedulerCommand", "--scheduler-cmd", 1},
		{RoleServer, "ServerCommand", "--server-cmd", j.NumServers},
		{RoleWorker, "WorkerCommand", "--worker-cmd", j.NumWorkers},
	} {
		if r.n == 0 {
			continue // that role has no processes, so it needs no command
		}
		argv := j.command(r.role)
		if len(argv) == 0 {
			return fmt.Errorf("launcher: no command for the %s; set Command (CMD after --) or %s (%s)", r.role, r.field, r.flag)
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

func procName(role string, index int) string {
	if role == RoleScheduler {
		return RoleScheduler // there is only ever one
	}
	return role + " " + strconv.Itoa(index)
}

// proc is one child process of a running job.
type proc struct {
	role  string
	index int
	name  string // "worker 1": used in prefixes and errors
	argv  []string
	env   []string

	cmd       *exec.Cmd
	pgid      int
	exited    bool // reaped by cmd.Wait
	groupGone bool // the process group is known to be empty; never signal it again
	stdoutR   *os.File
	stderrR   *os.File
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
		return fmt.Errorf("launcher: job not started: %w", err)
	}
	port := j.RootPort
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return err
		}
	}
	procs, err := j.plan(port)
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
		stdout:  stdout,
		stderr:  stderr,
		prefix:  !j.NoPrefix,
		grace:   grace,
		timeout: j.Timeout,
	}
	return r.run(ctx)
}

// plan builds every process's argv and environment before anything starts,
// so that a bad ExtraEnv entry fails the job without leaving half of it
// running.
func (j *Job) plan(port int) ([]*proc, error) {
	uri := j.RootURI
	if uri == "" {
		uri = DefaultRootURI
	}
	workerProcs := j.WorkerProcesses
	if workerProcs == 0 {
		workerProcs = j.NumWorkers
	}
	parent := os.Environ()
	var procs []*proc
	add := func(role string, n int) error {
		for i := range n {
			// Later entries win (os/exec keeps the last value of a
			// duplicated key), giving the documented precedence:
			// parent < launcher's DMLC_* < Env < ExtraEnv.
			env := append([]string(nil), parent...)
			env = append(env,
				"DMLC_ROLE="+role,
				"DMLC_NUM_SERVER="+strconv.Itoa(j.NumServers),
				"DMLC_NUM_WORKER="+strconv.Itoa(j.NumWorkers),
				"DMLC_PS_ROOT_URI="+uri,
				"DMLC_PS_ROOT_PORT="+strconv.Itoa(port),
				// Informational only. DMLC_RANK is deliberately not set:
				// ranks are assigned by the scheduler at registration and
				// need not match launch order.
				"ELASTICPS_LOCAL_INDEX="+strconv.Itoa(i),
			)
			env = append(env, j.Env...)
			if j.ExtraEnv != nil {
				extra := j.ExtraEnv(role, i)
				if err := checkEnv(extra, fmt.Sprintf("ExtraEnv(%q, %d)", role, i)); err != nil {
					return err
				}
				env = append(env, extra...)
			}
			procs = append(procs, &proc{
				role:  role,
				index: i,
				name:  procName(role, i),
				argv:  j.command(role),
				env:   env,
			})
		}
		return nil
	}
	// Launch order: the scheduler first because every other node connects
	// to it, then servers before workers as local.sh does.
	for _, r := range []struct {
		role string
		n    int
	}{{RoleScheduler, 1}, {RoleServer, j.NumServers}, {RoleWorker, workerProcs}} {
		if err := add(r.role, r.n); err != nil {
			return nil, err
		}
	}
	return procs, nil
}

// freePort asks the kernel for an unused port. It is released again before
// the scheduler binds it, so another program could grab it in between; that
// race is accepted (it is what everyone does for local test jobs) and shows
// up as a scheduler bind error, which fails the job visibly.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("launcher: cannot pick a free scheduler port (%v); set RootPort (--port)", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("launcher: cannot release the probe port %d: %v", port, err)
	}
	return port, nil
}

type runner struct {
	procs          []*proc
	out            *lineOutput
	stdout, stderr io.Writer
	prefix         bool
	grace, timeout time.Duration
	readers        sync.WaitGroup
}

// start launches one process with its output going to pipes we own. The
// pipes are ours rather than exec's (cmd.Stdout = non-*os.File writer) so
// that cmd.Wait returns when the process exits, even if a grandchild still
// holds the pipe open; the readers then run until the last writer is gone.
func (r *runner) start(p *proc) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	p.cmd = exec.Command(p.argv[0], p.argv[1:]...)
	p.cmd.Env = p.env
	p.cmd.Stdout = outW
	p.cmd.Stderr = errW
	setProcessGroup(p.cmd)
	err = p.cmd.Start()
	// The child has its own copies now; ours must be closed or the readers
	// would never see EOF.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	p.pgid = p.cmd.Process.Pid // Setpgid(0): the child leads a group with its own pid
	p.stdoutR, p.stderrR = outR, errR
	prefix := ""
	if r.prefix {
		prefix = "[" + p.name + "] "
	}
	r.readers.Add(2)
	go func() { defer r.readers.Done(); r.out.copyLines(r.stdout, outR, prefix) }()
	go func() { defer r.readers.Done(); r.out.copyLines(r.stderr, errR, prefix) }()
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
				cause = fmt.Errorf("launcher: job canceled, all processes killed: %w", ctx.Err())
				beginKill()
			}
		case <-timeoutC:
			timeoutC = nil
			if cause == nil {
				cause = fmt.Errorf("%w after %v (Timeout, --timeout); all processes killed", ErrTimeout, r.timeout)
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
	if p.stdoutR != nil {
		p.stdoutR.Close()
	}
	if p.stderrR != nil {
		p.stderrR.Close()
	}
}

// exitError turns a process's exit into the error Run reports, or nil for
// a clean exit.
func exitError(p *proc, waitErr error) error {
	if waitErr == nil {
		return nil
	}
	pe := &ProcessError{Role: p.role, Index: p.index, Pid: p.cmd.Process.Pid, State: p.cmd.ProcessState}
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

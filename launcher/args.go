package launcher

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/elasticps/elasticps/internal/cli"
)

// Usage documents the command line that ParseArgs accepts. The CLI prints
// it for -h and after a parse error.
const Usage = `usage: elasticps local -s NUM_SERVERS -w NUM_WORKERS [options] -- CMD [ARGS...]

Runs a whole ps-lite job on this machine, like ps-lite's tests/local.sh: one
scheduler, then NUM_SERVERS servers, then NUM_WORKERS workers, each running
CMD ARGS with DMLC_ROLE, DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_PS_ROOT_URI
and DMLC_NODE_HOST (127.0.0.1) and DMLC_PS_ROOT_PORT set, plus
ELASTICPS_LOCAL_INDEX (the launch index within the role; ranks are assigned
by the scheduler, so DMLC_RANK is not set). --env overrides any of them.
With --env DMLC_GROUP_SIZE=N (N > 1, the BytePS fork's instance groups,
where every process must ask for its rank) every server and worker process
gets DMLC_RANK = its launch index, unless DMLC_RANK is set by --env or in
the launcher's environment.

Every output line is prefixed with its process: "[worker 1] ", and
"[worker 1 rank 0] " once an elasticps node (Go, or C++ through the bridge)
knows its rank. The launcher's own lines, on stderr, start with
"[launcher] ": the scheduler's address, the control API's when PS_ELASTIC=1,
and, with --env PS_METRICS_ADDR=HOST:PORT, every process's metrics endpoint
(PORT, PORT+1, ... in launch order; port 0 lets each node pick one).

If any process fails, the whole job is stopped (SIGTERM, then SIGKILL after
the grace period) and the exit status is reported. Ctrl-C stops the job too;
if the launcher itself is killed, its processes die with it (Linux). A closed
stdout (elasticps local ... | head) only drops the output.

Options:
  -s N                  number of servers (required; 0 is allowed)
  -w N                  number of workers (required; 0 is allowed if -s > 0)
  --scheduler-cmd CMD   run CMD for the scheduler instead of the command after --
  --server-cmd CMD      run CMD for the servers instead of the command after --
  --worker-cmd CMD      run CMD for the workers instead of the command after --
                        (CMD is one string split into words like a shell does:
                        spaces separate, '...' and "..." quote, \ escapes)
  --env KEY=VALUE       extra environment variable for every process; repeatable
  --port P              scheduler port; the control API is at P+1 (default: a
                        free port P with P+1 free too)
  --worker-procs N      start N worker processes instead of NUM_WORKERS, for
                        programs that register several workers per process
  --timeout D           kill the job and fail after duration D, e.g. 90s or 5m
  --kill-grace D        time between SIGTERM and SIGKILL (default 3s)
  --no-prefix           do not prefix output lines

The command after -- may be omitted only if all three --*-cmd options cover
every role that has processes.

Example:
  elasticps local -s 1 -w 2 -- ./test_kv_app
`

// ParseArgs parses the arguments of `elasticps local` (without the
// subcommand name) into a validated Job. It prints nothing; for -h or
// -help it returns flag.ErrHelp and the caller should print Usage.
func ParseArgs(args []string) (*Job, error) {
	fs := flag.NewFlagSet("elasticps local", flag.ContinueOnError)
	// Errors are returned, not printed: the CLI decides how to show them.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}

	j := &Job{}
	fs.IntVar(&j.NumServers, "s", 0, "number of servers")
	fs.IntVar(&j.NumWorkers, "w", 0, "number of workers")
	var schedCmd, serverCmd, workerCmd string
	fs.StringVar(&schedCmd, "scheduler-cmd", "", "scheduler command")
	fs.StringVar(&serverCmd, "server-cmd", "", "server command")
	fs.StringVar(&workerCmd, "worker-cmd", "", "worker command")
	fs.Var((*envFlag)(&j.Env), "env", "KEY=VALUE for every process")
	fs.IntVar(&j.RootPort, "port", 0, "scheduler port")
	fs.IntVar(&j.WorkerProcesses, "worker-procs", 0, "number of worker processes")
	fs.DurationVar(&j.Timeout, "timeout", 0, "job timeout")
	fs.DurationVar(&j.KillGrace, "kill-grace", 0, "SIGTERM to SIGKILL delay")
	fs.BoolVar(&j.NoPrefix, "no-prefix", false, "do not prefix output lines")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("launcher: %w", cli.FlagError(err))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	// Both counts are required because no default is right: ps-lite
	// programs differ in how many servers and workers they expect.
	if !given["s"] {
		return nil, errors.New("launcher: -s is required: the number of servers (use -s 0 for none)")
	}
	if !given["w"] {
		return nil, errors.New("launcher: -w is required: the number of workers")
	}
	for _, c := range []struct {
		name string
		text string
		dst  *[]string
	}{
		{"scheduler-cmd", schedCmd, &j.SchedulerCommand},
		{"server-cmd", serverCmd, &j.ServerCommand},
		{"worker-cmd", workerCmd, &j.WorkerCommand},
	} {
		if !given[c.name] {
			continue
		}
		words, err := SplitWords(c.text)
		if err != nil {
			return nil, fmt.Errorf("launcher: --%s: %w", c.name, err)
		}
		if len(words) == 0 {
			return nil, fmt.Errorf("launcher: --%s is empty; give the command to run, e.g. --%s \"./prog --flag\"", c.name, c.name)
		}
		*c.dst = words
	}
	// flag stops at "--" (dropping it) or at the first non-flag argument,
	// so the rest is the command either way.
	if rest := fs.Args(); len(rest) > 0 {
		j.Command = rest
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	return j, nil
}

// envFlag collects repeated --env KEY=VALUE options.
type envFlag []string

func (e *envFlag) String() string { return strings.Join(*e, " ") }

func (e *envFlag) Set(kv string) error {
	if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
		return fmt.Errorf("%q is not of the form KEY=VALUE", kv)
	}
	*e = append(*e, kv)
	return nil
}

// SplitWords splits s into words the way a POSIX shell would for a simple
// command, minus expansions: unquoted blanks (space, tab, newline) separate
// words; '...' quotes literally; "..." quotes with \ escaping only \ " $ and
// `; an unquoted \ escapes the next character. A pair of quotes with
// nothing between them yields an empty word.
// There is no variable, glob or tilde expansion: the words are passed to
// exec as they are.
func SplitWords(s string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		inWord bool // distinguishes an empty quoted word from no word
	)
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\t', '\n':
			flush()
		case '\\':
			if i+1 == len(s) {
				return nil, errors.New("trailing backslash: nothing to escape")
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		case '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated single quote in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case '"':
			inWord = true
			closed := false
			for i++; i < len(s); i++ {
				c := s[i]
				if c == '"' {
					closed = true
					break
				}
				if c == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$`", s[i+1]) >= 0 {
					i++
					c = s[i]
				}
				cur.WriteByte(c)
			}
			if !closed {
				return nil, fmt.Errorf("unterminated double quote in %q", s)
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words, nil
}

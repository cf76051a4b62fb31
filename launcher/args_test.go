package launcher

import (
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want *Job
	}{
		{
			name: "minimal",
			args: []string{"-s", "1", "-w", "2", "--", "./prog", "a", "b"},
			want: &Job{NumServers: 1, NumWorkers: 2, Command: []string{"./prog", "a", "b"}},
		},
		{
			name: "command flags after -- belong to the command",
			args: []string{"-s", "1", "-w", "1", "--", "./prog", "-s", "9", "--timeout", "x"},
			want: &Job{NumServers: 1, NumWorkers: 1, Command: []string{"./prog", "-s", "9", "--timeout", "x"}},
		},
		{
			name: "without -- the first non-flag starts the command",
			args: []string{"--s=0", "--w", "3", "./prog", "-x"},
			want: &Job{NumWorkers: 3, Command: []string{"./prog", "-x"}},
		},
		{
			name: "every option",
			args: []string{
				"-s", "2", "-w", "2",
				"--scheduler-cmd", `python3 -c 'print("hi there")'`,
				"--server-cmd", `./server --name "a b" x\ y`,
				"--worker-cmd", "./worker",
				"--env", "A=1", "--env", "B=x=y", "--env", "EMPTY=",
				"--timeout", "5m", "--kill-grace", "500ms", "--port", "9000",
				"--worker-procs", "1", "--no-prefix",
				"--", "./prog",
			},
			want: &Job{
				NumServers: 2, NumWorkers: 2,
				Command:          []string{"./prog"},
				SchedulerCommand: []string{"python3", "-c", `print("hi there")`},
				ServerCommand:    []string{"./server", "--name", "a b", "x y"},
				WorkerCommand:    []string{"./worker"},
				Env:              []string{"A=1", "B=x=y", "EMPTY="},
				Timeout:          5 * time.Minute,
				KillGrace:        500 * time.Millisecond,
				RootPort:         9000,
				WorkerProcesses:  1,
				NoPrefix:         true,
			},
		},
		{
			name: "overrides replace the command",
			args: []string{"-s", "0", "-w", "1", "--scheduler-cmd", "./sched", "--worker-cmd", "./work"},
			want: &Job{NumWorkers: 1, SchedulerCommand: []string{"./sched"}, WorkerCommand: []string{"./work"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.args)
			require.NoError(t, err, "ParseArgs(%q)", tt.args)
			assert.Equal(t, tt.want, got, "ParseArgs(%q)", tt.args)
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // substring of the error
	}{
		{"no arguments", nil, "-s is required"},
		{"missing -w", []string{"-s", "1", "--", "p"}, "-w is required"},
		{"missing -s", []string{"-w", "1", "--", "p"}, "-s is required"},
		{"not a number", []string{"-s", "one", "-w", "1", "--", "p"}, `invalid value "one" for flag -s`},
		{"unknown flag", []string{"-s", "1", "-w", "1", "--bogus", "--", "p"}, "flag provided but not defined: --bogus"},
		{"flag without value", []string{"-s", "1", "-w"}, "flag needs an argument: -w"},
		{"no command", []string{"-s", "1", "-w", "1"}, "no command to run"},
		{"no command after --", []string{"-s", "1", "-w", "1", "--"}, "no command to run"},
		{"negative count", []string{"-s", "-2", "-w", "1", "--", "p"}, "the number of servers (-s) is -2"},
		{"-1 is negative, not missing", []string{"-s", "1", "-w", "-1", "--", "p"}, "the number of workers (-w) is -1"},
		{"empty job", []string{"-s", "0", "-w", "0", "--", "p"}, "no servers and no workers"},
		{"override does not cover a role", []string{"-s", "1", "-w", "1", "--worker-cmd", "w"}, "no command for the scheduler"},
		{"bad env", []string{"-s", "1", "-w", "1", "--env", "NOVALUE", "--", "p"}, `"NOVALUE" is not of the form KEY=VALUE`},
		{"empty env key", []string{"-s", "1", "-w", "1", "--env", "=v", "--", "p"}, `"=v" is not of the form KEY=VALUE`},
		{"bad timeout", []string{"-s", "1", "-w", "1", "--timeout", "5", "--", "p"}, `invalid value "5" for flag --timeout`},
		{"bad port", []string{"-s", "1", "-w", "1", "--port", "70000", "--", "p"}, "--port is 70000"},
		{"too many worker procs", []string{"-s", "1", "-w", "1", "--worker-procs", "2", "--", "p"}, "--worker-procs"},
		{"empty cmd", []string{"-s", "1", "-w", "1", "--server-cmd", " ", "--", "p"}, "--server-cmd is empty"},
		{"unterminated quote", []string{"-s", "1", "-w", "1", "--scheduler-cmd", `sh -c 'x`, "--", "p"}, "--scheduler-cmd: unterminated single quote"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := ParseArgs(tt.args)
			assert.ErrorContains(t, err, tt.want, "ParseArgs(%q) = %+v", tt.args, j)
		})
	}
}

func TestParseArgsHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		_, err := ParseArgs([]string{arg})
		assert.ErrorIs(t, err, flag.ErrHelp, "ParseArgs(%q)", arg)
	}
}

// TestUsageMentionsEveryFlag keeps the Usage text in step with the flags.
func TestUsageMentionsEveryFlag(t *testing.T) {
	for _, f := range []string{"-s N", "-w N", "--scheduler-cmd", "--server-cmd", "--worker-cmd", "--env", "--port", "--worker-procs", "--timeout", "--kill-grace", "--no-prefix"} {
		assert.Contains(t, Usage, f, "Usage does not mention %q", f)
	}
}

func TestSplitWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   \t\n", nil},
		{"prog", []string{"prog"}},
		{"  prog  a\tb\nc ", []string{"prog", "a", "b", "c"}},
		{`prog 'a b' "c d"`, []string{"prog", "a b", "c d"}},
		{`'it''s' x`, []string{"its", "x"}},
		{`"it's"`, []string{"it's"}},
		{`'say "hi"'`, []string{`say "hi"`}},
		{`a"b c"d`, []string{"ab cd"}},
		{`"" ''`, []string{"", ""}},
		{`a\ b \'c\"`, []string{"a b", `'c"`}},
		{`"\" \\ \$ \x"`, []string{`" \ $ \x`}},
		{`'\n stays'`, []string{`\n stays`}},
		{`$HOME *.go ~`, []string{"$HOME", "*.go", "~"}}, // no expansions
	}
	for _, tt := range tests {
		got, err := SplitWords(tt.in)
		if assert.NoError(t, err, "SplitWords(%q)", tt.in) {
			assert.Equal(t, tt.want, got, "SplitWords(%q)", tt.in)
		}
	}
	for _, bad := range []string{`'open`, `"open`, `x "a\"`, `trailing\`} {
		got, err := SplitWords(bad)
		assert.Error(t, err, "SplitWords(%q) = %q", bad, got)
	}
}

func TestValidate(t *testing.T) {
	cmd := []string{"prog"}
	tests := []struct {
		name string
		job  Job
		want string // substring of the error; "" = valid
	}{
		{"minimal", Job{NumServers: 1, NumWorkers: 1, Command: cmd}, ""},
		{"no servers", Job{NumWorkers: 1, Command: cmd}, ""},
		{"no workers", Job{NumServers: 1, Command: cmd}, ""},
		{"nothing", Job{Command: cmd}, "no servers and no workers"},
		{"negative servers", Job{NumServers: -1, NumWorkers: 1, Command: cmd}, "the number of servers (-s) is -1"},
		{"negative workers", Job{NumServers: 1, NumWorkers: -2, Command: cmd}, "the number of workers (-w) is -2"},
		{"no command", Job{NumServers: 1, NumWorkers: 1}, "no command to run"},
		{"empty program", Job{NumWorkers: 1, Command: []string{""}}, "empty program name"},
		{"overrides cover roles", Job{NumWorkers: 1, SchedulerCommand: cmd, WorkerCommand: cmd}, ""},
		{"override missing for role", Job{NumServers: 1, NumWorkers: 1, SchedulerCommand: cmd, WorkerCommand: cmd}, "no command for the server"},
		{"worker procs", Job{NumWorkers: 2, WorkerProcesses: 1, Command: cmd}, ""},
		{"too many worker procs", Job{NumWorkers: 2, WorkerProcesses: 3, Command: cmd}, "at most 2 processes"},
		{"negative worker procs", Job{NumWorkers: 2, WorkerProcesses: -1, Command: cmd}, "--worker-procs is -1"},
		{"bad port", Job{NumWorkers: 1, Command: cmd, RootPort: 70000}, "--port is 70000"},
		{"bad env", Job{NumWorkers: 1, Command: cmd, Env: []string{"=x"}}, `--env entry "=x"`},
		{"negative timeout", Job{NumWorkers: 1, Command: cmd, Timeout: -time.Second}, "--timeout is -1s"},
		{"negative grace", Job{NumWorkers: 1, Command: cmd, KillGrace: -time.Second}, "--kill-grace is -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.job.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tt.want)
			}
		})
	}
}

package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// Parse parses a subcommand's flags. For -h or --help it prints usage and
// then the flags (PrintFlags) to stdout and returns flag.ErrHelp, which the
// CLI turns into exit status 0. Any other error is returned as "CMD: ERR
// (see elasticps CMD --help)", CMD being fs's name without "elasticps ".
// Nothing else is printed: the CLI shows the error.
func Parse(fs *flag.FlagSet, usage string, args []string) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(os.Stdout, usage)
		PrintFlags(os.Stdout, fs)
		return err
	}
	if err != nil {
		cmd := strings.TrimPrefix(fs.Name(), "elasticps ")
		return fmt.Errorf("%s: %w (see elasticps %s --help)", cmd, FlagError(err), cmd)
	}
	return nil
}

// flagName matches a flag as the flag package's errors name it: one dash,
// after a space and before a colon or the end.
var flagName = regexp.MustCompile(` -([A-Za-z0-9][A-Za-z0-9_-]+)(:|$)`)

// FlagError rewrites an error of the flag package in the style of the help
// texts: "-lr" becomes "--lr"; one-letter flags keep one dash. The flag
// package's error stays in the chain.
func FlagError(err error) error {
	return flagError{msg: flagName.ReplaceAllString(err.Error(), " --$1$2"), err: err}
}

type flagError struct {
	msg string
	err error
}

func (e flagError) Error() string { return e.msg }
func (e flagError) Unwrap() error { return e.err }

// PrintFlags writes fs's flags in the style of every help text of the
// CLI: "--name VALUE" for long names and "-n VALUE" for one-letter ones
// (the flag package accepts either dash count for both), each followed by
// its description and its default.
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		value, usage := flag.UnquoteUsage(f)
		line := "  " + dash + f.Name
		if value != "" {
			line += " " + value
		}
		fmt.Fprintln(w, line)
		usage = strings.ReplaceAll(usage, "\n", "\n      ")
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && d != "[]" {
			if value == "string" {
				d = fmt.Sprintf("%q", d)
			}
			usage += " (default " + d + ")"
		}
		fmt.Fprintln(w, "      "+usage)
	})
}

// IsHelp reports whether args asks for help and nothing else.
func IsHelp(args []string) bool {
	return len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help")
}

// Command elasticps runs parameter-server roles, local jobs, the demo and
// benchmarks.
//
//	elasticps scheduler                      run the scheduler from DMLC_* env
//	elasticps COMMAND --help                 what COMMAND does, its flags and variables
//	elasticps server [--optimizer ...]       run a server (training store; sum by default)
//	elasticps local -s S -w W -- CMD ARGS    run a local job of CMD
//	elasticps demo                           train a small model on a local job
//	elasticps train                          train an MLP on MNIST per sync mode
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/elasticps/elasticps/internal/bench"
	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/straggler"
	trainer "github.com/elasticps/elasticps/internal/train"
	"github.com/elasticps/elasticps/launcher"
)

const usage = `usage: elasticps COMMAND [ARGS]
       elasticps COMMAND --help    (or: elasticps help COMMAND)

commands:
  scheduler    run the scheduler role; configured by DMLC_* / PS_* variables
  server       run a server with the training store: element-wise sum by default,
               --optimizer sgd|momentum|adam --lr --aggregate sum|mean (server --help)
  local        start a local job: elasticps local -s S -w W [opts] -- CMD ARGS
  demo         train logistic regression on a local job and print a summary
  train        train an MLP on MNIST on local jobs, per sync mode (--compare bsp,asp,ssp,fluent)
  ctl          status, move, drain, add on an elastic scheduler (PS_ELASTIC=1)
  bench        transport benchmark matrix (--van zmq,tcp,shm|all, --json, --cpuprofile)
  bench straggler   PSLD straggler benchmark: static vs elastic vs oracle placement

The roles read ps-lite's environment variables (DMLC_ROLE, DMLC_NUM_WORKER,
DMLC_NUM_SERVER, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, ...) and elasticps's
PS_* ones: elasticps scheduler --help lists them with their defaults.
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	// SIGHUP too: a closed terminal then tears a local job down as Ctrl-C
	// does.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	var err error
	switch args[0] {
	case "scheduler":
		err = runScheduler(ctx, args[1:])
	case "server":
		err = runServer(ctx, args[1:])
	case "local":
		err = runLocal(ctx, args[1:])
	case "demo":
		err = runDemo(ctx, args[1:])
	case "train":
		err = runTrain(ctx, args[1:])
	case "bench":
		if len(args) > 1 && args[1] == "straggler" {
			err = runStraggler(ctx, args[2:])
		} else {
			err = runBench(ctx, args[1:])
		}
	case bench.NodeCommand:
		err = nodeCommand(args, "elasticps bench", func() error { return bench.RunNode(ctx) })
	case straggler.NodeCommand:
		err = nodeCommand(args, "elasticps bench straggler", func() error { return straggler.RunNode(ctx) })
	case trainer.NodeCommand:
		err = nodeCommand(args, "elasticps train", func() error { return trainer.RunNode(ctx) })
	case "ctl":
		err = runCtl(args[1:])
	case "demo-node":
		err = nodeCommand(args, "elasticps demo", func() error { return runDemoNode(ctx) })
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" {
			return run(append(args[1:], "--help"))
		}
		fmt.Print(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "elasticps: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0 // the command printed its help
	case ctx.Err() != nil:
		// Stopped by a signal: whatever failed after it is fallout ("node
		// is stopped", "context canceled"); say which signal instead.
		fmt.Fprintf(os.Stderr, "elasticps: %s stopped: %v\n", args[0], context.Cause(ctx))
		return 1
	}
	fmt.Fprintf(os.Stderr, "elasticps: %v\n", err)
	return 1
}

// nodeCommand runs one process of a job that another command starts; it
// takes no arguments.
func nodeCommand(args []string, parent string, run func() error) error {
	if len(args) > 1 {
		if cli.IsHelp(args[1:]) {
			fmt.Printf("elasticps %s is one process of the jobs that '%s' starts, configured by\nthe environment it sets; it is not meant to be run by hand (see %s --help).\n", args[0], parent, parent)
			return flag.ErrHelp
		}
		return fmt.Errorf("%s takes no arguments (it is a process of '%s')", args[0], parent)
	}
	return run()
}

func runLocal(ctx context.Context, args []string) error {
	job, err := launcher.ParseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(launcher.Usage)
		return err
	}
	if err != nil {
		return fmt.Errorf("%w (see elasticps local --help)", err)
	}
	job.Info = os.Stderr
	// A reader of stdout that goes away (elasticps local ... | head) must
	// not kill the launcher with SIGPIPE, which would leave the job
	// unsupervised: with SIGPIPE caught, writes to it fail with EPIPE and
	// the launcher drops the output. Caught rather than ignored, so the
	// children still start with the default disposition.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return job.Run(ctx)
}

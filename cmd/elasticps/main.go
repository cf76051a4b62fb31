// Command elasticps runs parameter-server roles, local jobs, the demo and
// benchmarks.
//
//	elasticps scheduler                      run the scheduler from DMLC_* env
//	elasticps server [--optimizer ...]       run a server (training store; sum by default)
//	elasticps local -s S -w W -- CMD ARGS    run a local job of CMD
//	elasticps demo                           train a small model on a local job
//	elasticps train                          train an MLP on MNIST per sync mode
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/elasticps/elasticps/internal/bench"
	"github.com/elasticps/elasticps/internal/straggler"
	trainer "github.com/elasticps/elasticps/internal/train"
	"github.com/elasticps/elasticps/launcher"
)

const usage = `usage: elasticps COMMAND [ARGS]

commands:
  scheduler    run the scheduler role; configured by DMLC_* / PS_* variables
  server       run a server with the training store: element-wise sum by default,
               --optimizer sgd|momentum|adam --lr --aggregate sum|mean (server --help)
  local        start a local job: elasticps local -s S -w W [opts] -- CMD ARGS
  demo         train logistic regression on a local job and print a summary
  train        train an MLP on MNIST on local jobs, per sync mode (--compare bsp,asp,ssp,fluent)
  ctl          status, move, drain on an elastic scheduler (PS_ELASTIC=1)
  bench        transport benchmark matrix (--van zmq|tcp|all, --json, --cpuprofile)
  bench straggler   PSLD straggler benchmark: static vs elastic vs oracle placement

Environment (ps-lite's names): DMLC_ROLE, DMLC_NUM_WORKER, DMLC_NUM_SERVER,
DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NODE_HOST, DMLC_INTERFACE, PORT,
DMLC_LOCAL, PS_VERBOSE, PS_HEARTBEAT_INTERVAL, PS_HEARTBEAT_TIMEOUT, PS_RESEND,
PS_ELASTIC, PS_CTL_ADDR, PS_BALANCE_INTERVAL, PS_REPORT_INTERVAL.
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "scheduler":
		err = runRole(ctx, "scheduler")
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
		err = bench.RunNode(ctx)
	case straggler.NodeCommand:
		err = straggler.RunNode(ctx)
	case trainer.NodeCommand:
		err = trainer.RunNode(ctx)
	case "ctl":
		err = runCtl(args[1:])
	case "demo-node":
		err = runDemoNode(ctx)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "elasticps: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		var pe *launcher.ProcessError
		if errors.As(err, &pe) {
			fmt.Fprintf(os.Stderr, "elasticps: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "elasticps: %v\n", err)
		return 1
	}
	return 0
}

func runLocal(ctx context.Context, args []string) error {
	job, err := launcher.ParseArgs(args)
	if err != nil {
		return err
	}
	return job.Run(ctx)
}

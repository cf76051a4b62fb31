package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"

	"github.com/elasticps/elasticps/internal/cli"
	trainer "github.com/elasticps/elasticps/internal/train"
)

const trainUsage = `usage: elasticps train [flags]

Trains an MLP on MNIST with data-parallel SGD over push and pull, on local
jobs of this executable: one scheduler, --servers servers and --workers
workers. The parameters are cut into --blocks keys spread over the
servers, which run SGD on the mean of the workers' gradients (paramstore);
rank 0 pushes the seeded initial weights first. Each worker takes its
shard of the 60,000 training images; an iteration computes the gradient
of a minibatch, pushes it and pulls the weights.

One job per sync mode (--mode, or --compare for several in turn, each
--repeat times; the table gives medians). The mode reaches the servers as
PS_SYNC_MODE, with PS_STALENESS (ssp, fluent), PS_PAUSE_PROB (fluent) and
PS_SYNC_SEED.

Test accuracy is measured off the training clock: one worker (the lowest
rank that is not a straggler) copies the weights every --eval-every
iterations and at the end, with the time since the start of training;
after the job the launcher evaluates every copy on the test set.

Stragglers: --straggle-every d makes the workers with rank % d == 0 sleep
N(--straggle-mean, --straggle-sd) ms after each iteration (FluentPS's
injection); --cpu-straggler R puts worker R in a cgroup v1 cpu group with
a quota of --cpu-share of one CPU (needs root and /sys/fs/cgroup/cpu).

Elastic: --elastic runs every job with PS_ELASTIC=1 (the scheduler runs the
migration coordinator and the PSLD balancer; blocks move between servers
live, with their optimizer and sync state). --slow-server R puts server R
in a cgroup v1 cpu group with a quota of --slow-server-share of one CPU
(also without --elastic, as the static baseline), so that the balancer
moves blocks off it; --moves N moves server R's (or
server 0's) first block back and forth N times, one every --move-every,
besides the balancer's moves. The table adds the moves and the responses
the workers dropped as duplicates (a pull answered twice).

Writes train.png, train.svg (test accuracy against wall time, one line per
mode) and train.json into --out.

flags:
`

// runTrain is 'elasticps train'.
func runTrain(ctx context.Context, args []string) error {
	c, err := parseTrainArgs(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	_, err = trainer.Run(ctx, c, os.Stdout, os.Stdout)
	return err
}

func parseTrainArgs(args []string) (trainer.Config, error) {
	c := trainer.DefaultConfig()
	fs := flag.NewFlagSet("elasticps train", flag.ContinueOnError)
	fs.IntVar(&c.Workers, "workers", c.Workers, "number of workers")
	fs.IntVar(&c.Servers, "servers", c.Servers, "number of servers")
	mode := fs.String("mode", c.Modes[0], "sync mode: bsp, asp, ssp or fluent")
	compare := fs.String("compare", "", "run these modes in turn (comma-separated, e.g. bsp,asp,ssp,fluent); overrides --mode")
	fs.IntVar(&c.Repeat, "repeat", c.Repeat, "run every mode this many times; the table gives medians")
	fs.IntVar(&c.Staleness, "staleness", c.Staleness, "staleness bound s of ssp and fluent (PS_STALENESS)")
	fs.StringVar(&c.PauseProb, "pause-prob", "", "fluent's pause probability: a number in [0,1] or sigmoid (PS_PAUSE_PROB; default: the servers')")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the initial weights, the minibatches, the injected sleeps and PS_SYNC_SEED")
	fs.Float64Var(&c.Epochs, "epochs", c.Epochs, "passes of each worker over its shard (when --iterations is 0)")
	fs.IntVar(&c.Iterations, "iterations", 0, "iterations per worker (overrides --epochs)")
	fs.IntVar(&c.Batch, "batch", c.Batch, "minibatch size per worker")
	fs.Float64Var(&c.LR, "lr", c.LR, "learning rate of the servers' SGD")
	fs.IntVar(&c.EvalEvery, "eval-every", c.EvalEvery, "snapshot the weights for evaluation every this many iterations")
	target := fs.Float64("target", 0, "accuracy in percent to time (default: BSP's final accuracy minus 0.5 points, when bsp runs)")
	hidden := fs.String("hidden", "1024,256", "hidden layer sizes of the MLP (784 inputs and 10 outputs are fixed)")
	fs.IntVar(&c.Blocks, "blocks", c.Blocks, "keys (blocks) the parameter vector is cut into, spread over the servers")
	fs.IntVar(&c.TrainLimit, "train-samples", 0, "use only the first N training images (0: all 60,000)")
	fs.IntVar(&c.TestLimit, "test-samples", 0, "evaluate on only the first N test images (0: all 10,000)")
	every := fs.Int("straggle-every", 0, "workers with rank % d == 0 sleep after each iteration (0: none)")
	mean := fs.Float64("straggle-mean", 0, "mean of the injected sleep, ms")
	sd := fs.Float64("straggle-sd", 0, "standard deviation of the injected sleep, ms")
	fs.IntVar(&c.CPURank, "cpu-straggler", c.CPURank, "worker rank to slow with a cgroup CPU quota (-1: none)")
	fs.Float64Var(&c.CPUShare, "cpu-share", c.CPUShare, "the CPU straggler's share of one CPU")
	fs.BoolVar(&c.Elastic, "elastic", false, "run every job with PS_ELASTIC=1: the PSLD balancer moves blocks between servers during training")
	fs.IntVar(&c.SlowServer, "slow-server", c.SlowServer, "server rank to slow with a cgroup CPU quota (-1: none)")
	fs.Float64Var(&c.SlowShare, "slow-server-share", c.SlowShare, "the slow server's share of one CPU")
	fs.IntVar(&c.Moves, "moves", 0, "scripted moves of one block back and forth during training (--elastic)")
	fs.DurationVar(&c.MoveEvery, "move-every", c.MoveEvery, "interval of the scripted moves, from the start of training")
	fs.StringVar(&c.Out, "out", c.Out, "directory for train.png, train.svg and train.json")
	fs.StringVar(&c.MNISTDir, "mnist-dir", "", "directory with MNIST's .gz files (default: GoMNIST's data in the Go module cache)")
	fs.DurationVar(&c.Progress, "progress", c.Progress, "interval of the workers' progress lines")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "limit of one job")
	fs.StringVar(&c.Log, "log", "", "append the nodes' logs to this file")
	if err := cli.Parse(fs, trainUsage, args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("train: unexpected argument %q", fs.Arg(0))
	}
	c.Modes = []string{*mode}
	if *compare != "" {
		c.Modes = nil
		for _, m := range cli.SplitList(*compare) {
			if !slices.Contains(c.Modes, m) {
				c.Modes = append(c.Modes, m)
			}
		}
	}
	c.Target = *target / 100
	c.Sizes = []int{trainer.ImageSize}
	for _, h := range cli.SplitList(*hidden) {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 {
			return c, fmt.Errorf("train: --hidden %q: want positive layer sizes separated by commas", *hidden)
		}
		c.Sizes = append(c.Sizes, n)
	}
	c.Sizes = append(c.Sizes, trainer.Classes)
	var err error
	if c.Straggle, err = trainer.NewStraggle(*every, *mean, *sd); err != nil {
		return c, fmt.Errorf("train: %w", err)
	}
	return c, c.Validate()
}

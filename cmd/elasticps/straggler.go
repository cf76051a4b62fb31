package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/straggler"
)

const stragglerUsage = `usage: elasticps bench straggler [flags]

Trains a ResNet-50-shaped model (161 tensors, 25.6M float32 parameters,
scaled down by --scale) on local jobs of this executable — one scheduler,
-s servers, -w workers — with one server slowed down, and compares three
placements of the parameter blocks, each in its own job:

  static   the hash placement (--placement mxnet or byteps), no rebalancing
  elastic  the same start, with PSLD's balancer moving blocks live
           (PS_ELASTIC=1)
  oracle   a static placement computed offline from the true server speeds
           (longest-processing-time-first over the blocks), installed
           before training by choosing the blocks' keys; no rebalancing

plus, with --healthy, static and elastic on a cluster without a straggler.
Each worker iteration pushes every block (one key per request, all in
flight, then waits) and then pulls every block. Workers are asynchronous
(ps-lite's sum store); it/s is each worker's iteration rate after the
warm-up, averaged over the workers.

The slowdown is emulated inside the servers' request handler (this machine
has two cores and only loopback, so real bandwidth or CPU contention cannot
be confined to one process): every server's link carries --bandwidth MB/s
on a virtual clock, requests queued behind each other; the slow server's
link is --slowdown times slower (--straggler bandwidth), or its handler is
held --slowdown-1 times its normal handling time longer per request
(--straggler cpu). The handler sleeps; it does not spin. The servers read
ELASTICPS_EMULATE_BANDWIDTH (bytes/s), ELASTICPS_EMULATE_STRAGGLER,
ELASTICPS_EMULATE_SLOWDOWN and ELASTICPS_EMULATE_SLOW_RANK.

The elastic run's balancer steps every --balance-interval on the servers'
reports of every --report-interval (PS_BALANCE_INTERVAL, PS_REPORT_INTERVAL);
its trace, with every plan and move, is drawn in the --plot SVG.

flags:
`

// runStraggler is 'elasticps bench straggler'.
func runStraggler(ctx context.Context, args []string) error {
	o, err := parseStragglerArgs(args)
	if err != nil {
		return err
	}
	return straggler.Run(ctx, o, os.Stdout)
}

func parseStragglerArgs(args []string) (straggler.Config, error) {
	o := straggler.DefaultConfig()
	fs := flag.NewFlagSet("elasticps bench straggler", flag.ContinueOnError)
	fs.IntVar(&o.Servers, "s", o.Servers, "number of servers")
	fs.IntVar(&o.Workers, "w", o.Workers, "number of workers")
	fs.StringVar(&o.Van, "van", o.Van, "transport: zmq or tcp")
	fs.StringVar(&o.Placement, "placement", o.Placement, "hash placement of the static and elastic runs: mxnet or byteps")
	fs.Float64Var(&o.Scale, "scale", o.Scale, "divide every tensor's size by this (1 = the real 102 MB model)")
	mbps := fs.Float64("bandwidth", o.Bandwidth/1e6, "emulated link of every server, MB/s (10^6 bytes/s)")
	fs.Float64Var(&o.Slowdown, "slowdown", o.Slowdown, "the slow server runs at 1/slowdown of the speed")
	fs.StringVar(&o.Straggler, "straggler", o.Straggler, "what is slow: bandwidth, cpu or none")
	fs.IntVar(&o.SlowRank, "slow-rank", o.SlowRank, "rank of the slow server")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "timed training per run")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "iterations/s are measured after this much of each run")
	fs.IntVar(&o.Iters, "iters", o.Iters, "timed iterations per worker and run instead of --duration (warm-up then counts from the start)")
	fs.IntVar(&o.Repeat, "repeat", o.Repeat, "run every configuration this many times; report medians")
	fs.BoolVar(&o.Healthy, "healthy", o.Healthy, "also run static and elastic without a straggler")
	runs := fs.String("placements", strings.Join(o.Runs, ","), "which placements to run with the straggler: static, elastic, oracle")
	fs.DurationVar(&o.Balance, "balance-interval", o.Balance, "PS_BALANCE_INTERVAL of elastic runs")
	fs.DurationVar(&o.Report, "report-interval", o.Report, "PS_REPORT_INTERVAL of elastic runs")
	fs.BoolVar(&o.JSON, "json", false, "print results as JSON instead of a table")
	fs.StringVar(&o.Plot, "plot", o.Plot, "write the SVG plot here (\"\" = none)")
	fs.StringVar(&o.Log, "log", "", "append the nodes' logs to this file")
	fs.IntVar(&o.Verbose, "v", 0, "PS_VERBOSE of the nodes (1 logs every move)")
	if err := cli.Parse(fs, stragglerUsage, args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("bench straggler: unexpected argument %q", fs.Arg(0))
	}
	o.Bandwidth = *mbps * 1e6
	o.Runs = nil
	for _, p := range cli.SplitList(*runs) {
		if !slices.Contains(o.Runs, p) {
			o.Runs = append(o.Runs, p)
		}
	}
	return o, o.Validate()
}

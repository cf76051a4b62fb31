package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/elasticps/elasticps/internal/bench"
	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/failover"
	"github.com/elasticps/elasticps/van/rdma"
)

const benchUsage = `usage: elasticps bench [flags]

Runs the transport benchmark matrix of ps-lite's measurements
(docs/performance.md) on local jobs (one scheduler, S servers and W worker
processes of this executable): KV push and pull of one key per server, the
value split evenly over the servers, the servers answering at once; each cell
sequential (wait after every op) and pipelined (--depth ops in flight).
Prints goodput (MB/s = 10^6 B/s, summed over workers) and per-op latency next
to the measured dmlc ps-lite numbers.

flags:
`

// runBench is 'elasticps bench'.
func runBench(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "failover" {
		return runFailover(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == failover.NodeArg {
		return nodeCommand(args, "elasticps bench failover", func() error { return failover.RunNode(ctx) })
	}
	o, err := parseBenchArgs(args)
	if err != nil {
		return err
	}
	return bench.Run(ctx, o, os.Stdout)
}

func parseBenchArgs(args []string) (bench.Config, error) {
	o := bench.Config{}
	fs := flag.NewFlagSet("elasticps bench", flag.ContinueOnError)
	van := fs.String("van", "all", "comma-separated transports: zmq, tcp, shm (one host), samehost (tcp with PS_SHM_AUTO=1), fabric or ibverbs (builds with the rdma tag); all is zmq,tcp (and fabric in rdma builds)")
	topo := fs.String("topo", "1x1,2x2", "comma-separated SxW topologies (servers x workers)")
	sizes := fs.String("sizes", "4KB,256KB,4MB", "comma-separated value sizes per operation")
	ops := fs.String("ops-kind", "push,pull", "comma-separated operations: push, pull")
	modes := fs.String("modes", "seq,pipe", "comma-separated modes: seq, pipe")
	fs.DurationVar(&o.Duration, "duration", time.Second, "measuring time per cell (ignored with --ops)")
	fs.IntVar(&o.Count, "ops", 0, "operations per cell and worker instead of --duration")
	fs.IntVar(&o.Depth, "depth", 8, "operations in flight in pipe cells")
	fs.IntVar(&o.Repeat, "repeat", 1, "run the whole matrix this many times and report medians")
	fs.BoolVar(&o.JSON, "json", false, "print results as JSON instead of a table")
	fs.StringVar(&o.Profile, "cpuprofile", "", "write CPU profiles to PREFIX-<van>-<SxW>-<role><index>.pprof")
	fs.StringVar(&o.Encrypt, "encrypt", "off", "off, on (PS_ENCRYPT=on: CURVE on zmq, TLS on tcp) or both: each topology's job plaintext, then encrypted, rows side by side with their ratio (docs/security.md)")
	fs.BoolVar(&o.GoThread, "go-thread", false, "also run the Go nodes with each worker's loop on its own locked OS thread, as a C++ program's thread is (rows labelled "+bench.GoThreadLabel+"): what a caller's own thread costs, bridge aside")
	fs.Func("cxx", "[LABEL=]PROGRAM: also run every cell with this C++ program as servers and workers and compare it with the Go nodes; repeatable. compat_tests/build/test_benchmark is the program built against the bridge (label c++); the same source built against dmlc ps-lite measures ps-lite itself", func(v string) error {
		label, path, ok := strings.Cut(v, "=")
		if !ok {
			label, path = "c++", v
		}
		if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%q is not an executable program; build it with 'make -C compat_tests' (build/test_benchmark)", path)
		}
		if label == "" || label == bench.GoThreadLabel || strings.ContainsAny(label, " \t") {
			return fmt.Errorf("label %q: use a short name without spaces, e.g. c++ or ps-lite", label)
		}
		o.CXX = append(o.CXX, bench.NodeKind{Label: label, Program: path})
		return nil
	})
	if err := cli.Parse(fs, benchUsage, args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	for _, v := range cli.SplitList(*van) {
		switch v {
		case "all":
			o.Vans = append(o.Vans, "zmq", "tcp")
			if rdma.Built {
				o.Vans = append(o.Vans, "fabric")
			}
		case "zmq", "tcp", "shm", "samehost":
			o.Vans = append(o.Vans, v)
		case "fabric", "ibverbs":
			if !rdma.Built {
				return o, fmt.Errorf("bench: --van %s needs the RDMA van: build elasticps with -tags rdma (libibverbs-dev, librdmacm-dev, libfabric-dev)", v)
			}
			o.Vans = append(o.Vans, v)
		default:
			return o, fmt.Errorf("bench: --van %q: use zmq, tcp, shm, samehost (tcp with PS_SHM_AUTO=1), fabric, ibverbs (-tags rdma builds) or all, or a comma-separated list of them", v)
		}
	}
	for _, t := range cli.SplitList(*topo) {
		s, w, ok := strings.Cut(strings.ToLower(t), "x")
		ns, err1 := strconv.Atoi(s)
		nw, err2 := strconv.Atoi(w)
		if !ok || err1 != nil || err2 != nil || ns < 1 || nw < 1 {
			return o, fmt.Errorf("bench: --topo %q: use SxW such as 1x1 or 2x2", t)
		}
		o.Topos = append(o.Topos, [2]int{ns, nw})
	}
	for _, s := range cli.SplitList(*sizes) {
		n, err := bench.ParseSize(s)
		if err != nil {
			return o, fmt.Errorf("bench: --sizes: %w", err)
		}
		o.Sizes = append(o.Sizes, n)
	}
	o.Ops, o.Modes = cli.SplitList(*ops), cli.SplitList(*modes)
	return o, o.Validate()
}

const failoverUsage = `usage: elasticps bench failover [flags]

Measures replication and failover on local jobs of this executable (one
scheduler, 3 servers, 1 worker, PS_ELASTIC=1, heartbeats 1 s / 2 s,
memberlist on):

  failover time   a PS_REPLICAS=1 job; a standby server joins (PS_STANDBY=1),
                  a server holding copies is killed with SIGKILL while the
                  worker pushes continuously to every range, one push in
                  flight; the time from the kill to the worker's first
                  acknowledged push after it; then the bench waits until
                  every new backup is seeded (k copies again) and kills the
                  next, --kills times. p50 and p99.
  throughput      push goodput (MB/s = 10^6 B/s) with PS_REPLICAS=0, 1, 2 at
                  each --sizes, one job each, --depth pushes in flight, and
                  its ratio to k=0 of the same size.
  sync throughput PS_SYNC_MODE=bsp jobs of --sync-workers workers pushing
                  and pulling in rounds (a replicated primary ships each
                  round's state to its backups once), k=0 and k=1 at each
                  --sizes, and the ratio to k=0.

flags:
`

// runFailover is 'elasticps bench failover'.
func runFailover(ctx context.Context, args []string) error {
	o := failover.Config{}
	fs := flag.NewFlagSet("elasticps bench failover", flag.ContinueOnError)
	fs.IntVar(&o.Kills, "kills", 20, "servers killed (failover time samples); 0 = throughput only")
	sizes := fs.String("sizes", "1MB,4MB", "comma-separated push sizes for the throughput cells; \"\" = none")
	fs.DurationVar(&o.Duration, "duration", 3*time.Second, "measuring time per throughput cell")
	fs.IntVar(&o.Depth, "depth", 4, "pushes in flight in the throughput cells")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the victims' choice")
	fs.BoolVar(&o.JSON, "json", false, "print the results as JSON instead of a table")
	fs.IntVar(&o.SyncWorkers, "sync-workers", 4, "workers of the synchronous (PS_SYNC_MODE=bsp) cells, k=0 and k=1 at each size; 0 = none")
	if err := cli.Parse(fs, failoverUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench failover: unexpected argument %q", fs.Arg(0))
	}
	for _, s := range cli.SplitList(*sizes) {
		n, err := bench.ParseSize(s)
		if err != nil {
			return fmt.Errorf("bench failover: --sizes: %w", err)
		}
		o.Sizes = append(o.Sizes, n)
	}
	if err := o.Validate(); err != nil {
		return err
	}
	return failover.Run(ctx, o, os.Stdout)
}

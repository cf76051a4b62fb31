// Package train trains an MLP on MNIST with data-parallel SGD over push and
// pull on local jobs of this executable ('elasticps train'): one
// scheduler, S servers running paramstore's SGD on the mean of the
// gradients, W workers each on its shard of the training set; one job per
// sync mode (PS_SYNC_MODE on the servers) and repeat. It measures test
// accuracy against wall time, evaluated off the training clock, and writes
// a table, a JSON report and a plot.
package train

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/launcher"
)

// Modes are the sync modes a job can run, in the order of the table.
var Modes = []string{"bsp", "asp", "ssp", "fluent"}

// Config is one 'elasticps train' (the JSON report repeats it under
// "config").
type Config struct {
	Workers    int      `json:"workers"`
	Servers    int      `json:"servers"`
	Modes      []string `json:"modes"` // one job per mode and repeat
	Repeat     int      `json:"repeat"`
	Staleness  int      `json:"staleness"`  // PS_STALENESS of ssp and fluent
	PauseProb  string   `json:"pause_prob"` // PS_PAUSE_PROB of fluent ("" = the servers' default)
	Seed       uint64   `json:"seed"`
	Epochs     float64  `json:"epochs"`     // passes of each worker over its shard (when Iterations is 0)
	Iterations int      `json:"iterations"` // per worker; 0: from Epochs
	Batch      int      `json:"batch"`
	LR         float64  `json:"lr"`
	EvalEvery  int      `json:"eval_every"` // iterations of the evaluating worker between snapshots
	Target     float64  `json:"target"`     // accuracy (0..1) to time; 0: BSP's final accuracy - 0.005
	Sizes      []int    `json:"sizes"`      // the MLP, input first
	Blocks     int      `json:"blocks"`     // keys the parameters are cut into
	TrainLimit int      `json:"train_limit"`
	TestLimit  int      `json:"test_limit"`
	Straggle   Straggle `json:"straggle"`
	CPURank    int      `json:"cpu_straggler"` // worker rank slowed by a CPU quota; -1 none
	CPUShare   float64  `json:"cpu_share"`     // its share of one CPU
	CPURoot    string   `json:"-"`             // cgroup v1 cpu hierarchy ("" = /sys/fs/cgroup/cpu)
	// Elastic runs every job with PS_ELASTIC=1: the scheduler runs the
	// migration coordinator and the PSLD balancer, the servers hand
	// blocks over live.
	Elastic    bool    `json:"elastic"`
	SlowServer int     `json:"slow_server"`       // server rank slowed by a CPU quota (elastic jobs); -1 none
	SlowShare  float64 `json:"slow_server_share"` // its share of one CPU
	// Moves are scripted moves of one block back and forth between the
	// slow server (or server 0) and another, one every MoveEvery from the
	// start of training, besides the balancer's own.
	Moves     int           `json:"moves"`
	MoveEvery time.Duration `json:"move_every_ns"`
	MNISTDir  string        `json:"-"`
	Out       string        `json:"-"` // directory of the plot and the JSON report
	// Progress is the interval of the workers' progress lines.
	Progress time.Duration `json:"-"`
	Timeout  time.Duration `json:"-"` // per job
	Log      string        `json:"-"` // file the nodes' logs are appended to; "" none
}

// DefaultConfig is 'elasticps train' without flags.
func DefaultConfig() Config {
	return Config{
		Workers: 4, Servers: 2, Modes: []string{"asp"}, Repeat: 1, Staleness: 3, Seed: 1,
		Epochs: 1, Batch: 32, LR: 0.3, EvalEvery: 25, Sizes: []int{ImageSize, 1024, 256, Classes},
		Blocks: 8, CPURank: -1, CPUShare: 0.25, SlowServer: -1, SlowShare: 0.1, MoveEvery: time.Second, Progress: 3 * time.Second, Timeout: 30 * time.Minute,
		Out: filepath.Join(os.TempDir(), "elasticps-train"),
	}
}

// Validate checks c; its messages name the flags of 'elasticps train'.
func (c *Config) Validate() error {
	if len(c.Modes) == 0 {
		return errors.New("train: no mode: give --mode or --compare with some of bsp, asp, ssp, fluent")
	}
	for _, m := range c.Modes {
		if !slices.Contains(Modes, m) {
			return fmt.Errorf("train: mode %q: use bsp, asp, ssp or fluent", m)
		}
	}
	if c.PauseProb != "" && c.PauseProb != "sigmoid" {
		if p, err := strconv.ParseFloat(c.PauseProb, 64); err != nil || p < 0 || p > 1 {
			return fmt.Errorf("train: --pause-prob %q: use a probability in [0, 1] or sigmoid", c.PauseProb)
		}
	}
	switch {
	case c.Workers < 1 || c.Servers < 1:
		return errors.New("train: --workers and --servers must be at least 1")
	case c.Repeat < 1:
		return errors.New("train: --repeat must be at least 1")
	case c.Staleness < 0:
		return errors.New("train: --staleness must be >= 0")
	case c.Iterations < 0 || (c.Iterations == 0 && !(c.Epochs > 0)):
		return errors.New("train: give --iterations N > 0 or --epochs E > 0")
	case c.Batch < 1:
		return errors.New("train: --batch must be at least 1")
	case !(c.LR > 0):
		return errors.New("train: --lr must be > 0")
	case c.EvalEvery < 1:
		return errors.New("train: --eval-every must be at least 1")
	case c.Target < 0 || c.Target >= 1:
		return errors.New("train: --target is an accuracy in [0, 1) (0: BSP's final accuracy minus 0.5 points)")
	case c.Blocks < c.Servers:
		return fmt.Errorf("train: --blocks %d: want at least one block per server (%d)", c.Blocks, c.Servers)
	case c.TrainLimit < 0 || c.TestLimit < 0:
		return errors.New("train: --train-samples and --test-samples must be >= 0 (0: all)")
	case c.CPURank >= 0 && !(c.CPUShare > 0 && c.CPUShare <= 1):
		return fmt.Errorf("train: --cpu-share %g: want a fraction of one CPU in (0, 1]", c.CPUShare)
	case c.CPURank >= c.Workers:
		return fmt.Errorf("train: --cpu-straggler %d: want a worker rank 0..%d, or -1", c.CPURank, c.Workers-1)
	case c.Progress <= 0 || c.Timeout <= 0:
		return errors.New("train: --progress and --timeout must be positive")
	}
	if err := c.validateElastic(); err != nil {
		return err
	}
	if _, err := NewMLP(c.Sizes); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if c.Sizes[0] != ImageSize || c.Sizes[len(c.Sizes)-1] != Classes {
		return fmt.Errorf("train: --hidden: the MLP's input is MNIST's %d pixels and its output the %d classes", ImageSize, Classes)
	}
	if m, _ := NewMLP(c.Sizes); m.NumParams() < c.Blocks {
		return fmt.Errorf("train: --blocks %d: more blocks than the %d parameters", c.Blocks, m.NumParams())
	}
	return nil
}

// validateElastic checks the slow server and the scripted moves. A slow
// server also runs in a static job: the baseline of an elastic one.
func (c *Config) validateElastic() error {
	switch {
	case c.Moves != 0 && !c.Elastic:
		return errors.New("train: --moves needs --elastic")
	case c.Servers < 2 && c.Moves > 0:
		return errors.New("train: --moves needs at least 2 --servers (blocks move between servers)")
	case c.SlowServer >= 0 && !(c.SlowShare > 0 && c.SlowShare <= 1):
		return fmt.Errorf("train: --slow-server-share %g: want a fraction of one CPU in (0, 1]", c.SlowShare)
	case c.SlowServer >= c.Servers:
		return fmt.Errorf("train: --slow-server %d: want a server rank 0..%d, or -1", c.SlowServer, c.Servers-1)
	case c.Moves < 0:
		return errors.New("train: --moves must be >= 0")
	case c.Moves > 0 && c.MoveEvery <= 0:
		return errors.New("train: --move-every must be positive")
	}
	return nil
}

// moveFrom is the server rank whose first block the scripted moves move.
func (c *Config) moveFrom() int { return max(0, c.SlowServer) }

// evalRank is the worker that snapshots the weights: the lowest rank that
// is not a straggler, so that its snapshots come at the healthy pace
// (rank 0 when every worker straggles).
func (c *Config) evalRank() int {
	for r := range c.Workers {
		if !c.Straggle.Applies(r) && r != c.CPURank {
			return r
		}
	}
	return 0
}

// iterations is the number of iterations per worker.
func (c *Config) iterations(trainLen int) int {
	if c.Iterations > 0 {
		return c.Iterations
	}
	shard := trainLen / c.Workers
	return max(1, int(c.Epochs*float64(shard)/float64(c.Batch)+0.5))
}

// syncEnv is the environment that selects mode on the servers.
func (c *Config) syncEnv(mode string) []string {
	env := []string{"PS_SYNC_MODE=" + mode, "PS_SYNC_SEED=" + strconv.FormatUint(c.Seed, 10)}
	if mode == "ssp" || mode == "fluent" {
		env = append(env, "PS_STALENESS="+strconv.Itoa(c.Staleness))
	}
	if mode == "fluent" && c.PauseProb != "" {
		env = append(env, "PS_PAUSE_PROB="+c.PauseProb)
	}
	return env
}

// Run trains as c says, which must be valid, on local jobs of this
// executable (whose main runs RunNode for NodeCommand): every mode of
// c.Modes, c.Repeat times. The workers' progress goes to progress, the
// tables to out; the plot and the JSON report to c.Out.
func Run(ctx context.Context, c Config, out, progress io.Writer) (*Report, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find this executable to start the training nodes: %w", err)
	}
	if c.MNISTDir, err = FindMNIST(c.MNISTDir); err != nil {
		return nil, err
	}
	test, err := LoadMNIST(c.MNISTDir, false, c.TestLimit)
	if err != nil {
		return nil, err
	}
	trainLen := 60000
	if c.TrainLimit > 0 {
		trainLen = min(trainLen, c.TrainLimit)
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return nil, err
	}
	m, _ := NewMLP(c.Sizes)
	rep := &Report{Config: c, Params: m.NumParams(), Iterations: c.iterations(trainLen), EvalRank: c.evalRank(), TestSamples: test.Len()}
	fmt.Fprintf(out, "elasticps train: MLP %s (%d float32 parameters in %d blocks), MNIST, %d servers x %d workers, %d iterations of batch %d per worker, SGD lr %g on the servers (mean of the gradients)\n",
		joinInts(c.Sizes, "-"), rep.Params, c.Blocks, c.Servers, c.Workers, rep.Iterations, c.Batch, c.LR)
	if s := c.stragglerNote(); s != "" {
		fmt.Fprintf(out, "stragglers: %s\n", s)
	}
	if c.Elastic {
		fmt.Fprintf(out, "elastic: PS_ELASTIC=1, the scheduler runs the PSLD balancer%s\n", c.movesNote())
	}
	total := len(c.Modes) * c.Repeat
	k := 0
	for r := range c.Repeat {
		for _, mode := range c.Modes {
			k++
			label := fmt.Sprintf("%s %d/%d", mode, k, total)
			fmt.Fprintf(progress, "[%s] training\n", label)
			res, err := runJob(ctx, exe, c, mode, r, rep.Iterations, label, m, test, progress)
			if err != nil {
				return nil, fmt.Errorf("train, %s: %w", label, err)
			}
			rep.Runs = append(rep.Runs, res)
		}
	}
	rep.tabulate()
	if err := rep.writeFiles(); err != nil {
		return nil, err
	}
	rep.print(out)
	return rep, nil
}

func (c *Config) stragglerNote() string {
	var s []string
	if c.Straggle.Every > 0 {
		var ranks []string
		for r := range c.Workers {
			if c.Straggle.Applies(r) {
				ranks = append(ranks, strconv.Itoa(r))
			}
		}
		s = append(s, fmt.Sprintf("workers %s sleep N(%g ms, %g ms) after each iteration", strings.Join(ranks, ","), c.Straggle.MeanMS, c.Straggle.SDMS))
	}
	if c.CPURank >= 0 {
		s = append(s, fmt.Sprintf("worker %d runs in a cgroup limited to %g of one CPU", c.CPURank, c.CPUShare))
	}
	if c.SlowServer >= 0 {
		s = append(s, fmt.Sprintf("server %d runs in a cgroup limited to %g of one CPU", c.SlowServer, c.SlowShare))
	}
	return strings.Join(s, "; ")
}

func (c *Config) movesNote() string {
	if c.Moves == 0 {
		return ""
	}
	return fmt.Sprintf(", and moves server %d's first block back and forth %d times, one every %v", c.moveFrom(), c.Moves, c.MoveEvery)
}

// runJob runs one mode once and evaluates its snapshots.
func runJob(ctx context.Context, exe string, c Config, mode string, repeat, iters int, label string, m MLP, test Dataset, progress io.Writer) (*RunResult, error) {
	dir, err := os.MkdirTemp("", "elasticps-train-job-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	plan := nodePlan{Sizes: c.Sizes, Blocks: c.Blocks, Batch: c.Batch, Iterations: iters, LR: c.LR, Seed: c.Seed,
		EvalEvery: c.EvalEvery, EvalRank: c.evalRank(), TrainLimit: c.TrainLimit, MNISTDir: c.MNISTDir,
		Straggle: c.Straggle, CPURank: c.CPURank, Progress: c.Progress, OutDir: dir,
		SlowServer: c.SlowServer, Moves: c.Moves, MoveEvery: c.MoveEvery, MoveFrom: c.moveFrom()}
	if c.CPURank >= 0 {
		g, err := NewCPUGroup(c.CPURoot, c.CPUShare, "--cpu-straggler")
		if err != nil {
			return nil, err
		}
		defer g.Remove()
		plan.CPUGroup = g.Dir
	}
	if c.SlowServer >= 0 {
		g, err := NewCPUGroup(c.CPURoot, c.SlowShare, "--slow-server")
		if err != nil {
			return nil, err
		}
		defer g.Remove()
		plan.SlowGroup = g.Dir
	}
	planJSON, err := jsonString(plan)
	if err != nil {
		return nil, err
	}
	elasticEnv := "PS_ELASTIC=0"
	if c.Elastic {
		elasticEnv = "PS_ELASTIC=1"
	}
	env := append([]string{planEnv + "=" + planJSON, elasticEnv}, nodeproc.LoopbackEnv()...)
	env = append(env, c.syncEnv(mode)...)
	var logs bytes.Buffer
	var logMu sync.Mutex
	var logFile *os.File
	if c.Log != "" {
		if logFile, err = os.OpenFile(c.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, err
		}
		defer logFile.Close()
	}
	stderr := writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		if logFile != nil {
			fmt.Fprintf(logFile, "[%s] %s", label, p)
		}
		return logs.Write(p)
	})
	stdout := writerFunc(func(p []byte) (int, error) { // the launcher writes whole lines
		return fmt.Fprintf(progress, "[%s] %s", label, p)
	})
	job := &launcher.Job{NumServers: c.Servers, NumWorkers: c.Workers, Command: []string{exe, NodeCommand},
		Env: env, Stdout: stdout, Stderr: stderr, Timeout: c.Timeout}
	if err := job.Run(ctx); err != nil {
		logMu.Lock()
		defer logMu.Unlock()
		return nil, fmt.Errorf("%w\nlast node log lines:\n%s", err, cli.LastLines(logs.String(), 15))
	}
	res, err := collect(dir, c, mode, repeat)
	if err != nil {
		return nil, err
	}
	// Off the training clock: the job has ended.
	if err := res.evaluate(dir, m, test, label, progress); err != nil {
		return nil, err
	}
	return res, nil
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func joinInts(xs []int, sep string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, sep)
}

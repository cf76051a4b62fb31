package straggler

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/internal/stats"
	"github.com/elasticps/elasticps/launcher"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/routing"
)

// Config is one straggler experiment ('elasticps bench straggler' fills it
// from its flags; the JSON report repeats it under "options").
type Config struct {
	Servers   int           `json:"servers"`
	Workers   int           `json:"workers"`
	Van       string        `json:"van"`                   // zmq or tcp
	Placement string        `json:"placement"`             // hash placement of static and elastic runs: mxnet or byteps
	Scale     float64       `json:"scale"`                 // every tensor's size is divided by this (>= 1)
	Bandwidth float64       `json:"bandwidth_bytes_per_s"` // every server's emulated link
	Slowdown  float64       `json:"slowdown"`              // the slow server runs at 1/Slowdown of the speed (>= 1)
	Straggler string        `json:"straggler"`             // what is slow: bandwidth, cpu or none
	SlowRank  int           `json:"slow_rank"`             // rank of the slow server
	Duration  time.Duration `json:"duration_ns"`           // timed training per run
	Warmup    time.Duration `json:"warmup_ns"`             // it/s is measured after this much of each run
	Iters     int           `json:"iters"`                 // timed iterations per worker instead of Duration (0: Duration)
	Repeat    int           `json:"repeat"`                // runs of every configuration; the report gives medians
	Healthy   bool          `json:"healthy"`               // also run static and elastic without a straggler
	Runs      []string      `json:"placements"`            // placements run with the straggler: static, elastic, oracle
	Balance   time.Duration `json:"balance_interval_ns"`   // PS_BALANCE_INTERVAL of elastic runs
	Report    time.Duration `json:"report_interval_ns"`    // PS_REPORT_INTERVAL of elastic runs
	JSON      bool          `json:"-"`                     // print JSON instead of tables
	Plot      string        `json:"-"`                     // SVG file to draw; "" = none
	Log       string        `json:"-"`                     // file the nodes' logs are appended to; "" = none
	Verbose   int           `json:"-"`                     // PS_VERBOSE of the nodes
}

// DefaultConfig is the experiment of 'elasticps bench straggler' without
// flags.
func DefaultConfig() Config {
	return Config{
		Servers: 4, Workers: 4, Van: "zmq", Placement: "mxnet", Scale: 32, Bandwidth: 25e6,
		Slowdown: 4, Straggler: "bandwidth", SlowRank: 0, Duration: 20 * time.Second, Warmup: 8 * time.Second,
		Repeat: 1, Healthy: true, Runs: []string{"static", "elastic", "oracle"}, Balance: time.Second, Report: time.Second,
		Plot: "straggler.svg",
	}
}

// Validate checks o; its messages name the flags of 'elasticps bench
// straggler'.
func (o *Config) Validate() error {
	for _, p := range o.Runs {
		if p != "static" && p != "elastic" && p != "oracle" {
			return fmt.Errorf("bench straggler: --placements %q: use static, elastic, oracle", p)
		}
	}
	if len(o.Runs) == 0 && !o.Healthy {
		return errors.New("bench straggler: nothing to run (empty --placements and --healthy=false)")
	}
	switch {
	case o.Servers < 1 || o.Workers < 1:
		return errors.New("bench straggler: -s and -w must be at least 1")
	case o.Van != "zmq" && o.Van != "tcp":
		return fmt.Errorf("bench straggler: --van %q: use zmq or tcp", o.Van)
	case o.Placement != "mxnet" && o.Placement != "byteps":
		return fmt.Errorf("bench straggler: --placement %q: use mxnet or byteps", o.Placement)
	case !(o.Scale >= 1):
		return errors.New("bench straggler: --scale must be >= 1")
	case !(o.Bandwidth > 0):
		return errors.New("bench straggler: --bandwidth must be > 0")
	case !(o.Slowdown >= 1):
		return errors.New("bench straggler: --slowdown must be >= 1")
	case o.Straggler != "bandwidth" && o.Straggler != "cpu" && o.Straggler != "none":
		return fmt.Errorf("bench straggler: --straggler %q: use bandwidth, cpu or none", o.Straggler)
	case o.SlowRank < 0 || o.SlowRank >= o.Servers:
		return fmt.Errorf("bench straggler: --slow-rank %d: want 0..%d", o.SlowRank, o.Servers-1)
	case o.Iters < 0 || o.Repeat < 1:
		return errors.New("bench straggler: --iters must be >= 0 and --repeat >= 1")
	case o.Iters == 0 && o.Duration <= 0:
		return errors.New("bench straggler: --duration must be positive (or give --iters)")
	case o.Iters == 0 && (o.Warmup < 0 || o.Warmup >= o.Duration):
		return errors.New("bench straggler: --warmup must be in [0, --duration)")
	case o.Balance <= 0 || o.Report <= 0:
		return errors.New("bench straggler: --balance-interval and --report-interval must be positive")
	}
	return nil
}

// variant is one kind of run: a placement on a cluster with or without
// the straggler.
type variant struct {
	Placement string // static, elastic, oracle
	Straggler string // bandwidth, cpu or none
}

func (c variant) name() string {
	if c.Straggler == "none" {
		return c.Placement + " (healthy)"
	}
	return c.Placement + " (" + c.Straggler + " straggler)"
}

// jobResult is the outcome of one job.
type jobResult struct {
	Placement string `json:"placement"`
	Straggler string `json:"straggler"`
	Repeat    int    `json:"repeat"`
	// Iterations/s per worker (each worker's rate, averaged): after the
	// warm-up, and over the whole timed run.
	ItPerSec      float64 `json:"it_per_s"`
	ItPerSecWhole float64 `json:"it_per_s_whole_run"`
	Iterations    float64 `json:"iterations_per_worker"`
	// ModelItPerSec is the emulated servers' bound for the placement (for
	// elastic: the placement at the end of the run).
	ModelItPerSec float64 `json:"model_bound_it_per_s"`
	// Shares of the payload bytes per server rank: measured by the servers,
	// and of the final placement.
	ServerShare []float64 `json:"server_byte_share"`
	FinalShare  []float64 `json:"final_placement_share"`

	Plans       int `json:"plans"`
	Moves       int `json:"moves"`
	FailedMoves int `json:"failed_moves"`
	// MovesAtEnd were under way when the first worker finished training:
	// left out of the statistics (they wait for pushes that never come,
	// or fail when the nodes stop).
	MovesAtEnd int   `json:"moves_cut_off_by_the_end"`
	MovedBytes int64 `json:"moved_bytes"`
	MoveP50MS  num   `json:"move_p50_ms"`
	MoveP99MS  num   `json:"move_p99_ms"`
	MoveMaxMS  num   `json:"move_max_ms"`
	// Worker request latency (push or pull of one block) of requests that
	// overlapped a move, and of the others; likewise iteration times.
	OpsDuringMoves  int   `json:"ops_during_moves"`
	OpDuringP50MS   num   `json:"op_during_moves_p50_ms"`
	OpDuringP99MS   num   `json:"op_during_moves_p99_ms"`
	OpOtherP50MS    num   `json:"op_other_p50_ms"`
	OpOtherP99MS    num   `json:"op_other_p99_ms"`
	ItersDuringMove int   `json:"iterations_during_moves"`
	IterDuringP50MS num   `json:"iteration_during_moves_p50_ms"`
	IterDuringMaxMS num   `json:"iteration_during_moves_max_ms"`
	IterOtherP50MS  num   `json:"iteration_other_p50_ms"`
	Redirects       int64 `json:"worker_redirects"`
	Redirected      int64 `json:"server_redirected"`
	LogWarnings     int   `json:"log_warnings"`

	throughput []point // job iterations/s over time (seconds since T0)
	trace      *trace
	t0         int64
}

type point struct{ T, V float64 }

// tableRow is one line of the table: a configuration's median run.
type tableRow struct {
	Config      string     `json:"config"`
	Placement   string     `json:"placement"`
	Straggler   string     `json:"straggler"`
	ItPerSec    float64    `json:"it_per_s_median"`
	ItPerSecAll []float64  `json:"it_per_s_runs"`
	WholeMedian float64    `json:"it_per_s_whole_run_median"`
	SpeedUp     float64    `json:"speedup_vs_static"`
	VsOracle    float64    `json:"ratio_to_oracle,omitempty"`
	MedianRun   *jobResult `json:"median_run"`
}

// report is the JSON output.
type report struct {
	Options     Config       `json:"options"`
	Blocks      int          `json:"blocks"`
	PushBytes   int64        `json:"bytes_per_push_per_worker"`
	Emulation   string       `json:"emulation"`
	Rows        []*tableRow  `json:"rows"`
	Runs        []*jobResult `json:"runs"`
	Plot        string       `json:"plot,omitempty"`
	TargetNotes []string     `json:"targets"`
	Headline    string       `json:"headline"` // the result in one line, also in the plot
	// Failures are runs that failed and were run again.
	Failures []string `json:"failed_runs,omitempty"`
}

// Run runs the experiment o, which must be valid, as local jobs of this
// executable (whose main runs RunNode for NodeCommand), and writes the
// tables or JSON to out. Lines the nodes print go to stdout, progress to
// stderr.
func Run(ctx context.Context, o Config, out io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this executable to start the benchmark nodes: %w", err)
	}
	blocks, err := hashPlacement(o.Placement, o.Servers, o.Scale)
	if err != nil {
		return err
	}
	var configs []variant
	for _, p := range o.Runs {
		if p != "oracle" || o.Straggler != "none" {
			configs = append(configs, variant{p, o.Straggler})
		}
	}
	if o.Healthy && o.Straggler != "none" {
		configs = append(configs, variant{"static", "none"}, variant{"elastic", "none"})
	}
	var logFile *os.File
	if o.Log != "" {
		if logFile, err = os.OpenFile(o.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return err
		}
		defer logFile.Close()
	}
	prog := cli.NewProgress(os.Stderr)
	var runs []*jobResult
	var failures []string
	total := len(configs) * o.Repeat
	k := 0
	for rep := range o.Repeat {
		for _, c := range configs {
			k++
			label := fmt.Sprintf("run %d/%d: %s", k, total, c.name())
			r, err := runJob(ctx, exe, o, c, blocks, rep, label, prog, logFile)
			if err != nil && ctx.Err() == nil {
				// Report the failure and try once more: one bad run should
				// not cost the others, but it is not hidden either.
				prog.Done()
				fmt.Fprintf(os.Stderr, "bench straggler: %s failed, running it again: %v\n", label, err)
				failures = append(failures, fmt.Sprintf("%s: %v", label, strings.SplitN(err.Error(), "\n", 2)[0]))
				r, err = runJob(ctx, exe, o, c, blocks, rep, label+" (again)", prog, logFile)
			}
			if err != nil {
				prog.Done()
				return fmt.Errorf("bench straggler, %s: %w", c.name(), err)
			}
			prog.Finished(fmt.Sprintf("%s: %.2f it/s", label, r.ItPerSec))
			runs = append(runs, r)
		}
	}
	prog.Done()
	rows := tabulate(configs, runs)
	rep := &report{Options: o, Blocks: len(blocks), Runs: runs, Rows: rows, Emulation: emulationNote(o), Failures: failures}
	for _, b := range blocks {
		rep.PushBytes += b.Bytes()
	}
	rep.TargetNotes = targets(rows)
	rep.Headline = headline(rows)
	if o.Plot != "" {
		if err := writePlot(o.Plot, o, rep); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		rep.Plot = o.Plot
	}
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printTable(out, o, rep)
	return nil
}

// emulationNote says what the slow server is.
func emulationNote(o Config) string {
	link := fmt.Sprintf("every server's link emulated at %s MB/s (handler sleeps bytes/bandwidth on a serialised virtual clock)", cli.FormatNum(o.Bandwidth/1e6))
	switch o.Straggler {
	case "bandwidth":
		return fmt.Sprintf("%s; server %d's link at 1/%s: %s MB/s", link, o.SlowRank, cli.FormatNum(o.Slowdown), cli.FormatNum(o.Bandwidth/o.Slowdown/1e6))
	case "cpu":
		return fmt.Sprintf("%s; server %d's handler additionally sleeps %sx its normal handling time per request (CPU interference, emulated by sleeping, not spinning)",
			link, o.SlowRank, cli.FormatNum(o.Slowdown-1))
	}
	return link + "; no straggler"
}

// runJob runs one configuration as one local job.
func runJob(ctx context.Context, exe string, o Config, c variant, blocks []block, rep int, label string, prog *cli.Progress, logFile *os.File) (*jobResult, error) {
	dir, err := os.MkdirTemp("", "elasticps-straggler-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bw := bandwidths(o, c.Straggler)
	if c.Placement == "oracle" {
		blocks = oraclePlacement(blocks, capacities(o, c.Straggler))
	}
	plan := nodePlan{Mode: c.Placement, Van: o.Van, Blocks: blocks, Duration: o.Duration, Iters: o.Iters, OutDir: dir}
	planJSON, err := json.Marshal(plan)
	if err != nil {
		return nil, err
	}
	env := append([]string{planEnv + "=" + string(planJSON)}, nodeproc.LoopbackEnv()...)
	env = append(env,
		"PS_VERBOSE="+strconv.Itoa(o.Verbose),
		envBandwidth+"="+strconv.FormatFloat(o.Bandwidth, 'f', -1, 64),
		envKind+"="+c.Straggler,
		envSlowdown+"="+strconv.FormatFloat(o.Slowdown, 'f', -1, 64),
		envSlowRank+"="+strconv.Itoa(o.SlowRank),
		"PS_ELASTIC=0")
	if c.Placement == "elastic" {
		env = append(env, "PS_ELASTIC=1",
			"PS_BALANCE_INTERVAL="+strconv.FormatInt(o.Balance.Milliseconds(), 10),
			"PS_REPORT_INTERVAL="+strconv.FormatInt(o.Report.Milliseconds(), 10))
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	stderr := writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		if logFile != nil {
			fmt.Fprintf(logFile, "[%s] %s", label, p)
		}
		return logs.Write(p)
	})
	started := time.Now()
	var progMu sync.Mutex
	iters := 0
	stdout := &lineWriter{line: func(s string) {
		if i := strings.Index(s, progressTag); i >= 0 {
			rest := s[i+len(progressTag):]
			var it, ms int
			if _, err := fmt.Sscanf(rest, "%d %d", &it, &ms); err == nil {
				progMu.Lock()
				iters = it
				progMu.Unlock()
			}
			return
		}
		fmt.Fprintln(os.Stdout, s)
	}}
	tick := time.NewTicker(500 * time.Millisecond)
	done := make(chan struct{})
	var tickers sync.WaitGroup
	tickers.Add(1)
	go func() {
		defer tickers.Done()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				progMu.Lock()
				it := iters
				progMu.Unlock()
				goal := o.Duration.String()
				if o.Iters > 0 {
					goal = fmt.Sprintf("%d iterations", o.Iters)
				}
				prog.Update(fmt.Sprintf("[%s] %.0fs elapsed (goal %s of training), worker 0 at iteration %d",
					label, time.Since(started).Seconds(), goal, it))
			}
		}
	}()
	prog.Starting(label)
	// A run that overstays is hung: its nodes get SIGQUIT, so that their
	// goroutine dumps land in the log, and the launcher's timeout is the
	// last resort.
	hung := o.Duration + 45*time.Second
	if o.Iters > 0 {
		hung = 5 * time.Minute
	}
	watchdog := time.AfterFunc(hung, func() {
		prog.Update(fmt.Sprintf("[%s] no end after %v: dumping the nodes' goroutines (SIGQUIT)", label, hung))
		dumpNodes()
	})
	job := &launcher.Job{
		NumServers: o.Servers, NumWorkers: o.Workers,
		Command: []string{exe, NodeCommand},
		Env:     env, Stdout: stdout, Stderr: stderr,
		Timeout: hung + time.Minute,
	}
	err = job.Run(ctx)
	watchdog.Stop()
	tick.Stop()
	close(done)
	tickers.Wait()
	stdout.flush()
	if err != nil {
		logMu.Lock()
		all := logs.String()
		logMu.Unlock()
		msg := fmt.Sprintf("%v\nlast node log lines:\n%s", err, cli.LastLines(all, 15))
		if f, ferr := os.CreateTemp("", "elasticps-straggler-failed-*.log"); ferr == nil {
			_, _ = f.WriteString(all)
			_ = f.Close()
			msg += "\nall node logs: " + f.Name()
		}
		return nil, errors.New(msg)
	}
	r, err := collect(dir, o, c, blocks, bw)
	if err != nil {
		return nil, err
	}
	r.Repeat = rep
	logMu.Lock()
	for _, l := range strings.Split(logs.String(), "\n") {
		// (moves failing because the nodes stopped after training are
		// expected: see runScheduler)
		if (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) && !strings.Contains(l, "node is stopped") {
			r.LogWarnings++
		}
	}
	logMu.Unlock()
	return r, nil
}

// bandwidths is every server's emulated service rate (bytes/s) for a
// cluster: the link's bandwidth, divided by the slowdown on the slow server
// (for a cpu straggler too, whose requests take slowdown times their
// normal time, store time aside).
func bandwidths(o Config, straggler string) []float64 {
	bw := make([]float64, o.Servers)
	for i := range bw {
		bw[i] = o.Bandwidth
	}
	if straggler != "none" {
		bw[o.SlowRank] /= o.Slowdown
	}
	return bw
}

// capacities is what the oracle knows: each server's relative speed.
func capacities(o Config, straggler string) []float64 {
	c := make([]float64, o.Servers)
	for i := range c {
		c[i] = 1
	}
	if straggler != "none" {
		c[o.SlowRank] = 1 / o.Slowdown
	}
	return c
}

// collect reads the nodes' result files and computes a run's numbers.
func collect(dir string, o Config, c variant, blocks []block, bw []float64) (*jobResult, error) {
	r := &jobResult{Placement: c.Placement, Straggler: c.Straggler}
	var workers []workerResult
	for i := range o.Workers {
		var w workerResult
		if err := nodeproc.ReadResult(filepath.Join(dir, fmt.Sprintf("worker-%d.json", i)), &w); err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	var servers []serverResult
	var totalBytes int64
	for i := range o.Servers {
		var s serverResult
		if err := nodeproc.ReadResult(filepath.Join(dir, fmt.Sprintf("server-%d.json", i)), &s); err != nil {
			return nil, err
		}
		servers = append(servers, s)
		totalBytes += s.Bytes
		r.Redirected += s.Redirected
	}
	for _, s := range servers {
		r.ServerShare = append(r.ServerShare, float64(s.Bytes)/float64(max(totalBytes, 1)))
	}
	if c.Placement == "elastic" {
		var tr trace
		if err := nodeproc.ReadResult(filepath.Join(dir, "trace.json"), &tr); err != nil {
			return nil, err
		}
		r.trace = &tr
	}
	r.t0 = workers[0].T0

	if err := r.rates(workers, o); err != nil {
		return nil, err
	}
	final, windows := r.moves(workers, o.Servers, blocks)
	if t := linkBound(final, o.Workers, bw); t > 0 {
		r.ModelItPerSec = 1 / t
	}
	fb := serverBytes(final, o.Servers)
	var sum int64
	for _, b := range fb {
		sum += b
	}
	for _, b := range fb {
		r.FinalShare = append(r.FinalShare, float64(b)/float64(max(sum, 1)))
	}
	r.stalls(workers, windows)
	return r, nil
}

// rates computes the iterations/s of the workers' records.
func (r *jobResult) rates(workers []workerResult, o Config) error {
	warm := o.Warmup.Microseconds()
	if o.Iters > 0 {
		warm = 0
	}
	var rates, whole, counts []float64
	for _, w := range workers {
		n := len(w.IterEnds)
		if n == 0 {
			return fmt.Errorf("worker %d finished no iteration", w.Rank)
		}
		last := w.IterEnds[n-1]
		whole = append(whole, float64(n)/(float64(last)/1e6))
		counts = append(counts, float64(n))
		i := sort.Search(n, func(i int) bool { return w.IterEnds[i] > warm })
		if n-i >= 2 {
			rates = append(rates, float64(n-1-i)/(float64(last-w.IterEnds[i])/1e6))
		} else {
			rates = append(rates, float64(n-i)/(float64(last-warm)/1e6))
		}
		r.Redirects += w.Redirects
	}
	r.ItPerSec, r.ItPerSecWhole, r.Iterations = stats.Mean(rates), stats.Mean(whole), stats.Mean(counts)
	r.throughput = throughput(workers, r.t0)

	return nil
}

// moves counts the elastic run's plans and moves (those cut off by the end
// of training aside) and returns the placement the moves left and their
// time windows (Unix ns, merged).
func (r *jobResult) moves(workers []workerResult, servers int, blocks []block) (final []block, windows [][2]int64) {
	final = slices.Clone(blocks)
	if r.trace != nil {
		ranges := routing.KeyRanges(servers)
		var durs []float64
		end := int64(math.MaxInt64) // when the first worker finished training
		for _, w := range workers {
			end = min(end, w.T0+w.IterEnds[len(w.IterEnds)-1]*1000)
		}
		for _, tp := range r.trace.Points {
			if len(tp.Moves) > 0 && r.trace.Start+int64(tp.At) < end {
				r.Plans++
			}
		}
		for _, m := range r.trace.Moves {
			if m.Started+m.DurationNS > end {
				r.MovesAtEnd++
				continue
			}
			if m.Err != "" {
				r.FailedMoves++
				continue
			}
			r.Moves++
			r.MovedBytes += int64(m.Bytes)
			durs = append(durs, float64(m.DurationNS)/1e6)
			windows = append(windows, [2]int64{m.Started, m.Started + m.DurationNS})
			to := message.IDToRank(int(m.To))
			for i, b := range final {
				k := ranges[b.Server].Begin + b.Key
				if k >= m.Begin && k < m.End {
					final[i].Server = to
					final[i].Key = k - ranges[to].Begin
				}
			}
		}
		slices.Sort(durs)
		r.MoveP50MS, r.MoveP99MS = num(stats.Quantile(durs, 0.5)), num(stats.Quantile(durs, 0.99))
		if len(durs) > 0 {
			r.MoveMaxMS = num(durs[len(durs)-1])
		}
		windows = mergeWindows(windows)
	}
	return final, windows
}

// stalls compares the latency of worker requests and iterations that
// overlapped a move with the others'.
func (r *jobResult) stalls(workers []workerResult, windows [][2]int64) {
	var during, other, itDuring, itOther []float64
	for _, w := range workers {
		for _, op := range w.Ops {
			if len(op) != 2 {
				continue
			}
			s := w.T0 + op[0]*1000
			if overlaps(windows, s, s+op[1]*1000) {
				during = append(during, float64(op[1])/1e3)
			} else {
				other = append(other, float64(op[1])/1e3)
			}
		}
		prev := int64(0)
		for _, e := range w.IterEnds {
			d := float64(e-prev) / 1e3
			if overlaps(windows, w.T0+prev*1000, w.T0+e*1000) {
				itDuring = append(itDuring, d)
			} else {
				itOther = append(itOther, d)
			}
			prev = e
		}
	}
	for _, xs := range [][]float64{during, other, itDuring, itOther} {
		slices.Sort(xs)
	}
	r.OpsDuringMoves = len(during)
	r.OpDuringP50MS, r.OpDuringP99MS = num(stats.Quantile(during, 0.5)), num(stats.Quantile(during, 0.99))
	r.OpOtherP50MS, r.OpOtherP99MS = num(stats.Quantile(other, 0.5)), num(stats.Quantile(other, 0.99))
	r.ItersDuringMove = len(itDuring)
	r.IterDuringP50MS = num(stats.Quantile(itDuring, 0.5))
	if len(itDuring) > 0 {
		r.IterDuringMaxMS = num(itDuring[len(itDuring)-1])
	} else {
		r.IterDuringMaxMS = num(math.NaN())
	}
	r.IterOtherP50MS = num(stats.Quantile(itOther, 0.5))
}

// throughput is the job's iterations/s per worker over time: a 2 s
// sliding window, every half second, in seconds since t0.
func throughput(workers []workerResult, t0 int64) []point {
	var ends []float64 // seconds since t0
	last := 0.0
	for _, w := range workers {
		for _, e := range w.IterEnds {
			t := float64(w.T0-t0)/1e9 + float64(e)/1e6
			ends = append(ends, t)
			last = max(last, t)
		}
	}
	slices.Sort(ends)
	const win = 2.0
	var pts []point
	for t := win; t <= last+1e-9; t += 0.5 {
		lo := sort.SearchFloat64s(ends, t-win)
		hi := sort.SearchFloat64s(ends, t)
		pts = append(pts, point{T: t, V: float64(hi-lo) / win / float64(len(workers))})
	}
	return pts
}

func mergeWindows(ws [][2]int64) [][2]int64 {
	slices.SortFunc(ws, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]int64
	for _, w := range ws {
		if n := len(out); n > 0 && w[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], w[1])
			continue
		}
		out = append(out, w)
	}
	return out
}

// overlaps reports whether [s, e] meets one of the merged windows.
func overlaps(ws [][2]int64, s, e int64) bool {
	i := sort.Search(len(ws), func(i int) bool { return ws[i][1] >= s })
	return i < len(ws) && ws[i][0] <= e
}

// tabulate groups the runs by configuration; each row is the run with the
// median iterations/s (the lower middle one for an even count).
func tabulate(configs []variant, runs []*jobResult) []*tableRow {
	var rows []*tableRow
	byKey := map[variant]*tableRow{}
	for _, c := range configs {
		row := &tableRow{Config: c.name(), Placement: c.Placement, Straggler: c.Straggler}
		var rs []*jobResult
		var whole []float64
		for _, r := range runs {
			if r.Placement == c.Placement && r.Straggler == c.Straggler {
				rs = append(rs, r)
				row.ItPerSecAll = append(row.ItPerSecAll, r.ItPerSec)
				whole = append(whole, r.ItPerSecWhole)
			}
		}
		if len(rs) == 0 {
			continue
		}
		sorted := slices.Clone(rs)
		slices.SortStableFunc(sorted, func(a, b *jobResult) int { return cmp.Compare(a.ItPerSec, b.ItPerSec) })
		row.MedianRun = sorted[(len(sorted)-1)/2]
		row.ItPerSec = stats.Median(row.ItPerSecAll)
		row.WholeMedian = stats.Median(whole)
		rows = append(rows, row)
		byKey[c] = row
	}
	for _, row := range rows {
		if st := byKey[variant{"static", row.Straggler}]; st != nil && st.ItPerSec > 0 {
			row.SpeedUp = row.ItPerSec / st.ItPerSec
		}
		if or := byKey[variant{"oracle", row.Straggler}]; or != nil && or.ItPerSec > 0 {
			row.VsOracle = row.ItPerSec / or.ItPerSec
		}
	}
	return rows
}

// targets checks the numbers against the goals the benchmark is for.
func targets(rows []*tableRow) []string {
	find := func(p, s string) *tableRow {
		for _, r := range rows {
			if r.Placement == p && (s == "" && r.Straggler != "none" || r.Straggler == s) {
				return r
			}
		}
		return nil
	}
	yes := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	var out []string
	if el := find("elastic", ""); el != nil && el.SpeedUp > 0 {
		out = append(out, fmt.Sprintf("elastic >= 2x static with the straggler: %s (%.2fx)", yes(el.SpeedUp >= 2), el.SpeedUp))
		if el.VsOracle > 0 {
			out = append(out, fmt.Sprintf("elastic within 10%% of the oracle: %s (%.1f%% of the oracle)", yes(el.VsOracle >= 0.9), 100*el.VsOracle))
		}
	}
	if el := find("elastic", "none"); el != nil && el.SpeedUp > 0 {
		out = append(out, fmt.Sprintf("healthy cluster, elastic within 3%% of static: %s (%.1f%% of static)", yes(el.SpeedUp >= 0.97), 100*el.SpeedUp))
	}
	return out
}

func printTable(w io.Writer, o Config, rep *report) {
	how := fmt.Sprintf("%v of training per run, iterations/s measured after a %v warm-up", o.Duration, o.Warmup)
	if o.Iters > 0 {
		how = fmt.Sprintf("%d iterations per worker and run", o.Iters)
	}
	fmt.Fprintf(w, "elasticps bench straggler: ResNet-50 (161 tensors, 25,557,032 float32 parameters) scaled 1/%s: %d blocks, %.2f MB per push per worker\n",
		cli.FormatNum(o.Scale), rep.Blocks, float64(rep.PushBytes)/1e6)
	fmt.Fprintf(w, "%s placement, %d servers x %d workers, %s van; %s; median of %d run(s)\n", o.Placement, o.Servers, o.Workers, o.Van, how, o.Repeat)
	fmt.Fprintf(w, "emulation: %s\n", rep.Emulation)
	fmt.Fprintf(w, "(this machine has 2 cores and only loopback: real bandwidth or CPU contention cannot be isolated per process, so links and interference are emulated in the servers' handler)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "placement\tcluster\tit/s\twhole run\tvs static\tvs oracle\tmodel bound\tmoves\tmove p50/p99 ms\tops in moves\top p50/p99 ms in moves\top p50/p99 ms otherwise\t")
	for _, row := range rep.Rows {
		r := row.MedianRun
		cluster := o.Straggler + " straggler"
		if row.Straggler == "none" {
			cluster = "healthy"
		}
		vsOracle := "-"
		if row.VsOracle > 0 {
			vsOracle = fmt.Sprintf("%.2f", row.VsOracle)
		}
		moves, moveLat, opsIn, opIn := "-", "-", "-", "-"
		if row.Placement == "elastic" {
			moves = strconv.Itoa(r.Moves)
			if r.FailedMoves > 0 {
				moves += fmt.Sprintf(" (+%d failed)", r.FailedMoves)
			}
			moveLat = fmtPair(r.MoveP50MS, r.MoveP99MS)
			opsIn = strconv.Itoa(r.OpsDuringMoves)
			opIn = fmtPair(r.OpDuringP50MS, r.OpDuringP99MS)
		}
		speedUp := "-"
		if row.SpeedUp > 0 {
			speedUp = fmt.Sprintf("%.2fx", row.SpeedUp)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t\n",
			row.Placement, cluster, row.ItPerSec, row.WholeMedian, speedUp, vsOracle, r.ModelItPerSec,
			moves, moveLat, opsIn, opIn, fmtPair(r.OpOtherP50MS, r.OpOtherP99MS))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "it/s: iterations per second per worker (each worker's rate, averaged; one iteration = push and pull of every block), after the warm-up; 'whole run' from the start of timing.")
	fmt.Fprintln(w, "model bound: the emulated servers' limit for the placement, in it/s (for elastic: the placement the run ended with); CPU and per-message costs come on top.")
	fmt.Fprintln(w, "moves: successful Coordinator.Move calls; move p50/p99: prepare-to-commit time. ops in moves: worker push/pull requests whose lifetime overlapped a move; their latency vs the others' is the migration stall.")
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "placement\tcluster\tbyte share per server (measured)\tfinal placement share\tplans\tmoves cut off at the end\tredirects\titerations in moves p50/max ms\titerations otherwise p50 ms\tlog warnings\t")
	for _, row := range rep.Rows {
		r := row.MedianRun
		cluster := "straggler"
		if row.Straggler == "none" {
			cluster = "healthy"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\t\n", row.Placement, cluster, fmtShares(r.ServerShare), fmtShares(r.FinalShare),
			r.Plans, r.MovesAtEnd, r.Redirects, fmtPair(r.IterDuringP50MS, r.IterDuringMaxMS), cli.FormatNum(float64(r.IterOtherP50MS)), r.LogWarnings)
	}
	_ = tw.Flush()
	if o.Repeat > 1 {
		fmt.Fprintln(w)
		for _, row := range rep.Rows {
			var s []string
			for _, v := range row.ItPerSecAll {
				s = append(s, fmt.Sprintf("%.2f", v))
			}
			fmt.Fprintf(w, "%-28s it/s per run: %s\n", row.Config, strings.Join(s, " "))
		}
	}
	if len(rep.TargetNotes) > 0 {
		fmt.Fprintln(w)
		for _, t := range rep.TargetNotes {
			fmt.Fprintln(w, "target: "+t)
		}
	}
	if len(rep.Failures) > 0 {
		fmt.Fprintln(w)
		for _, f := range rep.Failures {
			fmt.Fprintln(w, "FAILED (and run again): "+f)
		}
	}
	if rep.Plot != "" {
		fmt.Fprintf(w, "\nplot: %s\n", rep.Plot)
	}
}

// num is a statistic that may be undefined (NaN, no samples); JSON
// gets null for it.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

func fmtPair(a, b num) string {
	if math.IsNaN(float64(a)) {
		return "-"
	}
	return cli.FormatNum(float64(a)) + "/" + cli.FormatNum(float64(b))
}

func fmtShares(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(s, " ")
}

// fmtNum formats a number with a precision that suits its size.

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// lineWriter splits written bytes into lines.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		s := string(l.buf[:i])
		l.buf = l.buf[i+1:]
		l.line(s)
	}
	return len(p), nil
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.line(string(l.buf))
		l.buf = nil
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/elasticps/elasticps/van/rdma"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/elasticps/elasticps/launcher"
)

// benchOptions are the flags of 'elasticps bench'.
type benchOptions struct {
	vans     []string
	topos    [][2]int // servers, workers
	sizes    []int
	ops      []string
	modes    []string
	duration time.Duration
	count    int // ops per cell and worker; 0: duration
	depth    int
	repeat   int
	json     bool
	profile  string
	cxx      []nodeKind // C++ node programs to compare with the Go nodes (--cxx)
	goThread bool       // also run Go nodes whose workers loop on a locked OS thread
}

const benchUsage = `usage: elasticps bench [flags]

Runs the transport benchmark matrix of spec section 8 on local jobs (one
scheduler, S servers and W worker processes of this executable): KV push and
pull of one key per server, the value split evenly over the servers, the
servers answering at once; each cell sequential (wait after every op) and
pipelined (--depth ops in flight). Prints goodput (MB/s = 10^6 B/s, summed
over workers) and per-op latency next to the measured dmlc ps-lite numbers.

flags:
`

func parseBenchArgs(args []string) (benchOptions, error) {
	o := benchOptions{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchUsage)
		fs.PrintDefaults()
	}
	van := fs.String("van", "all", "transport: zmq, tcp, fabric or ibverbs (-tags rdma builds), or all")
	topo := fs.String("topo", "1x1,2x2", "comma-separated SxW topologies (servers x workers)")
	sizes := fs.String("sizes", "4KB,256KB,4MB", "comma-separated value sizes per operation")
	ops := fs.String("ops-kind", "push,pull", "comma-separated operations: push, pull")
	modes := fs.String("modes", "seq,pipe", "comma-separated modes: seq, pipe")
	fs.DurationVar(&o.duration, "duration", time.Second, "measuring time per cell (ignored with --ops)")
	fs.IntVar(&o.count, "ops", 0, "operations per cell and worker instead of --duration")
	fs.IntVar(&o.depth, "depth", 8, "operations in flight in pipe cells")
	fs.IntVar(&o.repeat, "repeat", 1, "run the whole matrix this many times and report medians")
	fs.BoolVar(&o.json, "json", false, "print results as JSON instead of a table")
	fs.StringVar(&o.profile, "cpuprofile", "", "write CPU profiles to PREFIX-<van>-<SxW>-<role><index>.pprof")
	fs.BoolVar(&o.goThread, "go-thread", false, "also run the Go nodes with each worker's loop on its own locked OS thread, as a C++ program's thread is (rows labelled "+goThreadLabel+"): what a caller's own thread costs, bridge aside")
	fs.Func("cxx", "[LABEL=]PROGRAM: also run every cell with this C++ program as servers and workers and compare it with the Go nodes; repeatable. compat_tests/build/test_benchmark is the program built against the bridge (label c++); the same source built against dmlc ps-lite measures ps-lite itself", func(v string) error {
		label, path, ok := strings.Cut(v, "=")
		if !ok {
			label, path = "c++", v
		}
		if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%q is not an executable program; build it with 'make -C compat_tests' (build/test_benchmark)", path)
		}
		if label == "" || label == goThreadLabel || strings.ContainsAny(label, " \t") {
			return fmt.Errorf("label %q: use a short name without spaces, e.g. c++ or ps-lite", label)
		}
		o.cxx = append(o.cxx, nodeKind{label: label, program: path})
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	switch *van {
	case "all":
		o.vans = []string{"zmq", "tcp"}
		if rdma.Built {
			o.vans = append(o.vans, "fabric")
		}
	case "zmq", "tcp":
		o.vans = []string{*van}
	case "fabric", "ibverbs":
		if !rdma.Built {
			return o, fmt.Errorf("bench: --van %s needs the RDMA van: build elasticps with -tags rdma (libibverbs-dev, librdmacm-dev, libfabric-dev)", *van)
		}
		o.vans = []string{*van}
	default:
		return o, fmt.Errorf("bench: --van %q: use zmq, tcp, fabric, ibverbs (-tags rdma builds) or all", *van)
	}
	for _, t := range splitList(*topo) {
		s, w, ok := strings.Cut(strings.ToLower(t), "x")
		ns, err1 := strconv.Atoi(s)
		nw, err2 := strconv.Atoi(w)
		if !ok || err1 != nil || err2 != nil || ns < 1 || nw < 1 {
			return o, fmt.Errorf("bench: --topo %q: use SxW such as 1x1 or 2x2", t)
		}
		o.topos = append(o.topos, [2]int{ns, nw})
	}
	for _, s := range splitList(*sizes) {
		n, err := parseSize(s)
		if err != nil {
			return o, fmt.Errorf("bench: --sizes: %w", err)
		}
		o.sizes = append(o.sizes, n)
	}
	for _, op := range splitList(*ops) {
		if op != "push" && op != "pull" {
			return o, fmt.Errorf("bench: --ops-kind %q: use push, pull", op)
		}
		o.ops = append(o.ops, op)
	}
	for _, m := range splitList(*modes) {
		if m != "seq" && m != "pipe" {
			return o, fmt.Errorf("bench: --modes %q: use seq, pipe", m)
		}
		o.modes = append(o.modes, m)
	}
	switch {
	case len(o.topos) == 0 || len(o.sizes) == 0 || len(o.ops) == 0 || len(o.modes) == 0:
		return o, errors.New("bench: empty --topo, --sizes, --ops-kind or --modes")
	case o.duration <= 0 && o.count <= 0:
		return o, errors.New("bench: --duration must be positive (or give --ops)")
	case o.count < 0 || o.depth < 1 || o.repeat < 1:
		return o, errors.New("bench: --ops must be >= 0, --depth and --repeat >= 1")
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// benchResult is one cell of the matrix for one van and topology: the
// medians over --repeat runs.
type benchResult struct {
	Van       string  `json:"van"`
	Nodes     string  `json:"nodes,omitempty"` // label of the C++ nodes (--cxx); "" = Go nodes
	Servers   int     `json:"servers"`
	Workers   int     `json:"workers"`
	Size      int     `json:"size"`
	Op        string  `json:"op"`
	Mode      string  `json:"mode"`
	Ops       int64   `json:"ops"`
	MBps      float64 `json:"goodput_mbps"`
	P50US     float64 `json:"p50_us"`
	P99US     float64 `json:"p99_us"`
	MeanUS    float64 `json:"mean_us"`
	BaseMBps  float64 `json:"dmlc_goodput_mbps,omitempty"`
	BaseLatUS float64 `json:"dmlc_mean_us,omitempty"`
	Runs      int     `json:"runs"`
	// Bridge rows: the same cell's Go-native medians, from the same runs.
	GoMBps   float64 `json:"go_goodput_mbps,omitempty"`
	GoMeanUS float64 `json:"go_mean_us,omitempty"`
}

func (r *benchResult) key() string {
	return fmt.Sprintf("%dx%d/%s/%s/%s", r.Servers, r.Workers, sizeLabel(r.Size), r.Op, r.Mode)
}

// label names the nodes of a result row: the van, and the C++ program's
// label for --cxx rows.
func (r *benchResult) label() string {
	if r.Nodes != "" {
		return r.Van + " " + r.Nodes
	}
	return r.Van
}

// nodeKind is what the servers and workers of a bench job run, and the
// label of its rows: the Go nodes (label ""), the Go nodes with their
// workers on locked OS threads (--go-thread), or a C++ program (--cxx).
type nodeKind struct {
	label      string
	program    string // "" = Go nodes (this executable's bench-node role)
	lockThread bool   // Go workers loop on a locked OS thread
}

// goThreadLabel labels the rows of --go-thread.
const goThreadLabel = "go-thread"

// runBench is 'elasticps bench'.
func runBench(ctx context.Context, args []string) error {
	o, err := parseBenchArgs(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this executable to start the bench nodes: %w", err)
	}
	var cells []benchCell
	for _, size := range o.sizes {
		for _, op := range o.ops {
			for _, mode := range o.modes {
				cells = append(cells, benchCell{Size: size, Op: op, Mode: mode})
			}
		}
	}
	prog := newProgress(os.Stderr)
	// samples[van][topo][cell] collects one value per repeat.
	type samples struct{ mbps, p50, p99, mean []float64 }
	all := map[string]*samples{}
	var order []*benchResult
	// Each topology's C++ jobs run right after its Go job, so that their
	// ratios compare runs close in time on this noisy machine.
	kinds := []nodeKind{{}}
	if o.goThread {
		kinds = append(kinds, nodeKind{label: goThreadLabel, lockThread: true})
	}
	kinds = append(kinds, o.cxx...)
	for rep := range o.repeat {
		for _, van := range o.vans {
			for _, topo := range o.topos {
				for _, kind := range kinds {
					label := fmt.Sprintf("%s %dx%d", van, topo[0], topo[1])
					if kind.label != "" {
						label += " " + kind.label
					}
					if o.repeat > 1 {
						label += fmt.Sprintf(" run %d/%d", rep+1, o.repeat)
					}
					nodes := benchNodes{exe: exe, nodeKind: kind}
					reports, err := runBenchJob(ctx, nodes, o, van, topo, cells, func(i, n int, name string) {
						prog.update(fmt.Sprintf("[%s] cell %d/%d: %s", label, i, n, name))
					})
					if err != nil {
						prog.done()
						return fmt.Errorf("bench %s: %w", label, err)
					}
					for i, c := range cells {
						r := &benchResult{Van: van, Nodes: kind.label, Servers: topo[0], Workers: topo[1], Size: c.Size, Op: c.Op, Mode: c.Mode}
						mbps, h, ops := aggregate(reports[i])
						s := all[r.key()+"/"+r.label()]
						if s == nil {
							s = &samples{}
							all[r.key()+"/"+r.label()] = s
							order = append(order, r)
						}
						if ops > 0 {
							r.Ops = ops
						}
						s.mbps = append(s.mbps, mbps)
						s.p50 = append(s.p50, h.quantile(0.5))
						s.p99 = append(s.p99, h.quantile(0.99))
						s.mean = append(s.mean, h.meanUS())
					}
				}
			}
		}
	}
	prog.done()
	for _, r := range order {
		s := all[r.key()+"/"+r.label()]
		r.MBps, r.P50US, r.P99US, r.MeanUS = median(s.mbps), median(s.p50), median(s.p99), median(s.mean)
		r.Runs = len(s.mbps)
		if b, ok := dmlcBaseline[r.key()]; ok {
			r.BaseMBps, r.BaseLatUS = b.MBps, b.LatUS
		}
	}
	for _, r := range order {
		if r.Nodes != "" {
			g := all[r.key()+"/"+r.Van]
			r.GoMBps, r.GoMeanUS = median(g.mbps), median(g.mean)
		}
	}
	if o.json {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(order)
	}
	printBenchTable(os.Stdout, order, o)
	return nil
}

// aggregate sums the workers' goodput for one cell and merges their
// latency histograms.
func aggregate(reps []benchReport) (float64, *hist, int64) {
	h := newHist()
	var mbps float64
	var ops int64
	for _, r := range reps {
		if r.ElapsedNS > 0 {
			mbps += float64(r.Bytes) / (float64(r.ElapsedNS) / 1e9) / 1e6
		}
		h.merge(histFromPairs(r.Hist, r.SumNS, r.Ops))
		ops += r.Ops
	}
	return mbps, h, ops
}

// benchNodes says which programs a bench job runs: this executable (its
// scheduler, and its bench-node role unless kind names a C++ program) and
// kind.
type benchNodes struct {
	exe string
	nodeKind
}

// runBenchJob runs one local job (one van, one topology) through every cell
// and returns the workers' reports per cell.

func runBenchJob(ctx context.Context, nodes benchNodes, o benchOptions, van string, topo [2]int, cells []benchCell, progress func(i, n int, name string)) ([][]benchReport, error) {
	plan := benchPlan{Van: van, Cells: cells, Duration: o.duration, Ops: o.count, Depth: o.depth, LockThread: nodes.lockThread}
	if o.profile != "" {
		plan.Profile = fmt.Sprintf("%s-%s-%dx%d", o.profile, van, topo[0], topo[1])
	}
	planJSON, err := json.Marshal(plan)
	if err != nil {
		return nil, err
	}
	col := &benchCollector{reports: make([][]benchReport, len(cells)), progress: progress}
	pr, pw := io.Pipe()
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		col.scan(pr)
	}()
	perCell := o.duration + 2*time.Second
	if o.count > 0 {
		perCell = time.Duration(o.count) * 100 * time.Millisecond
	}
	job := &launcher.Job{
		NumServers: topo[0], NumWorkers: topo[1],
		Command: []string{nodes.exe, "bench-node"},
		Env: append([]string{benchPlanEnv + "=" + string(planJSON),
			"DMLC_PS_ROOT_URI=127.0.0.1", "DMLC_NODE_HOST=127.0.0.1", "PS_VERBOSE=0"}, plan.bridgeEnv()...),
		Stdout:   pw,
		NoPrefix: true,
		Timeout:  time.Minute + time.Duration(len(cells))*perCell*3,
	}
	if nodes.program != "" {
		job.ServerCommand = []string{nodes.program}
		job.WorkerCommand = []string{nodes.program}
	}
	err = job.Run(ctx)
	_ = pw.Close()
	<-scanDone
	if err != nil {
		return nil, err
	}
	for i, reps := range col.reports {
		if len(reps) != topo[1] {
			return nil, fmt.Errorf("cell %s: %d of %d workers reported", cells[i].name(), len(reps), topo[1])
		}
	}
	return col.reports, nil
}

// benchCollector parses the workers' stdout; other lines pass through.
type benchCollector struct {
	mu       sync.Mutex
	reports  [][]benchReport
	progress func(i, n int, name string)
}

func (c *benchCollector) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, benchResultTag):
			var rep benchReport
			if err := json.Unmarshal([]byte(line[len(benchResultTag):]), &rep); err != nil || rep.Cell < 0 || rep.Cell >= len(c.reports) {
				fmt.Fprintf(os.Stderr, "bench: unreadable worker report %q\n", line)
				continue
			}
			c.mu.Lock()
			c.reports[rep.Cell] = append(c.reports[rep.Cell], rep)
			c.mu.Unlock()
		case strings.HasPrefix(line, benchProgressTag):
			var i, n int
			rest := line[len(benchProgressTag):]
			if _, err := fmt.Sscanf(rest, "%d %d", &i, &n); err == nil {
				name := rest
				if f := strings.SplitN(rest, " ", 3); len(f) == 3 {
					name = f[2]
				}
				c.progress(i, n, name)
			}
		default:
			fmt.Println(line)
		}
	}
	_, _ = io.Copy(io.Discard, r) // keep the job from blocking on a long line
}

// progress keeps one status line on a terminal (and prints nothing
// otherwise, so that redirected output stays clean).
type progress struct {
	w    io.Writer
	tty  bool
	last string
}

func newProgress(f *os.File) *progress {
	fi, err := f.Stat()
	return &progress{w: f, tty: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) update(s string) {
	if !p.tty || s == p.last {
		return
	}
	p.last = s
	fmt.Fprintf(p.w, "\r\033[K%s", s)
}

func (p *progress) done() {
	if p.tty && p.last != "" {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func printBenchTable(w io.Writer, rs []*benchResult, o benchOptions) {
	how := fmt.Sprintf("%v per cell", o.duration)
	if o.count > 0 {
		how = fmt.Sprintf("%d ops per cell and worker", o.count)
	}
	fmt.Fprintf(w, "elasticps bench: %s, pipe depth %d, median of %d run(s); MB/s = 10^6 B/s summed over workers; latency per op in µs\n", how, o.depth, o.repeat)
	fmt.Fprintf(w, "baseline: dmlc ps-lite on this machine kind (spec section 8; its latency is the mean of sequential ops)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "van\tSxW\tsize\top\tmode\tMB/s\tp50\tp99\tmean\t\tdmlc MB/s\tx goodput\tdmlc lat\tx latency\t"
	if len(o.cxx) > 0 {
		head += "\tMB/s vs go\tlat vs go\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rs {
		ratio, lat, latRatio := "-", "-", "-"
		base := "-"
		if r.BaseMBps > 0 {
			base = fmtNum(r.BaseMBps)
			ratio = fmt.Sprintf("%.2f", r.MBps/r.BaseMBps)
		}
		if r.BaseLatUS > 0 {
			lat = fmtNum(r.BaseLatUS)
			latRatio = fmt.Sprintf("%.2f", r.MeanUS/r.BaseLatUS)
		}
		line := fmt.Sprintf("%s\t%dx%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\t%s\t%s\t%s\t%s\t",
			r.label(), r.Servers, r.Workers, sizeLabel(r.Size), r.Op, r.Mode,
			fmtNum(r.MBps), fmtNum(r.P50US), fmtNum(r.P99US), fmtNum(r.MeanUS), base, ratio, lat, latRatio)
		if len(o.cxx) > 0 {
			vsGo, latVsGo := "", ""
			if r.Nodes != "" && r.GoMBps > 0 {
				vsGo = fmt.Sprintf("%.2f", r.MBps/r.GoMBps)
			}
			if r.Nodes != "" && r.GoMeanUS > 0 {
				latVsGo = fmt.Sprintf("%.2f", r.MeanUS/r.GoMeanUS)
			}
			line += "\t" + vsGo + "\t" + latVsGo + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
	if len(o.cxx) > 0 || o.goThread {
		fmt.Fprintf(w, "\nvs go: a labelled row's (C++ program, or go-thread) goodput and mean latency over the Go nodes' of the same van, topology and runs (MB/s > 1 or lat < 1: faster than elasticps's Go nodes)\n")
	}
}

func fmtNum(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

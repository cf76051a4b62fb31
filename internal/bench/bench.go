package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/internal/stats"
	"github.com/elasticps/elasticps/launcher"
)

// Config is one run of the benchmark matrix ('elasticps bench' fills it
// from its flags). Every van, topology and cell is measured once per
// repeat; the report gives the medians.
type Config struct {
	Vans     []string // zmq, tcp, shm, fabric or ibverbs (the last two in -tags rdma builds)
	Topos    [][2]int // servers, workers
	Sizes    []int    // value bytes per operation, split evenly over the servers
	Ops      []string // push, pull
	Modes    []string // seq (wait after every op), pipe (Depth ops in flight)
	Duration time.Duration
	Count    int // ops per cell and worker; 0: Duration
	Depth    int
	Repeat   int
	JSON     bool       // print JSON instead of a table
	Profile  string     // CPU profile file prefix; "" = none
	CXX      []NodeKind // C++ node programs to compare with the Go nodes (--cxx)
	GoThread bool       // also run Go nodes whose workers loop on a locked OS thread
	// Encrypt is off (plaintext, the default), on (every job with
	// PS_ENCRYPT=on) or both (each topology's job once plaintext, then
	// once encrypted, the rows side by side with their ratio).
	Encrypt string
}

// Validate checks what the flag values alone cannot; its messages name
// the flags of 'elasticps bench'.
func (o *Config) Validate() error {
	for _, op := range o.Ops {
		if op != "push" && op != "pull" {
			return fmt.Errorf("bench: --ops-kind %q: use push, pull", op)
		}
	}
	for _, m := range o.Modes {
		if m != "seq" && m != "pipe" {
			return fmt.Errorf("bench: --modes %q: use seq, pipe", m)
		}
	}
	switch {
	case len(o.Vans) == 0:
		return errors.New("bench: no van")
	case len(o.Topos) == 0 || len(o.Sizes) == 0 || len(o.Ops) == 0 || len(o.Modes) == 0:
		return errors.New("bench: empty --topo, --sizes, --ops-kind or --modes")
	case o.Duration <= 0 && o.Count <= 0:
		return errors.New("bench: --duration must be positive (or give --ops)")
	case o.Count < 0 || o.Depth < 1 || o.Repeat < 1:
		return errors.New("bench: --ops must be >= 0, --depth and --repeat >= 1")
	case o.Encrypt != "" && o.Encrypt != "off" && o.Encrypt != "on" && o.Encrypt != "both":
		return fmt.Errorf("bench: --encrypt %q: use off, on or both", o.Encrypt)
	}
	for _, v := range o.Vans {
		if o.Encrypt == "on" || o.Encrypt == "both" {
			if v != "zmq" && v != "tcp" {
				return fmt.Errorf("bench: --encrypt %s: the %s van has no encryption; use --van zmq,tcp", o.Encrypt, v)
			}
		}
	}
	return nil
}

// result is one cell of the matrix for one van and topology: the
// medians over --repeat runs.
type result struct {
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

func (r *result) key() string {
	return fmt.Sprintf("%dx%d/%s/%s/%s", r.Servers, r.Workers, SizeLabel(r.Size), r.Op, r.Mode)
}

// label names the nodes of a result row: the van, and the C++ program's
// label for --cxx rows.
func (r *result) label() string {
	if r.Nodes != "" {
		return r.Van + " " + r.Nodes
	}
	return r.Van
}

// NodeKind is what the servers and workers of a bench job run, and the
// label of its rows: the Go nodes (label ""), the Go nodes with their
// workers on locked OS threads (--go-thread), or a C++ program (--cxx).
type NodeKind struct {
	Label      string
	Program    string   // "" = Go nodes (this executable's NodeCommand)
	LockThread bool     // Go workers loop on a locked OS thread
	Env        []string // added to every node's environment
}

// EncryptedLabel labels the rows of --encrypt on and both.
const EncryptedLabel = "encrypted"

// GoThreadLabel labels the rows of --go-thread.
const GoThreadLabel = "go-thread"

// Run measures the matrix of o, which must be valid, on local jobs of this
// executable (whose main runs RunNode for NodeCommand), and writes the
// table or JSON to out. Lines the nodes print go to stdout.
func Run(ctx context.Context, o Config, out io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this executable to start the bench nodes: %w", err)
	}
	var cells []cell
	for _, size := range o.Sizes {
		for _, op := range o.Ops {
			for _, mode := range o.Modes {
				cells = append(cells, cell{Size: size, Op: op, Mode: mode})
			}
		}
	}
	prog := cli.NewProgress(os.Stderr)
	m := matrix{all: map[string]*samples{}}
	// Each topology's C++ jobs run right after its Go job, so that their
	// ratios compare runs close in time on this noisy machine.
	kinds := []NodeKind{{}}
	if o.Encrypt == "on" || o.Encrypt == "both" {
		enc, err := encryptedKind()
		if err != nil {
			return err
		}
		if o.Encrypt == "on" {
			kinds = kinds[:0]
		}
		kinds = append(kinds, enc)
	}
	if o.GoThread {
		kinds = append(kinds, NodeKind{Label: GoThreadLabel, LockThread: true})
	}
	kinds = append(kinds, o.CXX...)
	for rep := range o.Repeat {
		for _, van := range o.Vans {
			for _, topo := range o.Topos {
				for _, kind := range kinds {
					label := fmt.Sprintf("%s %dx%d", van, topo[0], topo[1])
					if kind.Label != "" {
						label += " " + kind.Label
					}
					if o.Repeat > 1 {
						label += fmt.Sprintf(" run %d/%d", rep+1, o.Repeat)
					}
					nodes := jobNodes{exe: exe, NodeKind: kind}
					reports, err := runJob(ctx, nodes, o, van, topo, cells, func(i, n int, name string) {
						prog.Update(fmt.Sprintf("[%s] cell %d/%d: %s", label, i, n, name))
					})
					if err != nil {
						prog.Done()
						return fmt.Errorf("bench %s: %w", label, err)
					}
					for i, c := range cells {
						m.add(&result{Van: van, Nodes: kind.Label, Servers: topo[0], Workers: topo[1], Size: c.Size, Op: c.Op, Mode: c.Mode}, reports[i])
					}
				}
			}
		}
	}
	prog.Done()
	rows := m.summarize()
	if o.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	printTable(out, rows, o)
	return nil
}

// samples are one row's values, one per repeat.
type samples struct{ mbps, p50, p99, mean []float64 }

// matrix gathers the rows of a run, in the order they were first measured.
type matrix struct {
	order []*result
	all   map[string]*samples // by key()+"/"+label()
}

// add records one repeat of row r: the workers' reports of its cell.
func (m *matrix) add(r *result, reps []report) {
	mbps, h, ops := aggregate(reps)
	s := m.all[r.key()+"/"+r.label()]
	if s == nil {
		s = &samples{}
		m.all[r.key()+"/"+r.label()] = s
		m.order = append(m.order, r)
	}
	if ops > 0 {
		r.Ops = ops
	}
	s.mbps = append(s.mbps, mbps)
	s.p50 = append(s.p50, h.quantile(0.5))
	s.p99 = append(s.p99, h.quantile(0.99))
	s.mean = append(s.mean, h.meanUS())
}

// summarize fills every row with its medians, the dmlc baseline and, for
// labelled rows, the Go nodes' medians of the same cell.
func (m *matrix) summarize() []*result {
	for _, r := range m.order {
		s := m.all[r.key()+"/"+r.label()]
		r.MBps, r.P50US, r.P99US, r.MeanUS = stats.Median(s.mbps), stats.Median(s.p50), stats.Median(s.p99), stats.Median(s.mean)
		r.Runs = len(s.mbps)
		if b, ok := dmlcBaseline[r.key()]; ok {
			r.BaseMBps, r.BaseLatUS = b.MBps, b.LatUS
		}
	}
	for _, r := range m.order {
		if g := m.all[r.key()+"/"+r.Van]; r.Nodes != "" && g != nil {
			r.GoMBps, r.GoMeanUS = stats.Median(g.mbps), stats.Median(g.mean)
		}
	}
	return m.order
}

// aggregate sums the workers' goodput for one cell and merges their
// latency histograms.
func aggregate(reps []report) (float64, *hist, int64) {
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

// jobNodes says which programs a bench job runs: this executable (its
// scheduler, and its NodeCommand role unless kind names a C++ program) and
// kind.
type jobNodes struct {
	exe string
	NodeKind
}

// runJob runs one local job (one van, one topology) through every cell
// and returns the workers' reports per cell.
func runJob(ctx context.Context, nodes jobNodes, o Config, van string, topo [2]int, cells []cell, progress func(i, n int, name string)) ([][]report, error) {
	plan := nodePlan{Van: van, Cells: cells, Duration: o.Duration, Ops: o.Count, Depth: o.Depth, LockThread: nodes.LockThread}
	if o.Profile != "" {
		plan.Profile = fmt.Sprintf("%s-%s-%dx%d", o.Profile, van, topo[0], topo[1])
	}
	planJSON, err := json.Marshal(plan)
	if err != nil {
		return nil, err
	}
	col := &collector{reports: make([][]report, len(cells)), progress: progress}
	pr, pw := io.Pipe()
	scanDone := make(chan struct{})
	go func() {
		defer close(scanDone)
		col.scan(pr)
	}()
	perCell := o.Duration + 2*time.Second
	if o.Count > 0 {
		perCell = time.Duration(o.Count) * 100 * time.Millisecond
	}
	job := &launcher.Job{
		NumServers: topo[0], NumWorkers: topo[1],
		Command: []string{nodes.exe, NodeCommand},
		Env: slices.Concat([]string{planEnv + "=" + string(planJSON)}, nodeproc.LoopbackEnv(),
			[]string{"PS_VERBOSE=0"}, plan.bridgeEnv(), nodes.Env),
		Stdout:   pw,
		NoPrefix: true,
		Timeout:  time.Minute + time.Duration(len(cells))*perCell*3,
	}
	if nodes.Program != "" {
		job.ServerCommand = []string{nodes.Program}
		job.WorkerCommand = []string{nodes.Program}
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

// collector parses the workers' stdout; other lines pass through.
type collector struct {
	mu       sync.Mutex
	reports  [][]report
	progress func(i, n int, name string)
}

func (c *collector) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, resultTag):
			var rep report
			if err := json.Unmarshal([]byte(line[len(resultTag):]), &rep); err != nil || rep.Cell < 0 || rep.Cell >= len(c.reports) {
				fmt.Fprintf(os.Stderr, "bench: unreadable worker report %q\n", line)
				continue
			}
			c.mu.Lock()
			c.reports[rep.Cell] = append(c.reports[rep.Cell], rep)
			c.mu.Unlock()
		case strings.HasPrefix(line, progressTag):
			var i, n int
			rest := line[len(progressTag):]
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

func printTable(w io.Writer, rs []*result, o Config) {
	how := fmt.Sprintf("%v per cell", o.Duration)
	if o.Count > 0 {
		how = fmt.Sprintf("%d ops per cell and worker", o.Count)
	}
	fmt.Fprintf(w, "elasticps bench: %s, pipe depth %d, median of %d run(s); MB/s = 10^6 B/s summed over workers; latency per op in µs\n", how, o.Depth, o.Repeat)
	fmt.Fprintf(w, "baseline: dmlc ps-lite on this machine kind (docs/performance.md; its latency is the mean of sequential ops)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "van\tSxW\tsize\top\tmode\tMB/s\tp50\tp99\tmean\t\tdmlc MB/s\tx goodput\tdmlc lat\tx latency\t"
	vsGo := len(o.CXX) > 0 || o.Encrypt == "both"
	if vsGo {
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
			r.label(), r.Servers, r.Workers, SizeLabel(r.Size), r.Op, r.Mode,
			fmtNum(r.MBps), fmtNum(r.P50US), fmtNum(r.P99US), fmtNum(r.MeanUS), base, ratio, lat, latRatio)
		if vsGo {
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
	if len(o.CXX) > 0 || o.GoThread || o.Encrypt == "both" {
		fmt.Fprintf(w, "\nvs go: a labelled row's (C++ program, go-thread, or encrypted: PS_ENCRYPT=on) goodput and mean latency over the Go nodes' of the same van, topology and runs (MB/s > 1 or lat < 1: faster than elasticps's Go nodes)\n")
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

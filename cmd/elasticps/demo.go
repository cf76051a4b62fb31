package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/internal/plot"
	"github.com/elasticps/elasticps/internal/straggler"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/launcher"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
)

// demoParams configure the demo job; they travel to the node processes in
// ELASTICPS_DEMO_* variables.
type demoParams struct {
	Features, Samples, Batch, Iters int
	LR                              float64
}

func (p demoParams) env() []string {
	return []string{
		"ELASTICPS_DEMO_FEATURES=" + strconv.Itoa(p.Features),
		"ELASTICPS_DEMO_SAMPLES=" + strconv.Itoa(p.Samples),
		"ELASTICPS_DEMO_BATCH=" + strconv.Itoa(p.Batch),
		"ELASTICPS_DEMO_ITERS=" + strconv.Itoa(p.Iters),
		"ELASTICPS_DEMO_LR=" + strconv.FormatFloat(p.LR, 'g', -1, 64),
	}
}

func demoParamsFromEnv() (demoParams, error) {
	p := demoParams{}
	ints := map[string]*int{"FEATURES": &p.Features, "SAMPLES": &p.Samples, "BATCH": &p.Batch, "ITERS": &p.Iters}
	for k, dst := range ints {
		v := os.Getenv("ELASTICPS_DEMO_" + k)
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return p, fmt.Errorf("ELASTICPS_DEMO_%s=%q: expected a positive integer (run the demo with 'elasticps demo')", k, v)
		}
		*dst = n
	}
	lr, err := strconv.ParseFloat(os.Getenv("ELASTICPS_DEMO_LR"), 64)
	if err != nil || lr <= 0 {
		return p, fmt.Errorf("ELASTICPS_DEMO_LR=%q: expected a positive number", os.Getenv("ELASTICPS_DEMO_LR"))
	}
	p.LR = lr
	return p, nil
}

// demoUsage is the help of 'elasticps demo'.
const demoUsage = `usage: elasticps demo [flags]

Trains logistic regression with asynchronous SGD on a local job of this
executable (-s servers, -w workers) and prints a summary; then runs the short
straggler benchmark on the same -s and -w (one slow server: static placement,
PSLD's elastic rebalancing and the oracle placement, 10 s each, or --iters
iterations per worker when --iters is given) and writes its plot to the
temporary directory as SVG, and as PNG beside it when rsvg-convert or
ImageMagick's convert is installed.

flags:
`

// runDemo starts a local job of this executable's demo-node role.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("elasticps demo", flag.ContinueOnError)
	servers := fs.Int("s", 2, "number of servers")
	workers := fs.Int("w", 2, "number of workers")
	p := demoParams{}
	fs.IntVar(&p.Features, "features", 4000, "model size (float32 weights)")
	fs.IntVar(&p.Samples, "samples", 4000, "training samples per worker")
	fs.IntVar(&p.Batch, "batch", 100, "minibatch size")
	fs.IntVar(&p.Iters, "iters", 1000, "SGD iterations per worker")
	fs.Float64Var(&p.LR, "lr", 40, "learning rate")
	if err := cli.Parse(fs, demoUsage, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected argument %q (flags only; see elasticps demo --help)", fs.Arg(0))
	}
	itersSet := false
	fs.Visit(func(f *flag.Flag) { itersSet = itersSet || f.Name == "iters" })
	if *servers < 1 || *workers < 1 {
		return fmt.Errorf("demo: -s %d -w %d: the job needs at least one server and one worker", *servers, *workers)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this executable to start the demo nodes: %w", err)
	}
	o := straggler.DefaultConfig()
	o.Servers, o.Workers = *servers, *workers
	o.Duration, o.Warmup = 10*time.Second, 4*time.Second
	o.Healthy, o.Runs = false, []string{"static", "elastic", "oracle"}
	o.Plot = filepath.Join(os.TempDir(), "elasticps-straggler-demo.svg")
	o.JSON = true
	how := "10 s of training each, measured after a 4 s warm-up"
	if itersSet {
		o.Iters = p.Iters
		how = fmt.Sprintf("%d iterations per worker each", p.Iters)
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Printf("elasticps demo runs two local jobs of %d servers x %d workers:\n", *servers, *workers)
	fmt.Printf("  1. logistic regression, %d features, %d iterations of asynchronous SGD per worker\n", p.Features, p.Iters)
	fmt.Printf("  2. one slow parameter server (emulated link at 1/%s speed): static placement, PSLD elastic\n"+
		"     rebalancing and the oracle placement, %s\n", strconv.FormatFloat(o.Slowdown, 'g', -1, 64), how)
	fmt.Printf("plot: %s (and .png beside it)\n\n", o.Plot)
	job := &launcher.Job{NumServers: *servers, NumWorkers: *workers, Command: []string{exe, "demo-node"},
		Env: append(p.env(), nodeproc.LoopbackEnv()...), Timeout: 10 * time.Minute}
	fmt.Println("== 1. logistic regression")
	if err := job.Run(ctx); err != nil {
		return err
	}
	fmt.Println("\n== 2. a straggling server: static vs elastic vs oracle")
	return stragglerDemo(ctx, o, os.Stdout)
}

// demoRow is the part of a 'bench straggler' JSON row the demo prints.
type demoRow struct {
	Config    string  `json:"config"`
	Placement string  `json:"placement"`
	ItPerSec  float64 `json:"it_per_s_median"`
	SpeedUp   float64 `json:"speedup_vs_static"`
	VsOracle  float64 `json:"ratio_to_oracle"`
	Median    struct {
		Moves int `json:"moves"`
	} `json:"median_run"`
}

// stragglerDemo is the short version of 'elasticps bench straggler' (o),
// with a table of its own that fits 120 columns, the headline, and the
// plot as SVG and PNG.
func stragglerDemo(ctx context.Context, o straggler.Config, w io.Writer) error {
	var out bytes.Buffer
	if err := straggler.Run(ctx, o, &out); err != nil {
		return err
	}
	var rep struct {
		Rows     []demoRow `json:"rows"`
		Headline string    `json:"headline"`
		Plot     string    `json:"plot"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return fmt.Errorf("demo: the benchmark's report: %w", err)
	}
	printDemoRows(w, rep.Rows)
	if rep.Headline != "" {
		fmt.Fprintf(w, "\n%s\n", rep.Headline)
	}
	if rep.Plot != "" {
		fmt.Fprintf(w, "\nplot: %s\n", rep.Plot)
		if png, err := plot.PNG(rep.Plot); err != nil {
			fmt.Fprintf(w, "      %v\n", err)
		} else {
			fmt.Fprintf(w, "      %s\n", png)
		}
	}
	return nil
}

// printDemoRows writes the benchmark's rows as a table of at most 120
// columns.
func printDemoRows(w io.Writer, rows []demoRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "placement\tit/s per worker\tvs static\tvs oracle\tmoves\t")
	for _, r := range rows {
		vs, vo, mv := "-", "-", "-"
		if r.SpeedUp > 0 {
			vs = fmt.Sprintf("%.2fx", r.SpeedUp)
		}
		if r.VsOracle > 0 {
			vo = fmt.Sprintf("%.0f%%", 100*r.VsOracle)
		}
		if r.Placement == "elastic" {
			mv = strconv.Itoa(r.Median.Moves)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s\t%s\t%s\t\n", r.Config, r.ItPerSec, vs, vo, mv)
	}
	_ = tw.Flush()
}

// runDemoNode is one process of the demo job.
func runDemoNode(ctx context.Context) error {
	cfg, err := nodeproc.Config("")
	if err != nil {
		return err
	}
	if cfg.Role != message.RoleWorker {
		return runRole(ctx, cfg.Role.String())
	}
	p, err := demoParamsFromEnv()
	if err != nil {
		return err
	}
	po, release, err := nodeproc.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer release()
	w, err := nodeproc.StartWorker(po)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := train(po, w, p); err != nil {
		return err
	}
	return po.Finalize(0, true)
}

// demoKeys spreads the features over the servers in contiguous blocks; the
// returned keys are sorted. Three more keys per worker, on server 0 after
// the features, carry each worker's summary to rank 0 through the store.
func demoKeys(ranges []routing.Range, features, workers int) (weights []uint64, summary func(rank int) []uint64) {
	n := len(ranges)
	for s := range n {
		lo, hi := features*s/n, features*(s+1)/n
		for j := lo; j < hi; j++ {
			weights = append(weights, ranges[s].Begin+uint64(j-lo))
		}
	}
	summary = func(rank int) []uint64 {
		base := ranges[0].Begin + uint64(features) + uint64(3*rank)
		return []uint64{base, base + 1, base + 2}
	}
	return weights, summary
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

type dataset struct {
	x [][]float32
	y []float32
}

// makeData draws samples for one worker from a model shared by all
// workers (same seed), so training converges to it.
func makeData(features, samples, rank int) dataset {
	truth := rand.New(rand.NewPCG(42, 0))
	w := make([]float64, features)
	for i := range w {
		w[i] = truth.NormFloat64() * 3
	}
	r := rand.New(rand.NewPCG(uint64(100+rank), 7))
	d := dataset{x: make([][]float32, samples), y: make([]float32, samples)}
	scale := 1 / math.Sqrt(float64(features))
	for i := range samples {
		x := make([]float32, features)
		z := 0.0
		for j := range x {
			x[j] = float32(r.NormFloat64() * scale)
			z += float64(x[j]) * w[j]
		}
		d.x[i] = x
		if r.Float64() < sigmoid(z) {
			d.y[i] = 1
		}
	}
	return d
}

func evaluate(d dataset, w []float32) (loss, acc float64) {
	for i, x := range d.x {
		z := 0.0
		for j, v := range x {
			z += float64(v) * float64(w[j])
		}
		pr := min(max(sigmoid(z), 1e-12), 1-1e-12)
		if d.y[i] == 1 {
			loss -= math.Log(pr)
		} else {
			loss -= math.Log(1 - pr)
		}
		if (pr >= 0.5) == (d.y[i] == 1) {
			acc++
		}
	}
	n := float64(len(d.x))
	return loss / n, acc / n
}

func train(po *postoffice.Postoffice, w *kv.Worker, p demoParams) error {
	rank, nw := po.MyRank(), po.NumWorkers()
	keys, summaryKeys := demoKeys(po.ServerKeyRanges(), p.Features, nw)
	data := makeData(p.Features, p.Samples, rank)
	wait := waiter(w)
	// Every worker pushes zeros first: the sum store's first push creates
	// the keys, and zeros leave the sum unchanged.
	zero := make([]float32, p.Features)
	if err := wait(kv.Push(w, keys, zero, nil, kv.Options{})); err != nil {
		return fmt.Errorf("initial push: %w", err)
	}
	if err := wait(kv.Push(w, summaryKeys(rank), []float32{0, 0, 0}, nil, kv.Options{})); err != nil {
		return fmt.Errorf("initial push: %w", err)
	}
	if err := po.Barrier(0, message.WorkerGroup); err != nil {
		return err
	}
	weights := make([]float32, p.Features)
	grad := make([]float32, p.Features)
	r := rand.New(rand.NewPCG(uint64(rank), 1))
	start := time.Now()
	lr := float32(p.LR / float64(nw))
	var loss, acc float64
	for it := 1; it <= p.Iters; it++ {
		if err := wait(kv.Pull(w, keys, &weights, nil, kv.Options{})); err != nil {
			return fmt.Errorf("iteration %d pull: %w", it, err)
		}
		clear(grad)
		for range p.Batch {
			i := r.IntN(len(data.x))
			x := data.x[i]
			z := 0.0
			for j, v := range x {
				z += float64(v) * float64(weights[j])
			}
			g := float32(sigmoid(z)) - data.y[i]
			for j, v := range x {
				grad[j] -= lr * g * v / float32(p.Batch)
			}
		}
		if err := wait(kv.Push(w, keys, grad, nil, kv.Options{})); err != nil {
			return fmt.Errorf("iteration %d push: %w", it, err)
		}
		if it%100 == 0 || it == p.Iters {
			loss, acc = evaluate(data, weights)
			fmt.Printf("rank %d  iteration %4d/%d  loss %.4f  accuracy %.3f  %.0f it/s\n", rank,
				it, p.Iters, loss, acc, float64(it)/time.Since(start).Seconds())
		}
	}
	itps := float64(p.Iters) / time.Since(start).Seconds()
	// Summaries travel through the store (workers never talk to workers).
	sum := []float32{float32(loss), float32(acc), float32(itps)}
	if err := wait(kv.Push(w, summaryKeys(rank), sum, nil, kv.Options{})); err != nil {
		return err
	}
	if err := po.Barrier(0, message.WorkerGroup); err != nil {
		return err
	}
	if rank == 0 {
		return report(po, w, summaryKeys, p)
	}
	return nil
}

// waiter turns an operation's (ts, err) into its completion error.
func waiter(w *kv.Worker) func(ts int32, err error) error {
	return func(ts int32, err error) error {
		if err != nil {
			return err
		}
		return w.Wait(ts)
	}
}

func report(po *postoffice.Postoffice, w *kv.Worker, summaryKeys func(int) []uint64, p demoParams) error {
	wait := waiter(w)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nworker rank\tfinal loss\taccuracy\titerations/s\t")
	total := 0.0
	for r := range po.NumWorkers() {
		var s []float32
		if err := wait(kv.Pull(w, summaryKeys(r), &s, nil, kv.Options{})); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%d\t%.4f\t%.3f\t%.1f\t\n", r, s[0], s[1], s[2])
		total += float64(s[2])
	}
	fmt.Fprintf(tw, "all\t\t\t%.1f\t\n", total)
	tw.Flush()

	var mu sync.Mutex
	stats := map[int32]string{}
	app := w.Simple()
	app.SetResponseHandler(func(d kv.SimpleData, _ *kv.SimpleApp) {
		mu.Lock()
		stats[d.Sender] = string(d.Body)
		mu.Unlock()
	})
	ts, err := app.Request(statsHead, nil, message.ServerGroup)
	if err != nil {
		return err
	}
	if err := app.Wait(ts); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nserver rank\trequests\tMB in\tMB out\t")
	for r := range po.NumServers() {
		f := strings.Fields(stats[int32(message.ServerRankToID(r))])
		if len(f) != 3 {
			fmt.Fprintf(tw, "%d\t?\t?\t?\t\n", r)
			continue
		}
		in, _ := strconv.ParseFloat(f[1], 64)
		out, _ := strconv.ParseFloat(f[2], 64)
		fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.1f\t\n", r, f[0], in/1e6, out/1e6)
	}
	tw.Flush()
	return nil
}

package train

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/internal/stats"
)

// EvalPoint is the test accuracy of one snapshot of the weights.
type EvalPoint struct {
	Iteration int     `json:"iteration"` // of the evaluating worker
	Seconds   float64 `json:"seconds"`   // since the start of training
	Accuracy  float64 `json:"accuracy"`  // on the test set, 0..1
}

// RunResult is one job: one mode, one repeat.
type RunResult struct {
	Mode     string      `json:"mode"`
	Repeat   int         `json:"repeat"`
	Curve    []EvalPoint `json:"curve"`
	FinalAcc float64     `json:"final_accuracy"`
	// TimeToTarget is the time of the first snapshot at or above the
	// report's target accuracy; null when none reached it.
	TimeToTarget num     `json:"time_to_target_s"`
	TotalS       float64 `json:"total_s"`          // until every worker had finished
	ItPerSec     float64 `json:"it_per_s"`         // per worker: each worker's iterations / its training time, averaged
	SlowItPerSec float64 `json:"slowest_it_per_s"` // the slowest worker's
	Loss         float64 `json:"loss"`             // workers' mean training loss over their last iterations
	PullS        float64 `json:"pull_s"`           // time a worker spent in pulls, averaged over the workers
	BytesMoved   int64   `json:"bytes_moved"`      // received plus sent by the servers
	// DelayedPulls and ParkedS come from the servers' sync control; they
	// are null when the servers report no sync statistics.
	DelayedPulls *int64 `json:"pulls_delayed"`
	ParkedS      num    `json:"pulls_parked_s"`
	// Elastic jobs: the scheduler's record of the moves (nil otherwise),
	// and the exactly-once evidence summed over the workers: pulls
	// answered, responses answered twice (dropped as duplicates), request
	// spans redirected after a move.
	Moves      *schedulerResult `json:"moves,omitempty"`
	Pulls      int64            `json:"pulls"`
	Duplicates int64            `json:"duplicate_responses"`
	Redirects  int64            `json:"redirects"`
	Workers    []workerResult   `json:"workers"`
	Servers    []serverResult   `json:"servers"`
}

// Row is one mode of the table: medians over its repeats.
type Row struct {
	Mode         string  `json:"mode"`
	Runs         int     `json:"runs"`
	FinalAcc     float64 `json:"final_accuracy"`
	TimeToTarget num     `json:"time_to_target_s"` // null: the median run did not reach it
	ItPerSec     float64 `json:"it_per_s"`
	TotalS       float64 `json:"total_s"`
	DelayedPulls num     `json:"pulls_delayed"`
	ParkedS      num     `json:"pulls_parked_s"`
	MBMoved      float64 `json:"mb_moved"`
	// Elastic jobs: median committed moves, and the most duplicate
	// responses of any run (0 when every pull was answered once).
	Moves      num       `json:"moves"`
	Duplicates int64     `json:"duplicate_responses"`
	SpeedUp    num       `json:"speedup_to_target_vs_bsp"`
	Plotted    int       `json:"plotted_repeat"`
	TimesToTgt []num     `json:"time_to_target_runs_s"`
	FinalAccs  []float64 `json:"final_accuracy_runs"`
}

// Report is the outcome of Run; its JSON is written to Config.Out.
type Report struct {
	Config      Config       `json:"config"`
	Params      int          `json:"parameters"`
	Iterations  int          `json:"iterations_per_worker"`
	EvalRank    int          `json:"evaluating_worker"`
	TestSamples int          `json:"test_samples"`
	Target      num          `json:"target_accuracy"` // null: no target (no bsp run and no --target)
	TargetFrom  string       `json:"target_from"`
	Rows        []*Row       `json:"rows"`
	Runs        []*RunResult `json:"runs"`
	Checks      []string     `json:"checks"`
	PNG         string       `json:"png"`
	SVG         string       `json:"svg"`
	JSON        string       `json:"json"`
}

// collect reads the nodes' result files of one job.
func collect(dir string, c Config, mode string, repeat int) (*RunResult, error) {
	r := &RunResult{Mode: mode, Repeat: repeat, TimeToTarget: num(math.NaN()), ParkedS: num(math.NaN())}
	var rates, losses, pulls []float64
	r.SlowItPerSec = math.Inf(1)
	for i := range c.Workers {
		var w workerResult
		if err := nodeproc.ReadResult(filepath.Join(dir, fmt.Sprintf("worker-%d.json", i)), &w); err != nil {
			return nil, err
		}
		rate := float64(w.Iterations) / w.TrainS
		rates = append(rates, rate)
		r.SlowItPerSec = min(r.SlowItPerSec, rate)
		losses = append(losses, w.Loss)
		pulls = append(pulls, w.PullS)
		r.TotalS = max(r.TotalS, w.EndS)
		r.Pulls += w.Pulls
		r.Duplicates += w.Duplicates
		r.Redirects += w.Redirects
		r.Workers = append(r.Workers, w)
	}
	if c.Elastic {
		r.Moves = new(schedulerResult)
		if err := nodeproc.ReadResult(filepath.Join(dir, "scheduler.json"), r.Moves); err != nil {
			return nil, err
		}
	}
	r.ItPerSec, r.Loss, r.PullS = stats.Mean(rates), stats.Mean(losses), stats.Mean(pulls)
	var delayed int64
	parked := 0.0
	withSync := 0
	for i := range c.Servers {
		var s serverResult
		if err := nodeproc.ReadResult(filepath.Join(dir, fmt.Sprintf("server-%d.json", i)), &s); err != nil {
			return nil, err
		}
		r.BytesMoved += s.BytesRecv + s.BytesSent
		if s.Sync != nil {
			withSync++
			delayed += s.Sync.Stats.DelayedPulls
			parked += float64(s.Sync.ParkedNS) / 1e9
		}
		r.Servers = append(r.Servers, s)
	}
	if withSync == c.Servers {
		r.DelayedPulls, r.ParkedS = &delayed, num(parked)
	}
	return r, nil
}

// evaluate computes the test accuracy of every snapshot of the job, on
// two goroutines (this runs after the job, off its clock).
func (r *RunResult) evaluate(dir string, m MLP, test Dataset, label string, progress io.Writer) error {
	var snaps []snapshot
	for _, w := range r.Workers {
		snaps = append(snaps, w.Snapshots...)
	}
	if len(snaps) == 0 {
		return fmt.Errorf("the evaluating worker left no snapshot of the weights in %s", dir)
	}
	params := make([]float32, m.NumParams())
	ev := newEvaluator(m, 2)
	for _, s := range snaps {
		if err := readFloats(filepath.Join(dir, "snapshots", s.File), params); err != nil {
			return err
		}
		acc := ev.accuracy(params, test)
		r.Curve = append(r.Curve, EvalPoint{Iteration: s.Iteration, Seconds: s.Seconds, Accuracy: acc})
		fmt.Fprintf(progress, "[%s] test accuracy %6.2f%% at iteration %5d, %7.2f s\n", label, 100*acc, s.Iteration, s.Seconds)
	}
	r.FinalAcc = r.Curve[len(r.Curve)-1].Accuracy
	return nil
}

// evaluator computes test accuracy on a few goroutines, each with its
// workspace.
type evaluator struct {
	m   MLP
	ws  []*Workspace
	out [][]uint8
}

const evalBatch = 250

func newEvaluator(m MLP, par int) *evaluator {
	e := &evaluator{m: m}
	for range par {
		e.ws = append(e.ws, m.NewWorkspace(evalBatch))
		e.out = append(e.out, make([]uint8, evalBatch))
	}
	return e
}

// accuracy is the share of d that params classify right.
func (e *evaluator) accuracy(params []float32, d Dataset) float64 {
	var wg sync.WaitGroup
	correct := make([]int, len(e.ws))
	n := d.Len()
	for g := range e.ws {
		wg.Go(func() {
			lo, hi := n*g/len(e.ws), n*(g+1)/len(e.ws)
			for b := lo; b < hi; b += evalBatch {
				k := min(evalBatch, hi-b)
				e.ws[g].Predict(params, d.X[b*ImageSize:(b+k)*ImageSize], k, e.out[g])
				for i := range k {
					if e.out[g][i] == d.Y[b+i] {
						correct[g]++
					}
				}
			}
		})
	}
	wg.Wait()
	sum := 0
	for _, c := range correct {
		sum += c
	}
	return float64(sum) / float64(n)
}

// tabulate sets the target, every run's time to it, and the rows.
func (rep *Report) tabulate() {
	c := rep.Config
	rep.Target = num(math.NaN())
	switch {
	case c.Target > 0:
		rep.Target, rep.TargetFrom = num(c.Target), "--target"
	case slices.Contains(c.Modes, "bsp"):
		var accs []float64
		for _, r := range rep.Runs {
			if r.Mode == "bsp" {
				accs = append(accs, r.FinalAcc)
			}
		}
		rep.Target, rep.TargetFrom = num(stats.Median(accs)-0.005), "BSP's final accuracy minus 0.5 points"
	}
	for _, r := range rep.Runs {
		r.TimeToTarget = num(math.NaN())
		if math.IsNaN(float64(rep.Target)) {
			continue
		}
		for _, p := range r.Curve {
			if p.Accuracy >= float64(rep.Target) {
				r.TimeToTarget = num(p.Seconds)
				break
			}
		}
	}
	for _, mode := range c.Modes {
		row := &Row{Mode: mode, TimeToTarget: num(math.NaN()), DelayedPulls: num(math.NaN()), ParkedS: num(math.NaN()), SpeedUp: num(math.NaN()), Moves: num(math.NaN())}
		var runs []*RunResult
		var acc, rate, total, mb, delayed, parked, moves []float64
		for _, r := range rep.Runs {
			if r.Mode != mode {
				continue
			}
			runs = append(runs, r)
			acc = append(acc, r.FinalAcc)
			rate = append(rate, r.ItPerSec)
			total = append(total, r.TotalS)
			mb = append(mb, float64(r.BytesMoved)/1e6)
			row.TimesToTgt = append(row.TimesToTgt, r.TimeToTarget)
			row.Duplicates = max(row.Duplicates, r.Duplicates)
			if r.Moves != nil {
				moves = append(moves, float64(r.Moves.Moves))
			}
			if r.DelayedPulls != nil {
				delayed = append(delayed, float64(*r.DelayedPulls))
				parked = append(parked, float64(r.ParkedS))
			}
		}
		row.Runs, row.FinalAccs = len(runs), acc
		row.FinalAcc, row.ItPerSec, row.TotalS, row.MBMoved = stats.Median(acc), stats.Median(rate), stats.Median(total), stats.Median(mb)
		if len(delayed) == len(runs) {
			row.DelayedPulls, row.ParkedS = num(stats.Median(delayed)), num(stats.Median(parked))
		}
		if len(moves) == len(runs) {
			row.Moves = num(stats.Median(moves))
		}
		// A run that never reached the target counts as infinitely slow;
		// the row's run (and the plotted one) is the lower median.
		byTime := slices.Clone(runs)
		slices.SortStableFunc(byTime, func(a, b *RunResult) int { return cmp.Compare(infNaN(a.TimeToTarget), infNaN(b.TimeToTarget)) })
		med := byTime[(len(byTime)-1)/2]
		row.TimeToTarget, row.Plotted = med.TimeToTarget, med.Repeat
		rep.Rows = append(rep.Rows, row)
	}
	var bsp *Row
	for _, row := range rep.Rows {
		if row.Mode == "bsp" {
			bsp = row
		}
	}
	if bsp != nil {
		for _, row := range rep.Rows {
			if t := float64(row.TimeToTarget); t > 0 && !math.IsNaN(float64(bsp.TimeToTarget)) {
				row.SpeedUp = num(float64(bsp.TimeToTarget) / t)
			}
		}
	}
	rep.Checks = checks(rep.Rows, bsp)
	if c.Elastic {
		rep.Checks = append(rep.Checks, rep.elasticChecks()...)
	}
}

// elasticChecks states issue 19's goal for elastic jobs per mode: blocks
// moved during training, no pull answered twice, and none lost (every
// worker finished all its iterations, which it cannot with a pull
// unanswered).
func (rep *Report) elasticChecks() []string {
	var out []string
	for _, row := range rep.Rows {
		var moves, failed int
		var pulls int64
		for _, r := range rep.Runs {
			if r.Mode == row.Mode && r.Moves != nil {
				moves += r.Moves.Moves
				failed += r.Moves.FailedMoves
				pulls += r.Pulls
			}
		}
		out = append(out, fmt.Sprintf("%s elastic: blocks moved during training: %s (%d moves, %d failed); no pull answered twice: %s (%d duplicates); no pull lost: met (%d pulls answered, every worker finished its %d iterations)",
			row.Mode, yesNo(moves > 0), moves, failed, yesNo(row.Duplicates == 0), row.Duplicates, pulls, rep.Iterations))
	}
	return out
}

func yesNo(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func infNaN(n num) float64 {
	if math.IsNaN(float64(n)) {
		return math.Inf(1)
	}
	return float64(n)
}

func (rep *Report) row(mode string) *Row {
	for _, r := range rep.Rows {
		if r.Mode == mode {
			return r
		}
	}
	return nil
}

// checks compares the rows with issue 19's goals, where the modes they
// need ran.
func checks(rows []*Row, bsp *Row) []string {
	find := func(m string) *Row {
		for _, r := range rows {
			if r.Mode == m {
				return r
			}
		}
		return nil
	}
	yes := yesNo
	var out []string
	if bsp != nil {
		for _, r := range rows {
			if r != bsp {
				d := 100 * (r.FinalAcc - bsp.FinalAcc)
				out = append(out, fmt.Sprintf("%s final accuracy within 0.5 points of BSP's: %s (%+.2f points)", r.Mode, yes(d >= -0.5), d))
			}
		}
	}
	fl, ssp := find("fluent"), find("ssp")
	if fl != nil && bsp != nil {
		out = append(out, fmt.Sprintf("fluent >= 2x faster than bsp to the target: %s (%s)", yes(float64(fl.SpeedUp) >= 2), fmtSpeedUp(fl.SpeedUp)))
	}
	if fl != nil && ssp != nil {
		if f, s := infNaN(fl.TimeToTarget), infNaN(ssp.TimeToTarget); !math.IsInf(f, 1) {
			out = append(out, fmt.Sprintf("fluent faster than ssp (same s) to the target: %s (%s s vs %s s)", yes(f < s), cli.FormatNum(f), cli.FormatNum(s)))
		}
		if !math.IsNaN(float64(fl.DelayedPulls)) && !math.IsNaN(float64(ssp.DelayedPulls)) {
			ratio := float64(ssp.DelayedPulls) / max(1, float64(fl.DelayedPulls))
			out = append(out, fmt.Sprintf("ssp delays >= 10x more pulls than fluent: %s (%s vs %s, %sx)", yes(ratio >= 10),
				cli.FormatNum(float64(ssp.DelayedPulls)), cli.FormatNum(float64(fl.DelayedPulls)), cli.FormatNum(ratio)))
		}
	}
	return out
}

func (rep *Report) print(w io.Writer) {
	c := rep.Config
	tgt := "time to target"
	if t := float64(rep.Target); !math.IsNaN(t) {
		tgt = fmt.Sprintf("time to %.2f%% s", 100*t)
	}
	fmt.Fprintf(w, "\nmedians of %d run(s) per mode; test accuracy on %d test images, evaluated off the training clock on worker %d's snapshots every %d iterations\n",
		c.Repeat, rep.TestSamples, rep.EvalRank, c.EvalEvery)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := fmt.Sprintf("mode\tfinal acc %%\t%s\tvs bsp\tit/s\ttotal s\tpulls delayed\tparked s\tMB moved\t", tgt)
	if c.Elastic {
		head += "moves\tduplicates\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rep.Rows {
		line := fmt.Sprintf("%s\t%.2f\t%s\t%s\t%.2f\t%.1f\t%s\t%s\t%.0f\t", r.Mode, 100*r.FinalAcc, fmtOr(r.TimeToTarget, "not reached"),
			fmtSpeedUp(r.SpeedUp), r.ItPerSec, r.TotalS, fmtOr(r.DelayedPulls, "n/a"), fmtOr(r.ParkedS, "n/a"), r.MBMoved)
		if c.Elastic {
			moves := "n/a"
			if !r.Moves.isNaN() {
				moves = fmt.Sprintf("%.0f", float64(r.Moves))
			}
			line += fmt.Sprintf("%s\t%d\t", moves, r.Duplicates)
		}
		fmt.Fprintln(tw, line)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	if math.IsNaN(float64(rep.Target)) {
		fmt.Fprintln(w, "time to target: no target (run bsp too, or give --target)")
	} else {
		fmt.Fprintf(w, "target: %.2f%% (%s); time since the start of training until the first snapshot at or above it\n", 100*float64(rep.Target), rep.TargetFrom)
	}
	fmt.Fprintln(w, "it/s: iterations per second per worker (compute, push and pull of every block, plus any injected sleep), averaged over the workers")
	fmt.Fprintln(w, "total s: until every worker had finished; MB moved: bytes received and sent by the servers")
	if c.Elastic {
		fmt.Fprintln(w, "moves: key range migrations committed during training (balancer and scripted); duplicates: responses the workers dropped as answered twice (max over the runs)")
	}
	if rep.Rows[0].DelayedPulls.isNaN() {
		fmt.Fprintln(w, "pulls delayed, parked s: n/a: these servers report no sync statistics (kv.Server has no SyncStats in this build)")
	} else {
		fmt.Fprintln(w, "pulls delayed: pulls the servers' sync control parked at least once; parked s: their total time parked, summed over the servers")
	}
	if c.Repeat > 1 {
		for _, r := range rep.Rows {
			var t, a []string
			for i := range r.TimesToTgt {
				t = append(t, fmtOr(r.TimesToTgt[i], "-"))
				a = append(a, fmt.Sprintf("%.2f", 100*r.FinalAccs[i]))
			}
			fmt.Fprintf(w, "%-7s runs: time to target %s; final accuracy %s\n", r.Mode, strings.Join(t, " "), strings.Join(a, " "))
		}
	}
	for _, s := range rep.Checks {
		fmt.Fprintln(w, "check: "+s)
	}
	fmt.Fprintf(w, "\nplot: %s (and %s)\nresults: %s\n", rep.PNG, rep.SVG, rep.JSON)
}

// writeFiles writes the plots and the JSON report into Config.Out.
func (rep *Report) writeFiles() error {
	dir := rep.Config.Out
	rep.PNG, rep.SVG, rep.JSON = filepath.Join(dir, "train.png"), filepath.Join(dir, "train.svg"), filepath.Join(dir, "train.json")
	if err := rep.plot(rep.PNG, rep.SVG); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(rep.JSON, b, 0o644)
}

// num is a statistic that may be undefined (NaN); JSON gets null for it.
type num float64

func (n num) isNaN() bool { return math.IsNaN(float64(n)) }

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

func (n *num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = num(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = num(f)
	return nil
}

func fmtOr(n num, none string) string {
	if n.isNaN() {
		return none
	}
	return cli.FormatNum(float64(n))
}

func fmtSpeedUp(n num) string {
	if n.isNaN() {
		return "-" // this mode or bsp did not reach the target
	}
	return cli.FormatNum(float64(n)) + "x"
}

// fmtNum formats a number with a precision that suits its size.

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

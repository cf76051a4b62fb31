package straggler

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// The straggler benchmark's processes are this executable's hidden
// NodeCommand role (RunNode). The parent passes the run in
// planEnv (JSON) and the servers' slowdown in the ELASTICPS_EMULATE_*
// variables; every node writes its results as JSON into the plan's OutDir,
// and worker 0 prints progressTag lines for the progress display.
const (
	planEnv     = "ELASTICPS_STRAGGLER_PLAN"
	progressTag = "ELASTICPS_STRAGGLER_PROGRESS "

	// emulation of a slow server, read by the servers only
	envBandwidth = "ELASTICPS_EMULATE_BANDWIDTH" // every server link's bytes/s; 0 or unset: no emulated link
	envKind      = "ELASTICPS_EMULATE_STRAGGLER" // bandwidth, cpu or none
	envSlowdown  = "ELASTICPS_EMULATE_SLOWDOWN"  // the slow server's factor (4: a quarter of the speed)
	envSlowRank  = "ELASTICPS_EMULATE_SLOW_RANK" // the slow server's rank
)

// nodePlan is what every node of one run needs to know.
type nodePlan struct {
	Mode     string        `json:"mode"` // static, elastic or oracle (placement of Blocks already applied)
	Van      string        `json:"van"`
	Blocks   []block       `json:"blocks"`
	Duration time.Duration `json:"duration"` // timed training per worker (when Iters is 0)
	Iters    int           `json:"iters"`    // timed iterations per worker; 0: Duration
	OutDir   string        `json:"out_dir"`
}

// workerResult is one worker's record of a run. Times are in
// microseconds since T0, the worker's start of timed training (after the
// initial push and pull of every block and a barrier of the workers).
type workerResult struct {
	Rank      int       `json:"rank"`
	T0        int64     `json:"t0_unix_ns"`
	IterEnds  []int64   `json:"iter_ends_us"`
	Ops       [][]int64 `json:"ops"` // [start_us, latency_us] of every push and pull request
	Redirects int64     `json:"redirects"`
}

// serverResult is one server's counters for a run.
type serverResult struct {
	Rank       int     `json:"rank"`
	Slow       bool    `json:"slow"`
	Requests   int64   `json:"requests"`
	Bytes      int64   `json:"bytes"`       // payload: pushed values plus pulled values
	EmulatedNS int64   `json:"emulated_ns"` // time the emulation held the handler (link plus interference)
	Redirected int64   `json:"redirected"`
	Bandwidth  float64 `json:"bandwidth"` // this server's emulated link, bytes/s (0: none)
}

// trace is the elastic scheduler's record: the balancer's trace and
// the coordinator's moves.
type trace struct {
	Start  int64              `json:"balancer_start_unix_ns"`
	Points []coord.TracePoint `json:"points"`
	Moves  []move             `json:"moves"`
}

// move is one coord.Result, with times as Unix nanoseconds.
type move struct {
	Begin, End uint64
	From, To   int32
	Started    int64  `json:"started_unix_ns"`
	DurationNS int64  `json:"duration_ns"`
	Bytes      int    `json:"bytes"`
	Err        string `json:"err,omitempty"`
}

// NodeCommand is the hidden command of this executable that runs one node
// of an experiment's job: its main must call RunNode for it.
const NodeCommand = "straggler-node"

// RunNode is one process of a straggler benchmark job.
func RunNode(ctx context.Context) error {
	var plan nodePlan
	if err := nodeproc.ReadPlan(planEnv, NodeCommand, "elasticps bench straggler", &plan); err != nil {
		return err
	}
	cfg, err := nodeproc.PlanConfig(plan.Van)
	if err != nil {
		return err
	}
	po, release, err := nodeproc.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer release()

	switch cfg.Role {
	case message.RoleServer:
		return runServer(po, plan)
	case message.RoleWorker:
		return runWorker(po, plan)
	}
	return runScheduler(ctx, po, plan)
}

// runScheduler runs the scheduler; in elastic mode also the PSLD
// balancer, which it stops when the workers have finished training (they
// meet it in a barrier), and whose trace it then writes to
// OutDir/trace.json. A move under way at that point is not waited for: it
// would wait for pushes that the stopped workers never send, and it fails
// once the nodes shut down.
func runScheduler(ctx context.Context, po *postoffice.Postoffice, plan nodePlan) error {
	var bal *coord.Balancer
	var co *coord.Coordinator
	var balStart time.Time
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if po.Config().Elastic {
		balStart = time.Now()
		var err error
		if co, bal, err = nodeproc.StartBalancer(runCtx, po); err != nil {
			return err
		}
	}
	if err := po.StartWithBarrier(0); err != nil {
		return err
	}
	if err := po.Barrier(0, endGroup); err != nil {
		return err
	}
	cancel()
	if bal != nil {
		tr := trace{Start: balStart.UnixNano(), Points: bal.Trace()}
		for _, r := range co.History() {
			m := move{Begin: r.Move.Begin, End: r.Move.End, From: r.Move.From, To: r.Move.To,
				Started: r.Started.UnixNano(), DurationNS: int64(r.Duration), Bytes: r.Bytes}
			if r.Err != nil {
				m.Err = r.Err.Error()
			}
			tr.Moves = append(tr.Moves, m)
		}
		if err := writeJSON(filepath.Join(plan.OutDir, "trace.json"), tr); err != nil {
			return err
		}
	}
	return po.Finalize(0, true)
}

// endGroup meet in a barrier when the workers have finished training,
// so that the balancer stops before the nodes shut down.
const endGroup = message.WorkerGroup | message.SchedulerGroup

// runServer runs a server: the sum store behind the slowdown emulation.
func runServer(po *postoffice.Postoffice, plan nodePlan) error {
	emu, err := emulatorFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	en, err := elastic.Open(po)
	if err != nil {
		return err
	}
	store := kv.NewDefaultHandler()
	emu.store = store
	emu.rank = po.MyRank
	// The emulation wraps the handler only; migrations hand the store's
	// state over directly.
	srv, err := en.NewServer(0, kv.ServerOptions{Handler: emu.handle}, store)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := po.StartWithBarrier(0); err != nil {
		return err
	}
	if err := po.Finalize(0, true); err != nil {
		return err
	}
	slow, bw := emu.profile()
	res := serverResult{Rank: po.MyRank(), Slow: slow, Requests: emu.requests.Load(), Bytes: emu.bytes.Load(),
		EmulatedNS: emu.emulated.Load(), Redirected: en.Redirected(), Bandwidth: bw}
	return writeJSON(filepath.Join(plan.OutDir, fmt.Sprintf("server-%d.json", res.Rank)), res)
}

// emulator wraps kv.DefaultHandler with the emulated slowdown. This
// machine has two cores and only loopback, so a real bandwidth limit or
// CPU contention cannot be confined to one server process; instead:
//
//   - Every server has an emulated link of Bandwidth bytes/s (when set): a
//     request holds the server's handler for its payload bytes (pushed
//     values in, pulled values out) / bandwidth, on a virtual clock, so
//     requests queue behind each other as on one serialised link. The
//     handler sleeps (it does not spin), so the emulated link costs no CPU.
//   - bandwidth straggler: the slow server's link has Bandwidth/Slowdown.
//   - cpu straggler: the slow server's link is normal, but each request
//     then holds the handler (Slowdown-1) times its normal handling time
//     longer — the normal time being its payload times the link's time per
//     byte plus the store's measured handling time per byte (total time
//     over total bytes of the last thousand or so requests). Also sleep,
//     also serialised.
//
// Everything happens inside the handler, before the store answers, so the
// server's measured handling time (what its load reports call busy time)
// includes the emulated delay, as it would include a slow NIC's or a
// contended CPU's.
type emulator struct {
	base     float64 // bytes/s of every link; 0: none
	kind     string  // bandwidth, cpu or none
	slowdown float64
	slowRank int

	store *kv.DefaultHandler
	rank  func() int

	// Only the server's customer goroutine, which runs the handler, touches
	// these.
	resolved bool
	slow     bool
	free     time.Time      // when the emulated link is next free
	sizes    map[uint64]int // value bytes per key, learned from pushes
	// store handling time and bytes, exponentially decayed sums: their
	// ratio is the store's measured handling time per byte
	storeNS, storeBytes float64

	requests, bytes, emulated atomic.Int64
}

// carry is how late a request may start after the link's virtual free
// time and still count as queued behind it (so that a sleep's overshoot is
// paid back by the next request instead of slowing the link down); a
// longer gap means the link was idle.
const carry = 2 * time.Millisecond

// minSleep: shorter waits are not slept (a timer costs more); the
// virtual clock carries them to the next request.
const minSleep = 100 * time.Microsecond

func emulatorFromEnv(getenv func(string) string) (*emulator, error) {
	e := &emulator{kind: "none", slowdown: 1, sizes: map[uint64]int{}}
	if v := getenv(envBandwidth); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return nil, fmt.Errorf("%s=%q: want bytes/s >= 0", envBandwidth, v)
		}
		e.base = f
	}
	if v := getenv(envKind); v != "" {
		switch v {
		case "bandwidth", "cpu", "none":
			e.kind = v
		default:
			return nil, fmt.Errorf("%s=%q: want bandwidth, cpu or none", envKind, v)
		}
	}
	if v := getenv(envSlowdown); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 1 {
			return nil, fmt.Errorf("%s=%q: want a factor >= 1", envSlowdown, v)
		}
		e.slowdown = f
	}
	if v := getenv(envSlowRank); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s=%q: want a server rank", envSlowRank, v)
		}
		e.slowRank = n
	}
	if e.kind == "bandwidth" && e.base <= 0 {
		return nil, fmt.Errorf("%s=bandwidth needs %s > 0", envKind, envBandwidth)
	}
	return e, nil
}

// profile reports whether this server is the slow one and its link's
// bandwidth. Ranks are known once the node has started.
func (e *emulator) profile() (slow bool, bandwidth float64) {
	if !e.resolved && e.rank != nil {
		e.resolved = true
		e.slow = e.kind != "none" && e.slowdown > 1 && e.rank() == e.slowRank
	}
	bw := e.base
	if e.slow && e.kind == "bandwidth" {
		bw /= e.slowdown
	}
	return e.slow, bw
}

// payload is the request's value bytes: pushed values plus the values a
// pull will return.
func (e *emulator) payload(meta kv.ReqMeta, data kv.KVPairs) int {
	n := 0
	if meta.Push {
		n += len(data.Vals)
		if len(data.Keys) > 0 {
			es := meta.DataType.Size()
			for i, k := range data.Keys {
				if len(data.Lens) == len(data.Keys) {
					e.sizes[k] = int(data.Lens[i]) * es
				} else {
					e.sizes[k] = len(data.Vals) / len(data.Keys)
				}
			}
		}
	}
	if meta.Pull {
		for _, k := range data.Keys {
			sz, ok := e.sizes[k]
			if !ok { // arrived by migration: ask the store once
				v, _, _ := e.store.Value(k)
				sz = len(v)
				e.sizes[k] = sz
			}
			n += sz
		}
	}
	return n
}

// occupy holds the handler for d on the emulated link's virtual clock.
func (e *emulator) occupy(d time.Duration) {
	if d <= 0 {
		return
	}
	now := time.Now()
	start := e.free
	if start.IsZero() || now.Sub(start) > carry {
		start = now // the link was idle
	}
	e.free = start.Add(d)
	e.emulated.Add(int64(d))
	if wait := e.free.Sub(now); wait >= minSleep {
		time.Sleep(wait)
	}
}

// handle is the server's request handler.
func (e *emulator) handle(meta kv.ReqMeta, data kv.KVPairs, srv *kv.Server) {
	slow, bw := e.profile()
	n := e.payload(meta, data)
	e.requests.Add(1)
	e.bytes.Add(int64(n))
	if bw > 0 {
		e.occupy(time.Duration(float64(n) / bw * 1e9))
	}
	if slow && e.kind == "cpu" {
		normal := 0.0
		if e.storeBytes > 0 {
			normal = e.storeNS / e.storeBytes * float64(n)
		}
		if e.base > 0 {
			normal += float64(n) / e.base * 1e9
		}
		e.occupy(time.Duration((e.slowdown - 1) * normal))
	}
	start := time.Now()
	e.store.Handle(meta, data, srv)
	const keep = 1 - 1.0/1024 // forget over about a thousand requests
	e.storeNS = e.storeNS*keep + float64(time.Since(start))
	e.storeBytes = e.storeBytes*keep + float64(n)
}

// runWorker trains: every iteration pushes every block (one key per
// request, all in flight, then waits) and then pulls every block the same
// way, as BytePS and MXNet workers do.
func runWorker(po *postoffice.Postoffice, plan nodePlan) error {
	w, err := nodeproc.StartWorker(po)
	if err != nil {
		return err
	}
	defer w.Close()
	ranges := po.ServerKeyRanges()
	nb := len(plan.Blocks)
	keys := make([]uint64, nb)
	grads := make([][]float32, nb)
	params := make([][]float32, nb)
	for i, b := range plan.Blocks {
		if b.Server >= len(ranges) {
			return fmt.Errorf("block %d is placed on server %d of %d", i, b.Server, len(ranges))
		}
		keys[i] = ranges[b.Server].Begin + b.Key
		grads[i] = make([]float32, b.Elems)
		for j := range grads[i] {
			grads[i][j] = 1e-3
		}
		params[i] = make([]float32, b.Elems)
	}
	starts := make([]time.Time, nb)
	ends := make([]time.Time, nb)
	cbs := make([]func(), nb)
	for i := range cbs {
		cbs[i] = func() { ends[i] = time.Now() }
	}
	ts := make([]int32, nb)
	var opLog [][]int64
	var t0 time.Time
	phase := func(push, record bool) error {
		for i := range keys {
			starts[i] = time.Now()
			opts := kv.Options{Callback: cbs[i]}
			var err error
			if push {
				ts[i], err = kv.Push(w, keys[i:i+1], grads[i], nil, opts)
			} else {
				ts[i], err = kv.Pull(w, keys[i:i+1], &params[i], nil, opts)
			}
			if err != nil {
				return err
			}
		}
		var first error
		for i := range keys {
			if err := w.Wait(ts[i]); err != nil && first == nil {
				first = fmt.Errorf("block %d (key %d): %w", i, keys[i], err)
			}
		}
		if record && first == nil {
			for i := range keys {
				opLog = append(opLog, []int64{starts[i].Sub(t0).Microseconds(), ends[i].Sub(starts[i]).Microseconds()})
			}
		}
		return first
	}
	// The first push creates every key on its server; then all workers
	// start timing together.
	if err := phase(true, false); err != nil {
		return fmt.Errorf("initial push: %w", err)
	}
	if err := phase(false, false); err != nil {
		return fmt.Errorf("initial pull: %w", err)
	}
	if err := po.Barrier(0, message.WorkerGroup); err != nil {
		return err
	}
	rank := po.MyRank()
	res := workerResult{Rank: rank}
	t0 = time.Now()
	res.T0 = t0.UnixNano()
	lastProgress := t0
	for it := 1; ; it++ {
		if err := phase(true, true); err != nil {
			return fmt.Errorf("iteration %d push: %w", it, err)
		}
		if err := phase(false, true); err != nil {
			return fmt.Errorf("iteration %d pull: %w", it, err)
		}
		now := time.Now()
		res.IterEnds = append(res.IterEnds, now.Sub(t0).Microseconds())
		if rank == 0 && now.Sub(lastProgress) >= time.Second {
			lastProgress = now
			fmt.Printf("%s%d %d\n", progressTag, it, now.Sub(t0).Milliseconds())
		}
		if plan.Iters > 0 && it >= plan.Iters || plan.Iters <= 0 && now.Sub(t0) >= plan.Duration {
			break
		}
	}
	res.Ops = opLog
	res.Redirects = w.Redirects()
	if err := writeJSON(filepath.Join(plan.OutDir, fmt.Sprintf("worker-%d.json", rank)), res); err != nil {
		return err
	}
	if err := po.Barrier(0, endGroup); err != nil {
		return err
	}
	return po.Finalize(0, true)
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("cannot write results: %w", err)
	}
	return nil
}

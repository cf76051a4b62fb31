package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van/samehost"
)

// The bench job's processes are this executable's hidden NodeCommand
// role. The parent passes the plan in ELASTICPS_BENCH_* variables and reads
// results back from the workers' stdout, one line per cell, prefixed with
// resultTag; worker 0 also announces each cell with progressTag.
const (
	resultTag   = "ELASTICPS_BENCH_RESULT "
	progressTag = "ELASTICPS_BENCH_PROGRESS "
)

// nodePlan is what every node of a bench job needs to know.
type nodePlan struct {
	Van      string        `json:"van"`
	Cells    []cell        `json:"cells"`
	Duration time.Duration `json:"duration"` // per cell, when Ops is 0
	Ops      int           `json:"ops"`      // per cell and worker; 0: use Duration
	Depth    int           `json:"depth"`    // operations in flight in pipe cells
	Profile  string        `json:"profile"`  // CPU profile file prefix; "" = none
	// LockThread runs each worker's loop on a locked OS thread, where a
	// blocked Wait parks the thread as a C++ caller's does (--go-thread).
	LockThread bool `json:"lock_thread,omitempty"`
}

// cell is one measurement: a value size, push or pull, sequential or
// pipelined.
type cell struct {
	Size int    `json:"size"` // value bytes per operation, split evenly over the servers
	Op   string `json:"op"`   // "push" or "pull"
	Mode string `json:"mode"` // "seq" or "pipe"
}

func (c cell) name() string { return SizeLabel(c.Size) + " " + c.Op + " " + c.Mode }

// report is one worker's result for one cell.
type report struct {
	Cell      int        `json:"cell"`
	Rank      int        `json:"rank"`
	Ops       int64      `json:"ops"`
	Bytes     int64      `json:"bytes"`
	ElapsedNS int64      `json:"elapsed_ns"`
	Hist      [][2]int64 `json:"hist"`
	SumNS     int64      `json:"sum_ns"`
}

const planEnv = "ELASTICPS_BENCH_PLAN"

// bridgeEnv is the plan for C++ nodes (--cxx), in variables simple to
// read without a JSON parser, and the van selection the bridge reads.
func (p nodePlan) bridgeEnv() []string {
	cells := make([]string, len(p.Cells))
	for i, c := range p.Cells {
		cells[i] = fmt.Sprintf("%d %s %s", c.Size, c.Op, c.Mode)
	}
	env := []string{
		"ELASTICPS_BENCH_CELLS=" + strings.Join(cells, ","),
		"ELASTICPS_BENCH_DURATION_NS=" + strconv.FormatInt(int64(p.Duration), 10),
		"ELASTICPS_BENCH_OPS=" + strconv.Itoa(p.Ops),
		"ELASTICPS_BENCH_DEPTH=" + strconv.Itoa(p.Depth),
	}
	switch p.Van {
	case "fabric", "ibverbs":
		env = append(env, "DMLC_ENABLE_RDMA="+p.Van)
	case "samehost":
		env = append(env, "DMLC_PS_VAN_TYPE=tcp", samehost.Env+"=1")
	default:
		env = append(env, "DMLC_PS_VAN_TYPE="+p.Van)
	}
	return env
}

// NodeCommand is the hidden command of this executable that runs one node
// of a bench job: its main must call RunNode for it.
const NodeCommand = "bench-node"

// RunNode is one process of a bench job.
func RunNode(ctx context.Context) error {
	var plan nodePlan
	if err := nodeproc.ReadPlan(planEnv, NodeCommand, "elasticps bench", &plan); err != nil {
		return err
	}
	van := plan.Van
	if van == "samehost" {
		van = "tcp" // with PS_SHM_AUTO=1 (bridgeEnv)
	}
	cfg, err := nodeproc.PlanConfig(van)
	if err != nil {
		return err
	}
	if plan.Profile != "" {
		stop, err := startProfile(fmt.Sprintf("%s-%s%s.pprof", plan.Profile, cfg.Role, os.Getenv("ELASTICPS_LOCAL_INDEX")))
		if err != nil {
			return err
		}
		defer stop()
	}
	po, release, err := nodeproc.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer release()

	switch cfg.Role {
	case message.RoleServer:
		en, err := elastic.Open(po)
		if err != nil {
			return err
		}
		// the bench handler keeps no view of requests
		srv, err := en.NewServer(0, kv.ServerOptions{Handler: newHandler(plan, cfg.NumServers).handle, ReleaseRequests: true}, nil)
		if err != nil {
			return err
		}
		defer srv.Close()
	case message.RoleWorker:
		w, err := nodeproc.StartWorker(po)
		if err != nil {
			return err
		}
		defer w.Close()
		if plan.LockThread {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		if err := runWorker(po, w, plan); err != nil {
			return err
		}
		return po.Finalize(0, true)
	}
	if err := po.StartWithBarrier(0); err != nil {
		return err
	}
	if err := po.Finalize(0, true); err != nil {
		return err
	}
	return ctx.Err()
}

// startProfile writes a CPU profile to the file name until stop.
func startProfile(name string) (stop func(), err error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

// handler answers at once: a push with an empty ack, a pull with the
// requested number of bytes (Meta.Head, the worker's Options.Cmd) from a
// buffer built once, so Go and C++ (--cxx) nodes can be mixed.
type handler struct{ vals []byte }

func newHandler(plan nodePlan, servers int) *handler {
	maxPart := 0
	for _, c := range plan.Cells {
		maxPart = max(maxPart, c.Size/max(servers, 1))
	}
	h := &handler{vals: make([]byte, maxPart)}
	for i := range h.vals {
		h.vals[i] = pattern(i)
	}
	return h
}

func (h *handler) handle(meta kv.ReqMeta, data kv.KVPairs, srv *kv.Server) {
	var err error
	switch {
	case meta.Pull && int(meta.Cmd) <= len(h.vals) && meta.Cmd >= 0:
		err = srv.Response(meta, kv.KVPairs{Keys: data.Keys, Vals: h.vals[:meta.Cmd]})
	case meta.Pull:
		err = srv.ResponseError(meta, fmt.Errorf("bench: pull of %d bytes, more than the plan's largest", meta.Cmd))
	default:
		err = srv.Response(meta, kv.KVPairs{})
	}
	if err != nil && !errors.Is(err, postoffice.ErrStopped) {
		fmt.Fprintln(os.Stderr, "bench server:", err)
	}
}

// runWorker runs every cell of the plan, in step with the other workers.
func runWorker(po *postoffice.Postoffice, w *kv.Worker, plan nodePlan) error {
	ranges := po.ServerKeyRanges()
	keys := make([]uint64, len(ranges))
	for i, r := range ranges {
		keys[i] = r.Begin // one key per server
	}
	rank := po.MyRank()
	for i, c := range plan.Cells {
		if rank == 0 {
			fmt.Printf("%s%d %d %s\n", progressTag, i+1, len(plan.Cells), c.name())
		}
		r := &cellRun{w: w, keys: keys, cell: c, depth: plan.Depth, servers: len(ranges)}
		r.init()
		// Warm up (connections, buffers, the GC's pacing; twice round
		// every pipe slot, so that each destination and as much transport
		// memory as the depth keeps in flight has been written once: first
		// writes of fresh pages are slow on some virtual machines), then
		// start together so that the workers' measurements overlap.
		if err := r.run(max(plan.Ops/10, 3, 2*r.slots()), 0, nil); err != nil {
			return fmt.Errorf("bench cell %s: %w", c.name(), err)
		}
		if err := po.Barrier(0, message.WorkerGroup); err != nil {
			return err
		}
		h := newHist()
		start := time.Now()
		if err := r.run(plan.Ops, plan.Duration, h); err != nil {
			return fmt.Errorf("bench cell %s: %w", c.name(), err)
		}
		elapsed := time.Since(start)
		if err := r.check(); err != nil {
			return fmt.Errorf("bench cell %s: %w", c.name(), err)
		}
		line, err := json.Marshal(report{Cell: i, Rank: rank, Ops: h.N, Bytes: h.N * int64(c.Size),
			ElapsedNS: int64(elapsed), Hist: h.pairs(), SumNS: h.Sum})
		if err != nil {
			return err
		}
		fmt.Printf("%s%s\n", resultTag, line)
		if err := po.Barrier(0, message.WorkerGroup); err != nil {
			return err
		}
	}
	return nil
}

// cellRun issues one cell's operations.
type cellRun struct {
	w       *kv.Worker
	keys    []uint64
	cell    cell
	depth   int
	servers int
	vals    []byte
	dsts    [][]byte // one pull destination per slot in flight
}

// slots is the number of operations in flight.
func (r *cellRun) slots() int {
	if r.cell.Mode == "pipe" {
		return max(r.depth, 1)
	}
	return 1
}

func (r *cellRun) init() {
	slots := r.slots()
	if r.cell.Op == "push" {
		r.vals = make([]byte, r.cell.Size)
		for i := range r.vals {
			r.vals[i] = byte(i)
		}
	} else {
		for range slots {
			r.dsts = append(r.dsts, make([]byte, r.cell.Size))
		}
	}
}

// check compares the bytes of every pull destination with what the bench
// servers send (pattern of each server's part); pushes have nothing
// to check.
func (r *cellRun) check() error {
	part := r.cell.Size / r.servers
	for slot, dst := range r.dsts {
		for k := range r.servers {
			for i := range part {
				if got, want := dst[k*part+i], pattern(i); got != want {
					return fmt.Errorf("pulled byte %d of server %d's part (slot %d) is %d, want %d: the reply's bytes are wrong", i, k, slot, got, want)
				}
			}
		}
	}
	return nil
}

func (r *cellRun) issue(slot int) (int32, error) {
	opts := kv.Options{DataType: message.Other, Cmd: int32(r.cell.Size / r.servers)}
	if r.cell.Op == "push" {
		return r.w.Push(r.keys, r.vals, nil, opts)
	}
	return r.w.Pull(r.keys, &r.dsts[slot], nil, opts)
}

// run issues ops operations (or, with ops 0, as many as fit in d) and
// records each one's latency in h (when non-nil). Sequential cells wait
// for each operation; pipelined ones keep depth in flight.
func (r *cellRun) run(ops int, d time.Duration, h *hist) error {
	slots := r.slots()
	type inflight struct {
		ts    int32
		start time.Time
	}
	ring := make([]inflight, slots)
	deadline := time.Now().Add(d)
	more := func(issued int) bool {
		if ops > 0 {
			return issued < ops
		}
		return time.Now().Before(deadline)
	}
	issued, done := 0, 0
	for issued < slots && more(issued) {
		start := time.Now()
		ts, err := r.issue(issued % slots)
		if err != nil {
			return err
		}
		ring[issued%slots] = inflight{ts, start}
		issued++
	}
	for done < issued {
		slot := done % slots
		if err := r.w.Wait(ring[slot].ts); err != nil {
			return err
		}
		if h != nil {
			h.add(time.Since(ring[slot].start))
		}
		done++
		if more(issued) {
			start := time.Now()
			ts, err := r.issue(slot)
			if err != nil {
				return err
			}
			ring[slot] = inflight{ts, start}
			issued++
		}
	}
	return nil
}

func SizeLabel(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KB"
	}
	return strconv.Itoa(n) + "B"
}

// ParseSize reads 4096, 4KB, 4KiB, 4k, 4MB, ...
func ParseSize(s string) (int, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := 1
	for _, u := range []struct {
		suffix string
		m      int
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.m
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q: use e.g. 4KB, 256KB, 4MB", s)
	}
	return n * mult, nil
}

// pattern is byte i of every bench server's reply to a pull, which
// the Go and the C++ bench workers (compat_tests/test_benchmark.cc) check.
func pattern(i int) byte { return byte(i*7 + 3) }

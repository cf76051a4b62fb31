package train

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/elastic/coord"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/paramstore"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
	"github.com/elasticps/elasticps/syncctl"
)

// The processes of a training job are this executable's hidden NodeCommand
// role (RunNode). The launcher passes the job in planEnv (JSON) and the
// sync mode in PS_SYNC_* variables, which the servers read; every node
// writes its results as JSON into the plan's OutDir.
const (
	planEnv = "ELASTICPS_TRAIN_PLAN"
	// NodeCommand is the hidden command of this executable that runs one
	// node of a training job: its main must call RunNode for it.
	NodeCommand = "train-node"
)

// nodePlan is what every node of one training job needs to know.
type nodePlan struct {
	Sizes      []int    `json:"sizes"`
	Blocks     int      `json:"blocks"`
	Batch      int      `json:"batch"`
	Iterations int      `json:"iterations"` // per worker
	LR         float64  `json:"lr"`
	Seed       uint64   `json:"seed"`
	EvalEvery  int      `json:"eval_every"`
	EvalRank   int      `json:"eval_rank"` // the worker that snapshots the weights
	TrainLimit int      `json:"train_limit"`
	MNISTDir   string   `json:"mnist_dir"`
	Straggle   Straggle `json:"straggle"`
	CPUGroup   string   `json:"cpu_group"` // cgroup directory the CPU straggler joins; "" none
	CPURank    int      `json:"cpu_rank"`
	// SlowGroup is the cgroup directory server SlowServer joins; "" none.
	SlowGroup  string `json:"slow_group"`
	SlowServer int    `json:"slow_server"`
	// Moves scripted moves of MoveFrom's first block, one every MoveEvery
	// (elastic jobs; the scheduler makes them).
	Moves     int           `json:"moves"`
	MoveEvery time.Duration `json:"move_every"`
	MoveFrom  int           `json:"move_from"`
	// Progress is the interval of the workers' progress lines.
	Progress time.Duration `json:"progress"`
	OutDir   string        `json:"out_dir"`
}

// snapshot is one copy of the weights the evaluating worker took, with
// the time since the start of training; the launcher evaluates it after
// the job.
type snapshot struct {
	Iteration int     `json:"iteration"`
	Seconds   float64 `json:"seconds"`
	File      string  `json:"file"`
}

// workerResult is one worker's record of a job.
type workerResult struct {
	Rank       int     `json:"rank"`
	T0         int64   `json:"t0_unix_ns"` // start of training (after the initial weights, in a barrier)
	Iterations int     `json:"iterations"`
	TrainS     float64 `json:"train_s"` // until its last iteration ended
	PushS      float64 `json:"push_s"`  // waiting for pushes
	PullS      float64 `json:"pull_s"`  // waiting for pulls
	SleepS     float64 `json:"straggle_s"`
	Loss       float64 `json:"loss"` // mean training loss of the last iterations
	CPULimited bool    `json:"cpu_limited"`
	// Pulls is the pulls answered (every one the worker sent, or it would
	// not have finished); Duplicates the responses it dropped because they
	// matched no outstanding request (kv.Worker.Dropped: a pull or push
	// answered twice); Redirects the request spans it re-sent because a
	// block had moved.
	Pulls      int64 `json:"pulls"`
	Duplicates int64 `json:"duplicate_responses"`
	Redirects  int64 `json:"redirects"`
	// EndS is when every worker had finished (the end barrier), since T0;
	// the evaluating worker's last snapshot is taken then.
	EndS      float64    `json:"end_s"`
	Snapshots []snapshot `json:"snapshots,omitempty"`
}

// serverResult is one server's counters.
type serverResult struct {
	Rank      int   `json:"rank"`
	BytesRecv int64 `json:"bytes_recv"`
	BytesSent int64 `json:"bytes_sent"`
	MsgsRecv  int64 `json:"msgs_recv"`
	// Slow tells whether it ran in the slow server's cgroup; Redirected
	// counts the requests it redirected to a block's new owner.
	Slow       bool  `json:"slow"`
	Redirected int64 `json:"redirected"`
	// Sync is nil when the server has no sync statistics (a kv.Server
	// without SyncStats).
	Sync *serverSync `json:"sync,omitempty"`
}

type serverSync struct {
	Stats    syncctl.Stats `json:"stats"`
	ParkedNS int64         `json:"parked_ns"` // total time pulls spent parked
}

// syncStater is the kv.Server of a build with sync control.
type syncStater interface {
	SyncStats() (syncctl.Stats, time.Duration)
}

// RunNode is one process of a training job.
func RunNode(ctx context.Context) error {
	var plan nodePlan
	if err := nodeproc.ReadPlan(planEnv, NodeCommand, "elasticps train", &plan); err != nil {
		return err
	}
	cfg, err := nodeproc.Config("")
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
		return runWorker(ctx, po, plan)
	}
	return runScheduler(ctx, po, plan)
}

// trainGroup meets in a barrier when training starts and when every
// worker has finished, so that the scheduler's balancer and scripted
// moves run during training only.
const trainGroup = message.WorkerGroup | message.SchedulerGroup

// schedulerResult is the elastic scheduler's record of a job.
type schedulerResult struct {
	Moves       int `json:"moves"`        // committed, by the balancer or scripted
	FailedMoves int `json:"failed_moves"` // aborted or failed
	Scripted    int `json:"scripted_moves"`
	// MovedBytes is the state the committed moves carried.
	MovedBytes int             `json:"moved_bytes"`
	History    []movedInterval `json:"history"`
}

type movedInterval struct {
	Begin, End uint64
	From, To   int32
	Bytes      int
	Millis     float64
	Error      string `json:",omitempty"`
}

// runScheduler runs the scheduler; in an elastic job also the migration
// coordinator and the PSLD balancer (as 'elasticps scheduler' does), and
// plan.Moves scripted moves, all stopped when the workers have finished
// training. A move still under way then is not waited for (it ends when
// the nodes do); the record of the moves goes to OutDir/scheduler.json.
func runScheduler(ctx context.Context, po *postoffice.Postoffice, plan nodePlan) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var co *coord.Coordinator
	if po.Config().Elastic {
		var err error
		if co, _, err = nodeproc.StartBalancer(runCtx, po); err != nil {
			return err
		}
	}
	if err := po.StartWithBarrier(0); err != nil {
		return err
	}
	if err := po.Barrier(0, trainGroup); err != nil {
		return err
	}
	var scripted atomic.Int64
	if co != nil && plan.Moves > 0 {
		go scriptedMoves(runCtx, co, po, plan, &scripted)
	}
	if err := po.Barrier(0, trainGroup); err != nil {
		return err
	}
	cancel()
	if co != nil {
		res := schedulerResult{Scripted: int(scripted.Load())}
		for _, h := range co.History() {
			mi := movedInterval{Begin: h.Move.Begin, End: h.Move.End, From: h.Move.From, To: h.Move.To,
				Bytes: h.Bytes, Millis: float64(h.Duration.Microseconds()) / 1000}
			if h.Err != nil {
				mi.Error = h.Err.Error()
				res.FailedMoves++
			} else {
				res.Moves++
				res.MovedBytes += h.Bytes
			}
			res.History = append(res.History, mi)
		}
		if err := writeJSON(filepath.Join(plan.OutDir, "scheduler.json"), res); err != nil {
			return err
		}
	}
	return po.Finalize(0, true)
}

// scriptedMoves moves the first block of server plan.MoveFrom to another
// server and back, plan.Moves times, one every plan.MoveEvery, until ctx
// ends. Each move goes from the block's current owner (the balancer may
// have moved it too) to MoveFrom, or away from it when it is there.
func scriptedMoves(ctx context.Context, co *coord.Coordinator, po *postoffice.Postoffice, plan nodePlan, done *atomic.Int64) {
	m, _ := NewMLP(plan.Sizes)
	keys, _ := blockKeys(po.ServerKeyRanges(), m.NumParams(), plan.Blocks)
	home := int32(message.ServerRankToID(plan.MoveFrom))
	away := int32(message.ServerRankToID((plan.MoveFrom + 1) % po.NumServers()))
	key := keys[plan.Blocks*plan.MoveFrom/po.NumServers()] // blockKeys puts this block first on MoveFrom
	for i := range plan.Moves {
		select {
		case <-ctx.Done():
			return
		case <-time.After(plan.MoveEvery):
		}
		// The balancer may move the block between the look-up and the
		// move: then look again, once.
		var err error
		for range 2 {
			to := home
			r := co.Table().Current()
			if j := r.Find(key); j >= 0 && r.Intervals[j].Node == home {
				to = away
			}
			if _, err = co.Move(key, key+1, to); err == nil {
				done.Add(1)
				break
			}
		}
		if err != nil {
			po.Logger().Warn("train: scripted move failed", "move", i+1, "key", key, "err", err)
		}
	}
}

// runServer runs paramstore's SGD with the mean of the workers' gradients,
// and writes its counters at the end.
func runServer(po *postoffice.Postoffice, plan nodePlan) error {
	en, err := elastic.Open(po)
	if err != nil {
		return err
	}
	pc := paramstore.DefaultConfig()
	pc.Optimizer, pc.Aggregate, pc.LR = paramstore.SGD, paramstore.Mean, plan.LR
	pc.Workers = po.NumWorkers
	pc.Logger = po.Logger()
	store, err := paramstore.New(pc)
	if err != nil {
		return err
	}
	srv, err := en.NewServer(0, kv.ServerOptions{Handler: store.Handle, ReleaseRequests: true}, store)
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := po.StartWithBarrier(0); err != nil {
		return err
	}
	slow := plan.SlowGroup != "" && po.MyRank() == plan.SlowServer
	if slow { // its rank is known now, before training starts
		if err := (&CPUGroup{Dir: plan.SlowGroup}).Join(os.Getpid()); err != nil {
			return err
		}
	}
	if err := po.Finalize(0, true); err != nil {
		return err
	}
	st := po.Stats()
	res := serverResult{Rank: po.MyRank(), BytesRecv: st.BytesRecv.Load(), BytesSent: st.BytesSent.Load(), MsgsRecv: st.MsgsRecv.Load(),
		Slow: slow, Redirected: en.Redirected()}
	if ss, ok := any(srv).(syncStater); ok {
		s, parked := ss.SyncStats()
		res.Sync = &serverSync{Stats: s, ParkedNS: int64(parked)}
	}
	return writeJSON(filepath.Join(plan.OutDir, fmt.Sprintf("server-%d.json", res.Rank)), res)
}

// blockKeys cuts a flat vector of n parameters into blocks contiguous
// blocks of (nearly) equal length, the first blocks/S on server 0, the
// next on server 1 and so on, so that the keys ascend with the offsets
// and one push or pull moves the whole vector.
func blockKeys(ranges []routing.Range, n, blocks int) (keys []uint64, lens []int32) {
	s := len(ranges)
	for b := range blocks {
		srv := b * s / blocks
		first := (srv*blocks + s - 1) / s // the first block of server srv
		keys = append(keys, ranges[srv].Begin+uint64(b-first))
		lens = append(lens, int32(n*(b+1)/blocks-n*b/blocks))
	}
	return keys, lens
}

// worker is one worker's training state.
type worker struct {
	po   *postoffice.Postoffice
	w    *kv.Worker
	plan nodePlan
	rank int

	keys            []uint64
	lens, lensOut   []int32
	params, grad    []float32
	res             workerResult
	snapDir         string
	snapErr         chan error
	snaps           chan snapJob
	spare           chan []float32
	pushDur, pullDu time.Duration
}

type snapJob struct {
	s    snapshot
	vals []float32
}

func runWorker(ctx context.Context, po *postoffice.Postoffice, plan nodePlan) error {
	kw, err := nodeproc.StartWorker(po)
	if err != nil {
		return err
	}
	defer kw.Close()
	wk := &worker{po: po, w: kw, plan: plan, rank: po.MyRank()}
	wk.res.Rank = wk.rank
	if plan.CPUGroup != "" && wk.rank == plan.CPURank {
		g := &CPUGroup{Dir: plan.CPUGroup}
		if err := g.Join(os.Getpid()); err != nil {
			return err
		}
		wk.res.CPULimited = true
	}
	if err := wk.train(ctx); err != nil {
		return fmt.Errorf("worker %d: %w", wk.rank, err)
	}
	wk.res.Duplicates, wk.res.Redirects = kw.Dropped(), kw.Redirects()
	if err := writeJSON(filepath.Join(plan.OutDir, fmt.Sprintf("worker-%d.json", wk.rank)), wk.res); err != nil {
		return err
	}
	return po.Finalize(0, true)
}

func (wk *worker) wait(what string, ts int32, err error) error {
	if err == nil {
		err = wk.w.Wait(ts)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func (wk *worker) push(vals []float32) error {
	t := time.Now()
	ts, err := kv.Push(wk.w, wk.keys, vals, wk.lens, kv.Options{})
	err = wk.wait("push", ts, err)
	wk.pushDur += time.Since(t)
	return err
}

func (wk *worker) pull() error {
	t := time.Now()
	ts, err := kv.Pull(wk.w, wk.keys, &wk.params, &wk.lensOut, kv.Options{})
	err = wk.wait("pull", ts, err)
	wk.pullDu += time.Since(t)
	if err == nil {
		wk.res.Pulls++
	}
	return err
}

func (wk *worker) train(ctx context.Context) error {
	plan := wk.plan
	m, err := NewMLP(plan.Sizes)
	if err != nil {
		return err
	}
	data, err := LoadMNIST(plan.MNISTDir, true, plan.TrainLimit)
	if err != nil {
		return err
	}
	nw := wk.po.NumWorkers()
	shard := data.Slice(data.Len()*wk.rank/nw, data.Len()*(wk.rank+1)/nw)
	if shard.Len() < plan.Batch {
		return fmt.Errorf("its shard has %d samples, fewer than the batch of %d: use fewer workers, a smaller --batch or more samples", shard.Len(), plan.Batch)
	}
	n := m.NumParams()
	wk.keys, wk.lens = blockKeys(wk.po.ServerKeyRanges(), n, plan.Blocks)
	wk.params, wk.grad = make([]float32, n), make([]float32, n)

	// The first push of a key initialises it (paramstore), so rank 0
	// pushes the seeded initial weights; the others then push zeros, which
	// SGD leaves as they are, so that every worker starts having pushed
	// once (the servers' sync control counts a worker's pushes as its
	// iterations). Everyone pulls the weights, and training starts
	// together after a barrier.
	if wk.rank == 0 {
		m.Init(wk.params, plan.Seed)
		if err := wk.push(wk.params); err != nil {
			return fmt.Errorf("initial weights: %w", err)
		}
	}
	if err := wk.po.Barrier(0, message.WorkerGroup); err != nil {
		return err
	}
	if wk.rank != 0 {
		if err := wk.push(wk.grad); err != nil {
			return fmt.Errorf("initial push: %w", err)
		}
	}
	if err := wk.pull(); err != nil {
		return fmt.Errorf("initial weights: %w", err)
	}
	if wk.rank == plan.EvalRank && plan.EvalEvery > 0 {
		if err := wk.startSnapshots(); err != nil {
			return err
		}
	}
	if err := wk.po.Barrier(0, trainGroup); err != nil {
		return err
	}
	wk.pushDur, wk.pullDu = 0, 0

	ws := m.NewWorkspace(plan.Batch)
	bx := make([]float32, plan.Batch*ImageSize)
	by := make([]uint8, plan.Batch)
	r := rand.New(rand.NewPCG(plan.Seed, uint64(wk.rank)+1))
	order := r.Perm(shard.Len())
	pos := 0
	var sleep time.Duration
	recent := make([]float64, 0, 20)
	t0 := time.Now()
	wk.res.T0 = t0.UnixNano()
	lastLine, lastIt := t0, 0
	wk.snapshot(0, 0) // the initial weights
	for it := 1; it <= plan.Iterations; it++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for s := range plan.Batch {
			if pos == len(order) {
				r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				pos = 0
			}
			i := order[pos]
			pos++
			copy(bx[s*ImageSize:(s+1)*ImageSize], shard.Row(i))
			by[s] = shard.Y[i]
		}
		loss := ws.Step(wk.params, wk.grad, bx, by, plan.Batch)
		if len(recent) == cap(recent) {
			recent = recent[1:]
		}
		recent = append(recent, loss)
		if err := wk.push(wk.grad); err != nil {
			return fmt.Errorf("iteration %d: %w", it, err)
		}
		if err := wk.pull(); err != nil {
			return fmt.Errorf("iteration %d: %w", it, err)
		}
		if d := plan.Straggle.Delay(wk.rank, r); d > 0 {
			time.Sleep(d)
			sleep += d
		}
		now := time.Now()
		if plan.EvalEvery > 0 && it%plan.EvalEvery == 0 && it < plan.Iterations { // the last one comes after the end barrier
			wk.snapshot(it, now.Sub(t0))
		}
		if now.Sub(lastLine) >= plan.Progress || it == plan.Iterations {
			fmt.Printf("iteration %5d/%d  loss %.4f  %5.1f it/s\n", it, plan.Iterations, mean(recent),
				float64(it-lastIt)/now.Sub(lastLine).Seconds())
			lastLine, lastIt = now, it
		}
	}
	wk.res.TrainS = time.Since(t0).Seconds()
	wk.res.Iterations = plan.Iterations
	wk.res.Loss = mean(recent)
	wk.res.PushS, wk.res.PullS, wk.res.SleepS = wk.pushDur.Seconds(), wk.pullDu.Seconds(), sleep.Seconds()
	if err := wk.po.Barrier(0, trainGroup); err != nil {
		return err
	}
	wk.res.EndS = time.Since(t0).Seconds()
	if wk.snaps != nil {
		// Every worker has finished: the weights now are the final ones.
		if err := wk.pull(); err != nil {
			return fmt.Errorf("final weights: %w", err)
		}
		wk.snapshot(plan.Iterations, time.Duration(wk.res.EndS*float64(time.Second)))
		close(wk.snaps)
		if err := <-wk.snapErr; err != nil {
			return err
		}
	}
	return nil
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(max(1, len(xs)))
}

// startSnapshots starts the goroutine that writes the evaluating worker's
// snapshots: copying the weights is all the training loop does (a few
// milliseconds for 4 MB); the file is written beside it. Two buffers
// circulate, so a slow disk holds training back instead of filling memory.
func (wk *worker) startSnapshots() error {
	wk.snapDir = filepath.Join(wk.plan.OutDir, "snapshots")
	if err := os.MkdirAll(wk.snapDir, 0o755); err != nil {
		return err
	}
	wk.snaps = make(chan snapJob, 2)
	wk.spare = make(chan []float32, 2)
	wk.spare <- make([]float32, len(wk.params))
	wk.spare <- make([]float32, len(wk.params))
	wk.snapErr = make(chan error, 1)
	go func() {
		var first error
		for j := range wk.snaps {
			if first == nil {
				first = writeFloats(filepath.Join(wk.snapDir, j.s.File), j.vals)
			}
			wk.spare <- j.vals
		}
		wk.snapErr <- first
	}()
	return nil
}

func (wk *worker) snapshot(it int, at time.Duration) {
	if wk.snaps == nil {
		return
	}
	buf := <-wk.spare
	copy(buf, wk.params)
	s := snapshot{Iteration: it, Seconds: at.Seconds(), File: fmt.Sprintf("snap-%06d-%d.f32", it, len(wk.res.Snapshots))}
	wk.res.Snapshots = append(wk.res.Snapshots, s)
	wk.snaps <- snapJob{s: s, vals: buf}
}

// writeFloats writes vals little-endian.
func writeFloats(path string, vals []float32) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	var b [4]byte
	for _, v := range vals {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		if _, err := bw.Write(b[:]); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// readFloats reads a file of writeFloats into vals, which must have its
// length.
func readFloats(path string, vals []float32) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(b) != 4*len(vals) {
		return fmt.Errorf("snapshot %s has %d bytes, want %d", path, len(b), 4*len(vals))
	}
	for i := range vals {
		vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

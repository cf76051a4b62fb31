package e2e

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// runNode is the worker side of the process tests.
func runNode(kind string) error {
	cfg, err := postoffice.ConfigFromEnv(postoffice.OSEnv)
	if err != nil {
		return err
	}
	po, err := postoffice.Open(cfg)
	if err != nil {
		return err
	}
	defer po.Stop()
	switch kind {
	case "connection":
		if err := po.StartWithBarrier(0); err != nil {
			return err
		}
		fmt.Printf("rank %d id %d of %d workers / %d servers\n", po.MyRank(), po.MyNode().ID, po.NumWorkers(), po.NumServers())
		return po.Finalize(0, true)
	case "kv":
		return kvNode(po)
	case "bsp":
		return bspNode(po)
	case "two-customers":
		return twoCustomers(po)
	case "faults":
		return faultWorker(po)
	case "elastic":
		return elasticWorker(po)
	case "replicated":
		return replicatedWorker(po)
	case "snapshot-push":
		return snapshotPusher(po)
	case "snapshot-pull":
		return snapshotPuller(po)
	case "chaos":
		return chaosWorker(po)
	case "chaos-bsp":
		return chaosBSPWorker(po)
	}
	return fmt.Errorf("unknown node kind %q", kind)
}

// kvNode pushes rounds of integer-valued floats to keys on every server,
// then checks the pulled sums exactly (every worker pushed the same).
func kvNode(po *postoffice.Postoffice) error {
	return withStartedWorker(po, kvRounds)
}

// withStartedWorker runs f with a KV worker of po (app 0, customer 0)
// after ps::Start's barrier.
func withStartedWorker(po *postoffice.Postoffice, f func(*postoffice.Postoffice, *kv.Worker) error) error {
	w, err := kv.NewWorker(po, 0, 0)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := po.StartWithBarrier(0); err != nil {
		return err
	}
	return f(po, w)
}

func kvRounds(po *postoffice.Postoffice, w *kv.Worker) error {
	const rounds = 20
	var keys []uint64
	var vals []float32
	for s, r := range po.ServerKeyRanges() {
		for i := range 5 {
			keys = append(keys, r.Begin+uint64(i*7))
			vals = append(vals, float32(s*100+i+1))
		}
	}
	var pending []int32
	for range rounds {
		ts, err := kv.Push(w, keys, vals, nil, kv.Options{})
		if err != nil {
			return err
		}
		pending = append(pending, ts)
	}
	for _, ts := range pending {
		if err := w.Wait(ts); err != nil {
			return err
		}
	}
	if err := po.Barrier(0, message.WorkerGroup); err != nil {
		return err
	}
	var got []float32
	ts, err := kv.Pull(w, keys, &got, nil, kv.Options{})
	if err == nil {
		err = w.Wait(ts)
	}
	if err != nil {
		return err
	}
	for i, v := range vals {
		want := v * rounds * float32(po.NumWorkers())
		if got[i] != want {
			return fmt.Errorf("key %d: pulled %v, want %v", keys[i], got[i], want)
		}
	}
	fmt.Printf("KV OK rank %d: %d keys on %d servers\n", po.MyRank(), len(keys), po.NumServers())
	return po.Finalize(0, true)
}

// bspNode runs rounds of push then pull (MXNet's dist_async order, no
// barrier) against servers that synchronize by PS_SYNC_MODE=bsp alone, and
// checks every pull exactly: the sum of rounds 1..t of every worker, where
// worker w pushes (w+1)*100 + t*10 + i to its i-th key in round t.
func bspNode(po *postoffice.Postoffice) error {
	return withStartedWorker(po, bspRounds)
}

func bspRounds(po *postoffice.Postoffice, w *kv.Worker) error {
	const rounds = 25
	var keys []uint64
	for _, r := range po.ServerKeyRanges() {
		keys = append(keys, r.Begin, r.Begin+3)
	}
	val := func(w, t, i int) float32 { return float32((w+1)*100 + t*10 + i) }
	var pushes []int32
	for t := 1; t <= rounds; t++ {
		vals := make([]float32, len(keys))
		for i := range vals {
			vals[i] = val(po.MyRank(), t, i)
		}
		ts, err := kv.Push(w, keys, vals, nil, kv.Options{})
		if err != nil {
			return err
		}
		pushes = append(pushes, ts)
		var got []float32
		if ts, err = kv.Pull(w, keys, &got, nil, kv.Options{}); err == nil {
			err = w.Wait(ts)
		}
		if err != nil {
			return fmt.Errorf("round %d: %w", t, err)
		}
		for i := range keys {
			var want float32
			for r := 1; r <= t; r++ {
				for v := range po.NumWorkers() {
					want += val(v, r, i)
				}
			}
			if got[i] != want {
				return fmt.Errorf("round %d key %d: pulled %v, want exactly %v", t, keys[i], got[i], want)
			}
		}
	}
	for _, ts := range pushes {
		if err := w.Wait(ts); err != nil {
			return err
		}
	}
	fmt.Printf("BSP OK rank %d: %d rounds\n", po.MyRank(), rounds)
	return po.Finalize(0, true)
}

// twoCustomers is ps-lite's test_kv_app_multi_workers: one worker process,
// two customers started from two goroutines, each with its own KV worker.
func twoCustomers(po *postoffice.Postoffice) error {
	errs := make(chan error, 2)
	for cid := range 2 {
		go func() {
			errs <- func() error {
				w, err := kv.NewWorker(po, 0, cid)
				if err != nil {
					return err
				}
				defer w.Close()
				if err := po.StartWithBarrier(cid); err != nil {
					return err
				}
				keys := []uint64{uint64(10 + cid)}
				if signal := os.Getenv("E2E_SIGNAL_FILE"); signal != "" {
					return pushUntil(po, w, cid, keys, signal)
				}
				ts, err := kv.Push(w, keys, []float32{float32(cid + 1)}, nil, kv.Options{})
				if err == nil {
					err = w.Wait(ts)
				}
				if err != nil {
					return err
				}
				var got []float32
				ts, err = kv.PushPull(w, keys, []float32{float32(cid + 1)}, &got, nil, kv.Options{})
				if err == nil {
					err = w.Wait(ts)
				}
				if err != nil {
					return err
				}
				if !slices.Equal(got, []float32{float32(2 * (cid + 1))}) {
					return fmt.Errorf("customer %d pulled %v", cid, got)
				}
				fmt.Printf("customer %d OK\n", cid)
				return po.Barrier(cid, message.AllGroup)
			}()
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			return err
		}
	}
	return po.Finalize(0, false)
}

// pushUntil is customer cid of a two-customer worker process with
// E2E_SIGNAL_FILE set: it pushes cid+1 to keys until the signal file
// appears (the test restarts the scheduler meanwhile), then, after a
// barrier of both customers, checks that the pulled sum is exact and
// meets the job's last barrier.
func pushUntil(po *postoffice.Postoffice, w *kv.Worker, cid int, keys []uint64, signal string) error {
	do := waited(w)
	rounds := 0
	last := time.Now()
	for deadline := time.Now().Add(60 * time.Second); ; rounds++ {
		if _, err := os.Stat(signal); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("no signal within 60s")
		}
		if err := do(kv.Push(w, keys, []float32{float32(cid + 1)}, nil, kv.Options{})); err != nil {
			return fmt.Errorf("customer %d, push %d: %w", cid, rounds, err)
		}
		if time.Since(last) >= 50*time.Millisecond {
			fmt.Printf("customer %d rounds=%d\n", cid, rounds)
			last = time.Now()
		}
	}
	if err := po.Barrier(cid, message.WorkerGroup); err != nil {
		return err
	}
	var got []float32
	if err := do(kv.Pull(w, keys, &got, nil, kv.Options{})); err != nil {
		return err
	}
	if want := float32((cid + 1) * rounds); !slices.Equal(got, []float32{want}) {
		return fmt.Errorf("customer %d pulled %v after %d rounds, want %v", cid, got, rounds, want)
	}
	fmt.Printf("customer %d OK after %d rounds\n", cid, rounds)
	return po.Barrier(cid, message.AllGroup)
}

// faultWorker pushes to every server until an operation fails (the test
// kills a server meanwhile) and prints the error. With E2E_SIGNAL_FILE set
// it then waits for the test's signal that a restarted process took the
// dead server's id and pulls again, which must fail too: the range is
// lost. Last it finalizes and prints Finalize's error, which it returns
// (the process exits non-zero: the job lost a server).
func faultWorker(po *postoffice.Postoffice) error {
	w, do, err := startedWorker(po)
	if err != nil {
		return err
	}
	defer w.Close()
	var keys []uint64
	for _, r := range po.ServerKeyRanges() {
		keys = append(keys, r.Begin+1)
	}
	ones := slices.Repeat([]float32{1}, len(keys))
	fmt.Println("fault worker pushing")
	var opErr error
	for deadline := time.Now().Add(60 * time.Second); opErr == nil; {
		if time.Now().After(deadline) {
			return errors.New("no operation failed within 60s")
		}
		opErr = do(kv.Push(w, keys, ones, nil, kv.Options{}))
	}
	fmt.Printf("operation failed: %v\n", opErr)
	if signal := os.Getenv("E2E_SIGNAL_FILE"); signal != "" {
		if !testutil.Until(60*time.Second, func() bool { _, err := os.Stat(signal); return err == nil }) {
			return errors.New("no recovery signal within 60s")
		}
		var got []float32
		err := do(kv.Pull(w, keys, &got, nil, kv.Options{}))
		fmt.Printf("pull after the restart: %v %v\n", got, err)
	}
	err = po.Finalize(0, true)
	fmt.Printf("finalize: %v\n", err)
	if err == nil {
		return errors.New("finalize reported no failure")
	}
	return err
}

// elasticWorker pushes rounds to keys of its own (by rank) in every server
// range until the test's signal file appears (the test drains a server,
// or kills the scheduler, meanwhile), printing its progress every 50 ms,
// then checks the sums exactly and finalizes.
func elasticWorker(po *postoffice.Postoffice) error {
	w, do, err := startedWorker(po)
	if err != nil {
		return err
	}
	defer w.Close()
	var keys []uint64
	var vals []float32
	for s, r := range po.ServerKeyRanges() {
		for i := range 4 {
			keys = append(keys, r.Begin+uint64(po.MyRank()*4+i))
			vals = append(vals, float32(s*10+i+1))
		}
	}
	signal := os.Getenv("E2E_SIGNAL_FILE")
	rounds := 0
	last := time.Now()
	fmt.Println("elastic worker pushing")
	for deadline := time.Now().Add(60 * time.Second); ; rounds++ {
		if _, err := os.Stat(signal); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("no signal within 60s")
		}
		if err := do(kv.Push(w, keys, vals, nil, kv.Options{})); err != nil {
			return fmt.Errorf("push of round %d: %w", rounds, err)
		}
		if time.Since(last) >= 50*time.Millisecond {
			fmt.Printf("rounds=%d\n", rounds)
			last = time.Now()
		}
	}
	var got []float32
	if err := do(kv.Pull(w, keys, &got, nil, kv.Options{})); err != nil {
		return err
	}
	for i, v := range vals {
		if got[i] != v*float32(rounds) {
			return fmt.Errorf("key %d: pulled %v after %d rounds, want %v", keys[i], got[i], rounds, v*float32(rounds))
		}
	}
	fmt.Printf("elastic OK after %d rounds, %d redirects\n", rounds, w.Redirects())
	return po.Finalize(0, true)
}

// replicatedWorker pushes rounds, a few outstanding at a time, until the
// test's signal file appears (the test kills a server meanwhile): every
// push must be acknowledged. Each round adds vals to keys shared by the
// workers and 1 to a key of this worker's own in each server range; after
// a barrier, its own keys must hold its rounds exactly and the shared
// keys vals times every worker's rounds.
func replicatedWorker(po *postoffice.Postoffice) error {
	w, do, err := startedWorker(po)
	if err != nil {
		return err
	}
	defer w.Close()
	keys, all, vals := replicaKeys(po)
	signal := os.Getenv("E2E_SIGNAL_FILE")
	rounds, resentAt := 0, -1
	var pending []int32
	fmt.Println("replicated worker pushing")
	for deadline := time.Now().Add(60 * time.Second); ; rounds++ {
		if rounds == 200 {
			fmt.Println("pushed 200 rounds")
		}
		if resentAt < 0 && w.Redirects() > 0 {
			resentAt = rounds
			fmt.Printf("re-sent %d spans after the failover\n", w.Redirects())
		}
		if resentAt >= 0 && rounds == resentAt+200 {
			fmt.Println("pushed 200 rounds after the failover")
		}
		if _, err := os.Stat(signal); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("no signal within 60s")
		}
		ts, err := kv.Push(w, keys, vals, nil, kv.Options{})
		if err != nil {
			return fmt.Errorf("push %d: %w", rounds, err)
		}
		if pending = append(pending, ts); len(pending) == 4 {
			if err := do(pending[0], nil); err != nil {
				return fmt.Errorf("push %d: %w", rounds, err)
			}
			pending = pending[1:]
		}
	}
	for _, ts := range pending {
		if err := do(ts, nil); err != nil {
			return err
		}
	}
	fmt.Printf("pushed %d rounds\n", rounds)
	if err := po.Barrier(0, message.WorkerGroup); err != nil {
		return err
	}
	var got []float32
	if err := do(kv.Pull(w, all, &got, nil, kv.Options{})); err != nil {
		return err
	}
	if err := checkReplicaSums(po, got, vals, float32(rounds)); err != nil {
		return err
	}
	fmt.Printf("replicated OK after %d rounds, %d re-sent\n", rounds, w.Redirects())
	return po.Finalize(0, true) // the failover lost nothing: no lost node
}

// startedWorker creates app 0's KV worker, starts the node (ps::Start, with
// its barrier) and returns the worker with a function that waits for an
// operation: do(kv.Push(...)).
func startedWorker(po *postoffice.Postoffice) (*kv.Worker, func(int32, error) error, error) {
	en, err := elastic.Open(po)
	if err != nil {
		return nil, nil, err
	}
	w, err := en.NewWorker(0, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := po.StartWithBarrier(0); err != nil {
		w.Close()
		return nil, nil, err
	}
	return w, waited(w), nil
}

// waited returns do for w: do(w.Push(...)) waits for the operation it
// started, or returns the error that kept it from starting.
func waited(w *kv.Worker) func(int32, error) error {
	return func(ts int32, err error) error {
		if err != nil {
			return err
		}
		return w.Wait(ts)
	}
}

// chaosWorker pushes rounds, a few outstanding at a time, until the test's
// signal file appears (the test kills servers meanwhile). Round t adds
// c = t%3+1 to a key of this worker's own in each server range and
// c times a fixed value to two keys shared by the workers, so a push
// applied twice or lost shows in the sums. It records the acknowledged
// pushes: after a barrier, its own keys must hold the sum of their c
// exactly and the shared keys their value times every worker's sum. Any
// push that fails is an error: with one server death at a time none may.
func chaosWorker(po *postoffice.Postoffice) error {
	w, do, err := startedWorker(po)
	if err != nil {
		return err
	}
	defer w.Close()
	keys, all, base := replicaKeys(po)
	signal := os.Getenv("E2E_SIGNAL_FILE")
	type push struct {
		ts int32
		c  float32
	}
	var pending []push
	var acked float32 // the sum of c over the acknowledged pushes
	rounds := 0
	ack := func(p push) error {
		if err := do(p.ts, nil); err != nil {
			return fmt.Errorf("push with timestamp %d failed after %d acknowledged: %w", p.ts, rounds-len(pending), err)
		}
		acked += p.c
		return nil
	}
	fmt.Println("chaos worker pushing")
	for deadline := time.Now().Add(45 * time.Second); ; rounds++ {
		if rounds%100 == 0 {
			fmt.Printf("chaos pushed %d rounds\n", rounds)
		}
		if _, err := os.Stat(signal); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("no signal within 45s")
		}
		c := float32(rounds%3 + 1)
		vals := scaled(base, c)
		ts, err := kv.Push(w, keys, vals, nil, kv.Options{})
		if err != nil {
			return fmt.Errorf("push %d: %w", rounds, err)
		}
		if pending = append(pending, push{ts, c}); len(pending) == 4 {
			if err := ack(pending[0]); err != nil {
				return err
			}
			pending = pending[1:]
		}
	}
	for len(pending) > 0 {
		if err := ack(pending[0]); err != nil {
			return err
		}
		pending = pending[1:]
	}
	fmt.Printf("chaos pushed %d rounds, all acknowledged (sum %v)\n", rounds, acked)
	if err := po.Barrier(0, message.WorkerGroup); err != nil {
		return err
	}
	var got []float32
	if err := do(kv.Pull(w, all, &got, nil, kv.Options{})); err != nil {
		return err
	}
	if err := checkReplicaSums(po, got, base, acked); err != nil {
		return err
	}
	fmt.Printf("chaos OK after %d rounds, %d re-sent\n", rounds, w.Redirects())
	return finalizeChaos(po)
}

// replicaKeys are the keys of the replicated workers: two shared by the
// workers and one of this worker's own in each server range (keys), with
// their base values, and every worker's (all) for the final pull.
func replicaKeys(po *postoffice.Postoffice) (keys, all []uint64, base []float32) {
	for s, r := range po.ServerKeyRanges() {
		keys = append(keys, r.Begin, r.Begin+1, r.Begin+10+uint64(po.MyRank()))
		base = append(base, float32(s*10+1), float32(s*10+2), 1)
		all = append(all, r.Begin, r.Begin+1)
		for i := range po.NumWorkers() {
			all = append(all, r.Begin+10+uint64(i))
		}
	}
	return keys, all, base
}

// checkReplicaSums checks the pull of replicaKeys' all exactly: this
// worker's own keys hold mine (its acknowledged pushes' sum), the shared
// keys their base value times every worker's sum.
func checkReplicaSums(po *postoffice.Postoffice, got, base []float32, mine float32) error {
	per := 2 + po.NumWorkers()
	for s := range po.NumServers() {
		row := got[s*per : (s+1)*per]
		if v := row[2+po.MyRank()]; v != mine {
			return fmt.Errorf("server range %d: this worker's key holds %v, but its acknowledged pushes add up to %v", s, v, mine)
		}
		var total float32
		for _, c := range row[2:] {
			total += c
		}
		for i, b := range base[3*s : 3*s+2] {
			if row[i] != b*total {
				return fmt.Errorf("server range %d, key %d: pulled %v, want exactly %v (%v times every worker's acknowledged sum %v)", s, i, row[i], b*total, b, total)
			}
		}
	}
	return nil
}

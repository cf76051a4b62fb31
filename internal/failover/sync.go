package failover

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/elasticps/elasticps/internal/cli"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/postoffice"
)

// The synchronous cells: a job of Config.SyncWorkers workers with
// PS_SYNC_MODE=bsp, each pushing Size bytes per round (one key per server
// range) and pulling them back once every worker pushed, with k=0 and k=1.
// Under BSP a replicated primary ships each interval's state to its
// backups once per round instead of forwarding every worker's push, so
// the cost of k=1 falls as workers are added.

// syncRounds is a worker's part of a synchronous cell: rounds of a push
// and a pull of the same keys. Every worker must
// push the same rounds (a BSP pull waits for every worker's push), so
// rank 0 decides when to stop: once Duration has passed it pushes 1 to a
// control key, and every worker stops after the round whose pull shows it.
func syncRounds(po *postoffice.Postoffice, w *kv.Worker, p plan) error {
	ranges := po.ServerKeyRanges()
	per := max(p.Size/4/len(ranges), 1)
	var keys []uint64
	var lens []int32
	for i, r := range ranges {
		keys, lens = append(keys, r.Begin+1), append(lens, int32(per))
		if i == 0 {
			keys, lens = append(keys, r.Begin+2), append(lens, 1) // the control key
		}
	}
	vals := make([]float32, per*len(ranges)+1)
	for i := range vals {
		vals[i] = 1
	}
	ctl := per // index of the control value
	var res rate
	fmt.Println(readyTag)
	begin := time.Now()
	for {
		vals[ctl] = 0
		if po.MyRank() == 0 && time.Since(begin) >= p.Duration {
			vals[ctl] = 1
		}
		// The pull goes out with the push, as ps-lite programs do (ZPush,
		// ZPull, Wait): under BSP it is answered when the round closes;
		// the push's acknowledgement (after the backups got the round's
		// state) is waited for before the next round.
		push, err := kv.Push(w, keys, vals, lens, kv.Options{})
		var got []float32
		var pull int32
		if err == nil {
			pull, err = kv.Pull(w, keys, &got, nil, kv.Options{})
		}
		if err == nil {
			err = w.Wait(pull)
		}
		if err == nil {
			err = w.Wait(push)
		}
		if err != nil {
			return err
		}
		res.Ops++
		res.Bytes += int64(per * len(ranges) * 4)
		if len(got) > ctl && got[ctl] > 0 {
			break
		}
	}
	res.ElapsedNS = int64(time.Since(begin))
	line, _ := json.Marshal(res)
	fmt.Printf("%s%s\n", rateTag, line)
	return po.Finalize(0, true)
}

// measureSyncThroughput is one synchronous cell: the push goodput of all
// workers together, in MB/s.
func measureSyncThroughput(ctx context.Context, exe string, o Config, k, size int) (float64, error) {
	j, err := newJob(exe, k)
	if err != nil {
		return 0, err
	}
	defer j.stop()
	for i, e := range j.env {
		if strings.HasPrefix(e, "DMLC_NUM_WORKER=") {
			j.env[i] = fmt.Sprintf("DMLC_NUM_WORKER=%d", o.SyncWorkers)
		}
	}
	j.env = append(j.env, "PS_SYNC_MODE=bsp")
	planJSON, _ := json.Marshal(plan{Size: size, Depth: 1, Duration: o.Duration, Sync: true})
	sched, err := j.start("scheduler", []string{"DMLC_ROLE=scheduler"}, "scheduler")
	for i := 0; err == nil && i < servers; i++ {
		_, err = j.start(fmt.Sprintf("server%d", i), []string{"DMLC_ROLE=server"}, "server")
	}
	for i := 0; err == nil && i < o.SyncWorkers; i++ {
		_, err = j.start(fmt.Sprintf("worker%d", i), []string{"DMLC_ROLE=worker", planEnv + "=" + string(planJSON)}, "bench", NodeArg)
	}
	var total rate
	for i := 0; err == nil && i < o.SyncWorkers; i++ {
		var l string
		if l, err = j.line(ctx, rateTag, o.Duration+time.Minute); err != nil {
			break
		}
		var r rate
		if err = json.Unmarshal([]byte(l), &r); err != nil || r.ElapsedNS <= 0 {
			err = fmt.Errorf("unreadable worker result %q", l)
			break
		}
		total.Bytes += r.Bytes
		total.ElapsedNS = max(total.ElapsedNS, r.ElapsedNS)
	}
	if err != nil {
		tail := ""
		if sched != nil {
			tail = cli.LastLines(sched.output(), 10)
		}
		return 0, fmt.Errorf("%w; scheduler's last lines:\n%s\nlogs in %s", err, tail, j.saveLogs())
	}
	return float64(total.Bytes) / (float64(total.ElapsedNS) / 1e9) / 1e6, nil
}

// syncCells measures the synchronous cells of one size: k=0, then k=1.
func syncCells(ctx context.Context, exe string, o Config, size int, prog *cli.Progress) ([]Throughput, error) {
	var out []Throughput
	var k0 float64
	for k := range 2 {
		prog.Finished(fmt.Sprintf("throughput: bsp, %d workers, k=%d, %s pushes, %v ...", o.SyncWorkers, k, sizeLabel(size), o.Duration))
		mbps, err := measureSyncThroughput(ctx, exe, o, k, size)
		if err != nil {
			return nil, fmt.Errorf("bench failover: bsp throughput k=%d size %d: %w", k, size, err)
		}
		if k == 0 {
			k0 = mbps
		}
		out = append(out, Throughput{Mode: "bsp", Workers: o.SyncWorkers, Replicas: k, Size: size, MBps: mbps, VsK0: mbps / k0})
	}
	return out, nil
}

func printSyncCells(tw io.Writer, r Result, o Config) {
	first := true
	for _, t := range r.Throughput {
		if t.Mode != "bsp" {
			continue
		}
		if first {
			fmt.Fprintf(tw, "\t\t\t\t\t\n")
			fmt.Fprintf(tw, "push throughput, PS_SYNC_MODE=bsp (%d workers, push+pull rounds, %v per cell)\tsize\tk\tMB/s\tvs k=0\t\n", t.Workers, o.Duration)
			first = false
		}
		fmt.Fprintf(tw, "\t%s\t%d\t%s\t%s\t\n", sizeLabel(t.Size), t.Replicas, cli.FormatNum(t.MBps), cli.FormatNum(t.VsK0))
	}
}

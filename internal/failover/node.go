package failover

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/internal/nodeproc"
	"github.com/elasticps/elasticps/kv"
)

// The bench's worker process is `<this executable> bench failover-node`,
// its plan in planEnv. It prints result lines to stdout: gapTag when an
// operation took longer than gapThreshold (a failover: the time its
// acknowledgement came), rateTag once at the end of a throughput run.
const (
	NodeArg      = "failover-node"
	planEnv      = "ELASTICPS_FAILOVER_PLAN"
	gapTag       = "ELASTICPS_FAILOVER_GAP "
	rateTag      = "ELASTICPS_FAILOVER_RATE "
	readyTag     = "ELASTICPS_FAILOVER_PUSHING"
	gapThreshold = 100 * time.Millisecond
)

// plan is what the worker does: push Size bytes (float32, one key per
// server range) with Depth operations in flight, for Duration or, when
// StopFile is set, until that file exists.
type plan struct {
	Size     int           `json:"size"`
	Depth    int           `json:"depth"`
	Duration time.Duration `json:"duration"`
	StopFile string        `json:"stop_file,omitempty"`
	// Sync: BSP rounds (push, wait, pull, wait) with every worker of
	// the job, until rank 0 says stop (sync.go).
	Sync bool `json:"sync,omitempty"`
}

// rate is a throughput run's result.
type rate struct {
	Bytes     int64 `json:"bytes"`
	Ops       int64 `json:"ops"`
	ElapsedNS int64 `json:"elapsed_ns"`
}

// RunNode is the worker process of 'elasticps bench failover'.
func RunNode(ctx context.Context) error {
	var p plan
	if err := nodeproc.ReadPlan(planEnv, NodeArg, "elasticps bench failover", &p); err != nil {
		return err
	}
	cfg, err := nodeproc.Config("worker")
	if err != nil {
		return err
	}
	po, release, err := nodeproc.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer release()
	en, err := elastic.Open(po)
	if err != nil {
		return err
	}
	w, err := en.NewWorker(0, 0)
	if err != nil {
		return err
	}
	defer w.Close()
	if err := po.StartWithBarrier(0); err != nil {
		return err
	}
	if p.Sync {
		return syncRounds(po, w, p)
	}
	ranges := po.ServerKeyRanges()
	keys := make([]uint64, len(ranges))
	lens := make([]int32, len(ranges))
	per := max(p.Size/4/len(ranges), 1)
	for i, r := range ranges {
		keys[i], lens[i] = r.Begin+1, int32(per)
	}
	vals := make([]float32, per*len(ranges))
	for i := range vals {
		vals[i] = 1
	}
	type op struct {
		ts    int32
		start time.Time
	}
	var inflight []op
	var res rate
	wait := func() error {
		o := inflight[0]
		inflight = inflight[1:]
		if err := w.Wait(o.ts); err != nil {
			return err
		}
		now := time.Now()
		if d := now.Sub(o.start); d > gapThreshold && p.StopFile != "" {
			fmt.Printf("%s%d %d\n", gapTag, o.start.UnixNano(), now.UnixNano())
		}
		res.Ops++
		res.Bytes += int64(len(vals) * 4)
		return nil
	}
	fmt.Println(readyTag)
	begin := time.Now()
	for i := 0; ; i++ {
		if p.StopFile != "" {
			if i%16 == 0 {
				if _, err := os.Stat(p.StopFile); err == nil {
					break
				}
			}
		} else if time.Since(begin) >= p.Duration {
			break
		}
		ts, err := kv.Push(w, keys, vals, lens, kv.Options{})
		if err != nil {
			return err
		}
		if inflight = append(inflight, op{ts, time.Now()}); len(inflight) >= p.Depth {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	for len(inflight) > 0 {
		if err := wait(); err != nil {
			return err
		}
	}
	res.ElapsedNS = int64(time.Since(begin))
	line, _ := json.Marshal(res)
	fmt.Printf("%s%s\n", rateTag, line)
	return po.Finalize(0, true)
}

package coord

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/rebalance"
	"github.com/elasticps/elasticps/routing"
)

// Balancer closes the PSLD loop on the scheduler: it gathers the servers'
// and workers' load reports, asks the rebalance planner for a plan every
// interval, and carries the plan's moves out through the Coordinator.
type Balancer struct {
	c        *Coordinator
	planner  *rebalance.Planner
	interval time.Duration

	mu      sync.Mutex
	est     map[int32]*rebalance.Estimator
	servers map[int32]*elastic.LoadReport // latest per server
	workers map[int32]*elastic.WorkerReport
	latest  map[int32]seenReport // latest per server, kept across steps (for Status)
	blocks  map[uint64]blockSize // every block seen, by its first key (for Status)
	plan    *PlanStatus          // latest plan that decided something
	trace   []TracePoint
	start   time.Time
}

// blockSize is a block's end and its largest payload per request seen.
type blockSize struct {
	end   uint64
	bytes int64
}

// seenReport is a server's load report and when it arrived.
type seenReport struct {
	r  *elastic.LoadReport
	at time.Time
}

// TracePoint is one interval of the balancer's record, for plots and
// status: each server's measured busy fraction and bytes/s, and the moves
// carried out after it.
type TracePoint struct {
	At      time.Duration // since the balancer started
	Busy    map[int32]float64
	Rate    map[int32]float64 // payload bytes/s handled
	RTT     time.Duration     // workers' mean operation round trip
	Plan    string            // plan kind and reason, when it moved something
	Moves   []rebalance.Move
	MovedOK int
}

// NewBalancer connects a planner to c; every interval it plans once.
func NewBalancer(c *Coordinator, cfg rebalance.Config, interval time.Duration) (*Balancer, error) {
	p, err := rebalance.NewPlanner(cfg)
	if err != nil {
		return nil, err
	}
	b := &Balancer{c: c, planner: p, interval: interval, est: map[int32]*rebalance.Estimator{},
		servers: map[int32]*elastic.LoadReport{}, workers: map[int32]*elastic.WorkerReport{},
		latest: map[int32]seenReport{}, blocks: map[uint64]blockSize{}, start: time.Now()}
	c.OnLoadReport(b.report)
	c.mu.Lock()
	c.bal = b
	c.mu.Unlock()
	return b, nil
}

// report receives a load report (from the link's goroutine; must not block).
func (b *Balancer) report(from int32, body []byte) {
	srv, wrk, err := elastic.ParseReport(body)
	if err != nil {
		b.c.log.Warn("balancer: bad load report", "from", from, "err", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if srv != nil {
		b.servers[from] = srv
		b.latest[from] = seenReport{r: srv, at: time.Now()}
		for _, k := range srv.Blocks {
			if k.Requests > 0 {
				bs := b.blocks[k.Begin]
				b.blocks[k.Begin] = blockSize{end: k.End, bytes: max(bs.bytes, k.Bytes/k.Requests)}
			}
		}
		e := b.est[from]
		if e == nil {
			e, _ = rebalance.NewEstimator(rebalance.DefaultEstimatorConfig())
			b.est[from] = e
		}
		var bytes, reqs float64
		for _, k := range srv.Blocks {
			bytes += float64(k.Bytes)
			reqs += float64(k.Requests)
		}
		e.Add(rebalance.Sample{At: time.Now(), Bytes: bytes, Requests: reqs, Busy: srv.Busy})
	} else {
		b.workers[from] = wrk
	}
}

// Trace returns the record so far.
func (b *Balancer) Trace() []TracePoint {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.trace)
}

// Run plans every interval until ctx ends.
func (b *Balancer) Run(ctx context.Context) {
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.c.po.Done():
			return
		case now := <-t.C:
			b.Step(now)
		}
	}
}

// Step plans once with the reports received so far and carries out the
// plan.
func (b *Balancer) Step(now time.Time) rebalance.Plan {
	routes := b.c.table.Current()
	b.mu.Lock()
	tp := TracePoint{At: now.Sub(b.start), Busy: map[int32]float64{}, Rate: map[int32]float64{}}
	var blocks []rebalance.Block
	ranges := map[uint64][2]uint64{}
	for id, r := range b.servers {
		secs := r.Interval.Seconds()
		if secs <= 0 {
			continue
		}
		var bytes int64
		for _, k := range r.Blocks {
			bytes += k.Bytes
			i := routes.Find(k.Begin)
			if i < 0 || k.Requests == 0 {
				continue
			}
			if _, dup := ranges[k.Begin]; dup {
				continue
			}
			ranges[k.Begin] = [2]uint64{k.Begin, k.End}
			blocks = append(blocks, rebalance.Block{ID: k.Begin, Bytes: k.Bytes / k.Requests,
				Requests: float64(k.Requests) / secs, Server: routes.Intervals[i].Dest(^uint64(0))})
		}
		tp.Busy[id] = r.Busy.Seconds() / secs
		tp.Rate[id] = float64(bytes) / secs
		var reqs int64
		for _, k := range r.Blocks {
			reqs += k.Requests
		}
		em := b.c.link.Metrics()
		em.ServerLoadBytes.WithLabelValues(strconv.Itoa(int(id))).Set(tp.Rate[id])
		em.ServerLoadRequests.WithLabelValues(strconv.Itoa(int(id))).Set(float64(reqs) / secs)
	}
	var servers []rebalance.Server
	for _, id := range b.c.live(b.c.Servers()) { // a dead server reports nothing: it would look idle
		s := rebalance.Server{ID: id, Utilization: tp.Busy[id]}
		if e := b.est[id]; e != nil {
			s.Capacity = e.Capacity()
		}
		servers = append(servers, s)
	}
	var rtt time.Duration
	n := 0
	for _, w := range b.workers {
		if w.Ops > 0 {
			rtt += w.MeanRTT
			n++
		}
	}
	if n > 0 {
		rtt /= time.Duration(n)
	}
	tp.RTT = rtt
	b.servers = map[int32]*elastic.LoadReport{}
	b.workers = map[int32]*elastic.WorkerReport{}
	b.mu.Unlock()

	plan := b.planner.Step(rebalance.Observation{Now: now, IterationTime: rtt}, blocks, servers)
	if plan.Err != nil {
		b.c.log.Warn("balancer: planner rejected its input", "err", plan.Err)
	}
	var ps *PlanStatus
	if plan.Err != nil || plan.Kind != rebalance.None || len(plan.Moves) > 0 {
		ps = &PlanStatus{AtMs: float64(tp.At.Microseconds()) / 1000, Kind: plan.Kind.String(),
			Reason: plan.Reason, Moves: len(plan.Moves)}
		if plan.Err != nil {
			ps.Error = plan.Err.Error()
		}
	}
	if len(plan.Moves) > 0 {
		tp.Plan = fmt.Sprintf("%s: %s", plan.Kind, plan.Reason)
		tp.Moves = plan.Moves
	moves:
		for _, mv := range plan.Moves {
			select {
			case <-b.c.po.Done():
				break moves // the job is ending: the rest of the plan would only fail
			default:
			}
			r, ok := ranges[mv.Block]
			if !ok {
				continue
			}
			if _, err := b.c.Move(r[0], r[1], mv.To); err == nil {
				tp.MovedOK++
			}
		}
		if b.c.po.Verbose() >= 1 {
			b.c.log.Info("balancer: plan carried out", "plan", tp.Plan, "moves", len(plan.Moves), "ok", tp.MovedOK)
		}
	}
	b.mu.Lock()
	b.trace = append(b.trace, tp)
	if ps != nil {
		ps.MovedOK = tp.MovedOK
		b.plan = ps
	}
	b.mu.Unlock()
	return plan
}

// lastPlan is a copy of the latest plan that decided something (nil if
// none did yet).
func (b *Balancer) lastPlan() *PlanStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.plan == nil {
		return nil
	}
	p := *b.plan
	return &p
}

// load fills in s's load from server id's latest report, and reports
// whether there was one; a report older than three of its intervals (at
// least 3 s) makes the server "silent".
func (b *Balancer) load(id int32, now time.Time, s *ServerStatus) bool {
	b.mu.Lock()
	seen, ok := b.latest[id]
	b.mu.Unlock()
	if !ok {
		return false
	}
	r := seen.r
	age := now.Sub(seen.at)
	s.ReportAgeMs = float64(age.Microseconds()) / 1000
	if age > max(3*r.Interval, 3*time.Second) {
		s.Health = "silent"
	}
	var reqs, bytes int64
	for _, k := range r.Blocks {
		reqs += k.Requests
		bytes += k.Bytes
	}
	if secs := r.Interval.Seconds(); secs > 0 {
		s.Busy = r.Busy.Seconds() / secs
		s.RequestsPerSec = float64(reqs) / secs
		s.BytesPerSec = float64(bytes) / secs
	}
	if reqs > 0 {
		s.HandlingUs = float64(r.Busy.Microseconds()) / float64(reqs)
	}
	return true
}

// held counts, per server, the blocks every server has reported (by first
// key) that routes gives it, and their payload per request summed: the
// planner's view of what each server holds, which moves change at once.
func (b *Balancer) held(routes *routing.Routes) (blocks map[int32]int, bytes map[int32]int64) {
	blocks, bytes = map[int32]int{}, map[int32]int64{}
	b.mu.Lock()
	defer b.mu.Unlock()
	for begin, bs := range b.blocks {
		i := routes.Find(begin)
		if i < 0 || bs.end > routes.Intervals[i].End {
			// a move split the block: its parts are new blocks, which
			// their servers report as they serve them
			delete(b.blocks, begin)
			continue
		}
		id := routes.Intervals[i].Node
		blocks[id]++
		bytes[id] += bs.bytes
	}
	return blocks, bytes
}

// Servers lists the servers of the job (the coordinator's move targets).
func (c *Coordinator) Servers() []int32 {
	return append(c.po.Members(message.ServerGroup), c.po.Standbys()...)
}

// Coordinator returns the coordinator the balancer drives.
func (b *Balancer) Coordinator() *Coordinator { return b.c }

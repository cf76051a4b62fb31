package elastic

import (
	"strconv"
	"strings"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// loadStats is what a server measured since its last load report: per
// block (the key span of the requests, by first key) the requests and
// bytes, and the time spent handling them. Guarded by serverAgent.mu.
type loadStats struct {
	since  time.Time
	busy   time.Duration
	blocks map[uint64]*blockLoad
}

type blockLoad struct {
	hi          uint64 // last key
	reqs, bytes int64
}

func (l *loadStats) add(r *inflightReq, took time.Duration) {
	if l.blocks == nil {
		l.blocks = map[uint64]*blockLoad{}
	}
	l.busy += took
	b := l.blocks[r.lo]
	if b == nil {
		b = &blockLoad{hi: r.hi}
		l.blocks[r.lo] = b
	}
	b.hi = max(b.hi, r.hi)
	b.reqs++
	b.bytes += int64(r.bytes)
}

func messageBytes(m *message.Message) int {
	n := 0
	for _, d := range m.Data {
		n += len(d)
	}
	return n
}

// reportInterval is PS_REPORT_INTERVAL (milliseconds; default 1000), read
// from the node's environment (a bridge node's setenv included). An
// invalid value is logged and the default taken.
func reportInterval(po *postoffice.Postoffice) time.Duration {
	v, ok := po.Config().LookupEnv("PS_REPORT_INTERVAL")
	if !ok || strings.TrimSpace(v) == "" {
		return time.Second
	}
	ms, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || ms <= 0 {
		po.Logger().Warn("elastic: PS_REPORT_INTERVAL is invalid: expected milliseconds > 0; using 1000", "value", v)
		return time.Second
	}
	return time.Duration(ms) * time.Millisecond
}

// joined waits until po is in the job (it has its node id: a report sent
// before would reach the scheduler from an unknown sender); false if the
// node stopped first.
func joined(po *postoffice.Postoffice) bool {
	select {
	case <-po.Ready():
		return true
	case <-po.Done():
		return false
	}
}

// reportLoop sends the scheduler this server's load every interval, from
// the moment the node is in the job.
func (e *serverAgent) reportLoop(every time.Duration) {
	if !joined(e.po) {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	e.mu.Lock()
	e.load.since = time.Now()
	e.mu.Unlock()
	for {
		select {
		case <-e.po.Done():
			return
		case now := <-t.C:
			e.mu.Lock()
			r := LoadReport{Interval: now.Sub(e.load.since), Busy: e.load.busy}
			for lo, b := range e.load.blocks {
				r.Blocks = append(r.Blocks, BlockLoad{Begin: lo, End: b.hi + 1, Requests: b.reqs, Bytes: b.bytes})
			}
			e.load = loadStats{since: now}
			e.mu.Unlock()
			if err := e.node.link.Post(message.SchedulerID, MsgReport, r.Marshal()); err != nil {
				e.po.Logger().Debug("elastic: load report not sent", "err", err)
			}
		}
	}
}

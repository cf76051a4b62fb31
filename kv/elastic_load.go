package kv

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// loadStats is what a server measured since its last load report: per
// block (the key span of the requests, by first key) the requests and
// bytes, and the time spent handling them. Guarded by serverElastic.mu.
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

// LoadReport is a server's load over one interval (ElasticReport).
type LoadReport struct {
	Interval time.Duration
	Busy     time.Duration // time spent handling requests (sum, may exceed Interval with concurrency)
	Blocks   []BlockLoad
}

// BlockLoad is the traffic of one block: the keys [Begin, End) requested
// together.
type BlockLoad struct {
	Begin, End      uint64
	Requests, Bytes int64
}

const reportTagServer, reportTagWorker = 'S', 'W'

// Marshal encodes the report.
func (r *LoadReport) Marshal() []byte {
	b := []byte{reportTagServer}
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Interval))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Busy))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Blocks)))
	for _, k := range r.Blocks {
		b = binary.LittleEndian.AppendUint64(b, k.Begin)
		b = binary.LittleEndian.AppendUint64(b, k.End)
		b = binary.LittleEndian.AppendUint64(b, uint64(k.Requests))
		b = binary.LittleEndian.AppendUint64(b, uint64(k.Bytes))
	}
	return b
}

// WorkerReport is a worker's view over one interval: its operations and
// their mean round trip, split into server handling and network time.
type WorkerReport struct {
	Interval     time.Duration
	Ops          int64
	MeanRTT      time.Duration
	MeanHandling time.Duration
}

// Marshal encodes the report.
func (r *WorkerReport) Marshal() []byte {
	b := []byte{reportTagWorker}
	for _, v := range []int64{int64(r.Interval), r.Ops, int64(r.MeanRTT), int64(r.MeanHandling)} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// ParseReport decodes a server's or a worker's report; exactly one of the
// results is non-nil on success.
func ParseReport(b []byte) (*LoadReport, *WorkerReport, error) {
	if len(b) == 0 {
		return nil, nil, fmt.Errorf("elastic: empty load report")
	}
	switch b[0] {
	case reportTagWorker:
		if len(b) != 1+32 {
			return nil, nil, fmt.Errorf("elastic: worker report of %d bytes, want 33", len(b))
		}
		v := func(i int) int64 { return int64(binary.LittleEndian.Uint64(b[1+8*i:])) }
		return nil, &WorkerReport{Interval: time.Duration(v(0)), Ops: v(1), MeanRTT: time.Duration(v(2)), MeanHandling: time.Duration(v(3))}, nil
	case reportTagServer:
		if len(b) < 21 {
			return nil, nil, fmt.Errorf("elastic: server report of %d bytes is shorter than its header", len(b))
		}
		r := &LoadReport{Interval: time.Duration(binary.LittleEndian.Uint64(b[1:])), Busy: time.Duration(binary.LittleEndian.Uint64(b[9:]))}
		n := int(binary.LittleEndian.Uint32(b[17:]))
		b = b[21:]
		if n > 1<<20 || len(b) != n*32 {
			return nil, nil, fmt.Errorf("elastic: server report claims %d blocks in %d bytes", n, len(b))
		}
		r.Blocks = make([]BlockLoad, n)
		for i := range r.Blocks {
			p := b[i*32:]
			r.Blocks[i] = BlockLoad{Begin: binary.LittleEndian.Uint64(p), End: binary.LittleEndian.Uint64(p[8:]),
				Requests: int64(binary.LittleEndian.Uint64(p[16:])), Bytes: int64(binary.LittleEndian.Uint64(p[24:]))}
		}
		return r, nil, nil
	}
	return nil, nil, fmt.Errorf("elastic: unknown report tag %q", b[0])
}

// reportInterval is PS_REPORT_INTERVAL (milliseconds; default 1000).
func reportInterval(po *postoffice.Postoffice) time.Duration {
	if v, err := strconv.Atoi(os.Getenv("PS_REPORT_INTERVAL")); err == nil && v > 0 {
		return time.Duration(v) * time.Millisecond
	}
	return time.Second
}

// reportLoop sends the scheduler this server's load every interval.
func (e *serverElastic) reportLoop(every time.Duration) {
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
			if err := e.link.Post(message.SchedulerID, ElasticReport, r.Marshal()); err != nil {
				e.po.Logger().Debug("elastic: load report not sent", "err", err)
			}
		}
	}
}

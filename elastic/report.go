package elastic

import (
	"encoding/binary"
	"fmt"
	"time"
)

// LoadReport is a server's load over one interval (MsgReport).
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

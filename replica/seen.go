package replica

import (
	"encoding/binary"
	"fmt"
)

// Seen records which pushes a server applied, so that a push re-sent after
// a failover is applied at most once. A push is known by its worker (node
// and customer id), the first key of the span it carries and the worker's
// operation timestamp. Per (worker, first key) it keeps the highest
// timestamp applied and which of the Window timestamps below it were
// applied: after a failover the worker re-sends its unanswered pushes
// while it already sends new ones, so the new primary may see a push after
// a later one of the same keys. A timestamp further than Window below the
// highest counts as applied: a worker would need more than Window
// operations between sending a push and re-sending it. (The push sequence
// number, Meta.Ext.PushSeq, is the highest count among a span's keys, which
// does not identify a push when spans of different keys begin with the
// same one; the timestamp does.) Not safe for concurrent use.
type Seen struct {
	m map[seenKey]*seenWindow
}

// Window is how many timestamps below the highest applied one Seen tells
// apart.
const Window = 256

type seenKey struct {
	worker int32
	first  uint64
}

// seenWindow: bit i of bits says whether timestamp top-i was applied.
type seenWindow struct {
	top  int32
	bits [Window / 64]uint64
}

func (w *seenWindow) has(i int) bool { return w.bits[i/64]&(1<<(i%64)) != 0 }
func (w *seenWindow) set(i int)      { w.bits[i/64] |= 1 << (i % 64) }

// shift moves the window up by n timestamps.
func (w *seenWindow) shift(n int) {
	if n >= Window {
		w.bits = [Window / 64]uint64{}
		return
	}
	words, rest := n/64, uint(n%64)
	for i := len(w.bits) - 1; i >= 0; i-- {
		var v uint64
		if j := i - words; j >= 0 {
			v = w.bits[j] << rest
			if rest > 0 && j > 0 {
				v |= w.bits[j-1] >> (64 - rest)
			}
		}
		w.bits[i] = v
	}
}

// NewSeen returns an empty record.
func NewSeen() *Seen { return &Seen{m: map[seenKey]*seenWindow{}} }

// Applied reports whether the push (worker, first, ts) was applied here.
func (s *Seen) Applied(worker int32, first uint64, ts int32) bool {
	w, ok := s.m[seenKey{worker, first}]
	if !ok || ts > w.top {
		return false
	}
	d := int(w.top) - int(ts)
	return d >= Window || w.has(d)
}

// Note records that the push (worker, first, ts) was applied.
func (s *Seen) Note(worker int32, first uint64, ts int32) {
	k := seenKey{worker, first}
	w, ok := s.m[k]
	if !ok {
		w = &seenWindow{top: ts}
		s.m[k] = w
	}
	if ts > w.top {
		w.shift(int(ts) - int(w.top))
		w.top = ts
	}
	if d := int(w.top) - int(ts); d < Window {
		w.set(d)
	}
}

// Forget drops the record of a worker (a restarted worker process numbers
// its operations from the start again).
func (s *Seen) Forget(node int32) {
	for k := range s.m {
		if k.worker>>8 == node {
			delete(s.m, k)
		}
	}
}

const seenWire = 4 + 8 + 4 + Window/8

// Export encodes the records whose first key is in [begin, end), for a new
// backup of that interval.
func (s *Seen) Export(begin, end uint64) []byte {
	var b []byte
	for k, w := range s.m {
		if k.first >= begin && k.first < end {
			b = binary.LittleEndian.AppendUint32(b, uint32(k.worker))
			b = binary.LittleEndian.AppendUint64(b, k.first)
			b = binary.LittleEndian.AppendUint32(b, uint32(w.top))
			for _, v := range w.bits {
				b = binary.LittleEndian.AppendUint64(b, v)
			}
		}
	}
	return b
}

// Import adds Export's records.
func (s *Seen) Import(b []byte) error {
	if len(b)%seenWire != 0 {
		return fmt.Errorf("replica: applied-push record of %d bytes is not whole %d-byte entries", len(b), seenWire)
	}
	for ; len(b) > 0; b = b[seenWire:] {
		worker, first := int32(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint64(b[4:])
		in := seenWindow{top: int32(binary.LittleEndian.Uint32(b[12:]))}
		for i := range in.bits {
			in.bits[i] = binary.LittleEndian.Uint64(b[16+8*i:])
		}
		for d := Window - 1; d >= 0; d-- {
			if in.has(d) {
				s.Note(worker, first, in.top-int32(d))
			}
		}
	}
	return nil
}

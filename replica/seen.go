package replica

import (
	"encoding/binary"
	"fmt"
)

// Seen records which pushes a server applied, so that a push re-sent after
// a failover is applied at most once. A push is known by its worker (node
// and customer id), the first key of the span it carries and the worker's
// operation timestamp: a worker sends the spans of one first key in the
// order of its timestamps, and the primary forwards them to its backups in
// the order it applies them, so the highest timestamp applied per (worker,
// first key) tells every earlier push from a later one. (The push
// sequence number, Meta.Ext.PushSeq, is the highest count among a span's
// keys, which is not monotonic per first key when spans of different keys
// begin with the same one; the timestamp is.) Not safe for concurrent use.
type Seen struct {
	m map[seenKey]int32
}

type seenKey struct {
	worker int32
	first  uint64
}

// NewSeen returns an empty record.
func NewSeen() *Seen { return &Seen{m: map[seenKey]int32{}} }

// Applied reports whether the push (worker, first, ts) was applied here
// (it, or a later one of the same worker and first key).
func (s *Seen) Applied(worker int32, first uint64, ts int32) bool {
	last, ok := s.m[seenKey{worker, first}]
	return ok && ts <= last
}

// Note records that the push (worker, first, ts) was applied.
func (s *Seen) Note(worker int32, first uint64, ts int32) {
	k := seenKey{worker, first}
	if last, ok := s.m[k]; !ok || ts > last {
		s.m[k] = ts
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

const seenWire = 4 + 8 + 4

// Export encodes the records whose first key is in [begin, end), for a new
// backup of that interval.
func (s *Seen) Export(begin, end uint64) []byte {
	var b []byte
	for k, ts := range s.m {
		if k.first >= begin && k.first < end {
			b = binary.LittleEndian.AppendUint32(b, uint32(k.worker))
			b = binary.LittleEndian.AppendUint64(b, k.first)
			b = binary.LittleEndian.AppendUint32(b, uint32(ts))
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
		s.Note(int32(binary.LittleEndian.Uint32(b)), binary.LittleEndian.Uint64(b[4:]), int32(binary.LittleEndian.Uint32(b[12:])))
	}
	return nil
}

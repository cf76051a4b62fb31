// Package routing is the versioned routing table: which physical server
// holds which key interval, in which epoch, and where a migrating interval
// sends a request by its push sequence number. Consumers keep seeing
// ps-lite's N equal key ranges (KeyRanges); the table underneath starts as
// the identity and only elastic reassignment changes it. Pure: no IO.
package routing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/elasticps/elasticps/message"
)

// Range is a half-open key range [Begin, End), as ps::Range.
type Range struct{ Begin, End uint64 }

// Size is End - Begin.
func (r Range) Size() uint64 { return r.End - r.Begin }

// Contains reports whether k is in the range.
func (r Range) Contains(k uint64) bool { return k >= r.Begin && k < r.End }

// MaxKey is ps::kMaxKey.
const MaxKey = math.MaxUint64

// KeyRanges computes ps-lite's GetServerKeyRanges for n servers: server i
// owns [MaxKey/n*i, MaxKey/n*(i+1)). Keys at or above n*(MaxKey/n) belong to
// nobody.
func KeyRanges(n int) []Range {
	rs := make([]Range, n)
	step := uint64(MaxKey) / uint64(max(n, 1))
	for i := range rs {
		rs[i] = Range{Begin: step * uint64(i), End: step * uint64(i+1)}
	}
	return rs
}

// Interval assigns the keys [Begin, End) to a physical server. While the
// interval migrates, requests whose push sequence number (the worker's
// highest count of pushes among the request's keys, see kv.Worker) is below
// CutSeq still go to Prev, the old owner; from CutSeq on they go to Node.
// That aligns the cut-over with iterations without any change to
// applications.
//
// Backups (PS_REPLICAS=k) are the servers that hold a copy of the
// interval besides Node, in promotion order: the primary (Node) forwards
// every push to each of them and acknowledges it only once all have
// applied it; when Node dies the first live backup becomes Node. While
// the interval migrates they are Prev's, which forwards the pushes it
// still applies; Node may be one of them.
// Tables treat Backups as immutable: replace the slice, never modify it.
type Interval struct {
	Begin, End uint64
	Node       int32
	Prev       int32 // 0 when the interval is not migrating
	CutSeq     uint64
	Backups    []int32 `json:",omitempty"`
}

// HasBackup reports whether id is one of the interval's backups.
func (iv *Interval) HasBackup(id int32) bool { return slices.Contains(iv.Backups, id) }

// Dest returns the node for a request with push sequence number seq.
func (iv *Interval) Dest(seq uint64) int32 {
	if iv.Prev != 0 && seq < iv.CutSeq {
		return iv.Prev
	}
	return iv.Node
}

// Routes is one immutable version of the routing table: intervals sorted by
// key, contiguous, covering [0, the last logical range's End).
type Routes struct {
	Epoch     uint64
	Intervals []Interval
}

// Find returns the index of the interval holding key, or -1.
func (r *Routes) Find(key uint64) int {
	iv := r.Intervals
	i := sort.Search(len(iv), func(i int) bool { return iv[i].End > key })
	if i == len(iv) || key < iv[i].Begin {
		return -1
	}
	return i
}

// Validate checks that the intervals are sorted, non-empty and contiguous
// from 0.
func (r *Routes) Validate() error {
	var next uint64
	for i, iv := range r.Intervals {
		if iv.Begin != next || iv.End <= iv.Begin {
			return fmt.Errorf("routing epoch %d: interval %d [%d, %d) does not continue at %d", r.Epoch, i, iv.Begin, iv.End, next)
		}
		if iv.Node <= 0 {
			return fmt.Errorf("routing epoch %d: interval %d has no owner", r.Epoch, i)
		}
		// While an interval moves, its backups are still the old owner's
		// (it applies and forwards the pushes below the cut-over), and the
		// new owner may be one of them.
		applier := iv.Node
		if iv.Prev != 0 {
			applier = iv.Prev
		}
		for j, b := range iv.Backups {
			if b <= 0 || b == applier || slices.Contains(iv.Backups[:j], b) {
				return fmt.Errorf("routing epoch %d: interval %d (owner %d) has an invalid backup list %v: backups are distinct servers other than the owner", r.Epoch, i, applier, iv.Backups)
			}
		}
		next = iv.End
	}
	return nil
}

// Replicated reports whether any interval has backups.
func (r *Routes) Replicated() bool {
	return slices.ContainsFunc(r.Intervals, func(iv Interval) bool { return len(iv.Backups) > 0 })
}

// Owners lists the distinct nodes that own an interval (Node or Prev).
func (r *Routes) Owners() []int32 {
	seen := map[int32]bool{}
	var out []int32
	for _, iv := range r.Intervals {
		for _, n := range []int32{iv.Node, iv.Prev} {
			if n != 0 && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Clone returns a deep copy.
func (r *Routes) Clone() *Routes {
	return &Routes{Epoch: r.Epoch, Intervals: append([]Interval(nil), r.Intervals...)}
}

// Split returns a copy whose intervals have boundaries at begin and end
// (inside [0, last End)), so that [begin, end) is a union of intervals.
func (r *Routes) Split(begin, end uint64) *Routes {
	out := &Routes{Epoch: r.Epoch}
	for _, iv := range r.Intervals {
		for _, cut := range []uint64{begin, end} {
			if cut > iv.Begin && cut < iv.End {
				a := iv
				a.End = cut
				out.Intervals = append(out.Intervals, a)
				iv.Begin = cut
			}
		}
		out.Intervals = append(out.Intervals, iv)
	}
	return out
}

// Coalesce merges neighbouring intervals with the same owner and no
// migration in progress.
func (r *Routes) Coalesce() {
	var out []Interval
	for _, iv := range r.Intervals {
		if n := len(out); n > 0 && out[n-1].Node == iv.Node && out[n-1].Prev == 0 && iv.Prev == 0 && slices.Equal(out[n-1].Backups, iv.Backups) {
			out[n-1].End = iv.End
			continue
		}
		out = append(out, iv)
	}
	r.Intervals = out
}

const intervalWire = 8 + 8 + 4 + 4 + 8

// withBackups flags, in the interval count of the header, the second
// encoding: each interval record is followed by its number of backups
// (uint32) and their ids (uint32 each). A table without backups keeps the
// first, fixed-size encoding, byte for byte.
const withBackups = 1 << 31

// Marshal encodes the routes (little-endian; fixed-size records when no
// interval has backups, see withBackups).
func (r *Routes) Marshal() []byte {
	rep := r.Replicated()
	b := make([]byte, 12, 12+len(r.Intervals)*intervalWire)
	binary.LittleEndian.PutUint64(b, r.Epoch)
	n := uint32(len(r.Intervals))
	if rep {
		n |= withBackups
	}
	binary.LittleEndian.PutUint32(b[8:], n)
	for _, iv := range r.Intervals {
		b = binary.LittleEndian.AppendUint64(b, iv.Begin)
		b = binary.LittleEndian.AppendUint64(b, iv.End)
		b = binary.LittleEndian.AppendUint32(b, uint32(iv.Node))
		b = binary.LittleEndian.AppendUint32(b, uint32(iv.Prev))
		b = binary.LittleEndian.AppendUint64(b, iv.CutSeq)
		if rep {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(iv.Backups)))
			for _, id := range iv.Backups {
				b = binary.LittleEndian.AppendUint32(b, uint32(id))
			}
		}
	}
	return b
}

// UnmarshalRoutes decodes and validates Marshal's output.
func UnmarshalRoutes(b []byte) (*Routes, error) {
	if len(b) < 12 {
		return nil, errors.New("routing table: message shorter than its 12-byte header")
	}
	r := &Routes{Epoch: binary.LittleEndian.Uint64(b)}
	hdr := binary.LittleEndian.Uint32(b[8:])
	rep := hdr&withBackups != 0
	n := int(hdr &^ withBackups)
	b = b[12:]
	if n > 1<<20 || !rep && len(b) != n*intervalWire || rep && len(b) < n*(intervalWire+4) {
		return nil, fmt.Errorf("routing table: %d intervals need %d bytes, got %d", n, n*intervalWire, len(b))
	}
	r.Intervals = make([]Interval, n)
	for i := range r.Intervals {
		if len(b) < intervalWire {
			return nil, fmt.Errorf("routing table: interval %d of %d is truncated", i, n)
		}
		p := b
		r.Intervals[i] = Interval{
			Begin: binary.LittleEndian.Uint64(p), End: binary.LittleEndian.Uint64(p[8:]),
			Node: int32(binary.LittleEndian.Uint32(p[16:])), Prev: int32(binary.LittleEndian.Uint32(p[20:])),
			CutSeq: binary.LittleEndian.Uint64(p[24:]),
		}
		b = b[intervalWire:]
		if !rep {
			continue
		}
		if len(b) < 4 {
			return nil, fmt.Errorf("routing table: interval %d of %d has no backup count", i, n)
		}
		k := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if k > 1<<10 || len(b) < 4*k {
			return nil, fmt.Errorf("routing table: interval %d claims %d backups in %d bytes", i, k, len(b))
		}
		if k > 0 {
			r.Intervals[i].Backups = make([]int32, k)
			for j := range k {
				r.Intervals[i].Backups[j] = int32(binary.LittleEndian.Uint32(b[4*j:]))
			}
		}
		b = b[4*k:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("routing table: %d bytes after the last interval", len(b))
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// IdentityRoutes maps logical range i to server rank i (epoch 0).
func IdentityRoutes(ranges []Range) *Routes {
	r := &Routes{}
	for i, rg := range ranges {
		r.Intervals = append(r.Intervals, Interval{Begin: rg.Begin, End: rg.End, Node: int32(message.ServerRankToID(i))})
	}
	return r
}

// Table maps keys to the physical servers that hold them. Consumers
// keep seeing the N logical ranges of ServerKeyRanges; underneath, this
// versioned table (starting as the identity) says which server serves
// which interval, and elastic reassignment changes only it. Reads are
// lock-free.
type Table struct {
	ranges []Range
	cur    atomic.Pointer[Routes]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every update
}

// NewIdentityTable returns the identity table for n servers.
func NewIdentityTable(n int) *Table { return NewInstanceTable(n, 1, 0) }

// NewInstanceTable is the identity table of instance of n server
// processes with groupSize instances each (DMLC_GROUP_SIZE): logical range
// i goes to server rank i*groupSize+instance.
func NewInstanceTable(n, groupSize, instance int) *Table {
	t := &Table{ranges: KeyRanges(n), changed: make(chan struct{})}
	r := IdentityRoutes(t.ranges)
	for i := range r.Intervals {
		r.Intervals[i].Node = int32(message.ServerRankToID(i*groupSize + instance))
	}
	t.cur.Store(r)
	return t
}

// Ranges returns the logical key ranges (never changes for a job).
func (t *Table) Ranges() []Range { return t.ranges }

// Current returns the current routes; do not modify them.
func (t *Table) Current() *Routes { return t.cur.Load() }

// Epoch is the current version.
func (t *Table) Epoch() uint64 { return t.cur.Load().Epoch }

// Update installs r if it is newer than the current routes and reports
// whether it did.
func (t *Table) Update(r *Routes) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.Epoch <= t.cur.Load().Epoch {
		return false
	}
	t.cur.Store(r)
	close(t.changed)
	t.changed = make(chan struct{})
	return true
}

// Changed returns a channel closed at the next update.
func (t *Table) Changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changed
}

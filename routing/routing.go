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
type Interval struct {
	Begin, End uint64
	Node       int32
	Prev       int32 // 0 when the interval is not migrating
	CutSeq     uint64
}

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
		next = iv.End
	}
	return nil
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
		if n := len(out); n > 0 && out[n-1].Node == iv.Node && out[n-1].Prev == 0 && iv.Prev == 0 {
			out[n-1].End = iv.End
			continue
		}
		out = append(out, iv)
	}
	r.Intervals = out
}

const intervalWire = 8 + 8 + 4 + 4 + 8

// Marshal encodes the routes (little-endian, fixed-size records).
func (r *Routes) Marshal() []byte {
	b := make([]byte, 12, 12+len(r.Intervals)*intervalWire)
	binary.LittleEndian.PutUint64(b, r.Epoch)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(r.Intervals)))
	for _, iv := range r.Intervals {
		b = binary.LittleEndian.AppendUint64(b, iv.Begin)
		b = binary.LittleEndian.AppendUint64(b, iv.End)
		b = binary.LittleEndian.AppendUint32(b, uint32(iv.Node))
		b = binary.LittleEndian.AppendUint32(b, uint32(iv.Prev))
		b = binary.LittleEndian.AppendUint64(b, iv.CutSeq)
	}
	return b
}

// UnmarshalRoutes decodes and validates Marshal's output.
func UnmarshalRoutes(b []byte) (*Routes, error) {
	if len(b) < 12 {
		return nil, errors.New("routing table: message shorter than its 12-byte header")
	}
	r := &Routes{Epoch: binary.LittleEndian.Uint64(b)}
	n := int(binary.LittleEndian.Uint32(b[8:]))
	b = b[12:]
	if n > 1<<20 || len(b) != n*intervalWire {
		return nil, fmt.Errorf("routing table: %d intervals need %d bytes, got %d", n, n*intervalWire, len(b))
	}
	r.Intervals = make([]Interval, n)
	for i := range r.Intervals {
		p := b[i*intervalWire:]
		r.Intervals[i] = Interval{
			Begin: binary.LittleEndian.Uint64(p), End: binary.LittleEndian.Uint64(p[8:]),
			Node: int32(binary.LittleEndian.Uint32(p[16:])), Prev: int32(binary.LittleEndian.Uint32(p[20:])),
			CutSeq: binary.LittleEndian.Uint64(p[24:]),
		}
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
func NewIdentityTable(n int) *Table {
	t := &Table{ranges: KeyRanges(n), changed: make(chan struct{})}
	t.cur.Store(IdentityRoutes(t.ranges))
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

package postoffice

import (
	"math"
	"sync"
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

// RoutingTable maps each logical key range (what consumers see through
// ServerKeyRanges) to the physical server that holds it. It is versioned by
// Epoch. It starts as the identity (range i on server rank i); elastic
// reassignment changes only this table, never the ranges consumers see.
type RoutingTable struct {
	mu     sync.RWMutex
	epoch  uint64
	ranges []Range
	owner  []int32 // node id per range
}

// NewIdentityRouting returns the identity table for n servers.
func NewIdentityRouting(n int) *RoutingTable {
	t := &RoutingTable{ranges: KeyRanges(n), owner: make([]int32, n)}
	for i := range t.owner {
		t.owner[i] = int32(ServerRankToID(i))
	}
	return t
}

// ServerRankToID is re-exported for routing users.
func ServerRankToID(rank int) int { return rank*2 + 8 }

// Ranges returns the logical key ranges (never changes for a job).
func (t *RoutingTable) Ranges() []Range { return t.ranges }

// Owner returns the node id serving logical range i and the table epoch.
func (t *RoutingTable) Owner(i int) (id int32, epoch uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.owner[i], t.epoch
}

// Epoch is the table version.
func (t *RoutingTable) Epoch() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.epoch
}

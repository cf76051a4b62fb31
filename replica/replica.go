// Package replica is the IO-free part of replicated server state
// (PS_REPLICAS): where the backups of each key interval go, which backup a
// dead primary's intervals are promoted to, and the record of applied
// pushes that makes re-sent pushes idempotent. The scheduler's coordinator
// (elastic/coord) places and promotes; the servers' agents (elastic)
// forward, apply and deduplicate. See docs/fault-tolerance.md.
package replica

import (
	"cmp"
	"slices"

	"github.com/elasticps/elasticps/routing"
)

// Place returns a copy of r in which every interval has k backups among
// servers (when there are enough servers besides its owner): backups r
// already names are kept while they are in servers, and missing ones are
// taken from the servers holding the fewest copies (a standby that just
// joined holds none), ties broken by ring order after the owner. changed
// says whether any interval's backups differ from r's. The epoch is r's.
func Place(r *routing.Routes, servers []int32, k int) (out *routing.Routes, changed bool) {
	out = r.Clone()
	ring := slices.Clone(servers)
	slices.Sort(ring)
	copies := map[int32]int{}
	for _, iv := range out.Intervals {
		copies[iv.Node]++
		for _, b := range iv.Backups {
			if slices.Contains(ring, b) {
				copies[b]++
			}
		}
	}
	for i := range out.Intervals {
		iv := &out.Intervals[i]
		keep := slices.DeleteFunc(slices.Clone(iv.Backups), func(b int32) bool { return !slices.Contains(ring, b) })
		if len(keep) > k {
			for _, b := range keep[k:] {
				copies[b]--
			}
			keep = keep[:k]
		}
		for len(keep) < k {
			b, ok := pick(ring, iv.Node, keep, copies)
			if !ok {
				break
			}
			keep = append(keep, b)
			copies[b]++
		}
		if len(keep) == 0 {
			keep = nil
		}
		if !slices.Equal(keep, iv.Backups) {
			iv.Backups = keep
			changed = true
		}
	}
	return out, changed
}

// pick returns the server of ring, other than owner and those in have,
// holding the fewest copies; ties go to the first after owner in ring
// order.
func pick(ring []int32, owner int32, have []int32, copies map[int32]int) (int32, bool) {
	start, _ := slices.BinarySearch(ring, owner)
	best, found := int32(0), false
	for j := range ring {
		s := ring[(start+j)%len(ring)]
		if s == owner || slices.Contains(have, s) {
			continue
		}
		if !found || copies[s] < copies[best] {
			best, found = s, true
		}
	}
	return best, found
}

// Failover returns a copy of r without server dead: each interval dead was
// the owner of goes to its first backup in live, dead leaves every backup
// list, and lost lists the intervals dead owned that had no live backup
// (they keep dead as owner: their values are gone). The backups are not
// topped up here; Place does that. The epoch is r's.
func Failover(r *routing.Routes, dead int32, live []int32) (out *routing.Routes, promoted, lost []routing.Interval) {
	out = r.Clone()
	for i := range out.Intervals {
		iv := &out.Intervals[i]
		bs := slices.DeleteFunc(slices.Clone(iv.Backups), func(b int32) bool { return b == dead || !slices.Contains(live, b) })
		if iv.Node == dead {
			if len(bs) == 0 {
				lost = append(lost, *iv)
				iv.Backups = nil
				continue
			}
			iv.Node, bs = bs[0], bs[1:]
			promoted = append(promoted, *iv)
		}
		if iv.Prev == dead {
			iv.Prev, iv.CutSeq = 0, 0
		}
		if len(bs) == 0 {
			bs = nil
		}
		iv.Backups = bs
	}
	out.Coalesce()
	return out, promoted, lost
}

// Names returns the distinct servers named by r (owners and backups),
// sorted.
func Names(r *routing.Routes) []int32 {
	var ids []int32
	for _, iv := range r.Intervals {
		ids = append(ids, iv.Node)
		ids = append(ids, iv.Backups...)
	}
	slices.SortFunc(ids, cmp.Compare)
	return slices.Compact(ids)
}

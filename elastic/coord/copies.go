package coord

import (
	"slices"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/routing"
)

// A backup counts as a copy of an interval only once its primary reported
// it seeded (elastic.MsgSeeded): a backup placed by a table holds nothing
// until then, and promoting it would serve an empty interval as if nothing
// were lost. The coordinator keeps, per server, the key spans it holds a
// seeded copy of, and drops a span once a table no longer names the
// server as the primary or a backup of it (the copy stops following).

// seeded records primary from's report (MsgSeeded) that it seeded its
// backup of mv's keys: they count as a copy if the current table still
// names mv.To a backup of them under from.
func (c *Coordinator) seeded(from int32, mv elastic.Move) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	r := c.table.Current()
	for _, iv := range r.Intervals {
		if b, e := max(iv.Begin, mv.Begin), min(iv.End, mv.End); b < e && iv.Node == from && slices.Contains(iv.Backups, mv.To) {
			c.copies[mv.To] = c.copies[mv.To].Add(b, e)
		}
	}
	c.wakeAll()
}

// wakeLocked returns the channel closed at the next seeding or table
// change. The caller holds cmu.
func (c *Coordinator) wakeLocked() <-chan struct{} {
	if c.copyWake == nil {
		c.copyWake = make(chan struct{})
	}
	return c.copyWake
}

// wakeAll wakes those waiting for a seeding. The caller holds cmu.
func (c *Coordinator) wakeAll() {
	if c.copyWake != nil {
		close(c.copyWake)
		c.copyWake = nil
	}
}

// update makes r the job's table and drops the copies it no longer names
// their servers for: a server that stops being a backup of keys stops
// getting their pushes. (Under cmu: a seeding is counted against the
// table it is checked with.)
func (c *Coordinator) update(r *routing.Routes) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.table.Update(r)
	c.wakeAll()
	if c.copies == nil {
		return
	}
	h := routing.Held(r)
	for id, s := range c.copies {
		if s = s.Within(h[id]); len(s) == 0 {
			delete(c.copies, id)
		} else {
			c.copies[id] = s
		}
	}
}

// learnCopies asks the live servers, on a restarted scheduler, which keys
// each holds a seeded copy of (elastic.MsgCopies): the seedings happened
// before it started, and a backup placed but not seeded yet holds nothing
// a failover could promote. A server that does not answer counts as
// holding no copy: a later failover reports its keys lost rather than
// serve them empty. The caller holds moveMu, so no failover runs before.
func (c *Coordinator) learnCopies(live []int32) {
	reported := map[int32]routing.Spans{}
	for _, id := range live {
		ans, err := c.link.Call(id, elastic.MsgCopies, nil, c.Timeout)
		var s routing.Spans
		if err == nil {
			s, err = elastic.UnmarshalSpans(ans)
		}
		if err != nil {
			c.log.Warn("coord: a server did not say which keys it holds copies of; it counts as holding none (a failover will not promote it)", "node", id, "err", err)
			continue
		}
		reported[id] = s
		if c.po.Verbose() >= 1 {
			c.log.Info("coord: a server's seeded copies, as it reported them", "node", id, "copies", s)
		}
	}
	c.cmu.Lock()
	defer c.cmu.Unlock()
	held := routing.Held(c.table.Current())
	for id, s := range reported {
		for _, x := range s.Within(held[id]) {
			c.copies[id] = c.copies[id].Add(x.Begin, x.End)
		}
	}
}

// seededOnly returns r with, in each interval dead is the primary of, only
// the backups that hold a seeded copy of all of it: the ones a failover
// may promote.
func (c *Coordinator) seededOnly(r *routing.Routes, dead int32) *routing.Routes {
	out := r.Clone()
	c.cmu.Lock()
	defer c.cmu.Unlock()
	for i := range out.Intervals {
		iv := &out.Intervals[i]
		if iv.Node != dead {
			continue
		}
		iv.Backups = slices.DeleteFunc(slices.Clone(iv.Backups), func(b int32) bool { return !c.copies[b].Covers(iv.Begin, iv.End) })
		if len(iv.Backups) == 0 {
			iv.Backups = nil
		}
	}
	return out
}

package coord

import (
	"fmt"
	"slices"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/routing"
)

// Drain moves every key range of server id to the other servers (spread
// by key count, least loaded first), then lets the server leave the job:
// barriers stop waiting for it and its process exits (scale-in).
func (c *Coordinator) Drain(id int32) ([]Result, error) {
	if !c.isServer(id) {
		return nil, fmt.Errorf("coord: node %d is not a server of this job", id)
	}
	var others []int32
	for _, s := range c.Servers() {
		if s != id && !c.po.HasLeft(s) {
			others = append(others, s)
		}
	}
	if len(others) == 0 {
		return nil, fmt.Errorf("coord: cannot drain node %d: it is the only server", id)
	}
	if c.replicas > 0 {
		if len(others) < c.replicas+1 {
			return nil, fmt.Errorf("coord: cannot drain node %d: PS_REPLICAS=%d keeps %d copies of every interval, and only %d servers would be left (add a server with 'elasticps ctl add' first)",
				id, c.replicas, c.replicas+1, len(others))
		}
		c.mu.Lock()
		c.leaving[id] = true
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.leaving, id)
			c.mu.Unlock()
		}()
	}
	var results []Result
	for {
		r := c.table.Current()
		i := slices.IndexFunc(r.Intervals, func(iv routing.Interval) bool { return iv.Node == id })
		if i < 0 {
			break
		}
		// the target holding the fewest intervals takes the next one
		load := map[int32]int{}
		for _, iv := range r.Intervals {
			load[iv.Node]++
		}
		to := others[0]
		for _, o := range others[1:] {
			if load[o] < load[to] {
				to = o
			}
		}
		iv := r.Intervals[i]
		res, err := c.Move(iv.Begin, iv.End, to)
		results = append(results, res)
		if err != nil {
			return results, fmt.Errorf("coord: drain of node %d stopped: %w", id, err)
		}
	}
	if c.replicas > 0 {
		if err := c.handOverBackups(id); err != nil {
			return results, fmt.Errorf("coord: drain of node %d stopped: %w", id, err)
		}
	}
	if err := c.po.Leave(id); err != nil {
		return results, err
	}
	if _, err := c.link.Call(id, elastic.MsgLeave, nil, c.Timeout); err != nil {
		c.log.Warn("coord: drained server did not acknowledge leaving", "node", id, "err", err)
	}
	c.log.Info("coord: server drained and left", "node", id, "moves", len(results))
	return results, nil
}

// ReleaseStandbys tells the servers that joined the running job to leave:
// they are in no barrier group, so the job's final barrier does not wait
// for them, and the scheduler calls this after it.
func (c *Coordinator) ReleaseStandbys() {
	for _, id := range c.po.Standbys() {
		if g, ok := c.po.Gone(id); ok && g.Dead {
			continue // killed after it joined: nothing to wait for
		}
		if err := c.po.Leave(id); err != nil {
			c.log.Warn("coord: standby not released", "node", id, "err", err)
			continue
		}
		if _, err := c.link.Call(id, elastic.MsgLeave, nil, c.Timeout); err != nil {
			c.log.Warn("coord: standby did not acknowledge the end of the job", "node", id, "err", err)
		}
	}
}

// handOverBackups moves the copies the draining server id holds as a
// backup to other servers without a moment of fewer than k+1 copies: one
// table adds their new holders (replica.Place) and keeps id as the last
// backup of each interval, the primaries seed the new holders, and once
// the coordinator counts each as a copy (MsgSeeded) a last table drops id.
// A seeding not done within Timeout fails the drain, naming the interval:
// its unseeded holders are dropped again and id keeps its copies (it is
// not released).
func (c *Coordinator) handOverBackups(id int32) error {
	held, err := c.addHolders(id)
	if err != nil || len(held) == 0 {
		return err
	}
	deadline := time.Now().Add(c.Timeout)
	for {
		c.awaitSeeded(id, held, deadline)
		c.moveMu.Lock()
		r := c.table.Current()
		c.cmu.Lock()
		miss, missing := c.unseeded(r, id, held)
		c.cmu.Unlock()
		if missing && time.Now().Before(deadline) && !c.stopping() {
			c.moveMu.Unlock()
			continue // a table changed meanwhile
		}
		err := c.finishHandOver(r, id, held, missing)
		c.moveMu.Unlock()
		if err != nil {
			return err
		}
		if missing {
			return fmt.Errorf("coord: node %d keeps its copy of keys [%d, %d): their new backup %d (primary %d) was not seeded within %v (see the primary's log)",
				id, miss.Begin, miss.End, miss.Backups[0], miss.Node, c.Timeout)
		}
		if i := slices.IndexFunc(r.Intervals, func(iv routing.Interval) bool { return iv.Node == id }); i >= 0 {
			return fmt.Errorf("coord: a failover made node %d the primary of keys [%d, %d) again while its copies were handed over: drain it again",
				id, r.Intervals[i].Begin, r.Intervals[i].End)
		}
		return nil
	}
}

// addHolders publishes a table in which every interval the draining
// server id backs up also has its new holders (replica.Place over the
// other servers) and keeps id last; it returns the keys id backs up.
func (c *Coordinator) addHolders(id int32) (routing.Spans, error) {
	c.moveMu.Lock()
	defer c.moveMu.Unlock()
	r := c.table.Current()
	var held routing.Spans
	for _, iv := range r.Intervals {
		if iv.HasBackup(id) {
			held = held.Add(iv.Begin, iv.End)
		}
	}
	out, changed := c.placeBackups(r, c.live(c.Servers()))
	if !changed {
		return held, nil // the drain's moves placed them already
	}
	out.Epoch = r.Epoch + 1
	c.log.Info("coord: the copies of a draining server get new holders", "node", id, "epoch", out.Epoch, "routes", describe(out))
	return held, c.publish(out)
}

// unseeded returns an interval of r within held, with the first of its
// backups other than the draining server id that holds no seeded copy of
// it, if there is one. The caller holds cmu.
func (c *Coordinator) unseeded(r *routing.Routes, id int32, held routing.Spans) (routing.Interval, bool) {
	for _, iv := range r.Intervals {
		if !held.Covers(iv.Begin, iv.End) {
			continue
		}
		for _, b := range iv.Backups {
			if b != id && !c.copies[b].Covers(iv.Begin, iv.End) {
				return routing.Interval{Begin: iv.Begin, End: iv.End, Node: iv.Node, Backups: []int32{b}}, true
			}
		}
	}
	return routing.Interval{}, false
}

// awaitSeeded waits until every new holder of id's copies is seeded, or
// until deadline.
func (c *Coordinator) awaitSeeded(id int32, held routing.Spans, deadline time.Time) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		c.cmu.Lock()
		_, missing := c.unseeded(c.table.Current(), id, held)
		wake := c.wakeLocked()
		c.cmu.Unlock()
		if !missing {
			return
		}
		select {
		case <-wake:
		case <-timer.C:
			return
		case <-c.po.Done():
			return
		}
	}
}

// finishHandOver publishes, after r, the table that drops the draining
// server id from every backup list, or (missing: a new holder was not
// seeded) the one that drops the unseeded holders of the keys id still
// backs up instead. The caller holds moveMu.
func (c *Coordinator) finishHandOver(r *routing.Routes, id int32, held routing.Spans, missing bool) error {
	out := r.Clone()
	c.cmu.Lock()
	for i := range out.Intervals {
		iv := &out.Intervals[i]
		if !iv.HasBackup(id) {
			continue
		}
		drop := func(b int32) bool { return b == id }
		if missing && held.Covers(iv.Begin, iv.End) {
			drop = func(b int32) bool { return b != id && !c.copies[b].Covers(iv.Begin, iv.End) }
		}
		if iv.Backups = slices.DeleteFunc(slices.Clone(iv.Backups), drop); len(iv.Backups) == 0 {
			iv.Backups = nil
		}
	}
	c.cmu.Unlock()
	if slices.EqualFunc(out.Intervals, r.Intervals, func(a, b routing.Interval) bool { return slices.Equal(a.Backups, b.Backups) }) {
		return nil
	}
	out.Epoch = r.Epoch + 1
	c.log.Info("coord: the copies of a draining server were handed over", "node", id, "complete", !missing, "epoch", out.Epoch, "routes", describe(out))
	return c.publish(out)
}

// stopping reports whether the scheduler's node is shutting down.
func (c *Coordinator) stopping() bool {
	select {
	case <-c.po.Done():
		return true
	default:
		return false
	}
}

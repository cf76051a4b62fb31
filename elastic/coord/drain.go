package coord

import (
	"fmt"
	"slices"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/replica"
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
		if err := c.replaceBackups(id); err != nil {
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

// replaceBackups publishes a table in which the draining server id backs
// up nothing: its copies go to the other servers (replica.Place), which
// the intervals' primaries seed.
func (c *Coordinator) replaceBackups(id int32) error {
	c.moveMu.Lock()
	defer c.moveMu.Unlock()
	r := c.table.Current()
	out, changed := replica.Place(r, c.backupCandidates(), c.replicas)
	if !changed {
		return nil
	}
	out.Epoch = r.Epoch + 1
	c.log.Info("coord: the backups of a draining server moved", "node", id, "epoch", out.Epoch, "routes", describe(out))
	return c.publish(out)
}

package coord

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/replica"
	"github.com/elasticps/elasticps/routing"
)

// replicaCheck is how often the coordinator checks that every interval has
// its k backups (a standby that joined takes the copies a failover could
// not place).
const replicaCheck = 500 * time.Millisecond

// keepReplicated places the backups of every interval (PS_REPLICAS) once
// the job has started, and tops them up whenever servers allow it.
func (c *Coordinator) keepReplicated() {
	select {
	case <-c.po.Ready():
	case <-c.po.Done():
		return
	}
	t := time.NewTicker(replicaCheck)
	defer t.Stop()
	for {
		c.place()
		select {
		case <-t.C:
		case <-c.po.Done():
			return
		}
	}
}

// place publishes a table with the backups replica.Place gives, if they
// differ from the current ones.
func (c *Coordinator) place() {
	c.moveMu.Lock()
	defer c.moveMu.Unlock()
	r := c.table.Current()
	live := c.live(c.Servers())
	for _, iv := range r.Intervals {
		if !slices.Contains(live, iv.Node) && !c.lost[iv.Node] {
			return // a failover is due: it places the backups itself
		}
	}
	out, changed := c.placeBackups(r, live)
	if !changed {
		return
	}
	out.Epoch = r.Epoch + 1
	c.log.Info("coord: backups placed", "epoch", out.Epoch, "routes", describe(out))
	if err := c.publish(out); err != nil {
		c.log.Warn("coord: routing table with the backups not delivered", "epoch", out.Epoch, "err", err)
	}
}

// serverGone is the coordinator's postoffice.OnNodeGone subscriber with
// PS_REPLICAS > 0: a dead server's intervals fail over.
func (c *Coordinator) serverGone(ev postoffice.NodeEvent) {
	if ev.Dead && ev.Role == message.RoleServer {
		go c.Failover(ev.ID)
	}
}

// Failover publishes, in one new epoch, the table without server dead:
// each interval it was the primary of goes to its first live backup, it
// leaves every backup list, and the backups are topped up to k again
// (onto a standby if one joined, else onto the remaining servers); the
// primaries seed the new backups. It returns the intervals promoted and
// those lost (no live backup: they stay on dead, and workers' requests for
// them fail with kv.DeadServerError). Once the table is published, every
// node is told whether anything was lost (postoffice.ReportFailover): a
// dead server that lost nothing does not fail the job's Finalize.
func (c *Coordinator) Failover(dead int32) (promoted, lost []routing.Interval, err error) {
	c.moveMu.Lock()
	defer c.moveMu.Unlock()
	start := time.Now()
	r := c.table.Current()
	live := c.live(c.Servers())
	// only a seeded backup holds the interval's values
	out, promoted, lost := replica.Failover(c.seededOnly(r, dead), dead, live)
	out, _ = c.placeBackups(out, live)
	out.Epoch = r.Epoch + 1
	if len(lost) > 0 {
		c.lost[dead] = true
	}
	for _, iv := range lost {
		c.log.Error("coord: a dead server's interval had no live backup; its values are lost", "node", dead, "begin", iv.Begin, "end", iv.End)
	}
	err = c.publish(out)
	c.log.Warn("coord: failover", "dead", dead, "promoted", len(promoted), "lost", len(lost), "epoch", out.Epoch,
		"routes", describe(out), "took", time.Since(start), "err", err)
	if err == nil {
		// Every node learns whether the death lost anything: a server
		// whose every interval has a live copy is no loss of the job.
		nothingLost, detail := outcome(out.Epoch, promoted, lost)
		if rerr := c.po.ReportFailover(dead, nothingLost, detail); rerr != nil {
			c.log.Warn("coord: the failover's outcome was not reported", "dead", dead, "err", rerr)
		}
	}
	return promoted, lost, err
}

// outcome says what a failover did to a dead server's intervals, for
// postoffice.ReportFailover.
func outcome(epoch uint64, promoted, lost []routing.Interval) (nothingLost bool, detail string) {
	if len(lost) == 0 {
		return true, fmt.Sprintf("failed over in routing epoch %d: each of the %d intervals it was the primary of went to a live backup; nothing was lost", epoch, len(promoted))
	}
	s := ""
	for i, iv := range lost {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("[%d, %d)", iv.Begin, iv.End)
	}
	return false, fmt.Sprintf("the values of its intervals %s are lost: none had a live backup holding a seeded copy (routing epoch %d)", s, epoch)
}

// live drops the nodes the job lost from ids, also those a restarted
// process took over (its workers treat that id's range as lost).
func (c *Coordinator) live(ids []int32) []int32 {
	out := ids[:0:0]
	for _, id := range ids {
		if g, ok := c.po.Gone(id); ok && g.Dead {
			continue
		}
		out = append(out, id)
	}
	return out
}

// describe renders a table's owners and backups for a log line.
func describe(r *routing.Routes) string {
	s := ""
	for _, iv := range r.Intervals {
		s += fmt.Sprintf("[%d,%d)->%d%v ", iv.Begin, iv.End, iv.Node, iv.Backups)
	}
	return s
}

// canReplicateMove refuses a move of a replicated job that could not keep
// the keys' k copies: the new owner must not be leaving the job, and k
// other servers must remain to hold the backups.
func (c *Coordinator) canReplicateMove(r *routing.Routes, begin, end uint64, to int32) error {
	if c.replicas == 0 {
		return nil
	}
	c.mu.Lock()
	leaving := c.leaving[to]
	c.mu.Unlock()
	if leaving {
		return fmt.Errorf("coord: keys [%d, %d) cannot move to node %d: it is being drained", begin, end, to)
	}
	if n := len(c.backupCandidates()); n < c.replicas+1 {
		return fmt.Errorf("coord: keys [%d, %d) cannot move to node %d: PS_REPLICAS=%d keeps %d copies of them, and only %d servers would hold them (add a server with 'elasticps ctl add' first)",
			begin, end, to, c.replicas, c.replicas+1, n)
	}
	return nil
}

// placeBackups tops r's backups up to k with replica.Place over the
// servers of ids that are not being drained, and keeps a server being
// drained as the last backup of each interval it backs up in r: its copy
// counts until the drain's handOverBackups has seeded its heirs.
func (c *Coordinator) placeBackups(r *routing.Routes, ids []int32) (out *routing.Routes, changed bool) {
	c.mu.Lock()
	leaving := maps.Clone(c.leaving)
	c.mu.Unlock()
	out, _ = replica.Place(r, slices.DeleteFunc(slices.Clone(ids), func(id int32) bool { return leaving[id] }), c.replicas)
	for i := range out.Intervals {
		iv := &out.Intervals[i]
		if !slices.Contains(ids, iv.Node) {
			// Lost: its primary is gone and no copy was left to promote.
			// Nobody could seed a backup of it, and a backup listed would
			// keep the workers waiting for a failover that cannot come.
			iv.Backups = nil
			changed = changed || len(r.Intervals[i].Backups) > 0
			continue
		}
		for _, b := range r.Intervals[i].Backups {
			if leaving[b] && b != iv.Node && !iv.HasBackup(b) {
				iv.Backups = append(slices.Clone(iv.Backups), b)
			}
		}
		changed = changed || !slices.Equal(iv.Backups, r.Intervals[i].Backups)
	}
	return out, changed
}

// backupCandidates are the servers that may hold copies: live, and not
// being drained.
func (c *Coordinator) backupCandidates() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.DeleteFunc(c.live(c.Servers()), func(id int32) bool { return c.leaving[id] })
}

// moveBackups chooses the backups of mv's keys in r2, the table that
// commits mv: the old owner's backups are kept except the new owner, and
// replica.Place tops them up to k. Before the new owner serves the keys,
// each backup of all of them gets state, the old owner's export: from the
// export until the new owner's own seeding of its backups, the backups
// kept hold every acknowledged push (the old owner forwarded each before
// it acknowledged it, and the new owner acknowledges nothing before that
// seeding), and new ones hold them from here on. The caller holds moveMu.
func (c *Coordinator) moveBackups(r2 *routing.Routes, mv elastic.Move, state []byte) *routing.Routes {
	for i := range r2.Intervals {
		iv := &r2.Intervals[i]
		if iv.Begin >= mv.Begin && iv.End <= mv.End && iv.Node == mv.To {
			iv.Backups = slices.DeleteFunc(slices.Clone(iv.Backups), func(b int32) bool { return b == mv.To })
		}
	}
	out, _ := c.placeBackups(r2, c.live(c.Servers()))
	var common []int32 // the backups of every moved interval
	first := true
	for i, iv := range out.Intervals {
		if iv.Begin < mv.Begin || iv.End > mv.End {
			continue
		}
		if first {
			common, first = slices.Clone(iv.Backups), false
			continue
		}
		common = slices.DeleteFunc(common, func(b int32) bool { return !out.Intervals[i].HasBackup(b) })
	}
	for _, b := range common {
		seed := elastic.Move{Begin: mv.Begin, End: mv.End, From: mv.To, To: b, Epoch: out.Epoch}
		if _, err := c.link.Call(b, elastic.MsgSeed, elastic.MarshalSeed(seed, state), c.Timeout); err != nil {
			// The new owner seeds it too, once the move commits.
			c.log.Warn("coord: a moved interval's backup did not take the exported state; the new owner seeds it", "move", fmt.Sprintf("%+v", mv), "backup", b, "err", err)
		}
	}
	return out
}

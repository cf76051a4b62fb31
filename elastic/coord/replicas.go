package coord

import (
	"fmt"
	"slices"
	"time"

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
	out, changed := replica.Place(r, live, c.replicas)
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
	out, _ = replica.Place(out, live, c.replicas)
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

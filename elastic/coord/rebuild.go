package coord

import (
	"fmt"

	"github.com/elasticps/elasticps/routing"
)

// rebuild takes over the routing table of a running job on a restarted
// scheduler (postoffice.OnRebuild): each node re-registered with the table
// it holds, and the newest of them (the highest epoch) is the job's. The
// coordinator publishes it from then on; a node that holds an older one
// gets it in the background. It runs on the scheduler's driver before the
// node is ready: it does not block.
func (c *Coordinator) rebuild(states map[int32][]byte) {
	var newest *routing.Routes
	var holder int32
	epochs := map[int32]uint64{}
	for id, b := range states {
		if len(b) == 0 {
			continue
		}
		r, err := routing.UnmarshalRoutes(b)
		if err != nil {
			c.log.Error("coord: a node re-registered with a routing table that does not decode; it is sent the job's", "node", id, "err", err)
			continue
		}
		epochs[id] = r.Epoch
		if newest == nil || r.Epoch > newest.Epoch || r.Epoch == newest.Epoch && id < holder {
			newest, holder = r, id
		}
	}
	if newest != nil && c.table.Update(newest) {
		c.link.Metrics().RoutingEpoch.Set(float64(newest.Epoch))
	}
	cur := c.table.Current()
	// Moves wait for the moves the old scheduler left half-done to be
	// ended (so do failovers of servers found dead now): nothing holds
	// the lock this early, unless a control request raced the rebuild.
	locked := c.moveMu.TryLock()
	go c.resolveInterrupted(locked) // with PS_REPLICAS, it learns the seeded copies first
	c.log.Info("coord: routing table taken over from the running job", "epoch", cur.Epoch, "from_node", holder, "routes", describe(cur))
	for id, e := range epochs {
		c.ack(id, e)
		if e < cur.Epoch {
			c.lag(id, fmt.Sprintf("re-registered holding routing epoch %d, the job's is %d", e, cur.Epoch))
			c.kick(id)
		}
	}
}

package postoffice

import (
	"errors"
	"fmt"

	"github.com/elasticps/elasticps/message"
)

// Instance groups (Config.GroupSize, DMLC_GROUP_SIZE): a server or worker
// process runs GroupSize nodes, its instances, each with its own
// Postoffice and transport. Instance i of the process of rank r has rank
// r*GroupSize+i. The node table holds every instance; NumServers and
// NumWorkers, the key ranges and the routing of kv.Worker count processes:
// server rank r of instance i's view is the node of rank r*GroupSize+i, so
// each instance of a worker talks to the same instance of every server.

// groupSize is Config.GroupSize, at least 1.
func (c *Config) groupSize() int { return max(c.GroupSize, 1) }

// validateGroup checks the instance group and preferred rank settings.
func (c *Config) validateGroup() error {
	g := c.groupSize()
	if c.GroupSize < 0 {
		return fmt.Errorf("postoffice: GroupSize=%d (DMLC_GROUP_SIZE): want 1 or more instances per process", c.GroupSize)
	}
	if c.Instance < 0 || c.Instance >= g {
		return fmt.Errorf("postoffice: Instance=%d: want 0 to %d (DMLC_GROUP_SIZE=%d)", c.Instance, g-1, g)
	}
	if c.WantRank < 0 {
		return fmt.Errorf("postoffice: WantRank=%d: want the rank plus one, or 0 for none", c.WantRank)
	}
	if g == 1 {
		return nil
	}
	if c.Elastic || c.Replicas > 0 || c.Standby {
		return fmt.Errorf("postoffice: DMLC_GROUP_SIZE=%d cannot be combined with PS_ELASTIC, PS_REPLICAS or PS_STANDBY: unset DMLC_GROUP_SIZE or those", g)
	}
	return nil
}

// checkGroupRank says why this node cannot register (nil: it can): with
// instance groups every instance needs its process's rank. Checked at
// Start, so that SetWantRank may come after New.
func (c *Config) checkGroupRank() error {
	if g := c.groupSize(); g > 1 && c.Role != message.RoleScheduler && c.WantRank == 0 {
		return fmt.Errorf("postoffice: DMLC_GROUP_SIZE=%d needs this %s's rank: set DMLC_RANK (0 to %d) or pass StartPS a rank >= 0", g, c.Role, c.roleCount()-1)
	}
	return nil
}

// SetWantRank sets the rank this node's process asks for (rank < 0:
// none), as Config.WantRank does; only before Start (the BytePS fork's
// StartPS passes it when it starts).
func (p *Postoffice) SetWantRank(rank int) error {
	p.startMu.Lock()
	defer p.startMu.Unlock()
	if p.started {
		return errors.New("postoffice: SetWantRank after Start: the node has registered already")
	}
	p.mu.Lock()
	p.cfg.WantRank = int(message.WantRankOf(rank))
	p.myNode.WantRank = p.cfg.wantedInstanceRank()
	p.mu.Unlock()
	return nil
}

// roleCount is the number of processes of this node's role.
func (c *Config) roleCount() int {
	if c.Role == message.RoleServer {
		return c.NumServers
	}
	return c.NumWorkers
}

// wantedInstanceRank is the WantRank of this node's registration: its
// process's rank times GroupSize plus its instance (0: none).
func (c *Config) wantedInstanceRank() int32 {
	if c.WantRank <= 0 || c.Role == message.RoleScheduler {
		return 0
	}
	return message.WantRankOf((c.WantRank-1)*c.groupSize() + c.Instance)
}

// GroupSize is the job's instances per process (DMLC_GROUP_SIZE, 1
// without instance groups).
func (p *Postoffice) GroupSize() int { return p.cfg.groupSize() }

// Instance is which instance of its process this node is (0 without
// instance groups).
func (p *Postoffice) Instance() int { return p.cfg.Instance }

// GroupRank is the rank of this node's process: MyRank divided by
// GroupSize (ps::MyRank of the BytePS fork).
func (p *Postoffice) GroupRank() int { return p.MyRank() / p.cfg.groupSize() }

// InstanceID is the node id of instance Instance of the process of rank
// r and role (the fork's GroupServerRankToInstanceID and
// GroupWorkerRankToInstanceID).
func (p *Postoffice) InstanceID(role message.Role, r int) int32 {
	ir := r*p.cfg.groupSize() + p.cfg.Instance
	if role == message.RoleServer {
		return int32(message.ServerRankToID(ir))
	}
	return int32(message.WorkerRankToID(ir))
}

// GroupID is the node id of the first instance's rank of id's process
// with GroupSize 1 (the fork's WorkerRankToID(InstanceIDtoGroupRank(id))):
// what a C++ KVServer of the fork reports as a request's sender.
func (p *Postoffice) GroupID(id int32) int32 {
	if id == message.SchedulerID || id < 8 {
		return id
	}
	gr := message.IDToRank(int(id)) / p.cfg.groupSize()
	if id%2 == 0 {
		return int32(message.ServerRankToID(gr))
	}
	return int32(message.WorkerRankToID(gr))
}

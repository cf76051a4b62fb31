package postoffice

import (
	"fmt"
	"slices"

	"github.com/elasticps/elasticps/message"
)

// Registration of a server or worker: the scheduler side is the driver's
// (schedrole.go).

// connectScheduler opens the path to the scheduler, the first a server or
// worker needs.
func (p *Postoffice) connectScheduler() error {
	if err := p.tr.Connect(p.schedulerNode(), message.Empty); err != nil {
		return fmt.Errorf("postoffice: cannot connect to the scheduler at %s:%d: %w", p.cfg.SchedulerHost, p.cfg.SchedulerPort, err)
	}
	return nil
}

// register sends customer customerID's ADD_NODE to the scheduler.
func (p *Postoffice) register(customerID int) error {
	p.mu.Lock()
	if !slices.Contains(p.registered, int32(customerID)) {
		p.registered = append(p.registered, int32(customerID))
	}
	p.mu.Unlock()
	n := p.MyNode()
	n.ID = message.Empty
	n.CustomerID = int32(customerID)
	n.Standby = p.cfg.Standby
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Recver = message.SchedulerID
	m.Meta.Control.Cmd = message.CmdAddNode
	m.Meta.Control.Nodes = []message.Node{n}
	if err := p.sendControl(m); err != nil {
		return fmt.Errorf("postoffice: cannot register with the scheduler at %s:%d: %w", p.cfg.SchedulerHost, p.cfg.SchedulerPort, err)
	}
	return nil
}

// nodeAddNode handles the scheduler's node list on a server or worker.
func (p *Postoffice) nodeAddNode(m *message.Message) {
	if m.Meta.Sender != message.SchedulerID {
		p.reject(fmt.Errorf("ADD_NODE node list from node %d; only the scheduler (id 1) sends node lists", m.Meta.Sender))
		return
	}
	p.mu.Lock()
	mine, found := message.Node{}, false
	for _, n := range m.Meta.Control.Nodes {
		// The last entry with this address: a server that joined as a
		// standby at a dead server's address comes after that server.
		if n.Hostname == p.myNode.Hostname && n.Port == p.myNode.Port && (p.myNode.ID == message.Empty || n.IsRecovery) {
			mine, found = n, true
		}
	}
	if found {
		p.myNode = mine
		p.myID.Store(mine.ID)
	}
	me := p.myNode
	var recovered []message.Node
	var toConnect []message.Node
	retired := map[int32]message.Node{}
	for _, n := range m.Meta.Control.Nodes {
		if n.IsRecovery && n.ID != me.ID {
			recovered = append(recovered, n)
		}
		a := addrOf(n)
		old, ok := p.connected[a]
		if ok && old != n.ID {
			retired[old] = n // a new id at a gone node's address
		}
		if !ok || old != n.ID {
			p.connected[a] = n.ID
			toConnect = append(toConnect, n)
		}
	}
	p.mu.Unlock()
	for _, n := range recovered {
		p.nodeRecovered(n)
	}
	for old, n := range retired {
		p.retirePath(old, n)
	}
	if me.ID == message.Empty {
		p.reject(fmt.Errorf("ADD_NODE node list does not contain this node (%s:%d)", me.Hostname, me.Port))
		return
	}
	reportRank(message.IDToRank(int(me.ID)) / p.cfg.groupSize())
	for _, n := range toConnect {
		// Workers never talk to workers, nor servers to servers, but
		// with PS_REPLICAS a primary forwards pushes to its backups.
		if n.Role == me.Role && n.ID != me.ID && (me.Role != message.RoleServer || p.cfg.Replicas == 0) {
			continue
		}
		if err := p.tr.Connect(n, me.ID); err != nil {
			p.log.Error("cannot connect to peer", "peer", n.String(), "err", err)
			continue
		}
		p.vlog(1, "connected", "peer", n.String())
	}
	if p.isReady() {
		p.vlog(1, "peer list updated (recovery)", "nodes", fmt.Sprint(m.Meta.Control.Nodes))
		if _, lost := p.SchedulerLost(); lost {
			// the node list answers this node's re-registration
			p.schedulerBack()
		}
		return
	}
	p.heardScheduler()
	p.shareHostCPUs(me, m.Meta.Control.Nodes)
	p.vlog(1, "node is connected to others", "node", me.String())
	p.markReady()
}

// registeredCustomers are the customers this node registered (Start), in
// order; [0] before any did.
func (p *Postoffice) registeredCustomers() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.registered) == 0 {
		return []int32{0}
	}
	return slices.Clone(p.registered)
}

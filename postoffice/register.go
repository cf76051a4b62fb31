package postoffice

import (
	"fmt"
	"time"

	"github.com/elasticps/elasticps/message"
)

// nodeAddNode handles the scheduler's node list on a server or worker.
func (p *Postoffice) nodeAddNode(m *message.Message) {
	if m.Meta.Sender != message.SchedulerID {
		p.reject(fmt.Errorf("ADD_NODE node list from node %d; only the scheduler (id 1) sends node lists", m.Meta.Sender))
		return
	}
	p.mu.Lock()
	for _, n := range m.Meta.Control.Nodes {
		if n.Hostname == p.myNode.Hostname && n.Port == p.myNode.Port {
			if p.myNode.ID == message.Empty || n.IsRecovery {
				p.myNode = n
				p.myID.Store(n.ID)
			}
		}
	}
	me := p.myNode
	var toConnect []message.Node
	for _, n := range m.Meta.Control.Nodes {
		a := addrOf(n)
		if _, ok := p.connected[a]; !ok {
			p.connected[a] = n.ID
			toConnect = append(toConnect, n)
		}
		if !n.IsRecovery && n.Role == message.RoleServer {
			p.numSeen[0]++
		}
		if !n.IsRecovery && n.Role == message.RoleWorker {
			p.numSeen[1]++
		}
	}
	p.mu.Unlock()
	if me.ID == message.Empty {
		p.reject(fmt.Errorf("ADD_NODE node list does not contain this node (%s:%d)", me.Hostname, me.Port))
		return
	}
	for _, n := range toConnect {
		// Workers never talk to workers, nor servers to servers.
		if n.Role == me.Role && n.ID != me.ID {
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
		return
	}
	p.hbMu.Lock()
	p.heartbeats[message.SchedulerID] = time.Now()
	p.hbMu.Unlock()
	p.shareHostCPUs(me, m.Meta.Control.Nodes)
	p.vlog(1, "node is connected to others", "node", me.String())
	p.markReady()
}

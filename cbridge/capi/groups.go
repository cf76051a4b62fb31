package main

import (
	"fmt"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// Instance groups (DMLC_GROUP_SIZE, the BytePS fork's): a server, worker
// or JOINT process runs GroupSize instances of each of its nodes, each a
// Postoffice of its own with its own transport and rank
// (rank*GroupSize+instance). C++ names them by slot: slotMain or
// slotWorker plus twice the instance (Postoffice::GetServer(i),
// GetWorker(i)); KVServer and KVWorker take the instance.

// openInstances opens instances 1 to GroupSize-1 of first, a node of role;
// node.mu is held.
func openInstances(first *postoffice.Postoffice, role int) ([]*postoffice.Postoffice, error) {
	var out []*postoffice.Postoffice
	if first.Role() == message.RoleScheduler {
		return nil, nil
	}
	for i := 1; i < first.GroupSize(); i++ {
		po, _, err := openNode(role, i)
		if err != nil {
			for _, o := range out {
				o.Stop()
			}
			return nil, fmt.Errorf("elasticps: instance %d of this %s process (DMLC_GROUP_SIZE=%d): %w", i, first.Role(), first.GroupSize(), err)
		}
		out = append(out, po)
	}
	return out, nil
}

// stopNodes stops every node of the process and forgets them; node.mu is
// held.
func stopNodes() {
	for _, po := range append([]*postoffice.Postoffice{node.po, node.worker}, append(node.more, node.moreWorkers...)...) {
		if po != nil {
			po.Stop()
		}
	}
	node.po, node.elastic, node.worker, node.workerElastic = nil, nil, nil, nil
	node.more, node.moreWorkers = nil, nil
}

// processNodes lists every node of the process: instance 0 (and a JOINT
// process's worker), then the other instances.
func processNodes() []*postoffice.Postoffice {
	node.mu.Lock()
	defer node.mu.Unlock()
	var out []*postoffice.Postoffice
	for _, po := range []*postoffice.Postoffice{node.po, node.worker} {
		if po != nil {
			out = append(out, po)
		}
	}
	out = append(out, node.more...)
	return append(out, node.moreWorkers...)
}

// slotNode is the existing node of slot: instance slot/2, the JOINT
// process's worker node if slot is odd (the main node in any other
// process).
func slotNode(slot int) (*postoffice.Postoffice, error) {
	node.mu.Lock()
	defer node.mu.Unlock()
	if node.po == nil {
		return nil, fmt.Errorf("elasticps: the node is not running (slot %d)", slot)
	}
	if slot < 0 {
		return nil, fmt.Errorf("elasticps: instance %d: instances are numbered from 0", slot/2)
	}
	inst, worker := slot/2, slot%2 == slotWorker && node.worker != nil
	first, more := node.po, node.more
	if worker {
		first, more = node.worker, node.moreWorkers
	}
	if inst == 0 {
		return first, nil
	}
	if inst-1 >= len(more) {
		return nil, fmt.Errorf("elasticps: instance %d of this %s process does not exist: DMLC_GROUP_SIZE=%d gives instances 0 to %d", inst, first.Role(), first.GroupSize(), first.GroupSize()-1)
	}
	return more[inst-1], nil
}

// instanceSlot is the slot of instance of a KVWorker (worker) or a
// KVServer.
func instanceSlot(instance int, worker bool) int {
	if worker {
		return 2*instance + slotWorker
	}
	return 2*instance + slotMain
}

// instanceSender is the node a C++ KVServer's answer to sender (a worker
// process's id, as it saw the request) goes to: that process's instance
// of the server's instance.
func instanceSender(po *postoffice.Postoffice, sender int32) int32 {
	if po.GroupSize() == 1 || sender < 8 || sender%2 == 0 {
		return sender
	}
	return po.InstanceID(message.RoleWorker, message.IDToRank(int(sender)))
}

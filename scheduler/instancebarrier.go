package scheduler

import "github.com/elasticps/elasticps/message"

// InstanceBarrier handles the BytePS fork's INSTANCE_BARRIER request (cmd
// 9), which its nodes send in Start and Finalize. The fork's scheduler
// counts every instance of the group and answers each with an
// INSTANCE_BARRIER; that is a BARRIER's count without instance groups
// (DMLC_GROUP_SIZE), so the arrival joins the group's barrier round and is
// answered with the command it came with.
func (s *State) InstanceBarrier(sender int32, appID, customerID int32, group int32) Actions {
	k := arrival{sender, customerID}
	if s.instance == nil {
		s.instance = map[arrival]bool{}
	}
	s.instance[k] = true
	a := s.memberBarrier(sender, appID, customerID, group)
	if round := s.barrier[int(group)]; !round[k] {
		// Released at once, or dropped: nothing waits for the answer.
		delete(s.instance, k)
	}
	return a
}

// releaseOrder lists members with the workers last. A C++ server (dmlc's
// or the fork's test programs, BytePS) creates its KVServer only after the
// start barrier, and its receive thread waits at most 5 s for a customer,
// on the one thread that would also deliver the barrier's release: a
// worker released first can push to a server that is still waiting for its
// release and abort it. Releasing the workers last makes that unlikely;
// nothing orders messages that travel on different connections.
func (s *State) releaseOrder(members []int32) []int32 {
	out := make([]int32, 0, len(members))
	for pass := range 2 {
		for _, id := range members {
			n, _ := s.node(id)
			if (n.Role == message.RoleWorker) == (pass == 1) {
				out = append(out, id)
			}
		}
	}
	return out
}

// releaseCmd is the command of the barrier release to node to: what it
// asked with.
func (s *State) releaseCmd(to, customerID int32) message.Command {
	k := arrival{to, customerID}
	if s.instance[k] {
		delete(s.instance, k)
		return message.CmdInstanceBarrier
	}
	return message.CmdBarrier
}

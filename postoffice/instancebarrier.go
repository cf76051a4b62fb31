package postoffice

import "github.com/elasticps/elasticps/message"

// The BytePS fork's Start and Finalize meet in an INSTANCE_BARRIER (cmd 9)
// on every node rather than a BARRIER, and its scheduler counts the two in
// separate rounds. On the fork's wire (PS_WIRE=bytedance) this node does
// the same in JobBarrier (StartWithBarrier and Finalize use it), so that it
// is counted in the same round as the fork's nodes under either scheduler;
// Barrier stays a BARRIER, as Postoffice::Barrier is in the fork. With
// instance groups (Config.GroupSize > 1) it is an INSTANCE_BARRIER on
// either wire: the scheduler then counts a BARRIER by processes.

// JobBarrier is the barrier on every node that ps::Start and ps::Finalize
// do: Barrier(customerID, message.AllGroup), sent as the fork's
// INSTANCE_BARRIER on its wire. Programs that start or end a job with their
// own barrier call it instead of Barrier.
func (p *Postoffice) JobBarrier(customerID int) error {
	cmd := message.CmdBarrier
	if p.cfg.Wire == message.WireBytedance || p.cfg.groupSize() > 1 {
		cmd = message.CmdInstanceBarrier
	}
	return p.barrier(customerID, message.AllGroup, cmd)
}

// isBarrierCmd reports whether c is a barrier request or release of either
// kind.
func isBarrierCmd(c message.Command) bool {
	return c == message.CmdBarrier || c == message.CmdInstanceBarrier
}

package scheduler

import (
	"fmt"
	"slices"
)

// groupBarrier is a BARRIER of a job with instance groups (Config.GroupSize
// > 1), as the BytePS fork's scheduler counts it: the round is complete
// when as many requests arrived as the group has processes (its instances
// divided by GroupSize, the scheduler counting as one), and only the
// requesters are released. A process takes part through any one of its
// instances (BytePS uses instance 0); the instance barriers of Start and
// Finalize (InstanceBarrier) still wait for every instance.
//
// Unlike the fork, a repeated request of one instance and customer in a
// round (a resend) counts once.
func (s *State) groupBarrier(sender int32, appID, customerID int32, group int32) Actions {
	a, ok := s.barrierValid(sender, group)
	if !ok {
		return a
	}
	ids := s.groups[int(group)]
	if !s.isMember(int(group), sender) {
		a.Send = append(a.Send, s.barrierRelease(sender, appID, customerID, group))
		return a
	}
	if s.groupRounds == nil {
		s.groupRounds = map[int][]arrival{}
	}
	k := arrival{sender, customerID}
	round := s.groupRounds[int(group)]
	if !slices.Contains(round, k) {
		round = append(round, k)
	}
	need := groupBarrierNeed(len(ids), int(group), s.cfg.GroupSize)
	a.Events = append(a.Events, fmt.Sprintf("group barrier count for group %d: %d/%d", group, len(round), need))
	if len(round) < need {
		s.groupRounds[int(group)] = round
		return a
	}
	delete(s.groupRounds, int(group))
	for _, r := range round {
		if !s.IsAlias(r.node) {
			a.Send = append(a.Send, s.barrierRelease(r.node, appID, customerID, group))
		}
	}
	return a
}

// groupBarrierNeed is how many requests complete a group barrier on group
// (ids members) with groupSize instances per process: one for the
// scheduler alone, the processes plus the scheduler for a group that holds
// it, the processes otherwise.
func groupBarrierNeed(ids, group, groupSize int) int {
	switch {
	case group == 1:
		return 1
	case group&1 != 0:
		return (ids-1)/groupSize + 1
	default:
		return ids / groupSize
	}
}

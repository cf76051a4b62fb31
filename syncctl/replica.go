package syncctl

// Snapshot encodes the sync state of keys [begin, end) as Export does,
// without removing it or anything parked: a copy for a backup server
// (PS_REPLICAS), which Imports it in place of its older copy. BSP's pull
// debts (a worker pushed and did not pull since) are left out: pulls are
// not replicated, so a backup cannot know which were answered after the
// copy, and a debt the worker already paid would hold every later push
// of the key once the backup is promoted. After a failover a worker's
// re-sent pull of round t may therefore see pushes of round t+1 that
// reached the new primary first.
func (c *Controller) Snapshot(begin, end uint64) []byte {
	ks := c.sortedKeys(begin, end)
	cp := make([]*keyState, len(ks))
	for i, s := range ks {
		t := &keyState{key: s.key, tmin: s.tmin, entries: make([]entry, len(s.entries))}
		for j, e := range s.entries {
			t.entries[j] = entry{w: e.w, placeholder: e.placeholder, clock: e.clock}
		}
		cp[i] = t
	}
	return encodeState(cp)
}

// RoundClosed reports whether every one of keys has t_min >= iter: every
// worker pushed round iter of them, so BSP pulls of that round run. A key
// without state here counts as closed.
func (c *Controller) RoundClosed(keys []uint64, iter int64) bool {
	for _, k := range keys {
		if ks := c.keys[k]; ks != nil && ks.tmin < iter {
			return false
		}
	}
	return true
}

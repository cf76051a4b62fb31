package kv

import (
	"time"
)

// watchStale runs, with heartbeats on, until the worker closes or the node
// stops. While the scheduler is lost (postoffice.SchedulerLost) the data
// path goes on, but nobody would tell the worker that a server died: so
// every PS_HEARTBEAT_TIMEOUT/4 it fails the operations that have waited
// longer than PS_HEARTBEAT_TIMEOUT on a server that has not answered the
// node's liveness probes for as long (sweep; postoffice.HeardFrom), once
// the scheduler has been lost that long. A live server's operations, even
// one it holds for longer, go on waiting.
func (w *Worker) watchStale() {
	timeout := w.po.Config().HeartbeatTimeout
	if timeout <= 0 || w.po.Config().HeartbeatInterval <= 0 || !w.watching.CompareAndSwap(false, true) {
		return
	}
	t := time.NewTicker(max(timeout/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			before := now.Add(-timeout)
			if since, lost := w.po.SchedulerLost(); lost && since.Before(before) {
				w.enqueueSweep(&sweep{before: before})
			}
		case <-w.c.quit:
			return
		case <-w.po.Done():
			return
		}
	}
}

package postoffice

import (
	"fmt"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/scheduler"
)

// What a node says at the default log level while it joins a job: one line
// when it is up (role, address, transport), one when the job is complete,
// and, while it waits longer than waitReportFirst, what it waits for and
// why that usually happens, again at a slowing rate.

// waitReportFirst is how long a node waits for its job silently;
// waitReportMax is the longest gap between two of its reports. New reads
// them (tests change them).
var waitReportFirst, waitReportMax = 5 * time.Second, 30 * time.Second

// waitReport is a node's copy of waitReportFirst and waitReportMax.
type waitReport struct{ first, max time.Duration }

// mismatchHint lists the usual causes of a wait that never ends, for the
// reports of both sides.
const mismatchHint = "every node must use the same DMLC_PS_VAN_TYPE and PS_WIRE"

// announceUp logs, on the scheduler and on servers, that the node listens
// at me. Workers are the user's programs: they stay quiet.
func (p *Postoffice) announceUp(me message.Node) {
	switch p.cfg.Role {
	case message.RoleScheduler:
		p.log.Info("scheduler up", "id", me.ID, "addr", addrOf(me), "van", p.van,
			"servers", p.cfg.NumServers, "workers", p.cfg.NumWorkers)
	case message.RoleServer:
		p.log.Info("server up; registering with the scheduler", "addr", addrOf(me), "van", p.van,
			"scheduler", p.schedulerAddr())
	}
}

func (p *Postoffice) schedulerAddr() string { return addrOf(p.schedulerNode()) }

// reportUntilReady runs from Start until the node is ready or stopped:
// it reports the wait (reportWaiting) after waitReport.first, then after
// gaps doubling up to waitReport.max, and logs the complete line once ready.
// It only sleeps on a timer.
func (p *Postoffice) reportUntilReady() {
	start := time.Now()
	gap := p.waitReport.first
	t := time.NewTimer(gap)
	defer t.Stop()
	for {
		select {
		case <-p.ready:
			p.announceComplete()
			return
		case <-p.stopped:
			return
		case <-t.C:
			p.reportWaiting(time.Since(start).Round(time.Second))
			gap = min(2*gap, p.waitReport.max)
			t.Reset(gap)
		}
	}
}

// reportWaiting logs, at warning level, what the node has been waiting for
// since waited.
func (p *Postoffice) reportWaiting(waited time.Duration) {
	if p.cfg.Role != message.RoleScheduler {
		p.log.Warn(fmt.Sprintf("%s still waiting for the job: no node list from the scheduler at %s after %s; "+
			"usual causes: the scheduler is not started, DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT do not point at it, "+
			"this node's DMLC_PS_VAN_TYPE=%s differs from the scheduler's (%s), "+
			"or the scheduler still waits for other nodes (DMLC_NUM_SERVER=%d, DMLC_NUM_WORKER=%d)",
			p.cfg.Role, p.schedulerAddr(), waited, p.van, mismatchHint, p.cfg.NumServers, p.cfg.NumWorkers),
			"waiting_for", "scheduler", "scheduler", p.schedulerAddr(), "van", p.van, "waited", waited)
		return
	}
	servers, workers := -1, -1
	p.driver.query(func(s *scheduler.State) {
		servers, workers = s.Registered(message.RoleServer), s.Registered(message.RoleWorker)
	})
	if servers < 0 {
		return // stopping
	}
	p.log.Warn(fmt.Sprintf("scheduler still waiting for nodes to register at %s after %s: %d of %d servers, %d of %d workers; "+
		"usual causes: the missing nodes are not started, their DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT point elsewhere, "+
		"their DMLC_PS_VAN_TYPE differs from this scheduler's %s (%s), "+
		"or DMLC_NUM_SERVER/DMLC_NUM_WORKER are larger than the nodes started",
		p.schedulerAddr(), waited, servers, p.cfg.NumServers, workers, p.cfg.NumWorkers, p.van, mismatchHint),
		"waiting_for", "nodes", "servers", servers, "workers", workers, "van", p.van, "waited", waited)
}

// announceComplete logs, on the scheduler and on servers, that every node
// of the job registered.
func (p *Postoffice) announceComplete() {
	me := p.MyNode()
	switch p.cfg.Role {
	case message.RoleScheduler:
		p.log.Info("job complete: all nodes registered", "servers", p.cfg.NumServers, "workers", p.cfg.NumWorkers)
	case message.RoleServer:
		msg := "server ready: job complete"
		if p.cfg.Standby {
			msg = "standby server ready: joined the running job"
		}
		p.log.Info(msg, "rank", message.IDToRank(int(me.ID)), "id", me.ID, "addr", addrOf(me), "van", p.van,
			"servers", p.cfg.NumServers, "workers", p.cfg.NumWorkers)
	}
}

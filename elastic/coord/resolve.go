package coord

import (
	"errors"
	"fmt"
	"slices"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/routing"
)

// A scheduler that dies in the middle of a move leaves it half-done: the
// old owner has fixed a cut-over (and may have exported the keys), the new
// owner parks requests for them (and may have installed them), and the
// table of the job may still mark them as migrating. A restarted scheduler
// asks every live server which moves it is in the middle of (MsgMoves) and
// ends each one before any other reconfiguration:
//
//   - the new owner installed the keys: the move is completed (its commit
//     table goes out);
//   - it did not, and the old owner holds the keys or their export: the
//     move is rolled back (the export installed back on the old owner
//     first);
//   - no live server holds them (the old owner died, or it exported them
//     and the new owner died, which may have applied pushes since): they
//     are routed to the dead server, so that requests for them fail
//     (kv.DeadServerError) rather than being answered empty, and reported
//     lost (postoffice.ReportKeysLost): Finalize fails on every node,
//     naming the range.

// The phases of a move after which ELASTICPS_TEST_MOVE_HALT can stop the
// scheduler's coordinator (see halt).
const (
	PhasePrepare = "prepare" // the old owner fixed the cut-over
	PhaseRoutes  = "routes"  // the move's first table went out
	PhaseExport  = "export"  // the old owner's export arrived
	PhaseImport  = "import"  // the new owner installed the keys
	PhaseCommit  = "commit"  // the servers have the move's last table, the workers not yet
)

// halt stops the move for good after phase when the coordinator was told
// to (ELASTICPS_TEST_MOVE_HALT): a test then kills the scheduler there,
// as if it died between the move's phases, and restarts it.
func (c *Coordinator) halt(phase string, mv elastic.Move) {
	if c.haltAfter != phase {
		return
	}
	c.log.Warn("coord: halted the move after its phase, as ELASTICPS_TEST_MOVE_HALT says: kill the scheduler now", "phase", phase, "move", fmt.Sprintf("%+v", mv))
	<-c.po.Done()
}

// interrupted is one move a restarted scheduler found half-done.
type interrupted struct {
	mv        elastic.Move
	from      elastic.MoveStage // the old owner's stage (0: it reported none)
	state     []byte            // the old owner's export (MoveExported)
	installed bool              // the new owner reported MoveInstalled
}

// resolveInterrupted ends the moves the previous scheduler left half-done.
// It runs once the rebuilt node is ready, before any move; locked says
// that rebuild took moveMu for it already.
func (c *Coordinator) resolveInterrupted(locked bool) {
	if !locked {
		c.moveMu.Lock()
	}
	defer c.moveMu.Unlock()
	select {
	case <-c.po.Ready():
	case <-c.po.Done():
		return
	}
	live := c.live(c.Servers())
	reports := map[int32][]elastic.MoveReport{}
	answered := map[int32]bool{}
	for _, id := range live {
		ans, err := c.link.Call(id, elastic.MsgMoves, nil, c.Timeout)
		if err != nil {
			c.log.Warn("coord: a server did not say which moves it is in the middle of; it counts as holding none of their keys", "node", id, "err", err)
			continue
		}
		rs, err := elastic.UnmarshalMoveReports(ans)
		if err != nil {
			c.log.Error("coord: a server's move reports do not decode; it counts as holding none of their keys", "node", id, "err", err)
			continue
		}
		answered[id] = true
		reports[id] = rs
	}
	if c.replicas > 0 {
		c.learnCopies(live)
	}
	moves := c.interruptedMoves(reports)
	for _, im := range moves {
		c.resolve(im, answered)
	}
	if len(moves) == 0 && c.po.Verbose() >= 1 {
		c.log.Info("coord: no move was left half-done by the previous scheduler", "servers", len(answered))
	}
}

// interruptedMoves gathers the moves the servers' reports and the table
// show half-done: the old owner's cut names a move exactly, the new
// owner's install too; the table's migrating intervals and the new
// owner's parked ranges name the rest of it.
func (c *Coordinator) interruptedMoves(reports map[int32][]elastic.MoveReport) []*interrupted {
	var out []*interrupted
	find := func(mv elastic.Move) *interrupted {
		for _, im := range out {
			if im.mv.From == mv.From && im.mv.To == mv.To && mv.Begin < im.mv.End && im.mv.Begin < mv.End {
				return im
			}
		}
		return nil
	}
	add := func(mv elastic.Move) *interrupted {
		im := find(mv)
		if im == nil {
			im = &interrupted{mv: mv}
			out = append(out, im)
			return im
		}
		im.mv.Begin, im.mv.End = min(im.mv.Begin, mv.Begin), max(im.mv.End, mv.End)
		im.mv.Epoch = max(im.mv.Epoch, mv.Epoch)
		return im
	}
	ids := slices.Sorted(func(yield func(int32) bool) {
		for id := range reports {
			if !yield(id) {
				return
			}
		}
	})
	// Exact moves first (cuts and installs), then what widens them.
	for _, exact := range []bool{true, false} {
		for _, id := range ids {
			for _, r := range reports[id] {
				isExact := r.Stage != elastic.MoveParked
				if isExact != exact {
					continue
				}
				if r.Stage == elastic.MoveParked && find(r.Move) != nil {
					continue
				}
				im := add(r.Move)
				switch r.Stage {
				case elastic.MoveKept, elastic.MoveExported:
					im.from, im.state = r.Stage, r.State
				case elastic.MoveInstalled:
					im.installed = true
				}
			}
		}
	}
	cur := c.table.Current()
	for _, iv := range cur.Intervals {
		if iv.Prev != 0 && find(elastic.Move{Begin: iv.Begin, End: iv.End, From: iv.Prev, To: iv.Node}) == nil {
			add(elastic.Move{Begin: iv.Begin, End: iv.End, From: iv.Prev, To: iv.Node, Epoch: cur.Epoch})
		}
	}
	return out
}

// resolve completes, rolls back or reports lost one interrupted move;
// answered are the servers that reported their moves. The caller holds
// moveMu.
func (c *Coordinator) resolve(im *interrupted, answered map[int32]bool) {
	mv := im.mv
	// The table the move was interrupted in, at least at the move's
	// epoch: every table published now is newer than the move's, which
	// ends its cut on the old owner.
	r1 := c.table.Current().Clone()
	r1.Epoch = max(r1.Epoch, mv.Epoch)
	res := Result{Move: mv}
	fromHere, toHere := answered[mv.From], answered[mv.To]
	var outcome string
	var err error
	cur := c.table.Current()
	switch {
	case cur.Epoch > mv.Epoch && routesTo(cur, mv, mv.To):
		// Its commit table had gone out (the servers that lack it get
		// it: rebuild): the new owner may have applied pushes since.
		outcome = "completed already"
	case cur.Epoch > mv.Epoch && routesTo(cur, mv, mv.From):
		outcome = "rolled back already"
		if im.from == elastic.MoveExported && len(im.state) > 0 {
			// The table went out before the export came back; the old
			// owner has applied nothing since it exported.
			if err = c.returnState(mv, im.state, errors.New("the move was rolled back before the export came back")); err == nil {
				outcome = "rolled back already (the export went back to the old owner)"
			} else {
				outcome, err = "lost", c.lose(r1, mv, mv.From, fmt.Sprintf("a move of them from server %d to server %d was rolled back after server %d exported them, and installing the export back on it failed: %v", mv.From, mv.To, mv.From, err), true)
			}
		}
	case im.installed:
		outcome, err = "completed", c.complete(r1, im)
	case !toHere && im.from == elastic.MoveExported && c.replicas == 0:
		// The new owner may have installed them and applied pushes since:
		// the export lacks those. (With PS_REPLICAS a new owner applies
		// nothing before the commit table, so the export is whole.)
		outcome, err = "lost", c.lose(r1, mv, mv.To, fmt.Sprintf("a move of them from server %d to server %d was interrupted with the scheduler after server %d exported them, and server %d, which may have installed them and applied pushes since, is gone",
			mv.From, mv.To, mv.From, mv.To), true)
	case im.from == elastic.MoveExported && len(im.state) > 0:
		if err = c.returnState(mv, im.state, fmt.Errorf("the move was interrupted with the scheduler before server %d installed the keys", mv.To)); err == nil {
			c.rollback(r1, mv, true)
			outcome = "rolled back (the export went back to the old owner)"
		} else {
			outcome, err = "lost", c.lose(r1, mv, mv.From, fmt.Sprintf("a move of them from server %d to server %d was interrupted with the scheduler after the export, and installing the export back on server %d failed: %v", mv.From, mv.To, mv.From, err), true)
		}
	case fromHere:
		// The old owner holds the keys, or is exporting them now: its
		// export comes to this scheduler and goes back to it (rollback).
		c.rollback(r1, mv, false)
		outcome = "rolled back"
	case c.replicas > 0:
		// The old owner is gone; its backups hold the keys (they were
		// forwarded every push it applied): its failover decides.
		outcome, err = "rolled back to the dead old owner, for its failover", c.lose(r1, mv, mv.From, "", false)
	default:
		outcome, err = "lost", c.lose(r1, mv, mv.From, fmt.Sprintf("a move of them from server %d to server %d was interrupted with the scheduler before server %d installed them, and server %d, which held them, is gone",
			mv.From, mv.To, mv.To, mv.From), true)
	}
	c.log.Warn("coord: resolved a move the previous scheduler left half-done", "begin", mv.Begin, "end", mv.End, "from", mv.From, "to", mv.To,
		"epoch", mv.Epoch, "old_owner", im.from.String(), "installed", im.installed, "outcome", outcome, "err", err, "routing_epoch", c.table.Epoch())
	res.Err = err
	c.mu.Lock()
	c.history = append(c.history, res)
	c.mu.Unlock()
}

// complete publishes the commit table of a move whose new owner installed
// the keys. With PS_REPLICAS, the new owner's backups are seeded with the
// old owner's export first, when it still has it.
func (c *Coordinator) complete(r1 *routing.Routes, im *interrupted) error {
	mv := im.mv
	r2 := c.assign(r1, mv, mv.To)
	if c.replicas > 0 {
		if len(im.state) > 0 {
			r2 = c.moveBackups(r2, mv, im.state)
		} else {
			c.log.Warn("coord: the old owner's export of a completed move is gone; the new owner's backups are placed anew and seeded by it", "move", fmt.Sprintf("%+v", mv))
		}
	}
	r2.Coalesce()
	return c.publish(r2)
}

// lose routes mv's keys to dead, the gone server that held them last,
// so that every request for them fails (or, with PS_REPLICAS, goes to
// the backup its failover promotes), and with report says they are lost
// (postoffice.ReportKeysLost); why says what happened.
func (c *Coordinator) lose(r1 *routing.Routes, mv elastic.Move, dead int32, why string, report bool) error {
	if other := mv.From + mv.To - dead; len(c.live([]int32{other})) == 1 {
		if _, err := c.link.Call(other, elastic.MsgAbort, elastic.MarshalMove(mv, nil), c.Timeout); err != nil {
			c.log.Warn("coord: abort not acknowledged", "node", other, "err", err)
		}
	}
	var rerr error
	if report {
		// told before the table goes out: a node whose request for
		// the keys fails knows why
		c.log.Error("coord: the keys of an interrupted move are held by no live server; their values are lost", "begin", mv.Begin, "end", mv.End, "why", why)
		rerr = fmt.Errorf("coord: keys [%d, %d) are lost: %s", mv.Begin, mv.End, why)
		if err := c.po.ReportKeysLost(mv.Begin, mv.End, why); err != nil {
			rerr = errors.Join(rerr, err)
		}
	}
	r := c.assign(r1, mv, dead)
	r.Coalesce()
	return errors.Join(rerr, c.publish(r))
}

// assign is r1 in the next epoch with keys [mv.Begin, mv.End) on node
// and no interval migrating.
func (c *Coordinator) assign(r1 *routing.Routes, mv elastic.Move, node int32) *routing.Routes {
	r := r1.Split(mv.Begin, mv.End)
	r.Epoch = r1.Epoch + 1
	for i := range r.Intervals {
		iv := &r.Intervals[i]
		if iv.Begin >= mv.Begin && iv.End <= mv.End {
			iv.Node = node
		}
		iv.Prev, iv.CutSeq = 0, 0
	}
	return r
}

// routesTo reports whether r routes every key of mv's range to node, none of
// them migrating.
func routesTo(r *routing.Routes, mv elastic.Move, node int32) bool {
	for _, iv := range r.Intervals {
		if iv.Begin < mv.End && mv.Begin < iv.End && (iv.Node != node || iv.Prev != 0) {
			return false
		}
	}
	return true
}

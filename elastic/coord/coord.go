// Package coord is elastic mode's scheduler side: the migration coordinator: it carries out
// moves of key ranges between servers, one reconfiguration at a time, over
// the elastic control messages of package elastic. What to move is decided by
// package rebalance; how a move stays exactly-once is described in
// Coordinator.Move.
package coord

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
)

// Coordinator runs migrations on the scheduler.
type Coordinator struct {
	po    *postoffice.Postoffice
	link  *elastic.Link
	table *routing.Table // the job's authoritative routing table
	log   *slog.Logger

	// Timeout bounds each step (a node's answer, the old owner's export).
	Timeout time.Duration
	// PublishWait is how long a move waits for the nodes other than its
	// two servers to acknowledge a routing table. A node that has not by
	// then (a worker whose elastic link is stuck, a node that died) does
	// not hold the move up: its table only steers its requests, and the
	// servers redirect what it sends by an old one. It keeps being sent
	// the newest table in the background until it acknowledges one, and
	// later moves do not wait for it meanwhile (Lagging lists such nodes).
	PublishWait time.Duration

	// haltAfter, for tests of a scheduler that dies mid-move
	// (ELASTICPS_TEST_MOVE_HALT): the phase of Move after which it stops
	// for good, "" to run moves through.
	haltAfter string

	replicas int            // PS_REPLICAS: backups per interval (replicas.go)
	leaving  map[int32]bool // servers being drained: no backups go there (guarded by mu)
	lost     map[int32]bool // dead servers whose intervals had no live backup (guarded by moveMu)
	cmu      sync.Mutex
	copies   map[int32]routing.Spans // per server, the keys it holds a seeded copy of as a backup (copies.go)
	copyWake chan struct{}           // closed at the next seeding or table change (guarded by cmu)

	moveMu  sync.Mutex // one reconfiguration at a time
	exports chan export

	mu      sync.Mutex
	history []Result
	onLoad  func(from int32, report []byte)
	bal     *Balancer // the balancer driving this coordinator (nil: none), for Status

	// routing tables delivered to each node (see deliver)
	dmu   sync.Mutex
	nodes map[int32]*nodeRoutes
	acked chan struct{} // closed and replaced whenever a node acknowledges a table
}

// nodeRoutes is what the coordinator knows of one node's routing table.
type nodeRoutes struct {
	acked   uint64        // highest epoch the node acknowledged
	lagging bool          // did not acknowledge within PublishWait or its call failed
	wake    chan struct{} // capacity 1: a newer table is waiting for the node
}

type export struct {
	mv    elastic.Move
	state []byte
	err   error // the old owner could not export (it keeps the keys)
}

// Result describes one finished (or aborted) move.
type Result struct {
	Move     elastic.Move
	CutSeq   uint64
	Bytes    int // state moved
	Started  time.Time
	Duration time.Duration // from prepare to commit
	Err      error
}

// New starts a coordinator on the scheduler's postoffice.
func New(po *postoffice.Postoffice) (*Coordinator, error) {
	if po.Role() != message.RoleScheduler {
		return nil, errors.New("coord: the coordinator runs on the scheduler")
	}
	link, err := elastic.NewLink(po)
	if err != nil {
		return nil, err
	}
	c := &Coordinator{po: po, link: link, table: routing.NewIdentityTable(po.NumServers()), log: po.Logger(), Timeout: 30 * time.Second, PublishWait: 2 * time.Second,
		exports: make(chan export, 4), nodes: map[int32]*nodeRoutes{}, acked: make(chan struct{}), leaving: map[int32]bool{}}
	link.Handle(c.handle)
	po.OnRebuild(c.rebuild)
	if k := po.Config().Replicas; k > 0 {
		c.replicas, c.lost, c.copies = k, map[int32]bool{}, map[int32]routing.Spans{}
		po.OnNodeGone(c.serverGone)
		go c.keepReplicated()
	}
	return c, nil
}

// Metrics are the elastic metrics of the scheduler node (its link's).
func (c *Coordinator) Metrics() *elastic.Metrics { return c.link.Metrics() }

// Table is the job's routing table, as the coordinator publishes it.
func (c *Coordinator) Table() *routing.Table { return c.table }

// OnLoadReport sets the function that receives servers' load reports.
func (c *Coordinator) OnLoadReport(f func(from int32, report []byte)) {
	c.mu.Lock()
	c.onLoad = f
	c.mu.Unlock()
}

// handle runs in the link's customer goroutine: it must not block.
func (c *Coordinator) handle(from int32, head int32, body []byte) ([]byte, error) {
	switch head {
	case elastic.MsgExport:
		mv, state, err := elastic.UnmarshalMove(body)
		if err != nil {
			return nil, err
		}
		select {
		case c.exports <- export{mv: mv, state: append([]byte(nil), state...)}:
		default:
			return nil, errors.New("coord: no migration is waiting for this export")
		}
		return nil, nil
	case elastic.MsgExportFailed:
		mv, msg, err := elastic.UnmarshalMove(body)
		if err != nil {
			return nil, err
		}
		select {
		case c.exports <- export{mv: mv, err: fmt.Errorf("node %d could not export keys [%d, %d): %s", from, mv.Begin, mv.End, msg)}:
		default:
			return nil, errors.New("coord: no migration is waiting for this export")
		}
		return nil, nil
	case elastic.MsgSeeded:
		mv, _, err := elastic.UnmarshalMove(body)
		if err != nil {
			return nil, err
		}
		if c.replicas > 0 {
			c.seeded(from, mv)
		}
		return nil, nil
	case elastic.MsgReport:
		c.mu.Lock()
		f := c.onLoad
		c.mu.Unlock()
		if f != nil {
			f(from, body)
		}
		return nil, nil
	}
	return nil, fmt.Errorf("coord: unexpected elastic message %d from node %d", head, from)
}

// History returns the moves carried out so far.
func (c *Coordinator) History() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Result(nil), c.history...)
}

// Move migrates keys [begin, end) to server `to`, live:
//
//  1. prepare: the old owner fixes the cut-over push number S (one past the
//     highest it has received) and from then on redirects pushes numbered
//     S or more, so no round of pushes is split;
//  2. epoch e+1: the table sends pushes below S to the old owner and the
//     rest to the new one, which parks them until it has the state — the
//     new owner first, then the old, then the workers;
//  3. the old owner exports once nothing is in flight and every worker has
//     delivered its pushes below S, then redirects everything for the keys;
//  4. the new owner installs the state and lets the parked requests in;
//  5. epoch e+2: the keys belong to the new owner outright.
//
// Every request is applied on exactly one server; redirected ones are
// re-sent by the worker. If a step fails before the export, the move is
// aborted and the keys stay where they were; so do they if the export
// fails, and if the install fails they go back to the old owner (giveBack).
func (c *Coordinator) Move(begin, end uint64, to int32) (Result, error) {
	c.moveMu.Lock()
	defer c.moveMu.Unlock()
	res := Result{Started: time.Now()}
	r0 := c.table.Current()
	from, err := owner(r0, begin, end)
	if err != nil {
		return res, err
	}
	if from == to {
		return res, fmt.Errorf("coord: keys [%d, %d) are already on node %d", begin, end, to)
	}
	if !c.isServer(to) {
		return res, fmt.Errorf("coord: node %d is not a server of this job", to)
	}
	if id, why, dead := c.deadOf(from, to); dead {
		// It would answer nothing: the move would only hold up the
		// failover (one reconfiguration at a time) until its timeout.
		return res, fmt.Errorf("coord: keys [%d, %d) cannot move from node %d to node %d: node %d is dead (%s)", begin, end, from, to, id, why)
	}
	if err := c.canReplicateMove(r0, begin, end, to); err != nil {
		return res, err
	}
	mv := elastic.Move{Begin: begin, End: end, From: from, To: to, Epoch: r0.Epoch + 1}
	res.Move = mv
	// drain stale exports of an aborted move
	for len(c.exports) > 0 {
		<-c.exports
	}
	if _, err := c.link.Call(to, elastic.MsgAccept, elastic.MarshalMove(mv, nil), c.Timeout); err != nil {
		return c.finish(res, fmt.Errorf("coord: node %d cannot take keys [%d, %d): %w", to, begin, end, err))
	}
	ans, err := c.link.Call(from, elastic.MsgPrepare, elastic.MarshalMove(mv, nil), c.Timeout)
	if err != nil || len(ans) != 8 {
		return c.finish(res, fmt.Errorf("coord: prepare on node %d: %v", from, err))
	}
	res.CutSeq = binary.LittleEndian.Uint64(ans)
	c.halt(PhasePrepare, mv)

	r1 := r0.Split(begin, end)
	r1.Epoch = mv.Epoch
	for i := range r1.Intervals {
		iv := &r1.Intervals[i]
		if iv.Begin >= begin && iv.End <= end {
			iv.Prev, iv.Node, iv.CutSeq = from, to, res.CutSeq
		}
	}
	if err := c.publish(r1, to, from); err != nil {
		c.rollback(r1, mv, false)
		return c.finish(res, err)
	}
	c.halt(PhaseRoutes, mv)
	ex, err := c.awaitExport(mv)
	if err != nil {
		if !errors.Is(err, postoffice.ErrStopped) {
			c.rollback(r1, mv, false)
		}
		return c.finish(res, err)
	}
	if ex.mv != mv {
		return c.finish(res, fmt.Errorf("coord: node %d exported %+v while %+v was moving", from, ex.mv, mv))
	}
	if ex.err != nil {
		// An export is all or nothing: the keys are still on the old owner.
		c.rollback(r1, mv, true)
		return c.finish(res, fmt.Errorf("coord: %w; the move is aborted and the keys stay on node %d", ex.err, from))
	}
	res.Bytes = len(ex.state)
	c.halt(PhaseExport, mv)
	r2 := r1.Clone()
	r2.Epoch = mv.Epoch + 1
	for i := range r2.Intervals {
		r2.Intervals[i].Prev, r2.Intervals[i].CutSeq = 0, 0
	}
	if c.replicas > 0 {
		// Before the new owner applies anything: its backups get the
		// exported state, so the keys keep k copies besides it.
		r2 = c.moveBackups(r2, mv, ex.state)
	}
	if _, err := c.link.Call(to, elastic.MsgImport, elastic.MarshalMove(mv, ex.state), c.Timeout); err != nil {
		return c.finish(res, c.giveBack(r1, mv, ex.state, fmt.Errorf("coord: install on node %d: %w", to, err)))
	}
	c.halt(PhaseImport, mv)
	r2.Coalesce()
	if err := c.publishWaves(r2, func() { c.halt(PhaseCommit, mv) }); err != nil {
		return c.finish(res, err)
	}
	return c.finish(res, nil)
}

// awaitExport waits for the old owner's export of mv, up to Timeout. It
// gives up at once when the old or the new owner is declared dead: the
// failover of a dead server waits for the move, so the move must not wait
// for its timeout.
func (c *Coordinator) awaitExport(mv elastic.Move) (export, error) {
	deadline := time.NewTimer(c.Timeout)
	defer deadline.Stop()
	for {
		changed := c.po.GoneChanged()
		select {
		case ex := <-c.exports: // exported before a death: the move goes on with it
			return ex, nil
		default:
		}
		if id, why, dead := c.deadOf(mv.From, mv.To); dead {
			return export{}, fmt.Errorf("coord: node %d died (%s) before node %d exported keys [%d, %d); the move is rolled back", id, why, mv.From, mv.Begin, mv.End)
		}
		select {
		case ex := <-c.exports:
			return ex, nil
		case <-changed:
		case <-deadline.C:
			return export{}, fmt.Errorf("coord: node %d did not export keys [%d, %d) within %v", mv.From, mv.Begin, mv.End, c.Timeout)
		case <-c.po.Done():
			return export{}, postoffice.ErrStopped
		}
	}
}

// deadOf returns the first of ids that the job declared dead, and why.
func (c *Coordinator) deadOf(ids ...int32) (id int32, why string, dead bool) {
	for _, id := range ids {
		if g, ok := c.po.Gone(id); ok && g.Dead {
			return id, g.Reason, true
		}
	}
	return 0, "", false
}

func (c *Coordinator) finish(res Result, err error) (Result, error) {
	res.Duration = time.Since(res.Started)
	res.Err = err
	em := c.link.Metrics()
	switch {
	case err == nil:
		em.MigrationsTotal.WithLabelValues(elastic.ResultOK).Inc()
		em.MigrationStallSeconds.Observe(res.Duration.Seconds())
	case res.CutSeq == 0:
		em.MigrationsTotal.WithLabelValues(elastic.ResultAborted).Inc()
	default:
		em.MigrationsTotal.WithLabelValues(elastic.ResultFailed).Inc()
	}
	c.mu.Lock()
	c.history = append(c.history, res)
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("coord: move failed", "begin", res.Move.Begin, "end", res.Move.End, "from", res.Move.From, "to", res.Move.To,
			"epoch", res.Move.Epoch, "err", err)
	} else if c.po.Verbose() >= 1 {
		c.log.Info("coord: moved", "begin", res.Move.Begin, "end", res.Move.End, "from", res.Move.From, "to", res.Move.To,
			"cut_seq", res.CutSeq, "bytes", res.Bytes, "took", res.Duration)
	}
	return res, err
}

// giveBack returns exported state to the old owner after the new owner
// failed to install it (an install is all or nothing), then rolls the move
// back; err is the install's failure.
func (c *Coordinator) giveBack(r1 *routing.Routes, mv elastic.Move, state []byte, err error) error {
	if aerr := c.returnState(mv, state, err); aerr != nil {
		return fmt.Errorf("%w; giving the keys back to node %d failed too (their values are lost): %v", err, mv.From, aerr)
	}
	c.rollback(r1, mv, true)
	return fmt.Errorf("%w; the keys went back to node %d", err, mv.From)
}

// returnState installs exported state back on the old owner; why is what
// kept it from the new one. The old owner takes the keys back only if it
// can install them without doubling what it still holds (accept refuses
// that).
func (c *Coordinator) returnState(mv elastic.Move, state []byte, why error) error {
	_, err := c.link.Call(mv.From, elastic.MsgAccept, elastic.MarshalMove(mv, nil), c.Timeout)
	if err == nil {
		_, err = c.link.Call(mv.From, elastic.MsgImport, elastic.MarshalMove(mv, state), c.Timeout)
	}
	if err != nil {
		// The state left the old owner and neither server holds it now.
		// Say so loudly: this is the one failure a move cannot undo.
		c.log.Error("coord: exported keys were installed neither on the new owner nor back on the old one; their values are lost",
			"move", fmt.Sprintf("%+v", mv), "why", why, "give_back", err)
	}
	return err
}

// reclaim waits for the export of mv, which the old owner made before the
// abort reached it, and installs it back there.
func (c *Coordinator) reclaim(mv elastic.Move) {
	deadline := time.NewTimer(c.Timeout)
	defer deadline.Stop()
	for {
		select {
		case ex := <-c.exports:
			if ex.mv != mv {
				c.log.Warn("coord: dropped a stale export", "move", fmt.Sprintf("%+v", ex.mv))
				continue
			}
			if ex.err != nil {
				return // the export failed: the keys stayed on the old owner
			}
			if err := c.returnState(mv, ex.state, errors.New("the move was aborted after the old owner exported")); err == nil {
				c.log.Warn("coord: the old owner had exported the keys before the abort; their state went back to it", "move", fmt.Sprintf("%+v", mv))
			}
			return
		case <-deadline.C:
			c.log.Error("coord: the old owner exported the keys before the abort, but the export did not arrive; their values are lost",
				"move", fmt.Sprintf("%+v", mv), "waited", c.Timeout)
			return
		case <-c.po.Done():
			return
		}
	}
}

// rollback returns the keys to the old owner after a failed move. haveExport
// says whether the old owner's export (or its failure) has reached the
// coordinator; if not and the old owner answers the abort with "exported
// already", the state is on its way and goes back to it (reclaim) before
// the keys do.
func (c *Coordinator) rollback(r1 *routing.Routes, mv elastic.Move, haveExport bool) {
	r := r1.Clone()
	r.Epoch = r1.Epoch + 1
	for i := range r.Intervals {
		iv := &r.Intervals[i]
		if iv.Prev == mv.From {
			iv.Node, iv.Prev, iv.CutSeq = mv.From, 0, 0
		}
	}
	r.Coalesce()
	for _, id := range []int32{mv.From, mv.To} {
		ans, err := c.link.Call(id, elastic.MsgAbort, elastic.MarshalMove(mv, nil), c.Timeout)
		if err != nil {
			c.log.Warn("coord: abort not acknowledged", "node", id, "err", err)
			continue
		}
		if id == mv.From && !haveExport && len(ans) == 1 && ans[0] == 1 {
			// Too late to keep the keys there: they left with the
			// export, which must come back before the keys do.
			c.reclaim(mv)
		}
	}
	if err := c.publish(r); err != nil {
		c.log.Error("coord: rollback table not delivered", "err", err)
	}
}

// publish installs r on the scheduler and sends it to the given nodes
// first, in order, waiting for each (a failure there fails the publish);
// then to every other server at once, and then to every worker at once,
// waiting for each wave up to PublishWait. A node that has not acknowledged
// the table by then does not fail the publish: it keeps being sent the
// newest table in the background (deliver). A server that gets a request
// routed by a newer table than its own holds it until that table arrives,
// so the order only spares such waits.
func (c *Coordinator) publish(r *routing.Routes, first ...int32) error {
	return c.publishWaves(r, nil, first...)
}

// publishWaves is publish, calling afterServers (when not nil) once the
// servers have the table and before the workers are sent it.
func (c *Coordinator) publishWaves(r *routing.Routes, afterServers func(), first ...int32) error {
	c.update(r)
	c.link.Metrics().RoutingEpoch.Set(float64(r.Epoch))
	body := r.Marshal()
	for _, id := range first {
		if _, err := c.link.Call(id, elastic.MsgRoutes, body, c.Timeout); err != nil {
			return fmt.Errorf("coord: routing epoch %d not delivered to node %d: %w", r.Epoch, id, err)
		}
		c.ack(id, r.Epoch)
	}
	sent := slices.Clone(first)
	// Dead nodes are skipped: a failover's table must not wait for the
	// server that died.
	for w, wave := range [][]int32{c.live(c.Servers()), c.live(c.po.Members(message.WorkerGroup))} {
		if w == 1 && afterServers != nil {
			afterServers()
		}
		var ids []int32
		for _, id := range wave {
			if !slices.Contains(sent, id) {
				sent = append(sent, id)
				ids = append(ids, id)
				c.kick(id)
			}
		}
		if err := c.awaitAcks(ids, r.Epoch); err != nil {
			return err
		}
	}
	return nil
}

// awaitAcks waits up to PublishWait until every node of ids that is not
// lagging has acknowledged epoch; those that have not are lagging from then
// on.
func (c *Coordinator) awaitAcks(ids []int32, epoch uint64) error {
	deadline := time.NewTimer(c.PublishWait)
	defer deadline.Stop()
	for {
		c.dmu.Lock()
		acked := c.acked
		var waiting []int32
		for _, id := range ids {
			if n := c.node(id); n.acked < epoch && !n.lagging {
				waiting = append(waiting, id)
			}
		}
		c.dmu.Unlock()
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-acked:
		case <-deadline.C:
			for _, id := range waiting {
				c.lag(id, fmt.Sprintf("did not acknowledge routing epoch %d within %v", epoch, c.PublishWait))
			}
			return nil
		case <-c.po.Done():
			return postoffice.ErrStopped
		}
	}
}

// Lagging lists the nodes that have not acknowledged a routing table in
// time and are being sent the newest one in the background.
func (c *Coordinator) Lagging() []int32 {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	var ids []int32
	for id, n := range c.nodes {
		if n.lagging {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// node returns id's record, starting its delivery goroutine the first
// time. The caller holds dmu.
func (c *Coordinator) node(id int32) *nodeRoutes {
	n := c.nodes[id]
	if n == nil {
		n = &nodeRoutes{wake: make(chan struct{}, 1)}
		c.nodes[id] = n
		go c.deliver(id, n)
	}
	return n
}

// kick tells id's delivery goroutine that a newer table is waiting.
func (c *Coordinator) kick(id int32) {
	c.dmu.Lock()
	n := c.node(id)
	c.dmu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// ack records that id holds routing epoch epoch (or a newer one).
func (c *Coordinator) ack(id int32, epoch uint64) {
	c.dmu.Lock()
	n := c.node(id)
	if epoch > n.acked {
		n.acked = epoch
	}
	caughtUp := n.lagging && n.acked >= c.table.Epoch()
	if caughtUp {
		n.lagging = false
	}
	close(c.acked)
	c.acked = make(chan struct{})
	c.dmu.Unlock()
	if caughtUp {
		c.log.Info("coord: node caught up with the routing table", "node", id, "epoch", epoch)
	}
}

// lag marks id as lagging behind the routing table (why says how) and
// logs it once per episode.
func (c *Coordinator) lag(id int32, why string) {
	c.dmu.Lock()
	n := c.node(id)
	first := !n.lagging
	n.lagging = true
	c.dmu.Unlock()
	if first {
		c.log.Warn("coord: node lags behind the routing table; moves go on without waiting for it and it is sent the newest table in the background",
			"node", id, "why", why)
	}
}

// retryPause is how long deliver waits before sending a table again after
// a call that failed at once (not sent).
const retryPause = 100 * time.Millisecond

// deliver sends node id the newest routing table whenever it lacks it,
// until the scheduler stops or the node leaves the job. A call it gets no
// answer to (Timeout) is tried again with the table newest by then: tables
// are whole, so a node that missed some needs only the last.
func (c *Coordinator) deliver(id int32, n *nodeRoutes) {
	for {
		select {
		case <-n.wake:
		case <-c.po.Done():
			return
		}
		for {
			r := c.table.Current()
			c.dmu.Lock()
			done := n.acked >= r.Epoch
			c.dmu.Unlock()
			if done {
				break
			}
			start := time.Now()
			_, err := c.link.Call(id, elastic.MsgRoutes, r.Marshal(), c.Timeout)
			if err == nil {
				c.ack(id, r.Epoch)
				continue
			}
			if errors.Is(err, postoffice.ErrStopped) || c.po.HasLeft(id) {
				c.dmu.Lock()
				delete(c.nodes, id)
				c.dmu.Unlock()
				return
			}
			c.lag(id, fmt.Sprintf("routing epoch %d not delivered: %v", r.Epoch, err))
			if time.Since(start) < retryPause {
				select {
				case <-time.After(retryPause):
				case <-c.po.Done():
					return
				}
			}
		}
	}
}

func (c *Coordinator) isServer(id int32) bool {
	for _, s := range c.Servers() {
		if s == id {
			return true
		}
	}
	return false
}

// owner returns the single server that owns all of [begin, end).
func owner(r *routing.Routes, begin, end uint64) (int32, error) {
	if end <= begin {
		return 0, fmt.Errorf("coord: empty key range [%d, %d)", begin, end)
	}
	i := r.Find(begin)
	if i < 0 {
		return 0, fmt.Errorf("coord: key %d is outside every server range", begin)
	}
	var o int32
	for ; i < len(r.Intervals) && r.Intervals[i].Begin < end; i++ {
		iv := r.Intervals[i]
		if iv.Prev != 0 {
			return 0, fmt.Errorf("coord: keys [%d, %d) are migrating already", iv.Begin, iv.End)
		}
		if o != 0 && iv.Node != o {
			return 0, fmt.Errorf("coord: keys [%d, %d) span servers %d and %d; move one server's part at a time", begin, end, o, iv.Node)
		}
		o = iv.Node
	}
	if last := r.Intervals[len(r.Intervals)-1].End; end > last {
		return 0, fmt.Errorf("coord: key %d is outside every server range", end-1)
	}
	return o, nil
}

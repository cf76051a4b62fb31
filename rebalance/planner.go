package rebalance

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Planner decides, one Step at a time, how to redistribute blocks. It keeps
// what it needs between steps: the plan in flight, the probe being judged
// and its baseline, recent moves (Cooldown), which servers were slow and
// when each was last probed, and when it last scaled. It is not safe for
// concurrent use; the coordinator owns it.
type Planner struct {
	cfg  Config
	step int64 // number of Steps so far; the current one during Step

	inflight *inflight
	// recent maps a block to the last plan that moved it, for Cooldown.
	recent map[uint64]recentMove
	// slow maps a server to when it was last seen slow or failed a probe.
	slow map[int32]time.Time
	// probed maps a server to when a probe towards it was last judged.
	probed map[int32]time.Time
	// lastProbe is the step of the last probe (0 = never).
	lastProbe int64

	// lastScale is the step of the last scale decision (0 = never).
	lastScale int64
}

// inflight is the last plan with moves, until it shows in the inputs.
type inflight struct {
	kind   Kind
	moves  []Move
	issued int64
	// applied is the step its moves were first all seen done (0 = not yet).
	applied int64
	// Explore only: the iteration time before the probe, the server probed
	// and why it was probed.
	baseline time.Duration
	target   int32
	why      string
}

type recentMove struct {
	from int32
	step int64
}

// NewPlanner returns a Planner with no history, or the errors of cfg.
func NewPlanner(cfg Config) (*Planner, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Planner{
		cfg:    cfg,
		recent: map[uint64]recentMove{},
		slow:   map[int32]time.Time{},
		probed: map[int32]time.Time{},
	}, nil
}

// Config returns the planner's configuration (weights normalised).
func (p *Planner) Config() Config { return p.cfg }

// Step takes the measurements of the window ending at obs.Now, the current
// assignment and the servers, and returns what to do next (see the package
// documentation for the order of decisions). Invalid inputs (duplicate ids,
// negative sizes or rates) give a None plan with Err set and change nothing
// but the step count.
func (p *Planner) Step(obs Observation, blocks []Block, servers []Server) Plan {
	p.step++
	if err := checkInput(blocks, servers); err != nil {
		return Plan{Kind: None, Reason: "rejected input", Err: err}
	}
	v := newView(p.cfg.BytesWeight, p.cfg.RequestsWeight, p.cfg.MinSamples, blocks, servers)
	p.forget(v, obs.Now)
	before := v.maxActive(v.times(v.owner))

	var notes []string
	if p.inflight != nil {
		plan, wait, note := p.followUp(obs, v)
		if wait {
			plan.Before = before
			if len(plan.Moves) == 0 {
				plan.After = before
			}
			p.record(plan)
			return plan
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	plan := p.decide(obs, v)
	plan.Before = before
	if len(plan.Moves) == 0 {
		plan.After = before
	}
	if len(notes) > 0 {
		plan.Reason = strings.Join(append(notes, plan.Reason), "; ")
	}
	p.record(plan)
	return plan
}

// record remembers a plan with moves: it is in flight until the inputs show
// it, and its blocks are in Cooldown. explore has already set the probe's
// details.
func (p *Planner) record(plan Plan) {
	if len(plan.Moves) == 0 {
		return
	}
	if p.inflight == nil || p.inflight.issued != p.step {
		p.inflight = &inflight{kind: plan.Kind, issued: p.step}
	}
	p.inflight.moves = plan.Moves
	for _, m := range plan.Moves {
		p.recent[m.Block] = recentMove{from: m.From, step: p.step}
	}
}

// forget drops history that can no longer matter, so the Planner's memory
// is bounded by the live blocks and servers, and records slow servers.
func (p *Planner) forget(v *view, now time.Time) {
	for id, r := range p.recent {
		if p.step-r.step > int64(p.cfg.Cooldown) {
			delete(p.recent, id)
		}
	}
	for id := range p.slow {
		if i, ok := v.index[id]; !ok || v.servers[i].ghost {
			delete(p.slow, id)
		}
	}
	for id := range p.probed {
		if i, ok := v.index[id]; !ok || v.servers[i].ghost {
			delete(p.probed, id)
		}
	}
	if !v.known {
		return
	}
	for _, s := range v.servers {
		switch {
		case s.ghost || s.Draining:
		case s.speed < p.cfg.SlowRatio:
			if _, ok := p.slow[s.ID]; !ok {
				p.slow[s.ID] = now
			}
		case !p.uncertain(s, now):
			// Measured fast again: no longer worth re-probing.
			delete(p.slow, s.ID)
		}
	}
}

// back reports whether moving block b to server i would undo a move made
// within Cooldown steps.
func (p *Planner) back(v *view) func(b, i int) bool {
	return func(b, i int) bool {
		r, ok := p.recent[v.blocks[b].ID]
		return ok && r.from == v.servers[i].ID && p.step-r.step <= int64(p.cfg.Cooldown)
	}
}

// followUp handles the plan in flight. wait means return plan as it is;
// otherwise the in-flight plan is finished and note says how.
func (p *Planner) followUp(obs Observation, v *view) (plan Plan, wait bool, note string) {
	f := p.inflight
	var pending, done int
	for _, m := range f.moves {
		i, ok := v.find(m.Block)
		switch {
		case !ok:
		case v.blocks[i].Server == m.From:
			pending++
		case v.blocks[i].Server == m.To:
			done++
		}
	}
	if pending > 0 {
		if p.step-f.issued > int64(p.cfg.ApplyTimeout) {
			p.inflight = nil
			return Plan{}, false, fmt.Sprintf("%s plan of step %d not applied after %d steps: dropped", f.kind, f.issued, p.cfg.ApplyTimeout)
		}
		return Plan{Kind: None, Reason: fmt.Sprintf("waiting for the %s plan of step %d: %d of %d moves pending",
			f.kind, f.issued, pending, len(f.moves))}, true, ""
	}
	if f.kind != Explore {
		p.inflight = nil
		return Plan{}, false, ""
	}
	if done == 0 {
		// The probe's blocks were all moved elsewhere or vanished: nothing
		// left to judge.
		p.inflight = nil
		p.probed[f.target] = obs.Now
		return Plan{}, false, fmt.Sprintf("probe towards server %d overtaken by other changes", f.target)
	}
	if f.applied == 0 {
		f.applied = p.step
	}
	since := p.step - f.applied
	if since < int64(p.cfg.SettleSteps) || (obs.IterationTime <= 0 && since < int64(p.cfg.SettleSteps+p.cfg.ApplyTimeout)) {
		return Plan{Kind: None, Reason: fmt.Sprintf("measuring the probe towards server %d (baseline iteration %v)",
			f.target, f.baseline)}, true, ""
	}
	p.inflight = nil
	p.probed[f.target] = obs.Now
	if obs.IterationTime > 0 && obs.IterationTime < f.baseline {
		delete(p.slow, f.target)
		return Plan{}, false, fmt.Sprintf("kept the probe towards server %d: iteration %v < baseline %v",
			f.target, obs.IterationTime, f.baseline)
	}
	p.slow[f.target] = obs.Now
	var moves []Move
	for _, m := range f.moves {
		i, ok := v.find(m.Block)
		if !ok || v.blocks[i].Server != m.To || v.blocks[i].Pinned {
			continue
		}
		if h, ok := v.index[m.From]; !ok || !v.servers[h].active() {
			continue // its old home is leaving: leave the block where it is
		}
		moves = append(moves, Move{Block: m.Block, From: m.To, To: m.From})
	}
	measured := "unknown"
	if obs.IterationTime > 0 {
		measured = obs.IterationTime.String()
	}
	why := fmt.Sprintf("probe towards server %d (%s) did not help: iteration %s, baseline %v",
		f.target, f.why, measured, f.baseline)
	if len(moves) == 0 {
		return Plan{}, false, why + "; nothing to move back"
	}
	plan = Plan{Kind: Revert, Moves: moves, Reason: why}
	plan.After = predictAfter(v, moves)
	return plan, true, ""
}

// predictAfter is the slowest active server's time after moves.
func predictAfter(v *view, moves []Move) float64 {
	owner := slices.Clone(v.owner)
	for _, m := range moves {
		i, _ := v.find(m.Block)
		owner[i] = v.index[m.To]
	}
	return v.maxActive(v.times(owner))
}

func (p *Planner) limits() limits {
	return limits{moves: p.cfg.MaxMovesPerPlan, budget: p.cfg.MigrationBudgetBytes}
}

// decide makes a fresh plan: drain, else exploit and scale, else explore.
func (p *Planner) decide(obs Observation, v *view) Plan {
	draining := false
	for i, s := range v.servers {
		draining = draining || (!s.active() && v.hasBlocks(i))
	}
	if !draining {
		return p.exploit(obs, v, "", false)
	}
	s := newSim(v, nil)
	notes := strings.Join(s.drain(p.limits()), "; ")
	if moves := s.moves(); len(moves) > 0 {
		reason := fmt.Sprintf("drain: %d blocks, %d bytes leave draining servers", len(moves), s.bytes)
		if notes != "" {
			reason += "; " + notes
		}
		return Plan{Kind: Exploit, Moves: moves, Reason: reason, After: s.max()}
	}
	// Nothing movable is left on draining servers: balance the others.
	return p.exploit(obs, v, notes, true)
}

// hasBlocks reports whether server i owns any block.
func (v *view) hasBlocks(i int) bool { return slices.Contains(v.owner, i) }

// exploit balances, then considers scaling, then exploring.
func (p *Planner) exploit(obs Observation, v *view, note string, draining bool) Plan {
	before := v.maxActive(v.times(v.owner))
	full := newSim(v, p.back(v))
	full.balance(limits{})
	fullMax := full.max()

	plan := Plan{Kind: None}
	var reasons []string
	if note != "" {
		reasons = append(reasons, note)
	}
	if before > 0 && fullMax < before*(1-p.cfg.Hysteresis) {
		s := newSim(v, p.back(v))
		s.balance(p.limits())
		if moves := s.moves(); len(moves) > 0 {
			plan = Plan{Kind: Exploit, Moves: moves, After: s.max()}
			reasons = append(reasons, fmt.Sprintf("balance: %d moves, %d bytes: slowest server %.3f -> %.3f (balanced %.3f)",
				len(moves), s.bytes, before, plan.After, fullMax))
		} else {
			reasons = append(reasons, fmt.Sprintf("balancing would reach %.3f from %.3f but no move fits MaxMovesPerPlan/MigrationBudgetBytes",
				fullMax, before))
		}
	} else if before > 0 {
		reasons = append(reasons, fmt.Sprintf("balanced: slowest server %.3f, best plan %.3f (hysteresis %.0f%%)",
			before, fullMax, 100*p.cfg.Hysteresis))
	}

	if !draining {
		if r := p.scaleOut(v, full, fullMax); r != "" {
			plan.ScaleOut = 1
			plan.Kind = Exploit
			reasons = append(reasons, r)
		} else if len(plan.Moves) == 0 {
			if id, r := p.scaleIn(v); r != "" {
				plan.ScaleIn = []int32{id}
				plan.Kind = Exploit
				reasons = append(reasons, r)
			}
		}
		if plan.Kind == None {
			if probe := p.explore(obs, v); probe.Kind == Explore {
				return probe
			}
		}
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "no load measured")
	}
	plan.Reason = strings.Join(reasons, "; ")
	return plan
}

// scaleCooling reports whether a scale decision must wait: within
// ScaleCooldown steps of the previous one (or of the start), the cluster is
// still changing and the estimates still settling.
func (p *Planner) scaleCooling() bool {
	return p.step-p.lastScale < int64(p.cfg.ScaleCooldown)
}

// scaleOut returns why one more server is needed, or "".
func (p *Planner) scaleOut(v *view, full *sim, fullMax float64) string {
	if !v.known || fullMax <= p.cfg.ScaleOutThreshold || p.scaleCooling() {
		return ""
	}
	active, worst := 0, -1
	t := v.times(full.owner)
	for i, s := range v.servers {
		if !s.active() {
			continue
		}
		active++
		if s.Standby && !v.hasBlocks(i) {
			return "" // a spare has joined and not been used yet
		}
		if worst < 0 || t[i] > t[worst] {
			worst = i
		}
	}
	if p.cfg.MaxServers > 0 && active >= p.cfg.MaxServers {
		return ""
	}
	if worst < 0 || len(full.on[worst]) < 2 {
		return "" // one indivisible block is the bottleneck: more servers cannot help
	}
	p.lastScale = p.step
	return fmt.Sprintf("scale out: balanced plan leaves server %d at %.3f > %.2f", v.servers[worst].ID, fullMax, p.cfg.ScaleOutThreshold)
}

// scaleIn returns the server to drain and why, or "" when the cluster
// should keep its size.
func (p *Planner) scaleIn(v *view) (int32, string) {
	if !v.known || p.cfg.ScaleInThreshold <= 0 || p.scaleCooling() {
		return 0, ""
	}
	t := v.times(v.owner)
	var cands []int
	total := 0.0
	for i, s := range v.servers {
		if !s.active() {
			continue
		}
		if t[i] >= p.cfg.ScaleInThreshold || s.Utilization >= p.cfg.ScaleInThreshold {
			return 0, ""
		}
		total += t[i]
		cands = append(cands, i)
	}
	if len(cands) <= p.cfg.MinServers || total <= 0 {
		return 0, "" // no measured load: maybe the job has not started
	}
	// Least useful first: holding nothing (costs no migration), then the
	// slowest, then the one holding the fewest bytes, then the highest id.
	held := make([]int64, len(v.servers))
	unmovable := make([]bool, len(v.servers))
	for b, i := range v.owner {
		blk := v.blocks[b]
		held[i] += blk.Bytes
		if blk.Pinned || (p.cfg.MigrationBudgetBytes > 0 && blk.Bytes > p.cfg.MigrationBudgetBytes) {
			unmovable[i] = true
		}
	}
	slices.SortFunc(cands, func(a, b int) int {
		return cmp.Or(
			-cmpBool(held[a] == 0, held[b] == 0),
			cmp.Compare(v.servers[a].speed, v.servers[b].speed),
			cmp.Compare(held[a], held[b]),
			cmp.Compare(v.servers[b].ID, v.servers[a].ID))
	})
	limit := p.cfg.ScaleOutThreshold * (1 - p.cfg.Hysteresis)
	for _, c := range cands {
		if unmovable[c] {
			continue
		}
		// Would the others absorb its load and stay clear of scale-out?
		w := *v
		w.servers = slices.Clone(v.servers)
		w.servers[c].Draining = true
		s := newSim(&w, nil)
		s.drain(limits{})
		s.balance(limits{})
		if after := s.max(); after < limit {
			p.lastScale = p.step
			return v.servers[c].ID, fmt.Sprintf("scale in: every server below %.2f; without server %d the slowest would be %.3f",
				p.cfg.ScaleInThreshold, v.servers[c].ID, after)
		}
		return 0, "" // the least useful server is needed; any other is more so
	}
	return 0, ""
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// uncertainWhy reports why a server's estimate is not trustworthy, or "".
// A rate whose weight is 0 does not matter and is not checked.
func (p *Planner) uncertainWhy(s server, now time.Time) string {
	for _, d := range []struct {
		e Estimate
		w float64
	}{{s.Capacity.Bytes, p.cfg.BytesWeight}, {s.Capacity.Requests, p.cfg.RequestsWeight}} {
		e := d.e
		if d.w == 0 {
			continue
		}
		switch {
		case e.Samples < p.cfg.MinSamples || !e.known():
			return fmt.Sprintf("%d samples", e.Samples)
		case !(e.Std <= p.cfg.MaxRelStd*e.Mean):
			return fmt.Sprintf("std/mean %.2f", e.Std/e.Mean)
		case !e.Updated.IsZero() && now.Sub(e.Updated) >= p.cfg.ReprobeAfter:
			return fmt.Sprintf("not measured for %v", now.Sub(e.Updated))
		}
	}
	return ""
}

func (p *Planner) uncertain(s server, now time.Time) bool { return p.uncertainWhy(s, now) != "" }

// explore returns an Explore plan, or a None plan when no probe is due.
// The target is the server due for a probe that was probed longest ago;
// the probe takes ExploreFraction of the slowest server's predicted load,
// in blocks that fit it, largest first.
func (p *Planner) explore(obs Observation, v *view) Plan {
	if p.cfg.ExploreEvery == 0 || p.step-p.lastProbe < int64(p.cfg.ExploreEvery) || obs.IterationTime <= 0 {
		return Plan{}
	}
	t := v.times(v.owner)
	src := -1
	for i, s := range v.servers {
		if s.active() && (src < 0 || t[i] > t[src]) {
			src = i
		}
	}
	if src < 0 || t[src] <= 0 {
		return Plan{}
	}
	type cand struct {
		i    int
		last time.Time
		why  string
	}
	var cands []cand
	for i, s := range v.servers {
		if !s.active() || i == src {
			continue
		}
		last, probed := p.probed[s.ID]
		if probed && obs.Now.Sub(last) < p.cfg.ReprobeAfter {
			continue
		}
		why := p.uncertainWhy(s, obs.Now)
		if since, ok := p.slow[s.ID]; why == "" && ok {
			if obs.Now.Sub(since) < p.cfg.ReprobeAfter {
				continue
			}
			why = fmt.Sprintf("slow since %v ago", obs.Now.Sub(since))
		}
		if why != "" {
			cands = append(cands, cand{i, last, why})
		}
	}
	if len(cands) == 0 {
		return Plan{}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(a.last.Compare(b.last), cmp.Compare(v.servers[a.i].ID, v.servers[b.i].ID))
	})
	back := p.back(v)
	lim := p.limits()
	for _, c := range cands {
		s := newSim(v, back)
		want := p.cfg.ExploreFraction * t[src]
		blocks := slices.Clone(s.on[src])
		slices.SortFunc(blocks, func(a, b int) int {
			return cmp.Or(cmp.Compare(v.cost(b, src), v.cost(a, src)), cmp.Compare(v.blocks[a].ID, v.blocks[b].ID))
		})
		for _, b := range blocks {
			cost := v.cost(b, src)
			if v.blocks[b].Pinned || cost <= 0 || cost > want || !s.affordable(b, lim) || back(b, c.i) {
				continue
			}
			s.move(b, c.i)
			want -= cost
		}
		moves := s.moves()
		if len(moves) == 0 {
			continue
		}
		p.lastProbe = p.step
		p.inflight = &inflight{kind: Explore, issued: p.step, baseline: obs.IterationTime, target: v.servers[c.i].ID, why: c.why}
		return Plan{Kind: Explore, Moves: moves, After: s.max(), Reason: fmt.Sprintf(
			"probe: %d blocks, %d bytes from server %d to server %d (%s); baseline iteration %v",
			len(moves), s.bytes, v.servers[src].ID, v.servers[c.i].ID, c.why, obs.IterationTime)}
	}
	return Plan{}
}

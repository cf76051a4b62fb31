package rebalance

import (
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"testing/quick"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scenario is a random cluster: 1 to 6 servers (some unmeasured, some
// draining or standby), up to 40 blocks of skewed sizes (some pinned, some
// idle, a few on a node that is not listed), and random per-plan caps.
type scenario struct {
	Blocks  []Block
	Servers []Server
	Cfg     Config
}

func (scenario) Generate(r *rand.Rand, _ int) reflect.Value {
	var sc scenario
	nS := 1 + r.Intn(6)
	for i := range nS {
		s := Server{ID: int32(8 + 2*i)}
		if r.Intn(5) > 0 {
			f := 0.2 + 2*r.Float64()
			s.Capacity = Capacity{Bytes: measured(1e8*f, t0), Requests: measured(1e3*f*(0.5+r.Float64()), t0)}
		}
		s.Draining = r.Intn(6) == 0
		s.Utilization = r.Float64() / 2
		sc.Servers = append(sc.Servers, s)
	}
	for i := range r.Intn(41) {
		b := Block{ID: uint64(r.Intn(1000)*64 + i), Bytes: 4 << r.Intn(22), Server: sc.Servers[r.Intn(nS)].ID}
		if r.Intn(4) > 0 {
			b.Requests = 1 + 100*r.Float64()
		}
		b.Pinned = r.Intn(10) == 0
		if r.Intn(20) == 0 {
			b.Server = 99
		}
		sc.Blocks = append(sc.Blocks, b)
	}
	for i := range sc.Servers {
		sc.Servers[i].Standby = bytesOn(sc.Blocks)[sc.Servers[i].ID] == 0
	}
	sc.Cfg = DefaultConfig()
	sc.Cfg.ExploreEvery = 0
	sc.Cfg.ScaleCooldown = 1
	sc.Cfg.Hysteresis = []float64{0, 0.05, 0.2}[r.Intn(3)]
	sc.Cfg.MaxMovesPerPlan = r.Intn(6)
	sc.Cfg.MigrationBudgetBytes = []int64{0, 1 << 10, 1 << 16, 1 << 22}[r.Intn(4)]
	sc.Cfg.BytesWeight = r.Float64()
	sc.Cfg.RequestsWeight = r.Float64()
	return reflect.ValueOf(sc)
}

func (sc scenario) hasDraining() bool {
	listed := map[int32]bool{}
	for _, s := range sc.Servers {
		listed[s.ID] = !s.Draining
	}
	for _, b := range sc.Blocks {
		if !listed[b.Server] {
			return true
		}
	}
	return false
}

// activeMax is the predicted slowest non-draining listed server.
func activeMax(blocks []Block, servers []Server, cfg Config) float64 {
	pred := Predict(blocks, servers, cfg)
	m := 0.0
	for _, s := range servers {
		if !s.Draining {
			m = max(m, pred[s.ID])
		}
	}
	return m
}

// checkPlan returns what is wrong with a plan for these inputs, or "".
func checkPlan(plan Plan, blocks []Block, servers []Server, cfg Config) string {
	owner := map[uint64]Block{}
	for _, b := range blocks {
		owner[b.ID] = b
	}
	active := map[int32]bool{}
	for _, s := range servers {
		active[s.ID] = !s.Draining
	}
	var bytes int64
	seen := map[uint64]bool{}
	for _, m := range plan.Moves {
		b, ok := owner[m.Block]
		switch {
		case !ok:
			return fmt.Sprintf("move of unknown block %d", m.Block)
		case seen[m.Block]:
			return fmt.Sprintf("block %d moved twice", m.Block)
		case m.From != b.Server:
			return fmt.Sprintf("block %d: From %d but owner %d", m.Block, m.From, b.Server)
		case m.To == m.From:
			return fmt.Sprintf("block %d: From == To", m.Block)
		case !active[m.To]:
			return fmt.Sprintf("block %d sent to inactive server %d", m.Block, m.To)
		case b.Pinned:
			return fmt.Sprintf("pinned block %d moved", m.Block)
		}
		seen[m.Block] = true
		bytes += b.Bytes
	}
	if cfg.MigrationBudgetBytes > 0 && bytes > cfg.MigrationBudgetBytes {
		return fmt.Sprintf("%d bytes moved, budget %d", bytes, cfg.MigrationBudgetBytes)
	}
	if cfg.MaxMovesPerPlan > 0 && len(plan.Moves) > cfg.MaxMovesPerPlan {
		return fmt.Sprintf("%d moves, cap %d", len(plan.Moves), cfg.MaxMovesPerPlan)
	}
	if plan.ScaleOut > 0 && len(plan.ScaleIn) > 0 {
		return "scale out and in at once"
	}
	if len(plan.ScaleIn) > 0 && len(plan.Moves) > 0 {
		return "scale in with moves"
	}
	return ""
}

func quickCfg(n int) *quick.Config {
	return &quick.Config{MaxCount: n, Rand: rand.New(rand.NewSource(1))}
}

// TestQuickPlanInvariants: on any cluster, a plan moves blocks only from
// their current owner to an active server, never a pinned block, never one
// block twice, within MaxMovesPerPlan and MigrationBudgetBytes; an exploit
// plan without draining never raises the predicted maximum, and After is
// what Predict says of the applied plan.
func TestQuickPlanInvariants(t *testing.T) {
	f := func(sc scenario) bool {
		p := newPlanner(t, sc.Cfg)
		plan := p.Step(Observation{Now: t0, IterationTime: time.Second}, sc.Blocks, sc.Servers)
		if plan.Err != nil {
			t.Log(plan.Err)
			return false
		}
		if msg := checkPlan(plan, sc.Blocks, sc.Servers, p.Config()); msg != "" {
			t.Log(msg)
			return false
		}
		after := activeMax(Apply(sc.Blocks, plan), sc.Servers, p.Config())
		if math.Abs(after-plan.After) > 1e-9*max(1, after) {
			t.Logf("After %v, Predict %v", plan.After, after)
			return false
		}
		if !sc.hasDraining() && after > plan.Before*(1+1e-9) {
			t.Logf("max %v -> %v", plan.Before, after)
			return false
		}
		return true
	}
	require.NoError(t, quick.Check(f, quickCfg(3000)))
}

// TestQuickLocalOptimum checks exploitation against a brute-force second
// version: with no hysteresis and no caps, after the plan no single move of
// any movable block lowers the predicted maximum, and a second Step finds
// nothing more to do (applying a plan is idempotent).
func TestQuickLocalOptimum(t *testing.T) {
	f := func(sc scenario) bool {
		for i := range sc.Servers {
			sc.Servers[i].Draining = false
		}
		for i := range sc.Blocks {
			if sc.Blocks[i].Server == 99 {
				sc.Blocks[i].Server = sc.Servers[0].ID
			}
		}
		cfg := sc.Cfg
		cfg.Hysteresis, cfg.MaxMovesPerPlan, cfg.MigrationBudgetBytes = 0, 0, 0
		p := newPlanner(t, cfg)
		plan := p.Step(Observation{Now: t0}, sc.Blocks, sc.Servers)
		blocks := Apply(sc.Blocks, plan)
		top := activeMax(blocks, sc.Servers, cfg)
		for i, b := range blocks {
			if b.Pinned {
				continue
			}
			for _, s := range sc.Servers {
				if s.ID == b.Server {
					continue
				}
				alt := slices.Clone(blocks)
				alt[i].Server = s.ID
				if m := activeMax(alt, sc.Servers, cfg); m < top*(1-1e-9) {
					t.Logf("moving block %d to %d lowers the max %v -> %v", b.ID, s.ID, top, m)
					return false
				}
			}
		}
		again := p.Step(Observation{Now: t0.Add(time.Second)}, blocks, sc.Servers)
		if len(again.Moves) > 0 {
			t.Logf("second plan %v: %s", again.Moves, again.Reason)
			return false
		}
		return true
	}
	require.NoError(t, quick.Check(f, quickCfg(2000)))
}

// naivePredict is Predict written out the slow, obvious way.
func naivePredict(blocks []Block, servers []Server, cfg Config) map[int32]float64 {
	wb, wr := cfg.BytesWeight/(cfg.BytesWeight+cfg.RequestsWeight), cfg.RequestsWeight/(cfg.BytesWeight+cfg.RequestsWeight)
	med := func(get func(Capacity) Estimate) float64 {
		var xs []float64
		for _, s := range servers {
			if e := get(s.Capacity); e.Samples >= max(cfg.MinSamples, 1) && e.Mean > 0 {
				xs = append(xs, e.Mean)
			}
		}
		if len(xs) == 0 {
			return 1
		}
		slices.Sort(xs)
		return (xs[(len(xs)-1)/2] + xs[len(xs)/2]) / 2
	}
	rate := func(e Estimate, m float64) float64 {
		if e.Samples >= max(cfg.MinSamples, 1) && e.Mean > 0 {
			return e.Mean
		}
		return m
	}
	mb := med(func(c Capacity) Estimate { return c.Bytes })
	mr := med(func(c Capacity) Estimate { return c.Requests })
	out := map[int32]float64{}
	for _, s := range servers {
		out[s.ID] = 0
		for _, b := range blocks {
			if b.Server == s.ID {
				out[s.ID] += wb*float64(b.Bytes)*b.Requests/rate(s.Capacity.Bytes, mb) + wr*b.Requests/rate(s.Capacity.Requests, mr)
			}
		}
	}
	return out
}

func TestQuickPredictNaive(t *testing.T) {
	f := func(sc scenario) bool {
		got, want := Predict(sc.Blocks, sc.Servers, sc.Cfg), naivePredict(sc.Blocks, sc.Servers, sc.Cfg)
		if len(got) != len(want) {
			return false
		}
		for id, w := range want {
			if math.Abs(got[id]-w) > 1e-9*max(1, w) {
				t.Logf("server %d: %v, naive %v", id, got[id], w)
				return false
			}
		}
		return true
	}
	require.NoError(t, quick.Check(f, quickCfg(2000)))
}

// world evolves a scenario over steps: capacities drift, requests change,
// the coordinator applies most plans (sometimes late or never), scale
// decisions are carried out, iteration times are noisy. Exploration is on.
type world struct {
	r       *rand.Rand
	blocks  []Block
	servers []Server
	now     time.Time
	held    *Plan // a plan the coordinator sits on for a step
}

func (w *world) observe() Observation {
	w.now = w.now.Add(10 * time.Second)
	return Observation{Now: w.now, IterationTime: time.Duration(80+w.r.Intn(40)) * time.Millisecond}
}

func (w *world) carryOut(plan Plan) {
	if w.held != nil {
		w.blocks = Apply(w.blocks, *w.held)
		w.held = nil
	}
	switch w.r.Intn(10) {
	case 0: // dropped
	case 1:
		w.held = &plan
	default:
		w.blocks = Apply(w.blocks, plan)
	}
	for i := range w.servers {
		s := &w.servers[i]
		s.Standby = false
		f := 1 + 0.3*(w.r.Float64()-0.5)
		s.Capacity.Bytes.Mean *= f
		s.Capacity.Requests.Mean *= f
		s.Capacity.Bytes.Updated, s.Capacity.Requests.Updated = w.now, w.now
		if slices.Contains(plan.ScaleIn, s.ID) {
			s.Draining = true
		}
	}
	// Drained servers leave.
	on := bytesOn(w.blocks)
	w.servers = slices.DeleteFunc(w.servers, func(s Server) bool { _, has := on[s.ID]; return s.Draining && !has })
	if plan.ScaleOut > 0 && len(w.servers) < 12 {
		id := int32(100 + 2*w.r.Intn(50))
		if !slices.ContainsFunc(w.servers, func(s Server) bool { return s.ID == id }) {
			w.servers = append(w.servers, Server{ID: id, Standby: true})
		}
	}
	for i := range w.blocks {
		if w.r.Intn(5) == 0 {
			w.blocks[i].Requests = 100 * w.r.Float64()
		}
	}
}

// TestQuickMultiStep runs random worlds for 40 steps each and checks every
// plan's invariants, that a Revert undoes exactly moves of the probe before
// it, and that a drain always finishes when nothing pins it.
func TestQuickMultiStep(t *testing.T) {
	f := func(sc scenario, seed int64) bool {
		cfg := sc.Cfg
		cfg.ExploreEvery = 1 + int(seed%4+4)%4
		cfg.ReprobeAfter = time.Minute
		cfg.ApplyTimeout = 2
		cfg.ScaleCooldown = 3
		cfg.MaxServers = 10
		p := newPlanner(t, cfg)
		w := &world{r: rand.New(rand.NewSource(seed)), blocks: sc.Blocks, servers: sc.Servers, now: t0}
		var probe []Move
		for step := range 40 {
			plan := p.Step(w.observe(), w.blocks, w.servers)
			if plan.Err != nil {
				t.Log(plan.Err)
				return false
			}
			if msg := checkPlan(plan, w.blocks, w.servers, p.Config()); msg != "" {
				t.Logf("step %d: %s (%s)", step, msg, plan.Reason)
				return false
			}
			switch plan.Kind {
			case Explore:
				probe = plan.Moves
			case Revert:
				for _, m := range plan.Moves {
					if !slices.Contains(probe, Move{m.Block, m.To, m.From}) {
						t.Logf("step %d: revert %v not in probe %v", step, m, probe)
						return false
					}
				}
			}
			w.carryOut(plan)
		}
		return true
	}
	require.NoError(t, quick.Check(f, quickCfg(500)))
}

// TestDeterminism: two planners fed the same history make the same plans,
// and so does a third fed the same inputs in shuffled order.
func TestDeterminism(t *testing.T) {
	gen := rand.New(rand.NewSource(7))
	for range 50 {
		sc := scenario{}.Generate(gen, 0).Interface().(scenario)
		cfg := sc.Cfg
		cfg.ExploreEvery = 2
		cfg.ReprobeAfter = time.Minute
		seed := gen.Int63()
		ps := []*Planner{newPlanner(t, cfg), newPlanner(t, cfg), newPlanner(t, cfg)}
		worlds := make([]*world, 3)
		for i := range worlds {
			worlds[i] = &world{r: rand.New(rand.NewSource(seed)), blocks: slices.Clone(sc.Blocks), servers: slices.Clone(sc.Servers), now: t0}
		}
		shuffle := rand.New(rand.NewSource(seed))
		for step := range 30 {
			var plans [3]Plan
			for i, w := range worlds {
				obs := w.observe()
				blocks, servers := w.blocks, w.servers
				if i == 2 {
					blocks, servers = slices.Clone(blocks), slices.Clone(servers)
					shuffle.Shuffle(len(blocks), func(a, b int) { blocks[a], blocks[b] = blocks[b], blocks[a] })
					shuffle.Shuffle(len(servers), func(a, b int) { servers[a], servers[b] = servers[b], servers[a] })
				}
				plans[i] = ps[i].Step(obs, blocks, servers)
			}
			require.Equal(t, plans[0], plans[1], "step %d", step)
			require.Equal(t, plans[0], plans[2], "step %d, shuffled inputs", step)
			for i, w := range worlds {
				w.carryOut(plans[i])
			}
			require.Equal(t, byID(worlds[0].blocks), byID(worlds[2].blocks))
		}
	}
}

// TestPlannerMemoryBounded: Cooldown entries expire and servers that left
// are forgotten, so a long run does not grow the Planner.
func TestPlannerMemoryBounded(t *testing.T) {
	cfg := exactConfig()
	cfg.Cooldown = 3
	p := newPlanner(t, cfg)
	blocks := []Block{blk(1, 1, 8), blk(2, 1, 8), blk(3, 1, 8), blk(4, 1, 8)}
	servers := []Server{u(8, 1), u(10, 0.5)} // 10 is slow: speed 0.67 < SlowRatio
	plan := p.Step(Observation{Now: t0}, blocks, servers)
	require.NotEmpty(t, plan.Moves)
	assert.NotEmpty(t, p.recent)
	assert.Contains(t, p.slow, int32(10))
	blocks = Apply(blocks, plan)
	for i := range cfg.Cooldown + 1 {
		p.Step(Observation{Now: t0.Add(time.Duration(i) * time.Second)}, blocks, servers)
	}
	assert.Empty(t, p.recent)
	for i := range blocks {
		blocks[i].Server = 8
	}
	p.Step(Observation{Now: t0.Add(time.Minute)}, blocks, servers[:1])
	assert.Empty(t, p.slow)
	assert.Nil(t, p.inflight)
}

package syncctl

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// step is one event of a scripted scenario. A request's ID is its step's
// number (1-based), so expected releases name the steps they release.
type step struct {
	do   string // "push", "pull", "pushpull", "join", "leave", "close"
	node int32
	keys []uint64 // default: key 1
	iter int64
	run  bool     // requests: the expected decision
	rel  []uint64 // the expected releases, in order
}

func push(node int32, run bool, rel ...uint64) step {
	return step{do: "push", node: node, run: run, rel: rel}
}

func pull(node int32, run bool, rel ...uint64) step {
	return step{do: "pull", node: node, run: run, rel: rel}
}

func leave(node int32, rel ...uint64) step { return step{do: "leave", node: node, rel: rel} }

func (s step) on(keys ...uint64) step { s.keys = keys; return s }

// sim plays scripted steps on a controller. Request IDs count on across
// play calls: the n-th request step is ID n.
type sim struct {
	t *testing.T
	c *Controller
	n uint64
}

func newSim(t *testing.T, cfg Config, nodes ...int32) *sim {
	return &sim{t: t, c: newController(t, cfg, nodes...)}
}

// play runs steps, checking every decision.
func (m *sim) play(steps ...step) {
	t := m.t
	t.Helper()
	for _, s := range steps {
		m.n++
		id := m.n
		keys := s.keys
		if keys == nil {
			keys = []uint64{1}
		}
		var run bool
		var rel []uint64
		switch s.do {
		case "push", "pull", "pushpull":
			r := Request{ID: id, Worker: Worker{Node: s.node}, Keys: keys, Iteration: s.iter,
				Push: s.do != "pull", Pull: s.do != "push"}
			run, rel = m.c.Admit(r)
			assert.Equal(t, s.run, run, "step %d (%s of node %d): run", id, s.do, s.node)
		case "join":
			rel = m.c.Join(s.node)
		case "leave":
			rel = m.c.Leave(s.node)
		case "close":
			rel = m.c.Close()
		default:
			require.FailNow(t, "unknown step", s.do)
		}
		assert.Equal(t, s.rel, rel, "step %d (%s of node %d): released", id, s.do, s.node)
	}
}

func newController(t *testing.T, cfg Config, nodes ...int32) *Controller {
	t.Helper()
	c, err := New(cfg)
	require.NoError(t, err)
	for _, n := range nodes {
		assert.Empty(t, c.Join(n))
	}
	return c
}

// script is a Rand that returns its values in turn and fails the test when
// drawn more often than scripted.
type script struct {
	t     *testing.T
	vals  []float64
	drawn int
}

func (s *script) rand() float64 {
	s.t.Helper()
	if s.drawn >= len(s.vals) {
		assert.Fail(s.t, "Rand drawn more often than scripted", "draw %d", s.drawn+1)
		return 0.5
	}
	s.drawn++
	return s.vals[s.drawn-1]
}

func TestASPNeverWaits(t *testing.T) {
	m := newSim(t, Config{Mode: ASP}, 1, 2)
	m.play(push(1, true), push(1, true), pull(1, true), pull(2, true), push(2, true), leave(1), step{do: "close"})
	assert.Equal(t, Stats{Requests: 5}, m.c.Stats())
}

func TestBSPAnswersAPullOnlyWhenEveryWorkerPushedItsRound(t *testing.T) {
	m := newSim(t, Config{Mode: BSP}, 1, 2, 3)
	m.play(
		pull(1, true),        // 1: iteration 0, before any push
		push(1, true),        // 2: round 1
		pull(1, false),       // 3: round 1, t_min 0
		push(2, true),        // 4
		pull(2, false),       // 5
		push(3, true, 3, 5),  // 6: round 1 complete: both pulls, in park order
		pull(3, true),        // 7
		push(3, true),        // 8: round 2 (nobody owes round 1's pull)
		pull(3, false),       // 9
		push(1, true),        // 10
		pull(1, false),       // 11
		push(2, true, 9, 11), // 12
		pull(2, true),        // 13
	)
	assert.Equal(t, Stats{Requests: 13, DelayedPulls: 4, Releases: 2}, m.c.Stats())
}

func TestBSPPushHold(t *testing.T) {
	t.Run("a fast worker's next push waits until the others pulled the round", func(t *testing.T) {
		m := newSim(t, Config{Mode: BSP}, 1, 2, 3)
		m.play(
			push(1, true), push(2, true), push(3, true), // 1-3: round 1 complete
			pull(1, true),    // 4
			push(1, false),   // 5: round 2: 2 and 3 owe round 1's pull
			pull(2, true),    // 6: 3 still owes it
			pull(3, true, 5), // 7: nobody owes: the push goes
			push(2, true),    // 8: round 2: 3 is still at round 1 but pulled it
		)
		assert.Equal(t, Stats{Requests: 8, DelayedPushes: 1, Releases: 1}, m.c.Stats())
	})
	t.Run("a released push goes before the pulls that depend on it", func(t *testing.T) {
		m := newSim(t, Config{Mode: BSP}, 1, 2)
		m.play(
			push(1, true), push(2, true), // round 1 complete
			pull(1, true),       // 3
			push(1, false),      // 4: round 2: 2 owes round 1's pull
			pull(1, false),      // 5: round 2's pull, behind its parked push
			push(2, true, 4, 5), // 6: 2 skips its pull, so owes round 2's now: 4 goes, t_min 2, then 5
		)
		assert.Equal(t, Stats{Requests: 6, DelayedPulls: 1, DelayedPushes: 1, Releases: 1}, m.c.Stats())
	})
	t.Run("a worker's parked pushes go in order", func(t *testing.T) {
		m := newSim(t, Config{Mode: BSP}, 1, 2)
		m.play(
			push(1, true), push(2, true), // round 1 complete
			push(1, false),      // 3: round 2: 2 owes round 1
			push(1, false),      // 4: round 3: nobody at round 2 owes, but 3 is first
			pull(2, true, 3, 4), // 5
		)
	})
	t.Run("a push-pull is gated as a push", func(t *testing.T) {
		m := newSim(t, Config{Mode: BSP}, 1, 2)
		m.play(
			push(1, true), push(2, true),
			step{do: "pushpull", node: 1}, // 3: round 2: 2 owes round 1
			pull(2, true, 3),
		)
	})
}

func TestSSPNeverLetsAGapExceedTheBound(t *testing.T) {
	m := newSim(t, Config{Mode: SSP, Staleness: 2}, 1, 2)
	m.play(
		push(1, true), pull(1, true), // gap 1
		push(1, true), pull(1, true), // gap 2: at the bound, runs
		push(1, true),    // 5: pushes never wait
		pull(1, false),   // 6: gap 3
		push(1, true),    // 7
		pull(1, false),   // 8: gap 4
		push(2, true, 6), // 9: t_min 1: 6 at gap 2 goes, 8 at gap 3 waits
		pull(2, true),    // 10
		push(2, true, 8), // 11: t_min 2
	)
	assert.Equal(t, Stats{Requests: 11, DelayedPulls: 2, Releases: 2}, m.c.Stats())
}

func TestSSPWithStatedIterations(t *testing.T) {
	m := newSim(t, Config{Mode: SSP, Staleness: 1}, 1, 2)
	m.play(
		step{do: "push", node: 1, iter: 5, run: true},                   // clock 5 at once
		step{do: "pull", node: 1, iter: 5, run: false},                  // gap 5
		step{do: "push", node: 2, iter: 4, run: true, rel: []uint64{2}}, // t_min 4: gap 1
	)
}

func TestSSPMultiKeyPullWaitsForEveryKey(t *testing.T) {
	m := newSim(t, Config{Mode: SSP, Staleness: 0}, 1, 2)
	m.play(
		push(1, true).on(1, 2),
		pull(1, false).on(1, 2), // 2: both keys at gap 1
		push(2, true).on(1),     // 3: key 1 allows it now, key 2 does not
		push(2, true, 2).on(2),  // 4
	)
}

func TestFluent(t *testing.T) {
	// Steps 1-5: three workers at clocks 3, 2 and 0 on key 1.
	ahead := []step{push(1, true), push(1, true), push(1, true), push(2, true), push(2, true)}
	cases := []struct {
		name  string
		cfg   Config
		draws []float64
		steps []step
	}{
		{"a worker that is not the fastest is never held",
			Config{Staleness: 1, PauseProb: 1}, nil,
			[]step{pull(2, true), pull(3, true)}}, // gaps 2 and 0
		{"no hold below the bound",
			Config{Staleness: 4, PauseProb: 1}, nil,
			[]step{pull(1, true)}}, // gap 3
		{"p = 1 holds the fastest at the bound",
			Config{Staleness: 3, PauseProb: 1}, []float64{0.999},
			[]step{pull(1, false)}},
		{"p = 1 holds the fastest above the bound",
			Config{Staleness: 1, PauseProb: 1}, []float64{0.999},
			[]step{pull(1, false)}},
		{"p = 0 never holds",
			Config{Staleness: 1, PauseProb: 0}, []float64{0},
			[]step{pull(1, true)}},
		{"a constant p holds when the draw is below it",
			Config{Staleness: 1, PauseProb: 0.25}, []float64{0.25, 0.2499},
			[]step{pull(1, true), pull(1, false)}},
		{"a held pull goes at the first t_min advance, whatever its gap then",
			Config{Staleness: 1, PauseProb: 1}, []float64{0.5},
			[]step{pull(1, false), push(3, true, 6)}}, // t_min 1: gap 2, still >= s
		{"pushes never wait, other pulls run, the held pull waits for t_min",
			Config{Staleness: 1, PauseProb: 1}, []float64{0.5},
			[]step{pull(1, false), push(1, true), push(2, true), pull(2, true), push(3, true, 6)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			draws := &script{t: t, vals: tc.draws}
			tc.cfg.Mode, tc.cfg.Rand = Fluent, draws.rand
			m := newSim(t, tc.cfg, 1, 2, 3)
			m.play(ahead...)
			m.play(tc.steps...)
			assert.Equal(t, len(tc.draws), draws.drawn, "draws")
		})
	}
}

func TestFluentSigmoid(t *testing.T) {
	const s = 2
	sigmoid := func(gap int64) float64 { return 1 / (1 + math.Exp(float64(s-gap))) }
	for _, gap := range []int64{2, 3, 5} {
		p := sigmoid(gap)
		for _, tc := range []struct {
			u    float64
			held bool
		}{{math.Nextafter(p, 0), true}, {p, false}} {
			draws := &script{t: t, vals: []float64{tc.u}}
			// PauseProb 1 is ignored: the sigmoid decides.
			m := newSim(t, Config{Mode: Fluent, Staleness: s, Sigmoid: true, PauseProb: 1, Rand: draws.rand}, 1, 2)
			for range gap {
				m.play(push(1, true))
			}
			m.play(pull(1, !tc.held))
			assert.Equal(t, 1, draws.drawn, "gap %d u %v", gap, tc.u)
		}
	}
}

// A pull of several blocks meets one pause decision, not one per block
// (which would hold it with probability 1-(1-p)^n): drawn at the block
// with the largest gap, whose next t_min advance releases it.
func TestFluentDrawsOncePerRequest(t *testing.T) {
	const s = 2
	u := math.Nextafter(1/(1+math.Exp(float64(s-5))), 0) // just below p at gap 5, above p at gap 3
	draws := &script{t: t, vals: []float64{u}}
	m := newSim(t, Config{Mode: Fluent, Staleness: s, Sigmoid: true, Rand: draws.rand}, 1, 2)
	for range 3 {
		m.play(push(1, true).on(1))
	}
	for range 5 {
		m.play(push(1, true).on(2))
	}
	m.play(
		pull(1, false).on(1, 2), // 9: gaps 3 and 5, the fastest on both: one draw, at gap 5
		push(2, true).on(1),     // 10: key 1's t_min advances: not the key that holds it
		push(2, true, 9).on(2),  // 11: key 2's does
	)
	assert.Equal(t, 1, draws.drawn)
}

func TestFluentReleasesEveryPullParkedOnTheAdvanceInOneBatch(t *testing.T) {
	draws := &script{t: t, vals: []float64{0, 0, 0}}
	m := newSim(t, Config{Mode: Fluent, Staleness: 1, PauseProb: 0.5, Rand: draws.rand}, 1, 2, 3)
	m.play(
		push(1, true), push(2, true), push(1, true), push(2, true), // 1 and 2 at 2, 3 at 0
		pull(1, false),          // 5: both are the fastest
		pull(2, false),          // 6
		push(3, true, 5, 6),     // 7: t_min 1
		push(1, true),           // 8: 1 at 3
		pull(1, false).on(0, 1), // 9: key 0 is new, gap 0 there, no draw; key 1 holds it
		push(3, true, 9),        // 10: t_min 2
	)
	assert.Equal(t, 3, draws.drawn)
	assert.Equal(t, Stats{Requests: 10, DelayedPulls: 3, Pauses: 3, Releases: 2}, m.c.Stats())
}

func TestEveryParkedRequestIsReleasedExactlyOnce(t *testing.T) {
	t.Run("on leave of its worker", func(t *testing.T) {
		m := newSim(t, Config{Mode: BSP}, 1, 2, 3)
		m.play(
			push(1, true), pull(1, false), // 2 parked
			push(2, true), pull(2, false), // 4 parked
			leave(1, 2), // its own pull; 3 still holds 4
			leave(3, 4), // t_min 1
			step{do: "close"},
		)
		assert.Equal(t, 0, m.c.Stats().Parked)
	})
	t.Run("on leave, a held push of the leaver too", func(t *testing.T) {
		m := newSim(t, Config{Mode: BSP}, 1, 2)
		m.play(
			push(1, true), push(2, true), push(1, false), // 3: held by 2's owed pull
			leave(1, 3), pull(2, true), step{do: "close"},
		)
	})
	t.Run("on export of its keys", func(t *testing.T) {
		m := newSim(t, Config{Mode: SSP}, 1, 2)
		m.play(push(1, true).on(1, 5), pull(1, false).on(1), pull(1, false).on(5), pull(1, false).on(1, 5))
		_, parked, released := m.c.Export(5, 6)
		assert.Equal(t, []uint64{3, 4}, parked)
		assert.Empty(t, released)
		assert.Equal(t, 1, m.c.Stats().Parked)
		m.play(push(2, true, 2).on(1)) // 2 goes, 4 is gone
		assert.Nil(t, m.c.Close())
	})
	t.Run("on export, what waited behind an exported push runs", func(t *testing.T) {
		m := newSim(t, Config{Mode: BSP}, 1, 2)
		m.play(
			push(1, true).on(1, 5), push(2, true).on(1, 5),
			pull(2, true).on(1),     // 3: worker 2 still owes the pull of key 5
			push(1, false).on(1, 5), // 4: round 2, held by key 5 alone
			push(1, false).on(1),    // 5: round 3 of key 1, behind 4 in worker 1's queue
		)
		_, parked, released := m.c.Export(5, 6)
		assert.Equal(t, []uint64{4}, parked)
		assert.Equal(t, []uint64{5}, released, "5 is now worker 1's round 2 of key 1, which nothing holds")
	})
	t.Run("on close, in park order, once", func(t *testing.T) {
		draws := &script{t: t, vals: []float64{0, 0}}
		m := newSim(t, Config{Mode: Fluent, Staleness: 1, PauseProb: 1, Rand: draws.rand}, 1, 2)
		m.play(push(1, true), pull(1, false), push(1, true), pull(1, false), step{do: "close", rel: []uint64{2, 4}}, step{do: "close"})
		assert.Equal(t, 0, m.c.Stats().Parked)
		m.play(pull(1, true), leave(2)) // after close everything runs
	})
}

func TestJoinAndLeave(t *testing.T) {
	t.Run("a late joiner starts at t_min", func(t *testing.T) {
		m := newSim(t, Config{Mode: SSP}, 1, 2)
		m.play(
			push(1, true), push(2, true), push(1, true), push(2, true).on(1, 2), // t_min(1) 2; key 2: 1 at 0, 2 at 1
			step{do: "join", node: 3},
			pull(1, true),        // 6: gap 0: 3 did not drag t_min(1) back
			pull(2, false).on(2), // 7: key 2 at t_min 0
			push(1, true).on(2),  // 8: 3 holds key 2 at the t_min it joined at, 0
			push(3, true, 7).on(2),
			pull(3, true), // 10: 3 is at 2 on key 1: gap 0
		)
	})
	t.Run("an unknown worker joins implicitly at t_min", func(t *testing.T) {
		m := newSim(t, Config{Mode: BSP}, 1)
		m.play(
			push(1, true), push(1, true),
			pull(9, true),  // 3: node 9 at t_min 2: iteration 2, gap 0
			push(1, true),  // 4: 1 at 3
			pull(1, false), // 5: 9 holds t_min at 2
			push(9, true, 5),
		)
	})
	t.Run("the leave of the slowest advances t_min and releases", func(t *testing.T) {
		m := newSim(t, Config{Mode: SSP, Staleness: 1}, 1, 2, 3)
		m.play(
			push(1, true), push(1, true), push(2, true), push(2, true), // 3 at 0
			pull(1, false), pull(2, false),
			leave(3, 5, 6),
			pull(1, true), leave(3), step{do: "join", node: 3},
			pull(3, true), // 11: 3 comes back at t_min 2
		)
	})
}

func TestValidate(t *testing.T) {
	rnd := func() float64 { return 0 }
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: 9}, "sync mode Mode(9) unknown: use asp, bsp, ssp or fluent"},
		{Config{Mode: SSP, Staleness: -1}, "staleness -1 is negative: use a bound >= 0"},
		{Config{Mode: Fluent, Staleness: 1, PauseProb: 1.5, Rand: rnd}, "pause probability 1.5 is outside [0, 1]"},
		{Config{Mode: Fluent, Staleness: 1, PauseProb: math.NaN(), Rand: rnd}, "pause probability NaN is outside [0, 1]"},
		{Config{Mode: Fluent, Staleness: 1, PauseProb: -0.1, Rand: rnd}, "pause probability -0.1 is outside [0, 1]"},
		{Config{Mode: Fluent, Staleness: 1, PauseProb: 0.5}, "fluent mode needs Config.Rand"},
		{Config{Mode: Fluent, Staleness: 0, PauseProb: 0.5, Rand: rnd}, "fluent mode needs staleness >= 1"},
	} {
		err := tc.cfg.Validate()
		if assert.Error(t, err, "%+v", tc.cfg) {
			assert.Contains(t, err.Error(), tc.want)
		}
		_, err = New(tc.cfg)
		assert.Error(t, err)
	}
	for _, cfg := range []Config{{}, {Mode: BSP}, {Mode: SSP}, {Mode: Fluent, Staleness: 1, Sigmoid: true, Rand: rnd}} {
		assert.NoError(t, cfg.Validate(), "%+v", cfg)
	}
}

func TestASecondCustomerOfANodeStartsAtTMin(t *testing.T) {
	c := newController(t, Config{Mode: SSP}, 1)
	w0, w1 := Worker{Node: 1}, Worker{Node: 1, Customer: 1}
	for id := uint64(1); id <= 2; id++ {
		run, _ := c.Admit(Request{ID: id, Worker: w0, Push: true, Keys: []uint64{1}})
		require.True(t, run)
	}
	run, _ := c.Admit(Request{ID: 3, Worker: w1, Pull: true, Keys: []uint64{1}})
	assert.True(t, run, "customer 1 is at t_min 2: gap 0")
	run, _ = c.Admit(Request{ID: 4, Worker: w0, Push: true, Keys: []uint64{1}})
	assert.True(t, run)
	run, _ = c.Admit(Request{ID: 5, Worker: w0, Pull: true, Keys: []uint64{1}})
	assert.False(t, run, "customer 1 holds t_min at 2")
	run, rel := c.Admit(Request{ID: 6, Worker: w1, Push: true, Keys: []uint64{1}})
	assert.True(t, run)
	assert.Equal(t, []uint64{5}, rel)
}

package syncctl

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// The reference model: a deliberately naive second reading of the rules.
// It keeps the history of everything that happened (joins, leaves, keys
// touched, pushes applied, pulls run) and recomputes every clock and t_min
// from that whole history whenever it needs one.

// mstate is the state the history adds up to. A joined node none of whose
// customers touched a key is there as Worker{node, -1}.
type mstate struct {
	joined map[int32]bool
	keys   map[uint64]map[Worker]*mclock
	last   map[uint64]int64 // t_min of a key all workers left
}

type mclock struct {
	clock int64
	owes  bool
}

func placeholder(node int32) Worker { return Worker{Node: node, Customer: -1} }

func (s *mstate) tmin(k uint64) int64 {
	first, m := true, s.last[k]
	for _, c := range s.keys[k] {
		if first || c.clock < m {
			m = c.clock
		}
		first = false
	}
	return m
}

func (s *mstate) tmax(k uint64) int64 {
	m := s.tmin(k)
	for _, c := range s.keys[k] {
		m = max(m, c.clock)
	}
	return m
}

func (s *mstate) join(n int32) {
	if s.joined[n] {
		return
	}
	s.joined[n] = true
	for k, ws := range s.keys {
		has := false
		for w := range ws {
			has = has || w.Node == n
		}
		if !has {
			ws[placeholder(n)] = &mclock{clock: s.tmin(k)}
		}
	}
}

func (s *mstate) leave(n int32) {
	delete(s.joined, n)
	for k, ws := range s.keys {
		s.last[k] = s.tmin(k)
		for w := range ws {
			if w.Node == n {
				delete(ws, w)
			}
		}
	}
}

// touch: w sent a request for k.
func (s *mstate) touch(w Worker, k uint64) {
	s.join(w.Node)
	ws := s.keys[k]
	if ws == nil {
		ws = map[Worker]*mclock{}
		for n := range s.joined {
			ws[placeholder(n)] = &mclock{}
		}
		s.keys[k] = ws
	}
	if ws[w] != nil {
		return
	}
	if p := ws[placeholder(w.Node)]; p != nil {
		delete(ws, placeholder(w.Node))
		ws[w] = p
		return
	}
	ws[w] = &mclock{clock: s.tmin(k)}
}

type mreq struct {
	r     Request
	iters []int64
	hold  uint64 // Fluent: the key whose t_min advance releases it
}

type model struct {
	cfg     Config
	history []func(*mstate)
	parked  []*mreq // in park order
	draws   []float64
	drawn   int
}

func (m *model) state() *mstate {
	s := &mstate{joined: map[int32]bool{}, keys: map[uint64]map[Worker]*mclock{}, last: map[uint64]int64{}}
	for _, h := range m.history {
		h(s)
	}
	return s
}

func (m *model) record(h func(*mstate)) { m.history = append(m.history, h) }

func (m *model) bound() int64 {
	if m.cfg.Mode == BSP {
		return 0
	}
	return m.cfg.Staleness
}

// parkedPushes counts w's parked pushes that touch k, before index before.
func (m *model) parkedPushes(w Worker, k uint64, before int) int64 {
	n := int64(0)
	for _, p := range m.parked[:before] {
		if p.r.Push && p.r.Worker == w && slices.Contains(p.r.Keys, k) {
			n++
		}
	}
	return n
}

func (m *model) holds(s *mstate, w Worker, k uint64, iter int64) bool {
	for v, c := range s.keys[k] {
		if v != w && v.Customer >= 0 && c.owes && c.clock == iter-1 {
			return true
		}
	}
	return false
}

// runs tells whether the request at parked index i (or a new one, i ==
// len(parked)) may run now, per the rules of SYNC-SPEC.md.
func (m *model) runs(s *mstate, p *mreq, i int) bool {
	for j, k := range p.r.Keys {
		if p.r.Push {
			if m.cfg.Mode == BSP && (m.parkedPushes(p.r.Worker, k, i) > 0 || m.holds(s, p.r.Worker, k, p.iters[j])) {
				return false
			}
		} else if p.iters[j]-s.tmin(k) > m.bound() {
			return false
		}
	}
	return true
}

// apply records that p ran.
func (m *model) apply(p *mreq) {
	r, iters := p.r, slices.Clone(p.iters)
	m.record(func(s *mstate) {
		for j, k := range r.Keys {
			c := s.keys[k][r.Worker]
			if r.Push {
				c.clock, c.owes = iters[j], m.cfg.Mode == BSP
			} else {
				c.owes = false
			}
		}
	})
}

// admit returns the model's decision about r; for Fluent also what it
// releases.
func (m *model) admit(r Request) (run bool, fluentReleased []uint64) {
	r.Keys = slices.Clone(r.Keys)
	m.record(func(s *mstate) {
		for _, k := range r.Keys {
			s.touch(r.Worker, k)
		}
	})
	s := m.state()
	p := &mreq{r: r, iters: make([]int64, len(r.Keys))}
	for j, k := range r.Keys {
		n := m.parkedPushes(r.Worker, k, len(m.parked))
		p.iters[j] = s.keys[k][r.Worker].clock + n
		if r.Push {
			p.iters[j]++
		}
	}
	if m.cfg.Mode == Fluent {
		if !r.Push {
			// one draw per request, at the first key with the largest
			// gap among those where the worker is the fastest at gap >= s
			best := -1
			var bestGap int64
			for j, k := range r.Keys {
				gap := p.iters[j] - s.tmin(k)
				if gap >= m.cfg.Staleness && s.keys[k][r.Worker].clock == s.tmax(k) && (best < 0 || gap > bestGap) {
					best, bestGap = j, gap
				}
			}
			if best >= 0 {
				prob := m.cfg.PauseProb
				if m.cfg.Sigmoid {
					prob = sigmoidModel(m.cfg.Staleness, bestGap)
				}
				if m.drawn >= len(m.draws) {
					panic("the model draws more often than the controller")
				}
				u := m.draws[m.drawn]
				m.drawn++
				if u < prob {
					p.hold = r.Keys[best]
					m.parked = append(m.parked, p)
					return false, nil
				}
			}
		}
		before := m.state()
		m.apply(p)
		return true, m.fluentAdvance(before, r.Keys)
	}
	if !m.runs(s, p, len(m.parked)) {
		m.parked = append(m.parked, p)
		return false, nil
	}
	m.apply(p)
	return true, nil
}

// fluentAdvance releases, for each key of keys whose t_min grew since
// before, every pull held on it, in park order.
func (m *model) fluentAdvance(before *mstate, keys []uint64) []uint64 {
	after := m.state()
	var out []uint64
	for _, k := range keys {
		if len(after.keys[k]) == 0 || after.tmin(k) <= before.tmin(k) {
			continue
		}
		m.parked = slices.DeleteFunc(m.parked, func(p *mreq) bool {
			if p.hold == k {
				out = append(out, p.r.ID)
				return true
			}
			return false
		})
	}
	return out
}

// checkReleases checks a BSP or SSP controller's releases: each one may
// run when its turn comes (after those before it ran), and afterwards no
// parked request may run.
func (m *model) checkReleases(t *rapid.T, released []uint64) {
	for _, id := range released {
		i := slices.IndexFunc(m.parked, func(p *mreq) bool { return p.r.ID == id })
		require.GreaterOrEqual(t, i, 0, "released %d is not parked", id)
		p := m.parked[i]
		require.True(t, m.runs(m.state(), p, i), "released %d (%+v) may not run yet", id, p.r)
		m.parked = slices.Delete(m.parked, i, i+1)
		m.apply(p)
	}
	s := m.state()
	for i, p := range m.parked {
		require.False(t, m.runs(s, p, i), "parked %d (%+v) may run but was not released", p.r.ID, p.r)
	}
}

// leave returns the leaver's own parked requests, in park order.
func (m *model) leave(n int32) (own []uint64) {
	m.parked = slices.DeleteFunc(m.parked, func(p *mreq) bool {
		if p.r.Worker.Node == n {
			own = append(own, p.r.ID)
			return true
		}
		return false
	})
	m.record(func(s *mstate) { s.leave(n) })
	return own
}

func sigmoidModel(s, gap int64) float64 { return 1 / (1 + math.Exp(float64(s-gap))) }

// TestAgainstTheModel plays random event sequences on the controller and
// the model and compares every decision, with the invariants: a parked
// request is released at most once, and after Close all are; under SSP no
// pull runs at a gap above s.
func TestAgainstTheModel(t *testing.T) {
	configs := map[string]Config{
		"bsp":             {Mode: BSP},
		"ssp0":            {Mode: SSP},
		"ssp1":            {Mode: SSP, Staleness: 1},
		"fluent-constant": {Mode: Fluent, Staleness: 1, PauseProb: 0.5},
		"fluent-sigmoid":  {Mode: Fluent, Staleness: 2, Sigmoid: true},
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) { playRandom(t, cfg) })
		})
	}
}

func playRandom(t *rapid.T, cfg Config) {
	// The controller's draws come from rapid; the model takes the same
	// values, and must take as many.
	m := &model{cfg: cfg}
	if cfg.Mode == Fluent {
		cfg.Rand = func() float64 {
			u := rapid.Float64Range(0, 1).Draw(t, "u")
			m.draws = append(m.draws, u)
			return u
		}
	}
	c, err := New(cfg)
	require.NoError(t, err)
	m.cfg = cfg
	for n := int32(1); n <= 3; n++ {
		c.Join(n)
		m.record(func(s *mstate) { s.join(n) })
	}
	parked := map[uint64]bool{}
	released := map[uint64]bool{}
	release := func(ids []uint64) {
		for _, id := range ids {
			require.True(t, parked[id], "released %d was not parked", id)
			require.False(t, released[id], "%d released twice", id)
			released[id] = true
		}
	}
	steps := rapid.IntRange(1, 50).Draw(t, "steps")
	for id := uint64(1); id <= uint64(steps); id++ {
		what := rapid.SampledFrom([]string{"push", "push", "pull", "pull", "pushpull", "join", "leave"}).Draw(t, "what")
		node := rapid.Int32Range(1, 4).Draw(t, "node")
		if what == "join" {
			assert.Empty(t, c.Join(node))
			m.record(func(s *mstate) { s.join(node) })
			continue
		}
		if what == "leave" {
			got := c.Leave(node)
			before := m.state()
			own := m.leave(node)
			require.GreaterOrEqual(t, len(got), len(own), "leave %d: %v, own %v", node, got, own)
			cascade := slices.Clip(got[:len(got)-len(own)])
			require.Equal(t, fmt.Sprint(own), fmt.Sprint(got[len(got)-len(own):]), "leave %d: own parked requests come last", node)
			release(got)
			if cfg.Mode == Fluent {
				keys := slices.Sorted(maps.Keys(before.keys))
				require.Equal(t, fmt.Sprint(m.fluentAdvance(before, keys)), fmt.Sprint(cascade), "leave %d: released", node)
			} else {
				m.checkReleases(t, cascade)
			}
			require.Equal(t, len(m.parked), c.Stats().Parked, "after leave %d", node)
			continue
		}
		mask := rapid.IntRange(1, 7).Draw(t, "keys")
		var keys []uint64
		for k := range uint64(3) {
			if mask&(1<<k) != 0 {
				keys = append(keys, k+1)
			}
		}
		r := Request{ID: id, Worker: Worker{Node: node}, Push: what != "pull", Pull: what != "push", Keys: keys}
		run, got := c.Admit(r)
		want, wantRel := m.admit(r)
		require.Equal(t, want, run, "request %d %+v: run", id, r)
		if !run {
			parked[id] = true
		}
		release(got)
		if cfg.Mode == Fluent {
			require.Equal(t, wantRel, got, "request %d %+v: released", id, r)
			require.Equal(t, len(m.draws), m.drawn, "request %d: draws", id)
		} else {
			m.checkReleases(t, got)
		}
		if cfg.Mode == SSP && run && !r.Push {
			s := m.state()
			for _, k := range keys {
				require.LessOrEqual(t, s.keys[k][r.Worker].clock-s.tmin(k), cfg.Staleness, "pull %d ran at a gap above s", id)
			}
		}
		require.Equal(t, len(m.parked), c.Stats().Parked, "after request %d", id)
	}
	final := c.Close()
	release(final)
	for id := range parked {
		require.True(t, released[id], "%d never released", id)
	}
	require.Equal(t, 0, c.Stats().Parked)
	require.Nil(t, c.Close(), "a second close releases nothing")
}

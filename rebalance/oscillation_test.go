package rebalance

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// naiveStep is the planner PSLD warns against: every step, move the largest
// block of the slowest server to the fastest, without asking whether that
// helps.
func naiveStep(blocks []Block, servers []Server, cfg Config) Plan {
	pred := Predict(blocks, servers, cfg)
	ids := make([]int32, 0, len(pred))
	for id := range pred {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	hi, lo := ids[0], ids[0]
	for _, id := range ids {
		if pred[id] > pred[hi] {
			hi = id
		}
		if pred[id] < pred[lo] {
			lo = id
		}
	}
	var best *Block
	for i := range blocks {
		b := &blocks[i]
		if b.Server == hi && !b.Pinned && (best == nil || b.Bytes > best.Bytes) {
			best = b
		}
	}
	if hi == lo || best == nil {
		return Plan{}
	}
	return Plan{Kind: Exploit, Moves: []Move{{best.ID, hi, lo}}}
}

// runBoth drives the naive planner and ours for steps windows over the
// same world (servers(i) gives the estimates of window i) and returns how
// many moves each made in every window.
func runBoth(t *testing.T, cfg Config, blocks []Block, servers func(i int) []Server, steps int) (naive, ours []int) {
	t.Helper()
	p := newPlanner(t, cfg)
	nb, ob := slices.Clone(blocks), slices.Clone(blocks)
	for i := range steps {
		s := servers(i)
		np := naiveStep(nb, s, cfg)
		nb = Apply(nb, np)
		op := p.Step(Observation{Now: t0.Add(time.Duration(i) * 10 * time.Second), IterationTime: time.Second}, ob, s)
		require.NoError(t, op.Err)
		ob = Apply(ob, op)
		naive = append(naive, len(np.Moves))
		ours = append(ours, len(op.Moves))
	}
	return naive, ours
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestOscillationIndivisible: 10 bytes on 8, 4 on 10. Moving the big block
// only swaps which server is slow; the naive planner does it every window,
// forever. Ours sees no gain and never moves.
func TestOscillationIndivisible(t *testing.T) {
	naive, ours := runBoth(t, exactConfig(),
		[]Block{blk(1, 10, 8), blk(2, 4, 10)},
		func(int) []Server { return []Server{u(8, 1), u(10, 1)} }, 100)
	assert.Equal(t, 100, sum(naive), "naive: a move in every window")
	assert.Equal(t, 0, sum(ours))
}

// TestOscillationNoisyEstimates: 3 servers, 24 equal blocks, all on 8 at
// first; every window each server's measured rate wobbles by up to ±4%.
// Ours balances in the first plan and then holds: the wobble never promises
// more than the 5% hysteresis. The naive planner chases the noise for ever.
func TestOscillationNoisyEstimates(t *testing.T) {
	var blocks []Block
	for i := range 24 {
		blocks = append(blocks, blk(uint64(i+1), 1, 8))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	wobble := make([][]Server, 200)
	for i := range wobble {
		for _, id := range []int32{8, 10, 12} {
			wobble[i] = append(wobble[i], u(id, 10*(1+0.08*(rng.Float64()-0.5))))
		}
	}
	naive, ours := runBoth(t, exactConfig(), blocks, func(i int) []Server { return wobble[i] }, 200)
	assert.Equal(t, 100, sum(naive[100:]), "naive: still moving in every one of the last 100 windows")
	assert.Equal(t, 16, ours[0], "ours: 8 blocks each to 10 and 12 at once")
	assert.Equal(t, 0, sum(ours[1:]), "then nothing")
}

// TestOscillationAlternatingStraggler: server 10's measured rate alternates
// between 10 and 4 every window (interference that comes and goes). Fed the
// raw per-window rate, the naive planner moves a block every window. Ours
// reads an Estimator with a 1-minute half-life over 10-second windows: the
// estimate settles near 7 with a small standard error, two blocks leave 10,
// and the planner holds.
func TestOscillationAlternatingStraggler(t *testing.T) {
	var blocks []Block
	for i := range 20 {
		blocks = append(blocks, blk(uint64(i+1), 1, int32(8+2*(i%2))))
	}
	rate := func(i int) float64 { return []float64{10, 4}[i%2] }
	est, err := NewEstimator(DefaultEstimatorConfig())
	require.NoError(t, err)
	var smoothed [][]Server
	var raw [][]Server
	for i := range 300 {
		now := t0.Add(time.Duration(i) * 10 * time.Second)
		r := rate(i)
		// 10 s windows, server 10 busy 2 s handling 2·r bytes: the rate is r.
		est.Add(Sample{At: now, Bytes: 2 * r, Requests: 2, Busy: 2 * time.Second})
		smoothed = append(smoothed, []Server{srv(8, 10, 1, now), {ID: 10, Capacity: est.Capacity()}})
		raw = append(raw, []Server{u(8, 10), u(10, r)})
	}
	cfg := exactConfig()
	naive, _ := runBoth(t, cfg, blocks, func(i int) []Server { return raw[i] }, 300)
	_, ours := runBoth(t, cfg, blocks, func(i int) []Server { return smoothed[i] }, 300)
	assert.Equal(t, 100, sum(naive[200:]), "naive: a move in every one of the last 100 windows")
	// Once MinSamples samples are in, the estimate (about 7) moves one block
	// in each of two plans; then nothing, for 296 windows.
	assert.Equal(t, []int{0, 0, 1, 1}, ours[:4])
	assert.Equal(t, 0, sum(ours[4:]), "ours: settled")
}

// TestCooldown: a block just moved to 10 makes 10 look slow for one window
// (its estimate dips while it absorbs the migration). With Cooldown the
// block stays; without, it goes back, and returns when the dip is over: a
// flip-flop driven by the measurement, not by the cluster.
func TestCooldown(t *testing.T) {
	blocks := []Block{blk(1, 6, 8), blk(2, 4, 8), pinned(blk(3, 2, 10))}
	dip := func(i int) []Server {
		if i == 1 {
			return []Server{u(8, 10), u(10, 5)}
		}
		return []Server{u(8, 10), u(10, 10)}
	}
	for _, tt := range []struct {
		cooldown int
		want     []int
	}{{10, []int{1, 0, 0, 0, 0}}, {0, []int{1, 1, 1, 0, 0}}} {
		cfg := exactConfig()
		cfg.Cooldown = tt.cooldown
		_, ours := runBoth(t, cfg, blocks, dip, 5)
		assert.Equal(t, tt.want, ours, "Cooldown %d", tt.cooldown)
	}
}

// byID sorts a copy of blocks by id, to compare assignments.
func byID(bs []Block) []Block {
	bs = slices.Clone(bs)
	slices.SortFunc(bs, func(a, b Block) int { return cmp.Compare(a.ID, b.ID) })
	return bs
}

package paramstore

import (
	"math"
	"testing"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newStore is New(cfg) that must succeed.
func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	require.NoError(t, err)
	return s
}

// push pushes vals (one key per len(vals)/len(keys) elements) as a worker
// would, through the store's request path.
func push[F float32 | float64](s *Store, keys []uint64, vals []F) error {
	_, err := s.apply(kv.ReqMeta{Push: true, DataType: kv.DataTypeOf[F]()},
		kv.KVPairs{Keys: keys, Vals: kv.AsBytes(vals)})
	return err
}

// pull returns the values of keys as F.
func pull[F float32 | float64](t testing.TB, s *Store, keys ...uint64) []F {
	t.Helper()
	res, err := s.apply(kv.ReqMeta{Pull: true, DataType: kv.DataTypeOf[F]()}, kv.KVPairs{Keys: keys})
	require.NoError(t, err)
	require.Equal(t, keys, res.Keys)
	out, err := kv.FromBytes[F](res.Vals)
	require.NoError(t, err)
	return append([]F(nil), out...)
}

func sgd(lr float64) Config {
	c := DefaultConfig()
	c.Optimizer, c.LR = SGD, lr
	return c
}

func TestFirstPushInitializesLaterPushesAreSGDGradients(t *testing.T) {
	s := newStore(t, sgd(0.5))
	require.NoError(t, push(s, []uint64{7}, []float32{1, 2, 3}))
	assert.Equal(t, []float32{1, 2, 3}, pull[float32](t, s, 7), "the first push is the value")
	require.NoError(t, push(s, []uint64{7}, []float32{2, 4, -2}))
	assert.Equal(t, []float32{0, 0, 4}, pull[float32](t, s, 7), "w -= 0.5*g")
	require.NoError(t, push(s, []uint64{7}, []float32{1, 1, 1}))
	assert.Equal(t, []float32{-0.5, -0.5, 3.5}, pull[float32](t, s, 7))
	v, dt, ok := s.Value(7)
	require.True(t, ok)
	assert.Equal(t, message.Float, dt)
	assert.Equal(t, kv.AsBytes([]float32{-0.5, -0.5, 3.5}), v)
	assert.Equal(t, 1, s.Len())
}

func withOpt(o Optimizer, lr float64) Config {
	c := DefaultConfig()
	c.Optimizer, c.LR = o, lr
	return c
}

// steps pushes init and then each gradient to key 1 and returns the value
// after every gradient.
func steps[F float32 | float64](t *testing.T, s *Store, init []F, grads ...[]F) [][]F {
	t.Helper()
	require.NoError(t, push(s, []uint64{1}, init))
	var out [][]F
	for _, g := range grads {
		require.NoError(t, push(s, []uint64{1}, g))
		out = append(out, pull[F](t, s, 1))
	}
	return out
}

// exactUpdates checks SGD and Momentum against hand-computed values; lr,
// mu and gradients are powers of two or small integers, so every step is
// exact in float32 and float64.
func exactUpdates[F float32 | float64](t *testing.T) {
	grads := [][]F{{2, -4}, {4, 0}, {-2, 8}}
	t.Run("sgd", func(t *testing.T) {
		// w -= 0.5*g
		got := steps(t, newStore(t, withOpt(SGD, 0.5)), []F{8, 1}, grads...)
		assert.Equal(t, [][]F{{7, 3}, {5, 3}, {6, -1}}, got)
	})
	t.Run("momentum", func(t *testing.T) {
		cfg := withOpt(Momentum, 0.5)
		cfg.Momentum = 0.5
		// v = 0.5v + g, w -= 0.5v:
		// v = (2,-4) (5,-2) (0.5,7); w = (7,3) (4.5,4) (4.25,0.5)
		got := steps(t, newStore(t, cfg), []F{8, 1}, grads...)
		assert.Equal(t, [][]F{{7, 3}, {4.5, 4}, {4.25, 0.5}}, got)
	})
	t.Run("sgd with weight decay", func(t *testing.T) {
		cfg := withOpt(SGD, 0.5)
		cfg.WeightDecay = 0.25
		// w -= 0.5*(g + 0.25w): (8,1) -> (8-0.5*(2+2), 1-0.5*(-4+0.25)) = (6, 2.875)
		got := steps(t, newStore(t, cfg), []F{8, 1}, grads[0])
		assert.Equal(t, [][]F{{6, 2.875}}, got)
	})
	t.Run("none sums", func(t *testing.T) {
		got := steps(t, newStore(t, DefaultConfig()), []F{8, 1}, grads...)
		assert.Equal(t, [][]F{{10, -3}, {14, -3}, {12, 5}}, got)
	})
}

func TestExactUpdatesFloat32(t *testing.T) { exactUpdates[float32](t) }
func TestExactUpdatesFloat64(t *testing.T) { exactUpdates[float64](t) }

// adamReference is Adam as the paper writes it, in float64.
type adamReference struct {
	lr, b1, b2, eps float64
	w, m, v         []float64
	t               int
}

func (a *adamReference) step(g []float64) {
	a.t++
	for i := range a.w {
		a.m[i] = a.b1*a.m[i] + (1-a.b1)*g[i]
		a.v[i] = a.b2*a.v[i] + (1-a.b2)*g[i]*g[i]
		mhat := a.m[i] / (1 - math.Pow(a.b1, float64(a.t)))
		vhat := a.v[i] / (1 - math.Pow(a.b2, float64(a.t)))
		a.w[i] -= a.lr * mhat / (math.Sqrt(vhat) + a.eps)
	}
}

// TestAdamAgainstReference runs 20 steps of Adam on a key and a float64
// reference side by side. Tolerances: in float64 the store multiplies by
// the reciprocal bias corrections where the reference divides, a few ulps
// per step, so 1e-12 on values of magnitude < 4. In float32 each operation
// rounds by up to 2^-24 relative (6e-8): about ten of them make a step of
// at most lr = 0.1 (< 1e-7 off), and adding the step to w (|w| < 4) rounds
// by up to half an ulp of 4 (2.4e-7); 20 steps stay under 20 * 3.4e-7 <
// 1e-5 (measured: 1.3e-6).
func TestAdamAgainstReference(t *testing.T) {
	cfg := withOpt(Adam, 0.1)
	grads := make([][]float64, 20)
	for i := range grads {
		// varying signs and magnitudes, some zeros
		grads[i] = []float64{1, -2, float64(i%3) - 1, 0.5 * float64(i), 0}
	}
	init := []float64{1, 2, 3, -1, 0.25}
	newRef := func() *adamReference {
		n := len(init)
		return &adamReference{lr: cfg.LR, b1: cfg.Beta1, b2: cfg.Beta2, eps: cfg.Epsilon,
			w: append([]float64(nil), init...), m: make([]float64, n), v: make([]float64, n)}
	}
	t.Run("float64", func(t *testing.T) {
		ref, got := newRef(), steps(t, newStore(t, cfg), init, grads...)
		for i, g := range grads {
			ref.step(g)
			assert.InDeltaSlice(t, ref.w, got[i], 1e-12, "step %d", i+1)
		}
	})
	t.Run("float32", func(t *testing.T) {
		ref, s := newRef(), newStore(t, cfg)
		require.NoError(t, push(s, []uint64{1}, toF32(init)))
		for i, g := range grads {
			require.NoError(t, push(s, []uint64{1}, toF32(g)))
			ref.step(g)
			assert.InDeltaSlice(t, ref.w, toF64(pull[float32](t, s, 1)), 1e-5, "step %d", i+1)
		}
	})
	t.Run("first step is lr times the sign", func(t *testing.T) {
		// mhat = g and vhat = g² after one step: w -= lr*g/(|g|+eps), which
		// eps moves off lr*sign(g) by lr*eps/|g| <= 2e-9
		got := steps(t, newStore(t, cfg), []float64{1, 1, 1}, []float64{4, -0.5, 0})
		assert.InDeltaSlice(t, []float64{0.9, 1.1, 1}, got[0], 1e-8)
	})
	t.Run("step count per key", func(t *testing.T) {
		// key 2 starts after key 1 took 5 steps: its first step is again lr
		s := newStore(t, cfg)
		require.NoError(t, push(s, []uint64{1, 2}, []float64{0, 0}))
		for range 5 {
			require.NoError(t, push(s, []uint64{1}, []float64{1}))
		}
		require.NoError(t, push(s, []uint64{2}, []float64{1}))
		assert.InDelta(t, -0.1, pull[float64](t, s, 2)[0], 1e-9)
	})
}

func toF32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func toF64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func TestMeanDividesByTheWorkersSumDoesNot(t *testing.T) {
	four := func() int { return 4 }
	for _, tc := range []struct {
		name string
		opt  Optimizer
		agg  Aggregate
		want []float64
	}{
		// init (8, 0), gradient (8, -4), lr 0.5
		{"sgd sum", SGD, Sum, []float64{4, 2}},
		{"sgd mean", SGD, Mean, []float64{7, 0.5}},
		{"none sum", None, Sum, []float64{16, -4}},
		{"none mean", None, Mean, []float64{10, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := withOpt(tc.opt, 0.5)
			cfg.Aggregate, cfg.Workers = tc.agg, four
			got := steps(t, newStore(t, cfg), []float64{8, 0}, []float64{8, -4})
			assert.Equal(t, tc.want, got[0])
		})
	}
}

func TestRoundSizeAppliesTheRoundsSumOnce(t *testing.T) {
	round := 3
	cfg := withOpt(Momentum, 0.5)
	cfg.Momentum = 0.5
	cfg.RoundSize = func() int { return round }
	s := newStore(t, cfg)
	got := steps(t, s, []float64{10}, []float64{1}, []float64{2}, []float64{3}, []float64{4}, []float64{4}, []float64{-4})
	// round 1: g = 6, v = 6, w = 10-3 = 7; round 2: g = 4, v = 3+4 = 7, w = 3.5
	assert.Equal(t, [][]float64{{10}, {10}, {7}, {7}, {7}, {3.5}}, got)

	t.Run("mean of a round", func(t *testing.T) {
		cfg := withOpt(SGD, 0.5)
		cfg.Aggregate, cfg.Workers = Mean, func() int { return 2 }
		cfg.RoundSize = cfg.Workers
		got := steps(t, newStore(t, cfg), []float64{10}, []float64{2}, []float64{6})
		assert.Equal(t, [][]float64{{10}, {8}}, got, "w -= 0.5*(2+6)/2")
	})
	t.Run("a smaller round completes on the next push", func(t *testing.T) {
		r := 4
		cfg := withOpt(SGD, 0.5)
		cfg.RoundSize = func() int { return r }
		s := newStore(t, cfg)
		got := steps(t, s, []float64{10}, []float64{2}, []float64{2})
		assert.Equal(t, [][]float64{{10}, {10}}, got)
		r = 0 // async from now on: the open round goes with the next push
		require.NoError(t, push(s, []uint64{1}, []float64{2}))
		assert.Equal(t, []float64{7}, pull[float64](t, s, 1))
		require.NoError(t, push(s, []uint64{1}, []float64{2}))
		assert.Equal(t, []float64{6}, pull[float64](t, s, 1))
	})
}

func pullMeta() kv.ReqMeta              { return kv.ReqMeta{Pull: true, DataType: message.Double} }
func pullData(keys []uint64) kv.KVPairs { return kv.KVPairs{Keys: keys} }

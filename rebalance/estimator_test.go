package rebalance

import (
	"math"
	"math/rand"
	"testing"
	"testing/quick"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newEstimator(t testing.TB) *Estimator {
	t.Helper()
	e, err := NewEstimator(EstimatorConfig{HalfLife: time.Minute, MinBusy: time.Millisecond})
	require.NoError(t, err)
	return e
}

func TestEstimator(t *testing.T) {
	t.Run("no samples: unknown", func(t *testing.T) {
		assert.Equal(t, Capacity{}, newEstimator(t).Capacity())
	})
	t.Run("one sample: rate known, uncertainty total", func(t *testing.T) {
		e := newEstimator(t)
		require.True(t, e.Add(Sample{At: t0, Bytes: 1e9, Requests: 4000, Busy: 2 * time.Second}))
		assert.Equal(t, Capacity{
			Bytes:    Estimate{Mean: 5e8, Std: 5e8, Samples: 1, Updated: t0},
			Requests: Estimate{Mean: 2000, Std: 2000, Samples: 1, Updated: t0},
		}, e.Capacity())
	})
	t.Run("steady rate: no spread", func(t *testing.T) {
		e := newEstimator(t)
		for i := range 5 {
			e.Add(Sample{At: t0.Add(time.Duration(i) * 10 * time.Second), Bytes: 100, Requests: 10, Busy: time.Second})
		}
		c := e.Capacity()
		assert.InDelta(t, 100, c.Bytes.Mean, 1e-9)
		assert.InDelta(t, 0, c.Bytes.Std, 1e-6)
		assert.Equal(t, 5, c.Bytes.Samples)
		assert.Equal(t, t0.Add(40*time.Second), c.Bytes.Updated)
	})
	t.Run("a sample one half-life old counts half", func(t *testing.T) {
		e := newEstimator(t)
		e.Add(Sample{At: t0, Bytes: 100, Requests: 1, Busy: time.Second})
		e.Add(Sample{At: t0.Add(time.Minute), Bytes: 200, Requests: 1, Busy: time.Second})
		// (0.5·100 + 1·200) / 1.5; n = 1.5²/1.25 = 1.8 < 2: no spread yet.
		c := e.Capacity()
		assert.InDelta(t, 250.0/1.5, c.Bytes.Mean, 1e-9)
		assert.Equal(t, c.Bytes.Mean, c.Bytes.Std)
	})
	t.Run("standard error from the effective sample size", func(t *testing.T) {
		e := newEstimator(t)
		for _, x := range []float64{90, 110, 90, 110} {
			e.Add(Sample{At: t0, Bytes: x, Requests: 1, Busy: time.Second}) // same time: equal weights
		}
		// Sample std sqrt(400/3), standard error that over sqrt(4).
		assert.InDelta(t, math.Sqrt(400.0/3)/2, e.Capacity().Bytes.Std, 1e-9)
	})
	t.Run("follows a slowdown", func(t *testing.T) {
		e := newEstimator(t)
		for i := range 30 {
			e.Add(Sample{At: t0.Add(time.Duration(i) * 10 * time.Second), Bytes: 100, Requests: 1, Busy: time.Second})
		}
		for i := 30; i < 60; i++ { // 5 minutes at a quarter of the rate
			e.Add(Sample{At: t0.Add(time.Duration(i) * 10 * time.Second), Bytes: 25, Requests: 1, Busy: time.Second})
		}
		assert.InDelta(t, 25, e.Capacity().Bytes.Mean, 75.0/32, "5 half-lives later, within 1/32 of the change")
	})
	t.Run("rejects useless samples", func(t *testing.T) {
		e, err := NewEstimator(EstimatorConfig{HalfLife: time.Minute, MinBusy: 5 * time.Millisecond})
		require.NoError(t, err)
		for _, s := range []Sample{
			{At: t0, Bytes: 1, Requests: 1, Busy: 4 * time.Millisecond},
			{At: t0, Bytes: 1, Requests: 1, Busy: 0},
			{At: t0, Bytes: -1, Requests: 1, Busy: time.Second},
			{At: t0, Bytes: math.NaN(), Requests: 1, Busy: time.Second},
			{At: t0, Bytes: 1, Requests: math.Inf(1), Busy: time.Second},
		} {
			assert.False(t, e.Add(s), "%+v", s)
		}
		assert.Equal(t, Capacity{}, e.Capacity())
	})
	t.Run("a late sample is taken as simultaneous", func(t *testing.T) {
		e := newEstimator(t)
		e.Add(Sample{At: t0.Add(time.Minute), Bytes: 100, Requests: 1, Busy: time.Second})
		e.Add(Sample{At: t0, Bytes: 200, Requests: 1, Busy: time.Second})
		c := e.Capacity()
		assert.InDelta(t, 150, c.Bytes.Mean, 1e-9)
		assert.Equal(t, t0.Add(time.Minute), c.Bytes.Updated)
	})
	t.Run("config", func(t *testing.T) {
		_, err := NewEstimator(EstimatorConfig{})
		assert.ErrorContains(t, err, "HalfLife 0s not > 0")
		_, err = NewEstimator(EstimatorConfig{HalfLife: 1, MinBusy: -1})
		assert.ErrorContains(t, err, "MinBusy -1ns < 0")
		_, err = NewEstimator(DefaultEstimatorConfig())
		assert.NoError(t, err)
	})
}

// TestQuickEstimator: whatever the samples, the mean stays within the
// range of the rates that were used and the uncertainty is finite and not
// negative.
func TestQuickEstimator(t *testing.T) {
	f := func(seed int64) bool {
		r := rand.New(rand.NewSource(seed))
		e := newEstimator(t)
		lo, hi := math.Inf(1), math.Inf(-1)
		at := t0
		for range 1 + r.Intn(50) {
			at = at.Add(time.Duration(r.Intn(120)) * time.Second)
			s := Sample{At: at, Bytes: 1e9 * r.Float64(), Requests: 1e4 * r.Float64(), Busy: time.Duration(1+r.Intn(5000)) * time.Millisecond}
			if e.Add(s) {
				x := s.Bytes / s.Busy.Seconds()
				lo, hi = min(lo, x), max(hi, x)
			}
		}
		c := e.Capacity().Bytes
		return c.Mean >= lo*(1-1e-9) && c.Mean <= hi*(1+1e-9) && c.Std >= 0 && !math.IsInf(c.Std, 0) && !math.IsNaN(c.Std)
	}
	require.NoError(t, quick.Check(f, quickCfg(1000)))
}

// TestEstimatorDrivesPlanner: server 12's handling slows to a quarter
// (computation interference). Its Estimator follows within a few windows,
// and the planner moves load off it; nothing moves while it is healthy.
func TestEstimatorDrivesPlanner(t *testing.T) {
	blocks, servers := resnetCluster(nil)
	cfg := DefaultConfig()
	cfg.ExploreEvery = 0
	p := newPlanner(t, cfg)
	est := map[int32]*Estimator{}
	for _, s := range servers {
		est[s.ID] = newEstimator(t)
	}
	firstMove := -1
	for i := range 30 {
		now := t0.Add(time.Duration(i) * 10 * time.Second)
		for j, s := range servers {
			f := 1.0
			if s.ID == 12 && i >= 10 {
				f = 0.25
			}
			// What the server handled in the 10 s window and the busy time
			// that took at its true rate.
			var bytes, reqs float64
			for _, b := range blocks {
				if b.Server == s.ID {
					bytes += 10 * float64(b.Bytes) * b.Requests
					reqs += 10 * b.Requests
				}
			}
			busy := 0.75*bytes/(8e9*f) + 0.25*reqs/(40e3*f)
			est[s.ID].Add(Sample{At: now, Bytes: bytes, Requests: reqs, Busy: time.Duration(busy * float64(time.Second))})
			servers[j].Capacity = est[s.ID].Capacity()
		}
		plan := p.Step(Observation{Now: now}, blocks, servers)
		require.NoError(t, plan.Err)
		if len(plan.Moves) > 0 && firstMove < 0 {
			firstMove = i
		}
		blocks = Apply(blocks, plan)
	}
	// One window at a quarter rate already lowers the estimate by 12%
	// (its weight against 10 decayed older ones), past the hysteresis.
	assert.Equal(t, 10, firstMove)
	pred := Predict(blocks, servers, cfg)
	assert.Less(t, bytesOn(blocks)[12], int64(12<<20), "12 keeps well under half its share")
	assert.Less(t, maxOf(pred), 0.3)
}

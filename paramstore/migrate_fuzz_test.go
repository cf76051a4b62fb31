package paramstore

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// fuzzConfig is the store configuration a snapshot names (its optimizer
// and aggregation bytes), so that fuzzed inputs get past that check; the
// sum store for anything else.
func fuzzConfig(b []byte) Config {
	cfg := withOpt(None, 0.125)
	if len(b) >= headerSize {
		if o := Optimizer(b[6]); o >= None && o <= Adam {
			cfg = withOpt(o, 0.125)
		}
		if Aggregate(b[7]) == Mean {
			cfg.Aggregate, cfg.Workers = Mean, func() int { return 2 }
		}
	}
	cfg.RoundSize = func() int { return 3 }
	return cfg
}

// FuzzStoreImport feeds snapshots (a migration's or a seed's state, or a
// snapshot file's) to Store.Import: it never panics, and a snapshot it
// accepts writes back as a snapshot that imports to the same keys.
func FuzzStoreImport(f *testing.F) {
	var seeds [][]byte
	for _, opt := range []Optimizer{None, SGD, Momentum, Adam} {
		s, err := New(fuzzConfig([]byte{6: byte(opt), 11: 0}))
		require.NoError(f, err)
		for step := range 4 { // one round applied, one open
			require.NoError(f, push(s, []uint64{0, 1, 2}, []float64{float64(step), 1, -0.5, 2, 0.25, 3}))
			require.NoError(f, push(s, []uint64{100}, []float32{float32(step), -1, 0.5}))
		}
		snap, err := s.Snapshot(0, math.MaxUint64)
		require.NoError(f, err)
		seeds = append(seeds, snap)
	}
	empty, err := New(fuzzConfig(nil))
	require.NoError(f, err)
	snap, err := empty.Snapshot(0, 10)
	require.NoError(f, err)
	testutil.FuzzSeeds(f, append(seeds, snap)...)
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := fuzzConfig(b)
		s, err := New(cfg)
		require.NoError(t, err)
		if err := s.Import(b); err != nil {
			require.Zero(t, s.Len(), "a failed import installed keys")
			return
		}
		enc, err := s.Snapshot(0, math.MaxUint64)
		require.NoError(t, err)
		s2, err := New(cfg)
		require.NoError(t, err)
		require.NoError(t, s2.Import(enc))
		enc2, err := s2.Snapshot(0, math.MaxUint64)
		require.NoError(t, err)
		require.Equal(t, enc, enc2, "round trip changed the snapshot")
	})
}

package paramstore

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrentPushesPullsAndMoves runs pushers on keys 0..3, a mover that
// pushes key 10 and exports and re-imports [10, 20) between pushes, and
// readers, all at once (run with -race). With SGD at lr 0.5 every gradient
// of 2 takes exactly 1 off each element, so no lost or doubled update
// hides in the totals.
func TestConcurrentPushesPullsAndMoves(t *testing.T) {
	const pushers, pushes = 4, 200
	s := newStore(t, withOpt(SGD, 0.5))
	keys := []uint64{0, 1, 2, 3}
	require.NoError(t, push(s, keys, []float64{1000, 1000, 1000, 1000}))
	require.NoError(t, push(s, []uint64{10}, []float64{1000}))
	var wg sync.WaitGroup
	errs := make(chan error, pushers+2)
	for range pushers {
		wg.Go(func() {
			for range pushes {
				if err := push(s, keys, []float64{2, 2, 2, 2}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() { // mover
		for range pushes {
			if err := push(s, []uint64{10}, []float64{2}); err != nil {
				errs <- err
				return
			}
			snap, err := s.Export(10, 20)
			if err == nil {
				err = s.Import(snap)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() { // reader
		for range pushes {
			_, _, _ = s.Value(1)
			_ = s.Len()
			if _, err := s.apply(pullMeta(), pullData(keys)); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, []float64{200, 200, 200, 200}, pull[float64](t, s, keys...))
	assert.Equal(t, []float64{800}, pull[float64](t, s, 10))
}

package stats

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMedianIgnoresNaN(t *testing.T) {
	assert.Equal(t, 2.0, Median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, Median([]float64{4, 1, 2, 3}))
	assert.Equal(t, 2.5, Median([]float64{4, 1, math.NaN(), 2, 3}))
	assert.True(t, math.IsNaN(Median(nil)))
	assert.True(t, math.IsNaN(Median([]float64{math.NaN()})))
}

func TestMedianLeavesItsInputAlone(t *testing.T) {
	xs := []float64{3, math.NaN(), 1}
	Median(xs)
	assert.Equal(t, 3.0, xs[0])
	assert.True(t, math.IsNaN(xs[1]))
	assert.Equal(t, 1.0, xs[2])
}

func TestQuantileByNearestRank(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	assert.Equal(t, 5.0, Quantile(xs, 0.5))
	assert.Equal(t, 10.0, Quantile(xs, 0.99))
	assert.Equal(t, 1.0, Quantile(xs, 0))
	assert.Equal(t, 10.0, Quantile(xs, 1))
	assert.True(t, math.IsNaN(Quantile(nil, 0.5)))
}

func TestMean(t *testing.T) {
	assert.Equal(t, 2.5, Mean([]float64{1, 2, 3, 4}))
	assert.True(t, math.IsNaN(Mean(nil)))
}

// Package stats holds the summary statistics the benchmarks report over
// repeated runs and samples.
package stats

import (
	"math"
	"slices"
)

// Median of xs, NaNs (runs without a value) left out; NaN when nothing is
// left. xs is not changed.
func Median(xs []float64) float64 {
	v := slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// Quantile is the q-quantile (0..1) of sorted xs by nearest rank; NaN when
// xs is empty.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Mean of xs; NaN when xs is empty.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

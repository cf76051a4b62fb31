package bench

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHistBucketsAreMonotonicAndTight(t *testing.T) {
	prev := -1
	for ns := int64(0); ns < 1<<22; ns += 1 + ns/50 {
		b := bucketOf(ns)
		require.GreaterOrEqual(t, b, prev, "bucket of %d", ns)
		prev = b
		mid := bucketMid(b)
		// Sixteen sub-buckets per power of two: the midpoint is within
		// about 3% of every value in the bucket.
		assert.InDelta(t, float64(ns), mid, math.Max(1, 0.035*float64(ns)), "ns=%d", ns)
	}
}

func TestHistQuantilesAndMerge(t *testing.T) {
	a, b := newHist(), newHist()
	for i := 1; i <= 100; i++ {
		a.add(time.Duration(i) * time.Microsecond)
	}
	b.add(10 * time.Millisecond)
	assert.InDelta(t, 50, a.quantile(0.5), 2)
	assert.InDelta(t, 99, a.quantile(0.99), 3)
	assert.InDelta(t, 50.5, a.meanUS(), 0.01)

	// Through the wire form, as worker reports travel.
	c := histFromPairs(a.pairs(), a.Sum, a.N)
	c.merge(histFromPairs(b.pairs(), b.Sum, b.N))
	assert.Equal(t, int64(101), c.N)
	assert.InDelta(t, 10000, c.quantile(1), 300)
	assert.True(t, math.IsNaN(newHist().quantile(0.5)))
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"4096": 4096, "4KB": 4 << 10, "4kib": 4 << 10, "256k": 256 << 10, "4MB": 4 << 20, "1M": 1 << 20, "12B": 12} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "KB", "-4KB", "4GB", "x"} {
		_, err := ParseSize(in)
		assert.Error(t, err, in)
	}
	assert.Equal(t, "4KB", SizeLabel(4096))
	assert.Equal(t, "4MB", SizeLabel(4<<20))
	assert.Equal(t, "1000B", SizeLabel(1000))
}

// TestBaselineCoversTheDefaultMatrix: every cell of 'elasticps bench'
// without flags has a dmlc number, and a latency exactly for seq cells.
func TestBaselineCoversTheDefaultMatrix(t *testing.T) {
	for _, topo := range [][2]int{{1, 1}, {2, 2}} {
		for _, size := range []int{4 << 10, 256 << 10, 4 << 20} {
			for _, op := range []string{"push", "pull"} {
				for _, mode := range []string{"seq", "pipe"} {
					r := result{Servers: topo[0], Workers: topo[1], Size: size, Op: op, Mode: mode}
					b, ok := dmlcBaseline[r.key()]
					assert.True(t, ok, r.key())
					assert.Equal(t, mode == "seq", b.LatUS > 0, r.key())
				}
			}
		}
	}
}

func TestAggregateSumsWorkers(t *testing.T) {
	h := newHist()
	h.add(time.Millisecond)
	rep := report{Ops: 1, Bytes: 1e6, ElapsedNS: int64(time.Second), Hist: h.pairs(), SumNS: h.Sum}
	mbps, merged, ops := aggregate([]report{rep, rep})
	assert.InDelta(t, 2.0, mbps, 1e-9)
	assert.Equal(t, int64(2), ops)
	assert.Equal(t, int64(2), merged.N)
}

package main

import (
	"math"
	"os"
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

func TestMedianIgnoresNaN(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, math.NaN(), 2, 3}))
	assert.True(t, math.IsNaN(median(nil)))
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"4096": 4096, "4KB": 4 << 10, "4kib": 4 << 10, "256k": 256 << 10, "4MB": 4 << 20, "1M": 1 << 20, "12B": 12} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "KB", "-4KB", "4GB", "x"} {
		_, err := parseSize(in)
		assert.Error(t, err, in)
	}
	assert.Equal(t, "4KB", sizeLabel(4096))
	assert.Equal(t, "4MB", sizeLabel(4<<20))
	assert.Equal(t, "1000B", sizeLabel(1000))
}

func TestParseBenchArgs(t *testing.T) {
	o, err := parseBenchArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"zmq", "tcp"}, o.vans)
	assert.Equal(t, [][2]int{{1, 1}, {2, 2}}, o.topos)
	assert.Equal(t, []int{4 << 10, 256 << 10, 4 << 20}, o.sizes)
	assert.Equal(t, 8, o.depth)

	o, err = parseBenchArgs([]string{"--van", "tcp", "--topo", "3x1", "--sizes", "1MB", "--ops", "50", "--modes", "pipe", "--ops-kind", "pull", "--json"})
	require.NoError(t, err)
	assert.Equal(t, []string{"tcp"}, o.vans)
	assert.Equal(t, [][2]int{{3, 1}}, o.topos)
	assert.Equal(t, 50, o.count)
	assert.Equal(t, []string{"pipe"}, o.modes)
	assert.Equal(t, []string{"pull"}, o.ops)
	assert.True(t, o.json)
	assert.False(t, o.goThread)

	o, err = parseBenchArgs([]string{"--go-thread"})
	require.NoError(t, err)
	assert.True(t, o.goThread)
	exe, err := os.Executable()
	require.NoError(t, err)
	_, err = parseBenchArgs([]string{"--cxx", goThreadLabel + "=" + exe})
	assert.ErrorContains(t, err, "label", "the --go-thread rows' label is taken")

	for _, bad := range [][]string{
		{"--van", "rdma"}, {"--topo", "2"}, {"--topo", "0x1"}, {"--sizes", "big"},
		{"--modes", "burst"}, {"--ops-kind", "pushpull"}, {"--depth", "0"}, {"extra"},
	} {
		_, err := parseBenchArgs(bad)
		assert.Error(t, err, "%v", bad)
	}
}

func TestBaselineCoversTheDefaultMatrix(t *testing.T) {
	o, err := parseBenchArgs(nil)
	require.NoError(t, err)
	for _, topo := range o.topos {
		for _, size := range o.sizes {
			for _, op := range o.ops {
				for _, mode := range o.modes {
					r := benchResult{Servers: topo[0], Workers: topo[1], Size: size, Op: op, Mode: mode}
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
	rep := benchReport{Ops: 1, Bytes: 1e6, ElapsedNS: int64(time.Second), Hist: h.pairs(), SumNS: h.Sum}
	mbps, merged, ops := aggregate([]benchReport{rep, rep})
	assert.InDelta(t, 2.0, mbps, 1e-9)
	assert.Equal(t, int64(2), ops)
	assert.Equal(t, int64(2), merged.N)
}

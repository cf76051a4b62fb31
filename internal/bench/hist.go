package bench

import (
	"math"
	"math/bits"
	"slices"
	"time"
)

// hist is a log-linear latency histogram: values in nanoseconds fall into
// buckets of 1/histSub of a power of two (about 6% wide), so percentiles
// are exact to a few per cent at any scale, and merging the histograms of
// several workers is adding counts. It travels as sparse [bucket, count]
// pairs.
type hist struct {
	Counts map[int]int64 `json:"-"`
	Sum    int64         `json:"sum_ns"`
	N      int64         `json:"n"`
}

const histSubBits = 4 // 16 sub-buckets per power of two

func newHist() *hist { return &hist{Counts: map[int]int64{}} }

func bucketOf(ns int64) int {
	if ns < 1<<histSubBits {
		return int(max(ns, 0))
	}
	u := uint64(ns)
	e := bits.Len64(u) - 1 - histSubBits // shift that leaves histSubBits+1 bits
	return (e+1)<<histSubBits | int(u>>e)&(1<<histSubBits-1)
}

// bucketMid is the middle of bucket b's range, in ns.
func bucketMid(b int) float64 {
	if b < 1<<histSubBits {
		return float64(b)
	}
	e := b>>histSubBits - 1
	lo := float64(uint64(1<<histSubBits|b&(1<<histSubBits-1)) << e)
	return lo + float64(uint64(1)<<e)/2
}

func (h *hist) add(d time.Duration) {
	h.Counts[bucketOf(int64(d))]++
	h.Sum += int64(d)
	h.N++
}

func (h *hist) merge(o *hist) {
	for b, c := range o.Counts {
		h.Counts[b] += c
	}
	h.Sum += o.Sum
	h.N += o.N
}

// quantile returns the q-quantile (0..1) in microseconds.
func (h *hist) quantile(q float64) float64 {
	if h.N == 0 {
		return math.NaN()
	}
	keys := make([]int, 0, len(h.Counts))
	for b := range h.Counts {
		keys = append(keys, b)
	}
	slices.Sort(keys)
	rank := int64(math.Ceil(q * float64(h.N)))
	rank = max(rank, 1)
	var seen int64
	for _, b := range keys {
		seen += h.Counts[b]
		if seen >= rank {
			return bucketMid(b) / 1e3
		}
	}
	return bucketMid(keys[len(keys)-1]) / 1e3
}

// meanUS is the mean latency in microseconds.
func (h *hist) meanUS() float64 {
	if h.N == 0 {
		return math.NaN()
	}
	return float64(h.Sum) / float64(h.N) / 1e3
}

// pairs and fromPairs are the wire form of Counts.
func (h *hist) pairs() [][2]int64 {
	out := make([][2]int64, 0, len(h.Counts))
	for b, c := range h.Counts {
		out = append(out, [2]int64{int64(b), c})
	}
	slices.SortFunc(out, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	return out
}

func histFromPairs(p [][2]int64, sum, n int64) *hist {
	h := newHist()
	for _, bc := range p {
		h.Counts[int(bc[0])] += bc[1]
	}
	h.Sum, h.N = sum, n
	return h
}

// baseline is one row of the measured dmlc ps-lite numbers of
// docs/performance.md (loopback, 2 vCPU, this machine kind):
// goodput in MB/s (10^6 bytes) summed over workers and, for the sequential
// cells, the mean latency per operation in microseconds.
type baseline struct {
	MBps  float64
	LatUS float64 // 0: not measured (pipelined cells)
}

// dmlcBaseline is keyed by result.key().
var dmlcBaseline = map[string]baseline{
	"1x1/4KB/push/seq": {37, 110}, "1x1/4KB/pull/seq": {43, 96},
	"1x1/4KB/push/pipe": {181, 0}, "1x1/4KB/pull/pipe": {150, 0},
	"1x1/256KB/push/seq": {899, 292}, "1x1/256KB/pull/seq": {1236, 212},
	"1x1/256KB/push/pipe": {1671, 0}, "1x1/256KB/pull/pipe": {1437, 0},
	"1x1/4MB/push/seq": {2343, 1790}, "1x1/4MB/pull/seq": {2164, 1939},
	"1x1/4MB/push/pipe": {2316, 0}, "1x1/4MB/pull/pipe": {1886, 0},
	"2x2/4KB/push/seq": {30, 276}, "2x2/4KB/pull/seq": {30, 271},
	"2x2/4KB/push/pipe": {157, 0}, "2x2/4KB/pull/pipe": {153, 0},
	"2x2/256KB/push/seq": {1408, 372}, "2x2/256KB/pull/seq": {1276, 411},
	"2x2/256KB/push/pipe": {2343, 0}, "2x2/256KB/pull/pipe": {1688, 0},
	"2x2/4MB/push/seq": {2324, 3614}, "2x2/4MB/pull/seq": {2812, 2986},
	"2x2/4MB/push/pipe": {2281, 0}, "2x2/4MB/pull/pipe": {1465, 0},
}

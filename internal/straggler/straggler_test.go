package straggler

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResNet50HasTheRealParameterCount(t *testing.T) {
	ts := resNet50()
	require.Len(t, ts, 161)
	total := 0
	for _, x := range ts {
		n := 1
		for _, d := range x.Shape {
			n *= d
		}
		assert.Equal(t, n, x.Elems, "%s: elements of shape %v", x.Name, x.Shape)
		total += x.Elems
	}
	assert.Equal(t, 25_557_032, total, "parameters")
	want := map[string]int{
		"conv1.weight":               7 * 7 * 3 * 64,
		"layer1.0.conv1.weight":      64 * 64,
		"layer4.2.conv2.weight":      3 * 3 * 512 * 512,
		"layer3.0.downsample.weight": 1024 * 512,
		"fc.weight":                  2048 * 1000,
		"fc.bias":                    1000,
	}
	for _, x := range ts {
		if n, ok := want[x.Name]; ok {
			assert.Equal(t, n, x.Elems, x.Name)
			delete(want, x.Name)
		}
	}
	assert.Empty(t, want, "tensors missing")
	assert.Equal(t, "conv1.weight", ts[0].Name, "declaration order: first")
	assert.Equal(t, "fc.bias", ts[160].Name, "declaration order: last")
}

func TestDJB2MatchesHandComputedValues(t *testing.T) {
	// By hand, h = h*33 + c from 5381 over the decimal digits:
	//   "0":  5381*33 + 48 = 177621
	//   "1":  5381*33 + 49 = 177622
	//   "65536": 5381 -> 177627 ('6') -> 5861744 ('5') -> 193437605 ('5')
	//            -> 6383441016 ('3') -> 210653553582 ('6')
	cases := []struct {
		key  uint64
		hash uint64
	}{{0, 177621}, {1, 177622}, {65536, 210653553582}, {65537, 210653553583}}
	for _, c := range cases {
		assert.Equal(t, c.hash, djb2(c.key), "djb2(%d)", c.key)
	}
	// 20 digits: the uint64 arithmetic wraps, as in C++.
	h := uint64(5381)
	for _, c := range "18446744073709551615" {
		h = h*33 + uint64(c)
	}
	assert.Equal(t, h, djb2(math.MaxUint64), "djb2(MaxUint64)")
}

func TestBytePSPlacement(t *testing.T) {
	ts := []tensor{{Name: "a", Elems: 2_359_296}, {Name: "b", Elems: 64}}
	bs := bytePSPlacement(ts, 4, 1)
	// 2,359,296 float32 = 9,437,184 bytes: partitions of 4,096,000 bytes
	// (1,024,000 elements), 1,024,000, 311,296.
	want := []block{
		// djb2: "0" 177621 % 4 = 1, "1" 177622 % 4 = 2, "2" 177623 % 4 = 3,
		// "65536" 210653553582 % 4 = 2.
		{Tensor: 0, Part: 0, Key: 0, Elems: 1_024_000, Server: 1},
		{Tensor: 0, Part: 1, Key: 1, Elems: 1_024_000, Server: 2},
		{Tensor: 0, Part: 2, Key: 2, Elems: 311_296, Server: 3},
		{Tensor: 1, Part: 0, Key: 65536, Elems: 64, Server: 2},
	}
	assert.Equal(t, want, bs, "byteps placement")
	// At scale 32 the partitions keep their number and shrink.
	bs = bytePSPlacement(ts, 4, 32)
	if assert.Len(t, bs, 4, "scaled") {
		assert.Equal(t, []int{32_000, 9_728, 2}, []int{bs[0].Elems, bs[2].Elems, bs[3].Elems}, "scaled: elements of partitions 0, 2, 3")
	}
	all := bytePSPlacement(resNet50(), 4, 1)
	n := 0
	for _, x := range resNet50() {
		n += (x.Elems + 1_023_999) / 1_024_000
	}
	assert.Len(t, all, n, "partitions of ResNet-50")
}

func TestMXNetPlacement(t *testing.T) {
	// (key*9973) % n for small tensors; by hand: 5*9973 = 49865, 49865 % 4
	// = 1; 2*9973 = 19946 = 3*6648 + 2.
	ts := make([]tensor, 6)
	for i := range ts {
		ts[i] = tensor{Elems: 100}
	}
	bs := mxnetPlacement(ts, 4, 1)
	assert.Equal(t, 1, bs[5].Server, "key 5 of 4 servers")
	assert.EqualValues(t, 5, bs[5].Key, "key 5 of 4 servers")
	bs = mxnetPlacement(ts, 3, 1)
	assert.Equal(t, 2, bs[2].Server, "key 2 of 3 servers")
	// A big tensor (judged at its real size) is split over every server
	// with round(size/n*(i+1)) - round(size/n*i) elements; 10 over 4:
	// 2.5 -> 3, 5, 7.5 -> 8, 10: parts 3, 2, 3, 2.
	bs = mxnetPlacement([]tensor{{Elems: 999_999}, {Elems: 1_000_000}}, 4, 100_000)
	require.Len(t, bs, 5)
	require.Equal(t, 10, bs[0].Elems, "blocks %+v", bs)
	require.Equal(t, 0, bs[0].Server, "blocks %+v", bs)
	for i, want := range []int{3, 2, 3, 2} {
		b := bs[1+i]
		assert.Equal(t, want, b.Elems, "part %d: elements", i)
		assert.Equal(t, i, b.Server, "part %d: server", i)
		assert.EqualValues(t, 1, b.Key, "part %d: key", i)
		assert.Equal(t, i, b.Part, "part %d: part", i)
	}
	// ResNet-50: 10 tensors of at least 10^6 elements, split 4 ways.
	all := mxnetPlacement(resNet50(), 4, 32)
	assert.Len(t, all, 151+10*4, "blocks")
}

func TestOraclePlacementFollowsCapacity(t *testing.T) {
	bs := mxnetPlacement(resNet50(), 4, 32)
	capacity := []float64{0.25, 1, 1, 1}
	o := oraclePlacement(bs, capacity)
	require.Len(t, o, len(bs))
	var total int64
	seen := map[[2]uint64]bool{}
	for i, b := range o {
		require.Equal(t, [3]int{bs[i].Elems, bs[i].Tensor, bs[i].Part}, [3]int{b.Elems, b.Tensor, b.Part},
			"block %d changed: %+v -> %+v", i, bs[i], b)
		k := [2]uint64{uint64(b.Server), b.Key}
		require.False(t, seen[k], "key %d twice on server %d", b.Key, b.Server)
		seen[k] = true
		total += b.Bytes()
	}
	// The ideal: every server finishes together, bytes proportional to
	// capacity; LPT with ~190 blocks gets within a few percent.
	ideal := float64(total) / 3.25
	bw := []float64{0.25, 1, 1, 1}
	worst := linkBound(o, 1, bw) / 2
	assert.LessOrEqual(t, worst, ideal*1.03, "oracle's slowest server against the ideal")
	assert.GreaterOrEqual(t, linkBound(bs, 1, bw)/2, 2.5*ideal, "the hash placement should be far from ideal with a 4x straggler")
}

func TestEmulatorFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	e, err := emulatorFromEnv(env(map[string]string{envBandwidth: "25e6", envKind: "bandwidth", envSlowdown: "4", envSlowRank: "2"}))
	require.NoError(t, err)
	require.EqualValues(t, 25e6, e.base)
	require.Equal(t, "bandwidth", e.kind)
	require.EqualValues(t, 4, e.slowdown)
	require.Equal(t, 2, e.slowRank)
	e.rank = func() int { return 2 }
	slow, bw := e.profile()
	assert.True(t, slow, "rank 2 is slow")
	assert.EqualValues(t, 25e6/4, bw, "rank 2's bandwidth")
	e, _ = emulatorFromEnv(env(map[string]string{envBandwidth: "25e6", envKind: "cpu", envSlowdown: "4"}))
	e.rank = func() int { return 1 }
	slow, bw = e.profile()
	assert.False(t, slow, "rank 1 is not slow")
	assert.EqualValues(t, 25e6, bw, "rank 1's bandwidth")
	for _, bad := range []map[string]string{
		{envBandwidth: "-1"}, {envKind: "disk"}, {envSlowdown: "0.5"}, {envSlowRank: "x"},
		{envKind: "bandwidth"},
	} {
		_, err := emulatorFromEnv(env(bad))
		assert.Error(t, err, "%v accepted", bad)
	}
}

func TestEmulatedLinkKeepsItsRate(t *testing.T) {
	e := &emulator{sizes: map[uint64]int{}}
	start := time.Now()
	// 40 requests of 2 ms each: sleeps overshoot, the virtual clock pays
	// the overshoot back, so the total stays near 80 ms.
	for range 40 {
		e.occupy(2 * time.Millisecond)
	}
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, 78*time.Millisecond, "40 x 2 ms on the emulated link")
	assert.LessOrEqual(t, took, 400*time.Millisecond, "40 x 2 ms on the emulated link")
	assert.Equal(t, 80*time.Millisecond, time.Duration(e.emulated.Load()), "emulated")
}

func TestEmulatorPayload(t *testing.T) {
	e := &emulator{sizes: map[uint64]int{}}
	push := kv.ReqMeta{Push: true, DataType: message.Float}
	assert.Equal(t, 24, e.payload(push, kv.KVPairs{Keys: []uint64{7, 9}, Vals: make([]byte, 24), Lens: []int32{2, 4}}), "push payload")
	pull := kv.ReqMeta{Pull: true, DataType: message.Float}
	assert.Equal(t, 16, e.payload(pull, kv.KVPairs{Keys: []uint64{9}}), "pull payload: 4 floats pushed for key 9")
}

func TestMergedWindowsAndOverlaps(t *testing.T) {
	ws := mergeWindows([][2]int64{{50, 60}, {10, 20}, {15, 30}, {60, 70}})
	require.Equal(t, [][2]int64{{10, 30}, {50, 70}}, ws, "merged")
	for _, c := range []struct {
		s, e int64
		want bool
	}{{0, 9, false}, {0, 10, true}, {31, 49, false}, {25, 55, true}, {71, 80, false}, {70, 70, true}} {
		assert.Equal(t, c.want, overlaps(ws, c.s, c.e), "overlaps [%d, %d]", c.s, c.e)
	}
}

func TestRowsCompareWithStaticAndOracle(t *testing.T) {
	configs := []variant{{"static", "bandwidth"}, {"elastic", "bandwidth"}, {"oracle", "bandwidth"}, {"static", "none"}, {"elastic", "none"}}
	var runs []*jobResult
	add := func(p, s string, v ...float64) {
		for _, x := range v {
			runs = append(runs, &jobResult{Placement: p, Straggler: s, ItPerSec: x, ItPerSecWhole: x})
		}
	}
	add("static", "bandwidth", 1, 1.2, 0.9)
	add("elastic", "bandwidth", 2.9, 3.0, 2.5)
	add("oracle", "bandwidth", 3.1, 3.2, 3.0)
	add("static", "none", 4, 4, 4)
	add("elastic", "none", 3.9, 4.1, 3.96)
	rows := tabulate(configs, runs)
	require.Len(t, rows, 5)
	el := rows[1]
	assert.Equal(t, 2.9, el.ItPerSec, "elastic row")
	assert.Equal(t, 2.9, el.MedianRun.ItPerSec, "elastic row's median run")
	assert.InDelta(t, 2.9, el.SpeedUp, 1e-9, "elastic row's speed-up")
	assert.InDelta(t, 2.9/3.1, el.VsOracle, 1e-9, "elastic row against the oracle")
	h := rows[4]
	assert.InDelta(t, 0.99, h.SpeedUp, 1e-9, "healthy elastic row's speed-up")
	assert.Zero(t, h.VsOracle, "healthy elastic row against the oracle")
	notes := targets(rows)
	require.Len(t, notes, 3, "targets")
}

func TestSplitNote(t *testing.T) {
	got := splitNote("aaaa; bbbb; cccc", 11)
	assert.Equal(t, []string{"aaaa; bbbb;", "cccc"}, got)
}

func TestReportMarshalsUndefinedStatisticsAsNull(t *testing.T) {
	r := &jobResult{Placement: "static", MoveP50MS: num(math.NaN()), OpOtherP50MS: 1.5}
	b, err := json.Marshal(&report{Runs: []*jobResult{r}})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"move_p50_ms":null`)
	assert.Contains(t, string(b), `"op_other_p50_ms":1.5`)
}

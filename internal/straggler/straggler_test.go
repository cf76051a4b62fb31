package straggler

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
)

func TestResNet50HasTheRealParameterCount(t *testing.T) {
	ts := resNet50()
	if len(ts) != 161 {
		t.Fatalf("%d tensors, want 161", len(ts))
	}
	total := 0
	for _, x := range ts {
		n := 1
		for _, d := range x.Shape {
			n *= d
		}
		if n != x.Elems {
			t.Errorf("%s: shape %v has %d elements, Elems says %d", x.Name, x.Shape, n, x.Elems)
		}
		total += x.Elems
	}
	if total != 25_557_032 {
		t.Errorf("%d parameters, want 25,557,032", total)
	}
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
			if x.Elems != n {
				t.Errorf("%s has %d elements, want %d", x.Name, x.Elems, n)
			}
			delete(want, x.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("tensors missing: %v", want)
	}
	if ts[0].Name != "conv1.weight" || ts[160].Name != "fc.bias" {
		t.Errorf("declaration order: first %s, last %s", ts[0].Name, ts[160].Name)
	}
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
		if got := djb2(c.key); got != c.hash {
			t.Errorf("djb2(%d) = %d, want %d", c.key, got, c.hash)
		}
	}
	// 20 digits: the uint64 arithmetic wraps, as in C++.
	h := uint64(5381)
	for _, c := range "18446744073709551615" {
		h = h*33 + uint64(c)
	}
	if got := djb2(math.MaxUint64); got != h {
		t.Errorf("djb2(MaxUint64) = %d, want %d", got, h)
	}
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
	if !slices.Equal(bs, want) {
		t.Errorf("byteps placement\n got %+v\nwant %+v", bs, want)
	}
	// At scale 32 the partitions keep their number and shrink.
	bs = bytePSPlacement(ts, 4, 32)
	if len(bs) != 4 || bs[0].Elems != 32_000 || bs[2].Elems != 9_728 || bs[3].Elems != 2 {
		t.Errorf("scaled: %+v", bs)
	}
	all := bytePSPlacement(resNet50(), 4, 1)
	n := 0
	for _, x := range resNet50() {
		n += (x.Elems + 1_023_999) / 1_024_000
	}
	if len(all) != n {
		t.Errorf("%d partitions of ResNet-50, want %d", len(all), n)
	}
}

func TestMXNetPlacement(t *testing.T) {
	// (key*9973) % n for small tensors; by hand: 5*9973 = 49865, 49865 % 4
	// = 1; 2*9973 = 19946 = 3*6648 + 2.
	ts := make([]tensor, 6)
	for i := range ts {
		ts[i] = tensor{Elems: 100}
	}
	bs := mxnetPlacement(ts, 4, 1)
	if bs[5].Server != 1 || bs[5].Key != 5 {
		t.Errorf("key 5 of 4 servers: %+v, want server 1", bs[5])
	}
	bs = mxnetPlacement(ts, 3, 1)
	if bs[2].Server != 2 {
		t.Errorf("key 2 of 3 servers: %+v, want server 2", bs[2])
	}
	// A big tensor (judged at its real size) is split over every server
	// with round(size/n*(i+1)) - round(size/n*i) elements; 10 over 4:
	// 2.5 -> 3, 5, 7.5 -> 8, 10: parts 3, 2, 3, 2.
	bs = mxnetPlacement([]tensor{{Elems: 999_999}, {Elems: 1_000_000}}, 4, 100_000)
	if len(bs) != 5 || bs[0].Elems != 10 || bs[0].Server != 0 {
		t.Fatalf("blocks %+v", bs)
	}
	for i, want := range []int{3, 2, 3, 2} {
		b := bs[1+i]
		if b.Elems != want || b.Server != i || b.Key != 1 || b.Part != i {
			t.Errorf("part %d: %+v, want %d elements on server %d with key 1", i, b, want, i)
		}
	}
	// ResNet-50: 10 tensors of at least 10^6 elements, split 4 ways.
	all := mxnetPlacement(resNet50(), 4, 32)
	if len(all) != 151+10*4 {
		t.Errorf("%d blocks, want 191", len(all))
	}
}

func TestOraclePlacementFollowsCapacity(t *testing.T) {
	bs := mxnetPlacement(resNet50(), 4, 32)
	capacity := []float64{0.25, 1, 1, 1}
	o := oraclePlacement(bs, capacity)
	if len(o) != len(bs) {
		t.Fatalf("%d blocks, want %d", len(o), len(bs))
	}
	var total int64
	seen := map[[2]uint64]bool{}
	for i, b := range o {
		if b.Elems != bs[i].Elems || b.Tensor != bs[i].Tensor || b.Part != bs[i].Part {
			t.Fatalf("block %d changed: %+v -> %+v", i, bs[i], b)
		}
		k := [2]uint64{uint64(b.Server), b.Key}
		if seen[k] {
			t.Fatalf("key %d twice on server %d", b.Key, b.Server)
		}
		seen[k] = true
		total += b.Bytes()
	}
	// The ideal: every server finishes together, bytes proportional to
	// capacity; LPT with ~190 blocks gets within a few percent.
	ideal := float64(total) / 3.25
	bw := []float64{0.25, 1, 1, 1}
	worst := linkBound(o, 1, bw) / 2
	if worst > ideal*1.03 {
		t.Errorf("oracle's slowest server needs %.0f, ideal %.0f", worst, ideal)
	}
	if hashed := linkBound(bs, 1, bw) / 2; hashed < 2.5*ideal {
		t.Errorf("the hash placement (%.0f) should be far from ideal (%.0f) with a 4x straggler", hashed, ideal)
	}
}

func TestEmulatorFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	e, err := emulatorFromEnv(env(map[string]string{envBandwidth: "25e6", envKind: "bandwidth", envSlowdown: "4", envSlowRank: "2"}))
	if err != nil || e.base != 25e6 || e.kind != "bandwidth" || e.slowdown != 4 || e.slowRank != 2 {
		t.Fatalf("%+v, %v", e, err)
	}
	e.rank = func() int { return 2 }
	if slow, bw := e.profile(); !slow || bw != 25e6/4 {
		t.Errorf("rank 2: slow %v, bandwidth %v", slow, bw)
	}
	e, _ = emulatorFromEnv(env(map[string]string{envBandwidth: "25e6", envKind: "cpu", envSlowdown: "4"}))
	e.rank = func() int { return 1 }
	if slow, bw := e.profile(); slow || bw != 25e6 {
		t.Errorf("rank 1: slow %v, bandwidth %v", slow, bw)
	}
	for _, bad := range []map[string]string{
		{envBandwidth: "-1"}, {envKind: "disk"}, {envSlowdown: "0.5"}, {envSlowRank: "x"},
		{envKind: "bandwidth"},
	} {
		if _, err := emulatorFromEnv(env(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
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
	if took < 78*time.Millisecond || took > 400*time.Millisecond {
		t.Errorf("40 x 2 ms on the emulated link took %v", took)
	}
	if e.emulated.Load() != int64(80*time.Millisecond) {
		t.Errorf("emulated %v", time.Duration(e.emulated.Load()))
	}
}

func TestEmulatorPayload(t *testing.T) {
	e := &emulator{sizes: map[uint64]int{}}
	push := kv.ReqMeta{Push: true, DataType: message.Float}
	if n := e.payload(push, kv.KVPairs{Keys: []uint64{7, 9}, Vals: make([]byte, 24), Lens: []int32{2, 4}}); n != 24 {
		t.Errorf("push payload %d, want 24", n)
	}
	pull := kv.ReqMeta{Pull: true, DataType: message.Float}
	if n := e.payload(pull, kv.KVPairs{Keys: []uint64{9}}); n != 16 {
		t.Errorf("pull payload %d, want 16 (4 floats pushed for key 9)", n)
	}
}

func TestMergedWindowsAndOverlaps(t *testing.T) {
	ws := mergeWindows([][2]int64{{50, 60}, {10, 20}, {15, 30}, {60, 70}})
	if !slices.Equal(ws, [][2]int64{{10, 30}, {50, 70}}) {
		t.Fatalf("merged %v", ws)
	}
	for _, c := range []struct {
		s, e int64
		want bool
	}{{0, 9, false}, {0, 10, true}, {31, 49, false}, {25, 55, true}, {71, 80, false}, {70, 70, true}} {
		if got := overlaps(ws, c.s, c.e); got != c.want {
			t.Errorf("overlaps [%d, %d] = %v", c.s, c.e, got)
		}
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
	if len(rows) != 5 {
		t.Fatalf("%d rows", len(rows))
	}
	el := rows[1]
	if el.ItPerSec != 2.9 || el.MedianRun.ItPerSec != 2.9 || math.Abs(el.SpeedUp-2.9) > 1e-9 || math.Abs(el.VsOracle-2.9/3.1) > 1e-9 {
		t.Errorf("elastic row %+v", el)
	}
	if h := rows[4]; math.Abs(h.SpeedUp-0.99) > 1e-9 || h.VsOracle != 0 {
		t.Errorf("healthy elastic row %+v", h)
	}
	notes := targets(rows)
	if len(notes) != 3 {
		t.Fatalf("targets %q", notes)
	}
}

func TestSplitNote(t *testing.T) {
	got := splitNote("aaaa; bbbb; cccc", 11)
	if !slices.Equal(got, []string{"aaaa; bbbb;", "cccc"}) {
		t.Errorf("%q", got)
	}
}

func TestReportMarshalsUndefinedStatisticsAsNull(t *testing.T) {
	r := &jobResult{Placement: "static", MoveP50MS: num(math.NaN()), OpOtherP50MS: 1.5}
	b, err := json.Marshal(&report{Runs: []*jobResult{r}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"move_p50_ms":null`) || !strings.Contains(string(b), `"op_other_p50_ms":1.5`) {
		t.Errorf("%s", b)
	}
}

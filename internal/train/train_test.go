package train

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary be the nodes of the jobs Run starts: the
// launcher runs it with the plan in planEnv.
func TestMain(m *testing.M) {
	if os.Getenv(planEnv) != "" {
		if err := RunNode(context.Background()); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// skipUnderRace skips a whole training job under the race detector unless
// ELASTICPS_TRAIN_RACE is set: such a job starts 5 processes per mode from
// this test binary, and race-instrumented they take minutes on 2 cores.
// make unit-train runs these jobs without the detector; the library they
// drive (kv, postoffice, syncctl, elastic) runs under it in its own suites.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceDetector && os.Getenv("ELASTICPS_TRAIN_RACE") == "" {
		t.Skip("a whole training job: runs without the race detector in make unit-train (set ELASTICPS_TRAIN_RACE=1 to run it here)")
	}
}

// TestTrainCompareEndToEnd trains a small MLP on a subset of MNIST in real
// processes, every mode once, with an injected straggler.
func TestTrainCompareEndToEnd(t *testing.T) {
	skipUnderRace(t)
	c := DefaultConfig()
	c.Workers, c.Servers = 2, 2
	c.Modes = Modes
	c.Sizes = []int{ImageSize, 64, Classes}
	c.Blocks = 4
	c.Iterations, c.EvalEvery, c.Batch, c.LR = 40, 20, 32, 0.3
	c.TrainLimit, c.TestLimit = 4000, 2000
	c.Straggle = Straggle{Every: 2, MeanMS: 2, SDMS: 1}
	c.Out = t.TempDir()
	c.Timeout = 2 * time.Minute
	require.NoError(t, c.Validate())
	var out, progress bytes.Buffer
	rep, err := Run(t.Context(), c, &out, &progress)
	require.NoError(t, err, "progress:\n%s", progress.String())

	require.Len(t, rep.Rows, 4)
	for i, row := range rep.Rows {
		assert.Equal(t, Modes[i], row.Mode)
		assert.Equal(t, 1, row.Runs)
		assert.Greater(t, row.FinalAcc, 0.5, "%s: 40 iterations of 2 x 32 samples get well above chance (10%%)", row.Mode)
		assert.Greater(t, row.MBMoved, 0.0)
		assert.Regexp(t, `(?m)^ *`+row.Mode+` +\d+\.\d\d +`, out.String(), "the table has a row for %s", row.Mode)
	}
	assert.Equal(t, 1, rep.EvalRank, "worker 0 straggles (0 %% 2 == 0), so worker 1 takes the snapshots")
	for _, r := range rep.Runs {
		require.Len(t, r.Workers, 2)
		assert.Greater(t, r.Workers[0].SleepS, 0.0, "worker 0 sleeps after its iterations")
		assert.Zero(t, r.Workers[1].SleepS)
		assert.Equal(t, 40, r.Workers[0].Iterations)
		// snapshots: iteration 0, 20, and the final one after the end barrier
		var its []int
		for _, p := range r.Curve {
			its = append(its, p.Iteration)
		}
		assert.Equal(t, []int{0, 20, 40}, its)
		assert.InDelta(t, 0.1, r.Curve[0].Accuracy, 0.07, "the initial weights are at chance")
	}
	assert.InDelta(t, float64(rep.row("bsp").FinalAcc)-0.005, float64(rep.Target), 1e-12, "the target is BSP's final accuracy minus 0.5 points")
	assert.Regexp(t, `\[worker \d+ rank 1\] iteration    40/40`, progress.String(), "progress lines per worker")
	assert.Contains(t, progress.String(), "test accuracy", "an evaluation line")

	f, err := os.Open(filepath.Join(c.Out, "train.png"))
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "a valid PNG")
	assert.Greater(t, img.Bounds().Dx(), 500)
	svg, err := os.ReadFile(filepath.Join(c.Out, "train.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "<svg")
	assert.Contains(t, string(svg), "</svg>")
	var back Report
	b, err := os.ReadFile(filepath.Join(c.Out, "train.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Len(t, back.Rows, 4)
	assert.Len(t, back.Runs, 4)
}

// TestTrainElasticEndToEnd trains under PS_ELASTIC=1 with server 1 in a
// CPU-limited cgroup and scripted moves of its first block, ASP and
// FluentPS: blocks move during training, no pull is answered twice or
// lost, and the model still learns.
func TestTrainElasticEndToEnd(t *testing.T) {
	skipUnderRace(t)
	c := DefaultConfig()
	c.Workers, c.Servers = 2, 2
	c.Modes = []string{"asp", "fluent"}
	c.PauseProb = "0.1"
	c.Sizes = []int{ImageSize, 64, Classes}
	c.Blocks = 4
	c.Iterations, c.EvalEvery, c.Batch, c.LR = 60, 30, 32, 0.3
	c.TrainLimit, c.TestLimit = 4000, 2000
	c.Elastic, c.Moves, c.MoveEvery = true, 3, 100*time.Millisecond
	c.Out = t.TempDir()
	c.Timeout = 2 * time.Minute
	if g, err := NewCPUGroup("", c.SlowShare, "--slow-server"); err == nil {
		require.NoError(t, g.Remove())
		// This machine can slow a server for real (root, cgroup v1); half a
		// CPU, so that under the race detector on 2 busy cores its failure
		// detector still answers in time.
		c.SlowServer, c.SlowShare = 1, 0.5
	}
	require.NoError(t, c.Validate())
	var out, progress bytes.Buffer
	rep, err := Run(t.Context(), c, &out, &progress)
	require.NoError(t, err, "progress:\n%s", progress.String())

	require.Len(t, rep.Rows, 2)
	for _, row := range rep.Rows {
		assert.Greater(t, row.FinalAcc, 0.5, "%s: well above chance (10%%)", row.Mode)
		assert.Zero(t, row.Duplicates, "%s: no response answered twice", row.Mode)
		assert.GreaterOrEqual(t, float64(row.Moves), 1.0, "%s: blocks moved", row.Mode)
		assert.Regexp(t, `(?m)^ *`+row.Mode+` +\d+\.\d\d .* \d+ +0$`, out.String(), "the table ends with moves and duplicates for %s", row.Mode)
	}
	for _, r := range rep.Runs {
		require.NotNil(t, r.Moves, "%s: the scheduler's record", r.Mode)
		assert.Positive(t, r.Moves.Moves, "%s: moves committed during training", r.Mode)
		assert.Zero(t, r.Moves.FailedMoves, "%s", r.Mode)
		assert.LessOrEqual(t, r.Moves.Scripted, c.Moves)
		var redirected int64
		for _, s := range r.Servers {
			redirected += s.Redirected
			assert.Equal(t, c.SlowServer == s.Rank, s.Slow, "%s: server %d in the slow cgroup", r.Mode, s.Rank)
		}
		for _, w := range r.Workers {
			assert.Equal(t, 60, w.Iterations, "%s: worker %d finished", r.Mode, w.Rank)
			// the initial pull, one per iteration, and the evaluating
			// worker's final one
			want := int64(61)
			if w.Rank == rep.EvalRank {
				want++
			}
			assert.Equal(t, want, w.Pulls, "%s: worker %d's pulls were all answered", r.Mode, w.Rank)
			assert.Zero(t, w.Duplicates, "%s: worker %d", r.Mode, w.Rank)
		}
		assert.Positive(t, r.Redirects+redirected, "%s: requests met a moved block", r.Mode)
	}
	assert.Contains(t, out.String(), "check: fluent elastic: blocks moved during training: met")
	var back Report
	b, err := os.ReadFile(filepath.Join(c.Out, "train.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &back))
	require.NotNil(t, back.Runs[1].Moves)
	assert.Equal(t, rep.Runs[1].Moves.Moves, back.Runs[1].Moves.Moves)
}

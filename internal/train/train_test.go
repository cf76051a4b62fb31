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

// TestTrainCompareEndToEnd trains a small MLP on a subset of MNIST in real
// processes, every mode once, with an injected straggler.
func TestTrainCompareEndToEnd(t *testing.T) {
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
	assert.Contains(t, progress.String(), "[worker 1] iteration    40/40", "progress lines per worker")
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

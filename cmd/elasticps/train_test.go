package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTrainArgs(t *testing.T) {
	c, err := parseTrainArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, 4, c.Workers)
	assert.Equal(t, 2, c.Servers)
	assert.Equal(t, []string{"asp"}, c.Modes)
	assert.Equal(t, []int{784, 1024, 256, 10}, c.Sizes)
	assert.Equal(t, -1, c.CPURank)

	c, err = parseTrainArgs([]string{"--compare", "bsp, fluent,bsp", "--repeat", "3", "--straggle-every", "2", "--straggle-mean", "40",
		"--straggle-sd", "5", "--target", "96.5", "--hidden", "128", "--pause-prob", "sigmoid", "--cpu-straggler", "1"})
	require.NoError(t, err)
	assert.Equal(t, []string{"bsp", "fluent"}, c.Modes)
	assert.Equal(t, 3, c.Repeat)
	assert.Equal(t, 2, c.Straggle.Every)
	assert.Equal(t, 40.0, c.Straggle.MeanMS)
	assert.InDelta(t, 0.965, c.Target, 1e-12)
	assert.Equal(t, []int{784, 128, 10}, c.Sizes)
	assert.Equal(t, "sigmoid", c.PauseProb)
	assert.Equal(t, 1, c.CPURank)
	assert.False(t, c.Elastic)

	c, err = parseTrainArgs([]string{"--elastic", "--slow-server", "1", "--slow-server-share", "0.05", "--moves", "4", "--move-every", "300ms"})
	require.NoError(t, err)
	assert.True(t, c.Elastic)
	assert.Equal(t, 1, c.SlowServer)
	assert.Equal(t, 0.05, c.SlowShare)
	assert.Equal(t, 4, c.Moves)
	assert.Equal(t, 300*time.Millisecond, c.MoveEvery)

	for _, bad := range [][]string{{"--mode", "sync"}, {"--compare", "bsp,psp"}, {"--pause-prob", "2"}, {"--hidden", "a"},
		{"--straggle-every", "2"}, {"--cpu-straggler", "4"}, {"--workers", "0"}, {"--blocks", "1"}, {"--target", "100"}, {"extra"},
		{"--moves", "2"}, {"--slow-server", "2"}, {"--slow-server", "0", "--slow-server-share", "0"}, {"--elastic", "--servers", "1", "--blocks", "1", "--moves", "1"},
		{"--elastic", "--moves", "-1"}, {"--elastic", "--moves", "1", "--move-every", "0s"}} {
		_, err := parseTrainArgs(bad)
		assert.Error(t, err, "%v accepted", bad)
	}
}

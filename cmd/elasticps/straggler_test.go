package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStragglerArgs(t *testing.T) {
	o, err := parseStragglerArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, 4, o.Servers)
	assert.Equal(t, 4, o.Workers)
	assert.Equal(t, "zmq", o.Van)
	assert.Equal(t, "mxnet", o.Placement)
	assert.Equal(t, "bandwidth", o.Straggler)
	assert.EqualValues(t, 4, o.Slowdown)
	assert.True(t, o.Healthy)
	assert.Equal(t, []string{"static", "elastic", "oracle"}, o.Runs)
	assert.Equal(t, "straggler.svg", o.Plot)
	o, err = parseStragglerArgs([]string{"-s", "2", "-w", "3", "--placement", "byteps", "--bandwidth", "50", "--straggler", "cpu", "--placements", "elastic,static", "--healthy=false"})
	require.NoError(t, err)
	assert.Equal(t, 2, o.Servers)
	assert.Equal(t, 3, o.Workers)
	assert.EqualValues(t, 50e6, o.Bandwidth)
	assert.Equal(t, "cpu", o.Straggler)
	assert.Equal(t, []string{"elastic", "static"}, o.Runs)
	for _, bad := range [][]string{{"--van", "udp"}, {"--placement", "ring"}, {"--straggler", "disk"}, {"--slow-rank", "4"},
		{"--warmup", "30s"}, {"--placements", "fast"}, {"--scale", "0.5"}, {"extra"}} {
		_, err := parseStragglerArgs(bad)
		assert.Error(t, err, "%v accepted", bad)
	}
}

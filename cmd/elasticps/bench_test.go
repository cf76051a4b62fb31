package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/bench"
)

func TestParseBenchArgs(t *testing.T) {
	o, err := parseBenchArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"zmq", "tcp"}, o.Vans)
	assert.Equal(t, [][2]int{{1, 1}, {2, 2}}, o.Topos)
	assert.Equal(t, []int{4 << 10, 256 << 10, 4 << 20}, o.Sizes)
	assert.Equal(t, 8, o.Depth)

	o, err = parseBenchArgs([]string{"--van", "tcp", "--topo", "3x1", "--sizes", "1MB", "--ops", "50", "--modes", "pipe", "--ops-kind", "pull", "--json"})
	require.NoError(t, err)
	assert.Equal(t, []string{"tcp"}, o.Vans)
	assert.Equal(t, [][2]int{{3, 1}}, o.Topos)
	assert.Equal(t, 50, o.Count)
	assert.Equal(t, []string{"pipe"}, o.Modes)
	assert.Equal(t, []string{"pull"}, o.Ops)
	assert.True(t, o.JSON)
	assert.False(t, o.GoThread)

	o, err = parseBenchArgs([]string{"--go-thread"})
	require.NoError(t, err)
	assert.True(t, o.GoThread)
	exe, err := os.Executable()
	require.NoError(t, err)
	_, err = parseBenchArgs([]string{"--cxx", bench.GoThreadLabel + "=" + exe})
	assert.ErrorContains(t, err, "label", "the --go-thread rows' label is taken")

	for _, bad := range [][]string{
		{"--van", "rdma"}, {"--topo", "2"}, {"--topo", "0x1"}, {"--sizes", "big"},
		{"--modes", "burst"}, {"--ops-kind", "pushpull"}, {"--depth", "0"}, {"extra"},
	} {
		_, err := parseBenchArgs(bad)
		assert.Error(t, err, "%v", bad)
	}
}

package main

import (
	"os"
	"strings"
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

	o, err = parseBenchArgs([]string{"--van", "zmq,tcp,shm"})
	require.NoError(t, err)
	assert.Equal(t, []string{"zmq", "tcp", "shm"}, o.Vans)

	o, err = parseBenchArgs([]string{"--go-thread"})
	require.NoError(t, err)
	assert.True(t, o.GoThread)
	exe, err := os.Executable()
	require.NoError(t, err)
	_, err = parseBenchArgs([]string{"--cxx", bench.GoThreadLabel + "=" + exe})
	assert.ErrorContains(t, err, "label", "the --go-thread rows' label is taken")

	o, err = parseBenchArgs([]string{"--encrypt", "both"})
	require.NoError(t, err)
	assert.Equal(t, "both", o.Encrypt)
	_, err = parseBenchArgs([]string{"--encrypt", "on", "--van", "tcp,shm"})
	assert.ErrorContains(t, err, "the shm van has no encryption")

	for _, bad := range [][]string{
		{"--van", "rdma"}, {"--topo", "2"}, {"--topo", "0x1"}, {"--sizes", "big"},
		{"--modes", "burst"}, {"--ops-kind", "pushpull"}, {"--depth", "0"}, {"extra"},
		{"--encrypt", "yes"},
	} {
		_, err := parseBenchArgs(bad)
		assert.Error(t, err, "%v", bad)
	}
}

func TestBenchFailoverHelpAndErrors(t *testing.T) {
	t.Parallel() // processes of their own that print or fail before any job starts; no ports
	for _, args := range [][]string{{"bench", "failover", "--help"}, {"help", "bench", "failover"}} {
		r := elasticps(t, []string{"DMLC_ROLE=worker"}, args...)
		assert.Equal(t, 0, r.code, "%v: %s", args, r.stderr)
		assert.True(t, strings.HasPrefix(r.stdout, "usage: elasticps bench failover [flags]"), r.stdout)
		assert.Contains(t, r.stdout, "--kills")
	}
	r := elasticps(t, nil, "bench", "failover-node", "--help")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "'elasticps bench failover' starts")
	for args, want := range map[string]string{
		"--kills -1":         "elasticps: bench failover: --kills must be >= 0",
		"--sizes 1XB":        "elasticps: bench failover: --sizes:",
		"--depth 0":          "elasticps: bench failover: --depth must be >= 1",
		"--sync-workers -1":  "elasticps: bench failover: --sync-workers must be >= 0",
		"--kills 0 --sizes=": "something must be measured",
		"now":                `elasticps: bench failover: unexpected argument "now"`,
	} {
		r := elasticps(t, nil, append([]string{"bench", "failover"}, strings.Fields(args)...)...)
		assert.Equal(t, 1, r.code, args)
		assert.Contains(t, r.stderr, want, args)
	}
}

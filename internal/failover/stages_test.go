package failover

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	schedLog = `time=2026-12-02T02:33:04.100Z level=INFO msg="node server[id=8, 127.0.0.1:32783] is dead: membership gossip: its probes failed" role=scheduler
time=2026-12-02T02:33:04.341Z level=WARN msg="member failed: its connection closed and it answered no probe" role=scheduler peer=server-127.0.0.1:43433 for=400ms
time=2026-12-02T02:33:04.341Z level=INFO msg="node server[id=10, 127.0.0.1:43433] is dead: membership gossip: its probes failed" role=scheduler
time=2026-12-02T02:33:04.350Z level=WARN msg="coord: failover" role=scheduler dead=8 promoted=1 lost=0 epoch=2 routes="" took=1ms err=<nil>
time=2026-12-02T02:33:04.356Z level=WARN msg="coord: failover" role=scheduler dead=10 promoted=1 lost=0 epoch=3 routes="" took=13ms err=<nil>
`
	serverLog = `time=2026-12-02T02:33:04.000Z level=INFO msg="elastic: backup seeded" role=server begin=0 end=5 backup=12 bytes=48
time=2026-12-02T02:33:04.358Z level=INFO msg="elastic: backup seeded" role=server begin=0 end=5 backup=14 bytes=48
time=2026-12-02T02:33:04.360Z level=INFO msg="elastic: backup seeded" role=server begin=5 end=9 backup=14 bytes=48
`
)

func TestStagesOfAKill(t *testing.T) {
	at, err := time.Parse(time.RFC3339Nano, "2026-12-02T02:33:04.0405Z")
	require.NoError(t, err)
	k := kill{at: at, acked: at.Add(318 * time.Millisecond)}
	readKill(&k, 10, schedLog, []string{serverLog, "no seeding here\n"})
	require.True(t, k.complete)
	assert.True(t, k.byGossip)
	assert.True(t, k.byLifeline)
	// 04.0405 -> declared 04.341 -> table 04.356 -> acked 04.3585; seeded 04.360
	assert.Equal(t, []float64{300.5, 15, 2.5, 19}, k.stages())
	assert.Equal(t, "detect 300, table 15.0, resend 2.50, reseed 19.0 ms; found by lifeline", k.describe())

	s := summarize([]kill{k, {}})
	require.Len(t, s, len(stageNames), "an incomplete kill is left out")
	assert.Equal(t, Stage{Name: "detect", What: stageWhat[0], P50MS: 300.5, P99MS: 300.5, MaxMS: 300.5}, s[0])

	missing := kill{at: at}
	readKill(&missing, 12, schedLog, []string{serverLog})
	assert.False(t, missing.complete, "no death of server 12 in the log")
	assert.Equal(t, "stages not in the logs", missing.describe())
	_, ok := logTime("ELASTICPS_FAILOVER_GAP 1 2")
	assert.False(t, ok)
}

package elastic

import (
	"testing"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMoveRoundTripsWithItsPayload(t *testing.T) {
	mv := Move{Begin: 10, End: 20, From: 8, To: 10, Epoch: 3}
	got, rest, err := UnmarshalMove(MarshalMove(mv, []byte("state")))
	require.NoError(t, err)
	assert.Equal(t, mv, got)
	assert.Equal(t, []byte("state"), rest)
}

func TestMoveRejectsShortAndEmptyMessages(t *testing.T) {
	_, _, err := UnmarshalMove(make([]byte, 31))
	assert.ErrorContains(t, err, "shorter than 32")
	_, _, err = UnmarshalMove(MarshalMove(Move{Begin: 5, End: 5}, nil))
	assert.ErrorContains(t, err, "is empty")
}

func TestReportsRoundTrip(t *testing.T) {
	lr := LoadReport{Interval: time.Second, Busy: 300 * time.Millisecond,
		Blocks: []BlockLoad{{Begin: 0, End: 4, Requests: 7, Bytes: 112}, {Begin: 9, End: 10, Requests: 1, Bytes: 8}}}
	srv, wrk, err := ParseReport(lr.Marshal())
	require.NoError(t, err)
	assert.Nil(t, wrk)
	assert.Equal(t, &lr, srv)

	wr := WorkerReport{Interval: time.Second, Ops: 40, MeanRTT: 2 * time.Millisecond, MeanHandling: time.Millisecond}
	srv, wrk, err = ParseReport(wr.Marshal())
	require.NoError(t, err)
	assert.Nil(t, srv)
	assert.Equal(t, &wr, wrk)
}

func TestParseReportRejectsBadInput(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":             nil,
		"unknown tag":       {'X'},
		"short worker":      {'W', 1, 2},
		"short server":      {'S', 1},
		"blocks past end":   append((&LoadReport{Blocks: []BlockLoad{{}}}).Marshal()[:21], 0),
		"claims too many":   {'S', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f},
		"trailing garbage":  append((&LoadReport{}).Marshal(), 1),
		"worker with extra": append((&WorkerReport{}).Marshal(), 1),
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := ParseReport(b)
			assert.Error(t, err)
		})
	}
}

func TestMessageNamesAreDistinct(t *testing.T) {
	seen := map[string]int32{}
	for h := MsgRoutes; h <= MsgSeed; h++ {
		n := MessageName(h)
		_, dup := seen[n]
		assert.False(t, dup, "%d and %d are both %q", seen[n], h, n)
		seen[n] = h
	}
	assert.Equal(t, "message 99", MessageName(99))
}

func TestOpenOutsideElasticModeMakesPlainNodes(t *testing.T) {
	for _, c := range []struct {
		role    message.Role
		elastic bool
	}{{message.RoleServer, false}, {message.RoleWorker, false}, {message.RoleScheduler, true}} {
		po, err := postoffice.Open(postoffice.Config{Role: c.role, NumServers: 1, NumWorkers: 1, Elastic: c.elastic,
			SchedulerHost: "127.0.0.1", SchedulerPort: 1, NodeHost: "127.0.0.1"})
		require.NoError(t, err)
		n, err := Open(po)
		require.NoError(t, err)
		assert.False(t, n.Enabled(), "%s, elastic=%v", c.role, c.elastic)
		assert.Zero(t, n.Redirected())
		assert.NoError(t, n.SetMigrator(nil), "nothing moves: nothing to set")
		assert.Zero(t, n.Table().Epoch())
		po.Stop()
	}
}

func TestMoveReportsRoundTrip(t *testing.T) {
	in := []MoveReport{
		{Stage: MoveKept, Move: Move{Begin: 0, End: 10, From: 8, To: 10, Epoch: 2}},
		{Stage: MoveExported, Move: Move{Begin: 10, End: 20, From: 8, To: 12, Epoch: 3}, State: []byte("M state")},
		{Stage: MoveParked, Move: Move{Begin: 20, End: 30, From: 10, To: 8, Epoch: 4}},
		{Stage: MoveInstalled, Move: Move{Begin: 30, End: 40, From: 12, To: 8, Epoch: 5}},
	}
	got, err := UnmarshalMoveReports(MarshalMoveReports(in))
	require.NoError(t, err)
	assert.Equal(t, in, got)
	none, err := UnmarshalMoveReports(nil)
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.Equal(t, "exported", MoveExported.String())
	assert.Equal(t, "none", MoveStage(0).String())
}

func TestMoveReportsRejectBadInput(t *testing.T) {
	good := MarshalMoveReports([]MoveReport{{Stage: MoveExported, Move: Move{Begin: 1, End: 2, From: 8, To: 10}, State: []byte("abc")}})
	bad := append([]byte{9}, good[1:]...)
	_, err := UnmarshalMoveReports(bad)
	assert.ErrorContains(t, err, "unknown stage 9")
	_, err = UnmarshalMoveReports(good[:len(good)-1])
	assert.ErrorContains(t, err, "is truncated")
	_, err = UnmarshalMoveReports(good[:20])
	assert.ErrorContains(t, err, "shorter than 32")
}

func TestSpansRoundTrip(t *testing.T) {
	s := routing.Spans{{Begin: 0, End: 10}, {Begin: 20, End: 30}}
	got, err := UnmarshalSpans(MarshalSpans(s))
	require.NoError(t, err)
	assert.Equal(t, s, got)
	got, err = UnmarshalSpans(MarshalSpans(nil))
	require.NoError(t, err)
	assert.Empty(t, got)

	_, err = UnmarshalSpans([]byte{1})
	assert.ErrorContains(t, err, "lack their 4-byte count")
	_, err = UnmarshalSpans(MarshalSpans(s)[:20])
	assert.ErrorContains(t, err, "2 spans need 32 bytes after the count, got 16")
	_, err = UnmarshalSpans(MarshalSpans(routing.Spans{{Begin: 7, End: 7}}))
	assert.ErrorContains(t, err, "span 0, [7, 7), is empty")
}

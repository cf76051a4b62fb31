package coord

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/rebalance"
	"github.com/elasticps/elasticps/van/anyvan"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ctlGet fetches the control API's path (GET, or POST when post) and
// decodes its JSON into v, requiring status 200.
func ctlGet(t *testing.T, addr, path string, post bool, v any) {
	t.Helper()
	var resp *http.Response
	var err error
	if post {
		resp, err = http.Post("http://"+addr+path, "", nil)
	} else {
		resp, err = http.Get("http://" + addr + path)
	}
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	require.NoError(t, json.Unmarshal(body, v), "%s", body)
}

// keysOf lists a JSON object's keys, sorted.
func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// The control API over HTTP, as elasticps ctl uses it: status names each
// server (rank, node id, address, blocks and bytes held, load, health)
// under stable snake_case keys; a move answers with the move, and status
// then shows the new owner holding the block; the values stay exact.
func TestControlAPIStatusAndMove(t *testing.T) {
	t.Setenv("PS_REPORT_INTERVAL", "50") // read as the servers' elastic sides open
	j := startElasticJob(t, 2, 1)
	_, err := NewBalancer(j.coord, rebalance.DefaultConfig(), time.Hour) // plans only if stepped
	require.NoError(t, err)
	addr, err := j.coord.ServeControl("127.0.0.1:0")
	require.NoError(t, err)

	keys, vals := j.firstKeys(4) // one block of 4 keys per server
	wg, _ := j.pushRounds(t, keys, vals, 20, time.Millisecond)
	wg.Wait()
	var st Status
	require.Eventually(t, func() bool {
		ctlGet(t, addr, "/status", false, &st)
		return len(st.Servers) == 2 && st.Servers[0].Blocks == 1 && st.Servers[1].Blocks == 1
	}, 10*time.Second, 20*time.Millisecond, "both servers' blocks reported: %+v", st.Servers)

	var raw map[string]any
	ctlGet(t, addr, "/status", false, &raw)
	assert.Equal(t, []string{"epoch", "failed_moves", "intervals", "last_moves", "last_plan", "moves", "servers"}, keysOf(raw))
	srv0 := raw["servers"].([]any)[0].(map[string]any)
	assert.Equal(t, []string{"address", "blocks", "busy", "bytes", "bytes_per_sec", "handling_us", "health", "intervals",
		"node_id", "rank", "report_age_ms", "requests_per_sec", "standby"}, keysOf(srv0))
	assert.Equal(t, []string{"begin", "end", "server"}, keysOf(raw["intervals"].([]any)[0].(map[string]any)))

	for rank, s := range st.Servers {
		i := slices.IndexFunc(j.servers, func(po *postoffice.Postoffice) bool { return po.MyRank() == rank })
		require.GreaterOrEqual(t, i, 0)
		po := j.servers[i]
		assert.Equal(t, rank, s.Rank)
		assert.Equal(t, po.MyNode().ID, s.NodeID)
		assert.Equal(t, fmt.Sprintf("%s:%d", po.MyNode().Hostname, po.MyNode().Port), s.Address)
		assert.Equal(t, "ok", s.Health)
		assert.Equal(t, 1, s.Intervals)
		assert.Equal(t, int64(4*8+4*4), s.Bytes, "a push of the block carries 4 uint64 keys and 4 float32 values")
		assert.False(t, s.Standby)
		assert.GreaterOrEqual(t, s.ReportAgeMs, 0.0)
	}
	assert.Equal(t, uint64(0), st.Epoch)
	assert.Equal(t, 0, st.Moves)
	assert.Nil(t, st.LastPlan)

	// move server 8's block to server 10 while nothing pushes
	r0 := j.workers[0].ServerKeyRanges()[0]
	from, to := int32(message.ServerRankToID(0)), int32(message.ServerRankToID(1))
	var mv map[string]any
	ctlGet(t, addr, fmt.Sprintf("/move?begin=%d&end=%d&to=%d", r0.Begin, r0.Begin+4, to), true, &mv)
	assert.Equal(t, []string{"begin", "bytes", "end", "from", "ms", "to"}, keysOf(mv))
	assert.Equal(t, []any{float64(r0.Begin), float64(r0.Begin + 4), float64(from), float64(to)},
		[]any{mv["begin"], mv["end"], mv["from"], mv["to"]})

	ctlGet(t, addr, "/status", false, &st)
	assert.Equal(t, uint64(2), st.Epoch)
	assert.Equal(t, 1, st.Moves)
	assert.Equal(t, 0, st.FailedMoves)
	require.Len(t, st.LastMoves, 1)
	assert.Equal(t, MoveStatus{Begin: r0.Begin, End: r0.Begin + 4, From: from, To: to, Bytes: st.LastMoves[0].Bytes, Ms: st.LastMoves[0].Ms}, st.LastMoves[0])
	assert.Equal(t, []int{0, 2}, []int{st.Servers[0].Blocks, st.Servers[1].Blocks}, "the moved block is held by its new owner")
	assert.Equal(t, []int{1, 2}, []int{st.Servers[0].Intervals, st.Servers[1].Intervals}, "[0, 4) on 10, the rest of 8's range on 8")
	assert.Equal(t, IntervalStatus{Begin: r0.Begin, End: r0.Begin + 4, Server: to}, st.Intervals[0])

	wg, _ = j.pushRounds(t, keys, vals, 5, 0)
	wg.Wait()
	j.requireSums(t, keys, vals, 25)

	// drain answers with its moves; the drained server leaves
	var ds map[string]any
	ctlGet(t, addr, fmt.Sprintf("/drain?node=%d", from), true, &ds)
	assert.Equal(t, []string{"left", "moves", "node"}, keysOf(ds))
	assert.Equal(t, true, ds["left"])
	assert.Len(t, ds["moves"], 1)
	j.requireSums(t, keys, vals, 25)
}

// A move or drain asked for while the scheduler still waits for nodes is
// refused with what the job waits for, not attempted over connections
// that do not exist yet.
func TestControlAPIRefusesMovesBeforeTheJobIsComplete(t *testing.T) {
	po, err := postoffice.Open(postoffice.Config{Role: message.RoleScheduler, NumServers: 2, NumWorkers: 1,
		SchedulerHost: "127.0.0.1", SchedulerPort: porttest.Free(t), Elastic: true, VanType: anyvan.TestKind(), Logger: jobtest.Logger()})
	require.NoError(t, err)
	t.Cleanup(po.Stop)
	c, err := New(po)
	require.NoError(t, err)
	addr, err := c.ServeControl("127.0.0.1:0")
	require.NoError(t, err)
	started := make(chan error, 1)
	go func() { started <- po.Start(0) }() // waits for nodes that never come
	t.Cleanup(func() { po.Stop(); <-started })

	for _, path := range []string{"/move?begin=0&end=10&to=10", "/drain?node=10"} {
		resp, err := http.Post("http://"+addr+path, "", nil)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusConflict, resp.StatusCode, path)
		assert.Equal(t, "the job is not complete yet: the scheduler still waits for nodes to register "+
			"(DMLC_NUM_SERVER=2, DMLC_NUM_WORKER=1; status lists the servers so far); move or drain keys once every node has joined\n", string(body), path)
	}
	assert.Empty(t, c.History(), "nothing was attempted")
}

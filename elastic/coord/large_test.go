package coord

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
)

// TestStateOverTheMetaLimitMovesAndReplicates: a key of 2 MiB, twice
// PS_MAX_META_BYTES' default, in a PS_REPLICAS=1 job: its pushes are
// forwarded to the backup, the key moves to another server (export,
// install, a new backup seeded), and both copies hold the exact sum. The
// elastic messages carry such state in a data frame; in the meta, the
// receiving van refused it and the push or the move waited for an answer
// that never came.
func TestStateOverTheMetaLimitMovesAndReplicates(t *testing.T) {
	const n = 512 << 10 // float32s: 2 MiB
	j := startJobWith(t, 3, 1, jobOpts{configure: replicated(1)})
	r := j.waitReplicated(t, 1)
	key := j.workers[0].ServerKeyRanges()[0].Begin
	vals := make([]float32, n)
	want := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i%7 + 1)
		want[i] = 3 * vals[i]
	}
	w := j.kvw[0]
	push := func(what string) {
		t.Helper()
		ts, err := kv.Push(w, []uint64{key}, vals, nil, kv.Options{})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- w.Wait(ts) }()
		require.NoError(t, testutil.Recv(t, done, 30*time.Second, func() string { return what + " was not acknowledged" }))
	}
	push("a 2 MiB push forwarded to its backup")

	iv := r.Intervals[r.Find(key)]
	var to int32 // the server holding no copy of it
	for _, po := range j.servers {
		if id := po.MyNode().ID; id != iv.Node && !iv.HasBackup(id) {
			to = id
		}
	}
	_, err := j.coord.Move(key, key+1, to)
	require.NoError(t, err, "moving a 2 MiB key")
	push("a 2 MiB push after the move")
	push("another")
	r = j.waitReplicated(t, 1)
	moved := r.Intervals[r.Find(key)]
	require.Equal(t, to, moved.Node)

	var got []float32
	ts, err := kv.Pull(w, []uint64{key}, &got, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	require.Equal(t, want, got, "the primary holds the exact sum")
	require.Equal(t, want[:7], j.holdsN(t, moved.Backups[0], key, n)[:7], "the backup too")
}

// holdsN is holds for a key of n values.
func (j *elasticJob) holdsN(t *testing.T, id int32, key uint64, n int) []float32 {
	t.Helper()
	for i, po := range j.servers {
		if po.MyNode().ID != id {
			continue
		}
		res, err := j.srvs[i].HandleLocal(kv.LocalRequest{DataType: message.Float, Data: kv.KVPairs{Keys: []uint64{key}}}, 10*time.Second)
		require.NoError(t, err)
		got, err := kv.FromBytes[float32](res.Vals)
		require.NoError(t, err)
		require.Len(t, got, n)
		return got
	}
	t.Fatalf("no server %d", id)
	return nil
}

package kv

import (
	"bytes"
	"slices"
	"sync"
	"testing"

	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPullInto pulls into caller-owned buffers: a larger one keeps its
// tail, a smaller one fails the operation and is left unchanged, and a
// push-pull lands in place too.
func TestPullInto(t *testing.T) {
	j := startJob(t, 2, 1)
	j.startDefaultServers()
	w := j.newWorker(0, 0)
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 3)
	vals, _ := testValues(keys, false)
	for range 2 {
		ts, err := Push(w, keys, vals, nil, Options{})
		wait(t, w, ts, err)
	}
	want := AsBytes(scaled(vals, 2))

	big := bytes.Repeat([]byte{0xAB}, len(want)+64)
	n := -1
	var lens []int32
	ts, err := w.PullInto(keys, big, &n, &lens, Options{DataType: message.Float})
	wait(t, w, ts, err)
	require.Equal(t, len(want), n, "PullInto: n")
	require.Equal(t, want, big[:n], "PullInto")
	assert.Equal(t, bytes.Repeat([]byte{0xAB}, 64), big[n:], "PullInto wrote past the reply")
	assert.Equal(t, slices.Repeat([]int32{2}, len(keys)), lens, "PullInto lens: 2 per key")

	small := bytes.Repeat([]byte{0xCD}, len(want)-4)
	n = -1
	ts, err = w.PullInto(keys, small, &n, nil, Options{DataType: message.Float})
	require.NoError(t, err, "issue")
	assert.ErrorContains(t, w.Wait(ts), "servers returned", "PullInto a short buffer")
	assert.Equal(t, -1, n, "PullInto a short buffer set n")
	assert.Equal(t, bytes.Repeat([]byte{0xCD}, len(small)), small, "PullInto a short buffer changed it")

	out := make([]byte, len(want))
	n = -1
	ts, err = w.PushPullInto(keys, AsBytes(vals), out, &n, nil, Options{DataType: message.Float})
	wait(t, w, ts, err)
	want3 := AsBytes(scaled(vals, 3))
	assert.Equal(t, len(want3), n, "PushPullInto: n")
	assert.Equal(t, want3, out, "PushPullInto")
	_, err = w.PullInto(keys, big, nil, nil, Options{})
	assert.Error(t, err, "PullInto with a nil n")
}

// TestRetainKeepsRequests: a server that releases requests keeps the ones
// its handler retained intact while many more requests (whose buffers the
// transport reuses) arrive, and answers them later.
func TestRetainKeepsRequests(t *testing.T) {
	j := startJob(t, 1, 1)
	type held struct {
		meta    ReqMeta
		vals    []byte
		want    byte
		release func()
	}
	var (
		mu   sync.Mutex
		kept []held
	)
	srvs := j.startServers(func(meta ReqMeta, data KVPairs, s *Server) {
		if data.Vals[0]%2 == 0 { // every other request is kept for later
			mu.Lock()
			kept = append(kept, held{meta, data.Vals, data.Vals[0], meta.Retain()})
			mu.Unlock()
			return
		}
		assert.NoError(t, s.Response(meta, KVPairs{}))
	})
	srvs[0].ReleaseRequests(true)
	w := j.newWorker(0, 0)
	key := j.Workers[0].ServerKeyRanges()[0].Begin
	const n = 40
	var tss []int32
	for i := range n {
		vals := bytes.Repeat([]byte{byte(i)}, 256<<10) // large: pooled buffers
		ts, err := w.Push([]uint64{key}, vals, nil, Options{})
		require.NoError(t, err)
		if i%2 == 1 {
			wait(t, w, ts, nil) // answered at once; its buffer goes back
		} else {
			tss = append(tss, ts)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, kept, n/2, "kept requests")
	for _, h := range kept {
		assert.Equal(t, bytes.Repeat([]byte{h.want}, len(h.vals)), h.vals, "retained request %d was overwritten while kept", h.want)
		assert.NoError(t, srvs[0].Response(h.meta, KVPairs{}))
		h.release()
		h.release() // a second call does nothing
	}
	for _, ts := range tss {
		wait(t, w, ts, nil)
	}
}

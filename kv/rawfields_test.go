package kv

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elasticps/elasticps/message"
)

// TestRequestValLen: the fork's request fields reach a server over a real
// transport (dmlc wire fields 21-24, or the bytedance struct): a push
// carries its element count as ValLen, a pull into a pre-sized destination
// its share of the destination (elements divided evenly among the keys, as
// the fork's KVWorker slices a pull), a pull to be allocated 0.
func TestRequestValLen(t *testing.T) {
	j := startJob(t, 2, 1)
	const perKey = 5 // floats per key
	var (
		mu  sync.Mutex
		got = map[string][]int32{} // "push"/"pull" -> ValLen per request, by first key order
	)
	j.startServers(func(meta ReqMeta, data KVPairs, s *Server) {
		kind := "pull"
		if meta.Push {
			kind = "push"
		}
		mu.Lock()
		got[kind] = append(got[kind], meta.Raw.ValLen)
		mu.Unlock()
		var res KVPairs
		if !meta.Push {
			res = KVPairs{Keys: data.Keys, Vals: make([]byte, len(data.Keys)*perKey*4)}
		}
		assert.NoError(t, s.Response(meta, res))
	})
	w := j.newWorker(0, 0)
	krs := j.Workers[0].ServerKeyRanges()
	keys := []uint64{krs[0].Begin, krs[0].Begin + 1, krs[1].Begin} // two keys on server 0, one on 1
	take := func(kind string) []int32 {
		mu.Lock()
		defer mu.Unlock()
		v := got[kind]
		delete(got, kind)
		return v
	}

	ts, err := Push(w, keys, make([]float32, len(keys)*perKey), nil, Options{})
	wait(t, w, ts, err)
	assert.ElementsMatch(t, []int32{2 * perKey, perKey}, take("push"), "push ValLen: the elements each server gets")

	dst := make([]float32, len(keys)*perKey)
	ts, err = Pull(w, keys, &dst, nil, Options{})
	wait(t, w, ts, err)
	assert.ElementsMatch(t, []int32{2 * perKey, perKey}, take("pull"), "pull ValLen: each server's share of the destination")

	big := make([]byte, 3*len(keys)*perKey*4)
	var n int
	ts, err = w.PullInto(keys, big, &n, nil, Options{DataType: message.Float})
	wait(t, w, ts, err)
	assert.ElementsMatch(t, []int32{6 * perKey, 3 * perKey}, take("pull"), "PullInto ValLen: the whole buffer shared among the keys")

	var empty []float32
	ts, err = Pull(w, keys, &empty, nil, Options{})
	wait(t, w, ts, err)
	assert.Equal(t, []int32{0, 0}, take("pull"), "pull ValLen with a destination to allocate")
}

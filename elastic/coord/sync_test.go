package coord

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/require"
)

// syncStore is a synchronous server handler, as MXNet's and BytePS's
// servers are: per key, it holds every worker's push of a round and
// answers them only once all workers pushed that key (then adds the
// round's sum). A request of several keys is answered when every one of
// its keys finished its round. It moves by its own Migrator, which refuses
// keys with a round in progress (the library never asks that: it exports
// once the keys' requests are answered).
type syncStore struct {
	nw int

	mu      sync.Mutex
	val     map[uint64]float32
	merge   map[uint64]float32 // this round's pushes so far
	merged  map[uint64]int
	waiting map[uint64][]*heldPush
}

type heldPush struct {
	meta kv.ReqMeta
	left int // keys whose round is not complete yet
}

func newSyncStore(nw int) *syncStore {
	return &syncStore{nw: nw, val: map[uint64]float32{}, merge: map[uint64]float32{},
		merged: map[uint64]int{}, waiting: map[uint64][]*heldPush{}}
}

func (s *syncStore) handle(meta kv.ReqMeta, data kv.KVPairs, srv *kv.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vals, err := kv.FromBytes[float32](data.Vals)
	if err != nil {
		_ = srv.ResponseError(meta, err)
		return
	}
	if !meta.Push {
		res := kv.KVPairs{Keys: data.Keys}
		out := make([]float32, len(data.Keys))
		for i, k := range data.Keys {
			out[i] = s.val[k]
		}
		res.Vals = kv.AsBytes(out)
		_ = srv.Response(meta, res)
		return
	}
	h := &heldPush{meta: meta, left: len(data.Keys)}
	for i, k := range data.Keys {
		s.merge[k] += vals[i]
		s.merged[k]++
		s.waiting[k] = append(s.waiting[k], h)
		if s.merged[k] < s.nw {
			continue
		}
		s.val[k] += s.merge[k]
		for _, w := range s.waiting[k] {
			if w.left--; w.left == 0 {
				_ = srv.Response(w.meta, kv.KVPairs{})
			}
		}
		delete(s.merge, k)
		delete(s.merged, k)
		delete(s.waiting, k)
	}
}

// held is how many pushes of key k the store holds for the round.
func (s *syncStore) held(k uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.merged[k]
}

func (s *syncStore) Export(begin, end uint64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b []byte
	for k := range s.merged {
		if k >= begin && k < end {
			return nil, fmt.Errorf("key %d has a round in progress", k)
		}
	}
	for k, v := range s.val {
		if k < begin || k >= end {
			continue
		}
		b = binary.LittleEndian.AppendUint64(b, k)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		delete(s.val, k)
	}
	return b, nil
}

func (s *syncStore) Import(state []byte) error {
	if len(state)%12 != 0 {
		return fmt.Errorf("state of %d bytes is not whole entries", len(state))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ; len(state) > 0; state = state[12:] {
		s.val[binary.LittleEndian.Uint64(state)] = math.Float32frombits(binary.LittleEndian.Uint32(state[8:]))
	}
	return nil
}

// startSyncJob is startElasticJob with syncStore servers.
func startSyncJob(t *testing.T, ns, nw int) (*elasticJob, map[int32]*syncStore) {
	t.Helper()
	j := startElasticJob(t, ns, nw)
	stores := map[int32]*syncStore{} // by server id
	for i, srv := range j.srvs {
		st := newSyncStore(nw)
		srv.SetRequestHandler(st.handle)
		require.NoError(t, j.srvEl[i].SetMigrator(st))
		stores[j.servers[i].MyNode().ID] = st
	}
	return j, stores
}

// pushAll has every worker push keys/vals once (a synchronous round) and
// waits for all of them.
func (j *elasticJob) pushAll(t *testing.T, keys []uint64, vals []float32) {
	t.Helper()
	var wg sync.WaitGroup
	for _, w := range j.kvw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts, err := kv.Push(w, keys, vals, nil, kv.Options{})
			require.NoError(t, err)
			require.NoError(t, w.Wait(ts))
		}()
	}
	wg.Wait()
}

// moveDuringRound moves [k, k+1) from the server holding keys (all on one
// interval) to the other server while a synchronous round of keys is half
// done: worker 0's push is held by the handler when the move starts, and
// worker 1 pushes once it has the move's first table. The move must not
// split the round (worker 1's push of k belongs with worker 0's on the old
// owner), so it completes without waiting for a timeout.
func moveDuringRound(t *testing.T, j *elasticJob, stores map[int32]*syncStore, keys []uint64, vals []float32, k uint64) {
	t.Helper()
	from := j.coord.Table().Current()
	to := int32(message.ServerRankToID(1))
	if from.Intervals[from.Find(k)].Node == to {
		to = int32(message.ServerRankToID(0))
	}
	old := stores[from.Intervals[from.Find(k)].Node]
	x, y := j.kvw[0], j.kvw[1]
	tsX, err := kv.Push(x, keys, vals, nil, kv.Options{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return old.held(k) == 1 }, 10*time.Second, time.Millisecond,
		"worker 0's push is held by the handler")
	type result struct {
		res Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := j.coord.Move(k, k+1, to)
		done <- result{res, err}
	}()
	require.Eventually(t, func() bool { return j.wrkEl[1].Table().Epoch() > from.Epoch }, 10*time.Second, time.Millisecond,
		"worker 1 has the move's first table")
	tsY, err := kv.Push(y, keys, vals, nil, kv.Options{})
	require.NoError(t, err)
	require.NoError(t, x.Wait(tsX))
	require.NoError(t, y.Wait(tsY))
	r := <-done
	// the move's error is its timeout when the round was split
	require.NoError(t, r.err)
	require.Equal(t, to, j.coord.Table().Current().Intervals[j.coord.Table().Current().Find(k)].Node)
}

// A synchronous round in progress on the old owner when a move of one of
// its keys starts: the pushes were sent as one span of both keys (they are
// on one routing interval), so the old owner knew their push numbers only
// by the span's first key, which is outside the moving range. The cut-over
// must still come after the held round (it used to fall before it, the
// round was split between the two servers, and the move waited for its
// timeout). Keys move back and forth, and the sums stay exact.
func TestSyncMoveOfKeyInsideASpan(t *testing.T) {
	j, stores := startSyncJob(t, 2, 2)
	j.coord.Timeout = 5 * time.Second
	r0 := j.workers[0].ServerKeyRanges()[0]
	keys := []uint64{r0.Begin, r0.Begin + 1, r0.Begin + 2}
	vals := []float32{1, 2, 3}
	rounds := 0
	for range 2 {
		j.pushAll(t, keys, vals)
		rounds++
	}
	// the middle key, away and back, twice, each time mid-round
	for range 4 {
		moveDuringRound(t, j, stores, keys, vals, keys[1])
		rounds++
		j.pushAll(t, keys, vals)
		rounds++
	}
	for _, h := range j.coord.History() {
		require.NoError(t, h.Err)
	}
	j.requireSums(t, keys, vals, float32(rounds*2))
}

// Push numbers are counted per key, and the keys of one request need not
// have been pushed equally often: here the moving key was pushed alone
// before, so its count is ahead of the span's first key. A round held on
// the old owner must still be on the old owner's side of the cut-over for
// every key of the request.
func TestSyncMoveWithUnequalPushCounts(t *testing.T) {
	j, stores := startSyncJob(t, 2, 2)
	j.coord.Timeout = 5 * time.Second
	r0 := j.workers[0].ServerKeyRanges()[0]
	keys := []uint64{r0.Begin, r0.Begin + 1}
	vals := []float32{1, 2}
	for range 3 {
		j.pushAll(t, keys[1:], vals[1:])
	}
	moveDuringRound(t, j, stores, keys, vals, keys[1])
	j.pushAll(t, keys, vals)
	for _, h := range j.coord.History() {
		require.NoError(t, h.Err)
	}
	// key 0: 2 rounds of 1 by 2 workers; key 1: 5 rounds of 2 by 2 workers
	j.requireSums(t, keys, []float32{4, 20}, 1)
}

package kv

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/routing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modSlicer sends key k to server k % len(ranges), whatever its range
// (4-byte elements).
func modSlicer(keys []uint64, vals []byte, lens []int32, ranges []routing.Range) ([]Part, error) {
	parts := make([]Part, len(ranges))
	for i := range parts {
		parts[i].Server = i
	}
	per := 0
	if len(lens) == 0 && len(keys) > 0 {
		per = len(vals) / len(keys)
	}
	off := 0
	for i, k := range keys {
		p := &parts[int(k%uint64(len(ranges)))]
		n := per
		if len(lens) > 0 {
			n = int(lens[i]) * 4
			p.Lens = append(p.Lens, lens[i])
		}
		p.Keys = append(p.Keys, k)
		if vals != nil {
			p.Vals = append(p.Vals, vals[off:off+n]...)
		}
		off += n
	}
	return parts, nil
}

// keyLog records the keys each server was sent, then answers as the
// default store.
type keyLog struct {
	mu   sync.Mutex
	keys map[int32][]uint64 // server node id -> keys pushed to it
}

func (l *keyLog) servers(j *job) {
	l.keys = map[int32][]uint64{}
	j.startServersWith(func(s *Server) {
		h := NewDefaultHandler()
		id := s.po.MyNode().ID
		s.SetRequestHandler(func(meta ReqMeta, data KVPairs, srv *Server) {
			if meta.Push {
				l.mu.Lock()
				l.keys[id] = append(l.keys[id], data.Keys...)
				l.mu.Unlock()
			}
			h.Handle(meta, data, srv)
		})
	})
}

// TestSlicerByKeyModulo: a slicer that sends keys to servers by key %
// num_servers (not by range) decides who gets what: each server is sent
// exactly the keys the slicer chose, and pulls (sliced the same way)
// return the exact sums in request key order, with and without lens.
func TestSlicerByKeyModulo(t *testing.T) {
	j := startJob(t, 2, 2)
	var log keyLog
	log.servers(j)
	ranges := j.Workers[0].ServerKeyRanges()
	require.Len(t, ranges, 2)
	// keys from both ranges: by range 0..5 would all go to server 0
	keys := []uint64{0, 1, 2, 3, 4, 5, ranges[1].Begin, ranges[1].Begin + 1}
	w0, w1 := j.newWorker(0, 0), j.newWorker(1, 0)
	for _, w := range []*Worker{w0, w1} {
		require.NoError(t, w.SetSlicer(modSlicer))
	}
	vals, _ := testValues(keys, false)
	for _, w := range []*Worker{w0, w1, w0} {
		ts, err := Push(w, keys, vals, nil, Options{})
		wait(t, w, ts, err)
	}
	var even, odd []uint64
	for _, k := range keys {
		if k%2 == 0 {
			even = append(even, k)
		} else {
			odd = append(odd, k)
		}
	}
	s0, s1 := int32(message.ServerRankToID(0)), int32(message.ServerRankToID(1))
	log.mu.Lock()
	assert.Equal(t, slices.Concat(even, even, even), log.keys[s0], "server 0 got the even keys of each push")
	assert.Equal(t, slices.Concat(odd, odd, odd), log.keys[s1], "server 1 got the odd keys of each push")
	log.mu.Unlock()

	var got []float32
	ts, err := Pull(w1, keys, &got, nil, Options{})
	wait(t, w1, ts, err)
	assert.Equal(t, scaled(vals, 3), got, "pulled sums in request order")

	// with lens: variable lengths, pulled back in request order
	lkeys := []uint64{10, 11, 12, 13, 14}
	lvals, lens := testValues(lkeys, true)
	ts, err = Push(w0, lkeys, lvals, lens, Options{})
	wait(t, w0, ts, err)
	var lgot []float32
	var glens []int32
	ts, err = Pull(w0, lkeys, &lgot, &glens, Options{})
	wait(t, w0, ts, err)
	assert.Equal(t, lvals, lgot, "pulled values with lens")
	assert.Equal(t, lens, glens, "pulled lens")

	// push-pull through the slicer
	var pp []float32
	ts, err = PushPull(w1, keys, vals, &pp, nil, Options{})
	wait(t, w1, ts, err)
	assert.Equal(t, scaled(vals, 4), pp, "push-pull sums")

	// SetSlicer(nil): by range again, all of 0..5 to server 0
	require.NoError(t, w0.SetSlicer(nil))
	log.mu.Lock()
	before0, before1 := len(log.keys[s0]), len(log.keys[s1])
	log.mu.Unlock()
	ts, err = Push(w0, keys, vals, nil, Options{})
	wait(t, w0, ts, err)
	log.mu.Lock()
	assert.Equal(t, keys[:6], log.keys[s0][before0:], "by range: server 0's keys")
	assert.Equal(t, keys[6:], log.keys[s1][before1:], "by range: server 1's keys")
	log.mu.Unlock()
}

// TestSlicerBadParts: parts a worker cannot send are refused at issue with
// the reason, and nothing is sent.
func TestSlicerBadParts(t *testing.T) {
	j := startJob(t, 2, 1)
	j.startDefaultServers()
	w := j.newWorker(0, 0)
	keys := []uint64{1, 2, 3}
	vals := AsBytes([]float32{1, 2, 3})
	cases := []struct {
		name  string
		pull  bool
		parts []Part
		want  string
	}{
		{"server out of range", false, []Part{{Server: 2, Keys: keys, Vals: vals}}, "servers 0 to 1"},
		{"two parts for one server", false, []Part{{Server: 0, Keys: keys[:1], Vals: vals[:4]}, {Server: 0, Keys: keys[1:], Vals: vals[4:]}}, "two parts"},
		{"values do not split", false, []Part{{Server: 0, Keys: keys, Vals: vals[:8]}}, "cannot be split"},
		{"pull misses a key", true, []Part{{Server: 0, Keys: keys[:2]}}, "to no server"},
		{"pull key twice", true, []Part{{Server: 0, Keys: keys}, {Server: 1, Keys: keys[:1]}}, "another part"},
		{"pull key not requested", true, []Part{{Server: 0, Keys: []uint64{1, 2, 3, 4}}}, "not in the request"},
	}
	for _, c := range cases {
		var err error
		if c.pull {
			var dst []float32
			_, err = Pull(w, keys, &dst, nil, Options{Parts: c.parts})
		} else {
			_, err = w.Push(keys, vals, nil, Options{Parts: c.parts})
		}
		assert.ErrorContains(t, err, c.want, c.name)
	}
	failing := func([]uint64, []byte, []int32, []routing.Range) ([]Part, error) {
		return nil, errors.New("no")
	}
	require.NoError(t, w.SetSlicer(failing))
	_, err := w.Push(keys, vals, nil, Options{})
	assert.ErrorContains(t, err, "the slicer failed: no")
}

// otherRouter routes as the static ranges do but is not them (as elastic
// mode's router is not).
type otherRouter struct{ staticRouter }

// TestSlicerRefusedWhenRoutesMove: a worker whose routing table may move
// ranges refuses a custom slicing.
func TestSlicerRefusedWhenRoutesMove(t *testing.T) {
	j := startJob(t, 1, 1)
	j.startDefaultServers()
	w, err := NewWorkerWith(j.Workers[0], 0, 0, WorkerOptions{Router: otherRouter{staticRouter{routing.NewIdentityTable(1)}}})
	require.NoError(t, err)
	t.Cleanup(w.Close)
	assert.ErrorContains(t, w.SetSlicer(modSlicer), "PS_ELASTIC")
	_, err = w.Push([]uint64{1}, AsBytes([]float32{1}), nil, Options{Parts: []Part{{Server: 0, Keys: []uint64{1}, Vals: AsBytes([]float32{1})}}})
	assert.ErrorContains(t, err, "PS_ELASTIC")
	assert.NoError(t, w.SetSlicer(nil), "clearing is always allowed")
}

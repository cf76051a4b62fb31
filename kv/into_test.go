package kv

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/elasticps/elasticps/message"
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
	if n != len(want) || !bytes.Equal(big[:n], want) {
		t.Fatalf("PullInto: n = %d, prefix %v; want n = %d, %v", n, big[:max(n, 0)], len(want), want)
	}
	if !bytes.Equal(big[n:], bytes.Repeat([]byte{0xAB}, 64)) {
		t.Errorf("PullInto wrote past the reply: tail %v", big[n:])
	}
	if !slices.Equal(lens, slices.Repeat([]int32{2}, len(keys))) {
		t.Errorf("PullInto lens %v, want 2 per key", lens)
	}

	small := bytes.Repeat([]byte{0xCD}, len(want)-4)
	n = -1
	ts, err = w.PullInto(keys, small, &n, nil, Options{DataType: message.Float})
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	if err := w.Wait(ts); err == nil || !strings.Contains(err.Error(), "servers returned") {
		t.Errorf("PullInto a short buffer: Wait = %v, want an error saying the servers returned more", err)
	}
	if n != -1 || !bytes.Equal(small, bytes.Repeat([]byte{0xCD}, len(small))) {
		t.Errorf("PullInto a short buffer changed it (n = %d)", n)
	}

	out := make([]byte, len(want))
	n = -1
	ts, err = w.PushPullInto(keys, AsBytes(vals), out, &n, nil, Options{DataType: message.Float})
	wait(t, w, ts, err)
	if want3 := AsBytes(scaled(vals, 3)); n != len(want3) || !bytes.Equal(out, want3) {
		t.Errorf("PushPullInto: n = %d, %v; want %v", n, out, want3)
	}
	if _, err := w.PullInto(keys, big, nil, nil, Options{}); err == nil {
		t.Error("PullInto with a nil n: no error")
	}
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
		if err := s.Response(meta, KVPairs{}); err != nil {
			t.Error(err)
		}
	})
	srvs[0].ReleaseRequests(true)
	w := j.newWorker(0, 0)
	key := j.Workers[0].ServerKeyRanges()[0].Begin
	const n = 40
	var tss []int32
	for i := range n {
		vals := bytes.Repeat([]byte{byte(i)}, 256<<10) // large: pooled buffers
		ts, err := w.Push([]uint64{key}, vals, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			wait(t, w, ts, nil) // answered at once; its buffer goes back
		} else {
			tss = append(tss, ts)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kept) != n/2 {
		t.Fatalf("kept %d requests, want %d", len(kept), n/2)
	}
	for _, h := range kept {
		if !bytes.Equal(h.vals, bytes.Repeat([]byte{h.want}, len(h.vals))) {
			t.Errorf("retained request %d was overwritten while kept", h.want)
		}
		if err := srvs[0].Response(h.meta, KVPairs{}); err != nil {
			t.Error(err)
		}
		h.release()
		h.release() // a second call does nothing
	}
	for _, ts := range tss {
		wait(t, w, ts, nil)
	}
}

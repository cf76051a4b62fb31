package kv

import (
	"fmt"
	"sync"
	"testing"

	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/assert"
)

// TestLargeValuesExactSum pushes and pulls values of 256 KiB and more per
// key, different every round, several pushes in flight, with servers that
// release requests. Over van/zmq such frames are views of libzmq's memory
// (C memory the race detector does not watch): a view read after its
// message was released shows up here as a wrong sum.
func TestLargeValuesExactSum(t *testing.T) {
	const ns, nw, rounds, perKey = 2, 2, 8, 80 << 10 // 320 KiB of float32 per key
	j := startJob(t, ns, nw)
	j.startServersWith(func(s *Server) {
		s.ReleaseRequests(true)
		s.SetRequestHandler(NewDefaultHandler().Handle)
	})
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 2)
	lens := make([]int32, len(keys))
	for i := range lens {
		lens[i] = perKey
	}
	valsFor := func(w, r int) []float32 {
		v := make([]float32, perKey*len(keys))
		for i := range v {
			v[i] = float32((w+1)*(r+3) + i%251)
		}
		return v
	}
	want := make([]float32, perKey*len(keys))
	for r := range rounds {
		for w := range nw {
			for i, x := range valsFor(w, r) {
				want[i] += x
			}
		}
	}
	workers := []*Worker{j.newWorker(0, 0), j.newWorker(1, 0)}
	var wg sync.WaitGroup
	for wi, w := range workers {
		wg.Go(func() {
			var tss []int32
			for r := range rounds {
				ts, err := Push(w, keys, valsFor(wi, r), lens, Options{})
				if !assert.NoError(t, err, "push") {
					return
				}
				tss = append(tss, ts)
				// Pulls in between return partial sums: checked for
				// shape only, but they exercise replies as views.
				var got []float32
				ts, err = Pull(w, keys, &got, nil, Options{})
				wait(t, w, ts, err)
				assert.Len(t, got, len(want), "pulled values")
			}
			for _, ts := range tss {
				wait(t, w, ts, nil)
			}
			if !assert.NoError(t, j.Workers[wi].Barrier(0, message.WorkerGroup), "barrier") {
				return
			}
			for range 4 {
				var got []float32
				ts, err := Pull(w, keys, &got, nil, Options{})
				wait(t, w, ts, err)
				assert.NoError(t, sameFloats(got, want), "worker %d", wi)
			}
		})
	}
	wg.Wait()
}

func sameFloats(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("value %d is %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}

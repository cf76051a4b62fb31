package kv

import (
	"testing"
)

// BenchmarkPushPull measures one push-pull round trip of 256 float32 values
// per server over ZeroMQ on loopback (1 worker, 2 servers, default store),
// the servers set up as the elasticps server command sets them up.
func BenchmarkPushPull(b *testing.B) {
	j := startJob(b, 2, 1)
	j.startServersWith(func(s *Server) {
		s.SetRequestHandler(NewDefaultHandler().Handle)
		s.ReleaseRequests(true) // the default store copies what it keeps
	})
	w := j.newWorker(0, 0)
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 1)
	vals := make([]float32, 512)
	out := make([]float32, 512)
	b.SetBytes(int64(4 * len(vals)))
	b.ReportAllocs()
	for b.Loop() {
		ts, err := PushPull(w, keys, vals, &out, nil, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Wait(ts); err != nil {
			b.Fatal(err)
		}
	}
}

package paramstore

import (
	"fmt"
	"testing"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
)

// BenchmarkPush applies one gradient push of a 256K-element float32 block
// (1 MiB, the size of a layer of a small MLP) per iteration: the store's
// hot path, which must not allocate per element (allocs/op stays 0 or a
// few per push).
func BenchmarkPush(b *testing.B) {
	const n = 1 << 18
	for _, opt := range []Optimizer{None, SGD, Momentum, Adam} {
		b.Run(opt.String(), func(b *testing.B) {
			s, err := New(withOpt(opt, 0.01))
			if err != nil {
				b.Fatal(err)
			}
			g := make([]float32, n)
			for i := range g {
				g[i] = float32(i%7) - 3
			}
			meta := kv.ReqMeta{Push: true, DataType: message.Float}
			data := kv.KVPairs{Keys: []uint64{1}, Vals: kv.AsBytes(g)}
			if _, err := s.apply(meta, data); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(4 * n))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.apply(meta, data); err != nil {
					b.Fatal(fmt.Errorf("push: %w", err))
				}
			}
		})
	}
}

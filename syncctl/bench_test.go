package syncctl

import (
	"testing"
)

// BenchmarkAdmit runs rounds of 4 workers pushing, then pulling, 8 keys,
// so that no request waits: the per-request cost of the common path.
func BenchmarkAdmit(b *testing.B) {
	for _, cfg := range []Config{
		{Mode: ASP},
		{Mode: BSP},
		{Mode: SSP, Staleness: 2},
		{Mode: Fluent, Staleness: 2, PauseProb: 0.5, Rand: func() float64 { return 0.9 }},
	} {
		b.Run(cfg.Mode.String(), func(b *testing.B) {
			c, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			keys := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
			var reqs []Request
			for _, pushing := range []bool{true, false} {
				for n := range int32(4) {
					c.Join(n)
					reqs = append(reqs, Request{Worker: Worker{Node: n}, Push: pushing, Pull: !pushing, Keys: keys})
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				r := reqs[i%len(reqs)]
				r.ID = uint64(i)
				if run, rel := c.Admit(r); !run || rel != nil {
					b.Fatalf("request %d waited", i)
				}
			}
		})
	}
}

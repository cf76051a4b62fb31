package rebalance

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// t0 is the start of every scenario's timeline.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// resnet50 returns the element count of each parameter tensor of ResNet-50
// in torchvision's order (conv weights, batch-norm gamma and beta, the
// classifier): 161 tensors, 25,557,032 parameters. Sizes from 64 to
// 2,359,296 elements: the skew that makes hash placement uneven.
func resnet50() []int64 {
	var ts []int64
	ts = append(ts, 64*3*7*7, 64, 64)
	in := int64(64)
	for _, st := range []struct{ blocks, width int64 }{{3, 64}, {4, 128}, {6, 256}, {3, 512}} {
		w := st.width
		for j := range st.blocks {
			ts = append(ts, w*in, w, w, w*w*9, w, w, 4*w*w, 4*w, 4*w)
			if j == 0 {
				ts = append(ts, 4*w*in, 4*w, 4*w)
			}
			in = 4 * w
		}
	}
	return append(ts, 1000*2048, 1000)
}

// mxnetPlacement places ResNet-50's float32 tensors on servers the way
// MXNet's dist kvstore does: a tensor of at least bigArray elements is cut
// into one slice per server, slice i on server i; a smaller one goes whole
// to server (key*9973) % n. Block ids are key*16 + slice. Every block is
// pushed and pulled by each worker once per iteration, so all carry the
// same request rate.
func mxnetPlacement(servers []int32, reqPerSec float64) []Block {
	const bigArray = 1_000_000 // MXNET_KVSTORE_BIGARRAY_BOUND default
	n := int64(len(servers))
	var bs []Block
	for key, elems := range resnet50() {
		k := int64(key)
		if elems >= bigArray {
			for i := range n {
				part := elems / n
				if i == n-1 {
					part = elems - part*(n-1)
				}
				bs = append(bs, Block{ID: uint64(k*16 + i), Bytes: 4 * part, Requests: reqPerSec, Server: servers[i]})
			}
			continue
		}
		bs = append(bs, Block{ID: uint64(k * 16), Bytes: 4 * elems, Requests: reqPerSec, Server: servers[(k*9973)%n]})
	}
	return bs
}

// measured returns an estimate from many tight samples taken at now.
func measured(mean float64, now time.Time) Estimate {
	return Estimate{Mean: mean, Std: mean / 100, Samples: 20, Updated: now}
}

// srv is a server measured at bytes/s and requests/s.
func srv(id int32, bytesPerSec, reqPerSec float64, now time.Time) Server {
	return Server{ID: id, Capacity: Capacity{Bytes: measured(bytesPerSec, now), Requests: measured(reqPerSec, now)}}
}

// newPlanner returns a planner for cfg or fails the test.
func newPlanner(t testing.TB, cfg Config) *Planner {
	t.Helper()
	p, err := NewPlanner(cfg)
	require.NoError(t, err)
	return p
}

// maxOf is the largest value of a prediction.
func maxOf(m map[int32]float64) float64 {
	x := 0.0
	for _, v := range m {
		x = max(x, v)
	}
	return x
}

// blocksOn sums bytes per owner.
func bytesOn(blocks []Block) map[int32]int64 {
	out := map[int32]int64{}
	for _, b := range blocks {
		out[b.Server] += b.Bytes
	}
	return out
}

func nan() float64 { return math.NaN() }

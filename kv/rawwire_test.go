package kv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// A 2x2 job over ZeroMQ whose every node speaks the BytePS fork's raw meta
// (PS_WIRE=bytedance): pushes from both workers, a pull and a push-pull
// (whose pull flag the fork's struct lacks) give exact sums.
func TestBytedanceWireSums(t *testing.T) {
	const nw, rounds = 2, 3
	j := startJobWith(t, jobtest.Options{Servers: 2, Workers: nw, Van: "zmq",
		Configure: func(c *postoffice.Config) { c.Wire = message.WireBytedance }})
	j.startDefaultServers()
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 4)
	vals, lens := testValues(keys, true)
	workers := []*Worker{j.newWorker(0, 0), j.newWorker(1, 0)}
	for range rounds {
		for _, w := range workers {
			ts, err := Push(w, keys, vals, lens, Options{Priority: 2})
			wait(t, w, ts, err)
		}
	}
	var got []float32
	var gotLens []int32
	ts, err := Pull(workers[1], keys, &got, &gotLens, Options{})
	wait(t, workers[1], ts, err)
	assert.Equal(t, scaled(vals, rounds*nw), got, "pulled")
	assert.Equal(t, lens, gotLens, "pulled lens")
	var out []float32
	outLens := append([]int32(nil), lens...)
	ts, err = PushPull(workers[0], keys, vals, &out, &outLens, Options{})
	wait(t, workers[0], ts, err)
	assert.Equal(t, scaled(vals, rounds*nw+1), out, "push-pull returned")
	for _, po := range j.All() {
		require.Zero(t, po.Stats().Malformed.Load(), "%s rejected frames", po.MyNode())
	}
}

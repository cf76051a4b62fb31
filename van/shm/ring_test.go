//go:build linux

package shm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/vantest"
)

func TestRingAllocatesInOrderAndReclaims(t *testing.T) {
	r := &ring{mem: make([]byte, 100)}
	alloc := func(n uint64) uint64 {
		t.Helper()
		off, ok := r.alloc(n)
		require.True(t, ok, "alloc %d", n)
		return off
	}
	assert.Equal(t, uint64(0), alloc(40))
	assert.Equal(t, uint64(40), alloc(40))
	_, ok := r.alloc(40)
	assert.False(t, ok, "20 bytes left at the end, none at the start")

	assert.True(t, r.free(40), "freed out of order")
	_, ok = r.alloc(40)
	assert.False(t, ok, "the oldest region still holds the start")
	assert.True(t, r.free(0))
	assert.Equal(t, uint64(0), alloc(16), "an empty ring starts over at 0")
	assert.Equal(t, uint64(16), alloc(80))
	_, ok = r.alloc(8)
	assert.False(t, ok)
	assert.True(t, r.free(0))
	assert.Equal(t, uint64(0), alloc(16), "wraps to the space the oldest region freed")
	_, ok = r.alloc(8)
	assert.False(t, ok, "full: head met tail")
	assert.False(t, r.free(8), "not a live region")
	_, ok = r.alloc(101)
	assert.False(t, ok)
}

// TestFullSegmentFallsBackToStream: a receiver that keeps messages without
// releasing them fills the sender's segment; later messages go through the
// stream, intact, instead of blocking the sender.
func TestFullSegmentFallsBackToStream(t *testing.T) {
	server, worker := connectedPair(t, Config{RingBytes: 1 << 20})

	var kept []*message.Message
	for i := range 6 {
		vals := pattern(byte(i), 300<<10)
		_, err := worker.Send(kvMsg(8, int32(i), vals))
		require.NoError(t, err)
		m, err := vantest.RecvWithin(t, server)
		require.NoError(t, err)
		require.Equal(t, vals, m.Data[1])
		kept = append(kept, m)
	}
	server.viewsMu.Lock()
	views := len(server.views)
	server.viewsMu.Unlock()
	assert.Equal(t, 3, views, "three 300 KB messages fill a 1 MB segment; the rest came inline")
	for i, m := range kept {
		assert.Equal(t, pattern(byte(i), 300<<10), m.Data[1])
		server.Detach(m)
	}
	for i, m := range kept {
		assert.Equal(t, pattern(byte(i), 300<<10), m.Data[1], "Detach copied it out")
	}
}

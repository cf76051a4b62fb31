//go:build linux

package shm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van/vantest"
)

func TestRingAllocatesLowestFirstAndReclaims(t *testing.T) {
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
	assert.False(t, ok, "20 bytes left")
	assert.Equal(t, uint64(80), alloc(16))

	assert.True(t, r.free(0), "freed out of order")
	assert.Equal(t, uint64(0), alloc(24), "the lowest gap that fits")
	assert.Equal(t, uint64(24), alloc(16), "the rest of that gap")
	_, ok = r.alloc(8)
	assert.False(t, ok, "4 bytes at the end, none between")
	assert.True(t, r.free(40))
	assert.True(t, r.free(24))
	assert.Equal(t, uint64(24), alloc(56), "two freed neighbours make one gap")
	assert.False(t, r.free(8), "not a live region")
	assert.False(t, r.free(40), "freed twice")
	for _, off := range []uint64{0, 24, 80} {
		assert.True(t, r.free(off))
	}
	assert.Equal(t, uint64(0), alloc(100), "empty: all of it")
	_, ok = r.alloc(8)
	assert.False(t, ok)
	assert.True(t, r.free(0))
	_, ok = r.alloc(101)
	assert.False(t, ok)
}

// TestRingKeepsToLowPages: messages that come and go a few at a time reuse
// the start of the data area instead of walking all of it (each new page
// costs a fault; see ring).
func TestRingKeepsToLowPages(t *testing.T) {
	const msg = 4 << 20
	r := &ring{mem: make([]byte, 64<<20)}
	var live []uint64
	var top uint64
	for i := range 200 {
		off, ok := r.alloc(msg)
		require.True(t, ok)
		top = max(top, off+msg)
		live = append(live, off)
		if len(live) == 3 { // three in flight, released out of order
			j := i % 3
			require.True(t, r.free(live[j]))
			live = append(live[:j], live[j+1:]...)
		}
	}
	assert.Equal(t, uint64(3*msg), top, "bytes of the data area ever used")
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

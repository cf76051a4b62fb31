package postoffice

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHandOver: a handler that returns within the period keeps the
// receive loop on its goroutine; one that runs for several periods loses
// it exactly once (one new receiving goroutine), even when the watcher was
// asleep because nothing had run inline for a while. It runs in a
// synctest bubble: the clock moves only while every goroutine of the test
// waits, so a handler "returned at once" took no time at all, however
// loaded the machine is, and one that slept 20 periods took exactly that.
func TestHandOver(t *testing.T) { synctest.Test(t, testHandOver) }

func testHandOver(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	var restarts, moves atomic.Int32
	h := newHandOver(time.Millisecond, func() { restarts.Add(1) }, func(time.Duration) { moves.Add(1) })
	go h.watch(stop)

	for range 100 {
		s := h.begin()
		require.True(t, h.end(s), "a handler that returned at once lost the receive loop")
	}
	// Nothing runs inline: the watcher parks.
	testutil.WaitFor(t, 5*time.Second, h.parked.Load, func() string { return "the watcher did not park while nothing ran inline" })
	s := h.begin() // wakes it
	time.Sleep(20 * time.Millisecond)
	require.False(t, h.end(s), "a handler that ran for 20 periods kept the receive loop")
	assert.Equal(t, int32(1), restarts.Load(), "new receiving goroutines")
	assert.Equal(t, int32(1), moves.Load(), "hand-overs reported")
	assert.Equal(t, int64(1), h.count.Load(), "hand-overs counted")
	// The new receiver's handlers are watched the same way.
	s = h.begin()
	require.True(t, h.end(s), "a quick handler after a hand-over lost the receive loop")
}

package postoffice

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/testutil"
)

// TestHandOver: a handler that returns within the period keeps the
// receive loop on its goroutine; one that runs for several periods loses
// it exactly once (one new receiving goroutine), even when the watcher was
// asleep because nothing had run inline for a while.
func TestHandOver(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	var restarts, moves atomic.Int32
	h := newHandOver(time.Millisecond, func() { restarts.Add(1) }, func(time.Duration) { moves.Add(1) })
	go h.watch(stop)

	for range 100 {
		if s := h.begin(); !h.end(s) {
			t.Fatal("a handler that returned at once lost the receive loop")
		}
	}
	// Nothing runs inline: the watcher parks.
	testutil.WaitFor(t, 5*time.Second, h.parked.Load, func() string { return "the watcher did not park while nothing ran inline" })
	s := h.begin() // wakes it
	time.Sleep(20 * time.Millisecond)
	if h.end(s) {
		t.Fatal("a handler that ran for 20 periods kept the receive loop")
	}
	if got := restarts.Load(); got != 1 {
		t.Errorf("%d new receiving goroutines, want 1", got)
	}
	if got, n := moves.Load(), h.count.Load(); got != 1 || n != 1 {
		t.Errorf("hand-overs reported %d, counted %d, want 1", got, n)
	}
	// The new receiver's handlers are watched the same way.
	if s := h.begin(); !h.end(s) {
		t.Fatal("a quick handler after a hand-over lost the receive loop")
	}
}

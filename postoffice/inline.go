package postoffice

import (
	"sync/atomic"
	"time"

	"github.com/elasticps/elasticps/message"
)

// InlineCustomer is a Customer that may handle a message on the receive
// loop's goroutine, when nothing of its own is queued or running, instead of
// queueing it for its own goroutine. That saves a goroutine hand-over per
// message (with the runtime's wake-up of an idle thread that goes with it),
// which is a fifth of a small request's round trip on a two-core machine.
//
// AcceptInline is called from the receive loop only. It may block: if it has
// not returned within Config.InlineHandOver, the receive loop goes on in a
// new goroutine (see handOver), so a slow handler holds up its own customer
// only, as a ps-lite handler holds up only its customer's thread.
type InlineCustomer interface {
	Customer
	AcceptInline(msg *message.Message)
}

// DefaultInlineHandOver is Config.InlineHandOver's default. The watcher
// ticks at this period while handlers run inline, and a tick is not free:
// its timer sits on some P, often the receive goroutine's, and when it is
// due while that goroutine waits in a cgo receive, sysmon takes the P away
// and the goroutine, back from libzmq, must find another. At 2 ms that cost
// a fifth of 4 MB push goodput; at 20 ms it is within the noise, and a
// handler that blocks still holds up other customers for at most 40 ms.
const DefaultInlineHandOver = 20 * time.Millisecond

// inlineMaxBytes is the largest message (data bytes) handled inline. Small
// messages gain from skipping the hand-over; a large one's handling
// (copying values, freeing libzmq's buffer) is better overlapped with
// receiving the next one, which the customer goroutine allows.
const inlineMaxBytes = 64 << 10

// handOver watches handlers running on the receive goroutine and moves the
// receive loop to a new goroutine when one runs too long.
//
// seq is odd while a handler runs inline. The receiving goroutine makes it
// odd (begin) and even again (end) with a compare-and-swap; the watcher,
// finding the same odd value twice one period apart, takes it over with the
// same compare-and-swap and starts a new receiving goroutine. Whoever wins
// the swap decides: the old goroutine, losing it in end, finishes its
// handler and exits. No lock or timer is on the path of a message; the
// watcher sleeps while nothing runs inline.
type handOver struct {
	period  time.Duration
	seq     atomic.Uint64
	parked  atomic.Bool   // the watcher waits on wake
	wake    chan struct{} // capacity 1
	restart func()        // starts a new receiving goroutine
	count   atomic.Int64  // hand-overs so far
	onMove  func(held time.Duration)
}

func newHandOver(period time.Duration, restart func(), onMove func(time.Duration)) *handOver {
	return &handOver{period: period, wake: make(chan struct{}, 1), restart: restart, onMove: onMove}
}

// begin marks the start of an inline handler and returns the token for end.
func (h *handOver) begin() uint64 {
	s := h.seq.Add(1) // odd: running
	if h.parked.Load() && h.parked.CompareAndSwap(true, false) {
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	return s
}

// end marks the handler done and reports whether the calling goroutine is
// still the receive loop.
func (h *handOver) end(s uint64) bool { return h.seq.CompareAndSwap(s, s+1) }

// watch runs until stop is closed.
func (h *handOver) watch(stop <-chan struct{}) {
	t := time.NewTimer(h.period)
	defer t.Stop()
	var last uint64
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s := h.seq.Load()
		switch {
		case s%2 == 1 && s == last:
			// The same handler has run for at least a period.
			if h.seq.CompareAndSwap(s, s+1) {
				h.count.Add(1)
				if h.onMove != nil {
					h.onMove(h.period)
				}
				h.restart()
			}
		case s == last:
			// Nothing ran inline for a whole period: sleep until
			// something does. Parked is set before seq is read again,
			// so a begin after this read sees it and wakes us.
			h.parked.Store(true)
			if h.seq.Load() == s {
				select {
				case <-stop:
					return
				case <-h.wake:
				}
			}
			h.parked.Store(false)
		}
		last = h.seq.Load()
		t.Reset(h.period)
	}
}

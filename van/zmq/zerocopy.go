//go:build cgo

package zmq

/*
#include "shim.h"
*/
import "C"

import (
	"sync"
	"sync/atomic"

	"github.com/elasticps/elasticps/message"
)

// Zero-copy receive.
//
// A data frame of at least Config.ZeroCopyRecvMin bytes is delivered as a
// view of libzmq's own buffer: its zmq_msg_t is moved to the C heap
// (eps_in_keep) and stays open until Release or Detach closes it. The view
// is C memory, invisible to the GC: read after Release it is a
// use-after-free, and never released it leaks. So views are only for
// consumers that always Release; every other path must Detach (copy into
// Go memory) or Release the message first. The kept messages are recorded
// per *message.Message, not per address, so that closing one twice is
// impossible: Release and Detach take the record out. (Since Release
// recycles the Message itself, a second Release after a later Recv
// returned the same Message would close that message's views: Release
// is called at most once, as Recv's contract says.)

type keptFrame struct {
	idx int // index in Message.Data
	msg *C.zmq_msg_t
}

// viewSet holds the kept messages of one Message by value, so that
// recording them allocates nothing: a KV message has at most three data
// frames (keys, vals, lens); more views than that go to the slice.
type viewSet struct {
	n     int
	first [3]keptFrame
	more  []keptFrame
}

func (v *viewSet) add(k keptFrame) {
	if v.n < len(v.first) {
		v.first[v.n] = k
	} else {
		v.more = append(v.more, k)
	}
	v.n++
}

func (v *viewSet) at(i int) keptFrame {
	if i < len(v.first) {
		return v.first[i]
	}
	return v.more[i-len(v.first)]
}

var kept struct {
	mu sync.Mutex
	m  map[*message.Message]viewSet
}

// openViews counts kept messages not yet closed, for tests.
var openViews atomic.Int64

func keepViews(m *message.Message, frames *viewSet) {
	kept.mu.Lock()
	if kept.m == nil {
		kept.m = map[*message.Message]viewSet{}
	}
	kept.m[m] = *frames
	kept.mu.Unlock()
}

// takeViews removes and returns m's kept messages (none for most
// messages, at the cost of one map lookup).
func takeViews(m *message.Message) viewSet {
	kept.mu.Lock()
	defer kept.mu.Unlock()
	f, ok := kept.m[m]
	if ok {
		delete(kept.m, m)
	}
	return f
}

// closeView closes a kept message, or, when a zero-copy Send still
// references its bytes (a frame echoed back), once libzmq has sent them.
func closeView(k keptFrame, view []byte) {
	if pinnedWithin(view) {
		AfterSent(func() { closeKept(k.msg) }, view)
		return
	}
	closeKept(k.msg)
}

func closeKept(m *C.zmq_msg_t) {
	C.eps_kept_close(m)
	openViews.Add(-1)
}

// Detach replaces the zero-copy views among msg.Data (see
// Config.ZeroCopyRecvMin) with copies in Go memory and closes the libzmq
// messages behind them, so that msg may be kept, dropped or handed on
// without Release. Slices of the views taken before Detach become invalid.
// It does nothing for messages without views, and may be called more than
// once.
func (t *Transport) Detach(msg *message.Message) {
	views := takeViews(msg)
	for i := range views.n {
		k := views.at(i)
		v := msg.Data[k.idx]
		c := getBuf(len(v))
		copy(c, v)
		msg.Data[k.idx] = c
		closeView(k, v)
	}
}

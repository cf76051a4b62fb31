// Package recvmsg recycles the messages a transport's Recv returns, so that
// a node in steady state receives without allocating: the Message, its
// frame list, its data_type list and one buffer for its small frames are
// one object, taken from a pool by Recv and given back by the transport's
// Release.
//
// Recycling makes Release a promise: after it, the Message itself (not only
// its frames) may be handed out again by the next Recv, so the caller must
// read nothing of it afterwards and release it at most once. A message that
// is never released is garbage-collected as before.
package recvmsg

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/elasticps/elasticps/message"
)

// maxSmallKept bounds the small-frame buffer a recycled message keeps, so
// that one unusual message does not pin a large buffer in the pool.
const maxSmallKept = 64 << 10

// Msg is a received message with room for its usual frames.
type Msg struct {
	msg   message.Message
	data  [4][]byte
	types [4]message.DataType
	small []byte // backing store of the small frames (see Small)
	// out is 1 from Get to Put. A Put that finds it 0 (a release racing
	// another release of the same message) is refused and counted, so a
	// Msg never enters the pool twice, which would have two receivers fill
	// it at once. A release made after another one returned finds nothing
	// to do (Put cleared the message), unless a later Recv got the Msg
	// again: such a stale release looks like its new owner's and is not
	// detected.
	out atomic.Uint32
}

var pool = sync.Pool{New: func() any { return new(Msg) }}

var misuses atomic.Int64

// Misuses counts the releases refused because another release of the same
// message had given it back already: a bug in a consumer, which tests
// check for.
func Misuses() int64 { return misuses.Load() }

// typesOffset locates Msg.types from a Msg's address; Of uses it to
// recognise a Message that is the first field of a Msg.
var typesOffset = unsafe.Offsetof(Msg{}.types)

// Get returns a message ready for decoding: an empty Meta whose DataType
// appends into the Msg's own array.
func Get() *Msg {
	im := pool.Get().(*Msg)
	im.out.Store(1)
	im.msg.Meta.DataType = im.types[:0]
	return im
}

// Message is the message Recv returns.
func (im *Msg) Message() *message.Message { return &im.msg }

// Frames returns an empty frame list with room for n frames, the Msg's own
// when n fits.
func (im *Msg) Frames(n int) [][]byte {
	if n > len(im.data) {
		return make([][]byte, 0, n)
	}
	return im.data[:0]
}

// Small returns n bytes (n > 0) for the message's small frames, reusing the
// buffer of an earlier message when it is big enough. Its contents are
// stale: the caller overwrites what it delivers. Go aligns an allocation
// whose size is a multiple of 8 to 8 bytes, so callers that round frames up
// to 8 bytes get 8-byte-aligned frames.
func (im *Msg) Small(n int) []byte {
	if cap(im.small) < n {
		im.small = make([]byte, (n+7)&^7)
	}
	return im.small[:n]
}

// SmallBuf is the buffer Small last returned (nil if none), for a
// transport that must check whether something still reads it.
func (im *Msg) SmallBuf() []byte { return im.small[:cap(im.small)] }

// DropSmall forgets the small-frame buffer instead of reusing it, for
// when something outside the message may still read it.
func (im *Msg) DropSmall() { im.small = nil }

// Of returns the Msg that msg is the first field of, or nil when msg did
// not come from Get (a message built by hand, a message already recycled,
// or one whose DataType was replaced). It is recognised by its DataType
// still appending into the Msg's array, compared as integers so that no
// pointer is formed outside msg's own object.
func Of(msg *message.Message) *Msg {
	dt := msg.Meta.DataType
	if cap(dt) != len(Msg{}.types) {
		return nil
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(dt))) != uintptr(unsafe.Pointer(msg))+typesOffset {
		return nil
	}
	return (*Msg)(unsafe.Pointer(msg))
}

// Put gives im back to the pool. Its message loses every reference it held
// (so Of no longer recognises it, and a second Release finds nothing),
// and the small-frame buffer is kept for the next message unless it is
// unusually large.
func Put(im *Msg) {
	if !im.out.CompareAndSwap(1, 0) {
		n := misuses.Add(1)
		slog.Default().Error("van: a received message was released twice; the second release is ignored, but whoever made it may have read or changed another message meanwhile: release a message once, after its last use",
			"released_twice_total", n)
		return
	}
	clear(im.data[:])
	im.msg = message.Message{}
	if cap(im.small) > maxSmallKept {
		im.small = nil
	}
	pool.Put(im)
}

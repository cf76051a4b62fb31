package zmq

import (
	"math/bits"
	"sync"
	"unsafe"
)

// directReadMin is the frame size from which Recv copies a frame into its
// own pooled buffer rather than into the message's shared allocation: from
// there on, allocating (and zeroing, and collecting) a fresh buffer per
// message costs more than the copy itself. (The same scheme as van/tcp; a
// shared van/internal package could hold both.)
const directReadMin = 32 << 10

// bufPools holds receive buffers by size class: pool k has buffers of
// exactly 1<<k bytes. Entries are unsafe.Pointers to the first byte, which
// fit an interface without allocating and keep the buffer alive.
var bufPools [bits.UintSize]sync.Pool

func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

// getBuf returns a buffer of length n (n >= directReadMin) whose capacity
// is its size class. Pooled buffers are not zeroed: every byte is
// overwritten by the read.
func getBuf(n int) []byte {
	k := sizeClass(n)
	if p, ok := bufPools[k].Get().(unsafe.Pointer); ok {
		return unsafe.Slice((*byte)(p), 1<<k)[:n]
	}
	return make([]byte, n, 1<<k)
}

// putBuf pools b if it is a buffer getBuf handed out (as far as can be
// told: a power-of-two capacity of at least directReadMin).
func putBuf(b []byte) {
	c := cap(b)
	if c < directReadMin || c&(c-1) != 0 {
		return
	}
	bufPools[sizeClass(c)].Put(unsafe.Pointer(unsafe.SliceData(b[:1])))
}

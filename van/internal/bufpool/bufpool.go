// Package bufpool pools large receive buffers by power-of-two size class,
// for the transports that read frames into buffers of their own (van/zmq,
// van/tcp) and take them back on Release.
package bufpool

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Min is the smallest buffer pooled: below it, allocating a buffer per
// message costs less than pooling (and a transport copies small frames
// into the message's shared allocation instead).
const Min = 32 << 10

// pools holds buffers by size class: pool k has buffers of exactly 1<<k
// bytes. Entries are unsafe.Pointers to the first byte, which fit an
// interface without allocating and keep the buffer alive.
var pools [bits.UintSize]sync.Pool

func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

// Get returns a buffer of length n (n >= Min) whose capacity is its size
// class. Pooled buffers are not zeroed: the caller overwrites every byte.
func Get(n int) []byte {
	k := sizeClass(n)
	if p, ok := pools[k].Get().(unsafe.Pointer); ok {
		return unsafe.Slice((*byte)(p), 1<<k)[:n]
	}
	return make([]byte, n, 1<<k)
}

// Put pools b if it is a buffer Get handed out (as far as can be told: a
// power-of-two capacity of at least Min).
func Put(b []byte) {
	c := cap(b)
	if c < Min || c&(c-1) != 0 {
		return
	}
	pools[sizeClass(c)].Put(unsafe.Pointer(unsafe.SliceData(b[:1])))
}

//go:build rdma && cgo

package rdma

/*
#include "common.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sort"
	"unsafe"
)

// regBuf is a page-aligned block of C memory registered with the device.
// C memory (not Go memory) because the device reads and writes it at any
// time, which the cgo pointer rules allow only for C memory or pinned Go
// memory, and because a registration must never see its pages move.
type regBuf struct {
	p    unsafe.Pointer
	size int
	mr   memReg
}

func (b *regBuf) bytes() []byte { return unsafe.Slice((*byte)(b.p), b.size) }

func (b *regBuf) remote(idx uint32) remoteSlot {
	return remoteSlot{idx: idx, addr: b.mr.remoteAddr(uintptr(b.p)), rkey: b.mr.rkey, cap: uint64(b.size)}
}

// classSize rounds a request up to the size class it is served from: powers
// of two up to 64 KiB, then eighths of a power of two, so that a 1 MiB value
// plus its header does not take a 2 MiB block.
func classSize(n int) int {
	const minClass = 4096
	if n <= minClass {
		return minClass
	}
	if n <= 64<<10 {
		return 1 << bits.Len(uint(n-1))
	}
	step := 1 << (bits.Len(uint(n-1)) - 1 - 3)
	return (n + step - 1) / step * step
}

// bufPool hands out registered buffers by size class and keeps returned ones
// for reuse, so that steady traffic registers nothing. Not safe for
// concurrent use: the Transport's mu guards it.
type bufPool struct {
	dev       device
	free      map[int][]*regBuf
	freeBytes int64
	maxFree   int64 // above this, returned buffers are released
	live      map[*regBuf]struct{}
}

func newBufPool(dev device, maxFree int64) *bufPool {
	return &bufPool{dev: dev, free: map[int][]*regBuf{}, maxFree: maxFree, live: map[*regBuf]struct{}{}}
}

func (p *bufPool) get(n int) (*regBuf, error) {
	size := classSize(n)
	if l := p.free[size]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[size] = l[:len(l)-1]
		p.freeBytes -= int64(size)
		return b, nil
	}
	ptr := C.epsr_alloc(C.size_t(size))
	if ptr == nil {
		return nil, fmt.Errorf("van/rdma: cannot allocate %d bytes of registered memory", size)
	}
	mr, err := p.dev.reg(ptr, size)
	if err != nil {
		C.epsr_free(ptr)
		return nil, err
	}
	b := &regBuf{p: ptr, size: size, mr: mr}
	p.live[b] = struct{}{}
	return b, nil
}

func (p *bufPool) put(b *regBuf) {
	if p.freeBytes+int64(b.size) > p.maxFree {
		p.release(b)
		return
	}
	p.free[b.size] = append(p.free[b.size], b)
	p.freeBytes += int64(b.size)
}

func (p *bufPool) release(b *regBuf) {
	delete(p.live, b)
	p.dev.dereg(b.mr)
	C.epsr_free(b.p)
}

// close releases every buffer, free or not. The device must no longer
// access any of them.
func (p *bufPool) close() {
	for b := range p.live {
		p.dev.dereg(b.mr)
		C.epsr_free(b.p)
	}
	p.live = nil
	p.free = nil
}

// slotState is where a receive slot is in its life.
type slotState uint8

const (
	slotFree    slotState = iota
	slotGranted           // offered to a link (rendezvous or cached); waiting for its write
	slotLanding           // offered in a request of ours for the response
	slotArrived           // written and queued for Recv
	slotHeld              // cached, copied out, waiting to be handed back in a response
)

func (s slotState) String() string {
	return [...]string{"free", "granted", "landing", "arrived", "held"}[s]
}

// slot is an entry of the address pool: a registered buffer that a peer may
// write one image into, named on the wire by its index.
type slot struct {
	idx    uint32
	buf    *regBuf
	state  slotState
	link   *link // granted: the incoming link allowed to write; arrived: the one that did
	peer   int32 // landing: the node whose response may land here
	cached bool  // bound to ckey of link until the link goes
	ckey   chanKey
	hdr    header // arrived: the parsed header
}

// userReg is a caller's buffer registered with RegisterBuffer: pinned, so
// that neither the garbage collector nor anything else can free or move it
// while the device may read it.
type userReg struct {
	base, end uintptr
	mr        memReg
	pin       runtime.Pinner
	refs      int  // writes in flight from it
	dropped   bool // unregistered while in use: release at refs == 0
}

// mrCache is the registered-memory cache keyed by buffer (BytePS's mem_mr_):
// sorted, non-overlapping regions. Guarded by the Transport's mu.
type mrCache struct {
	regs []*userReg
}

// find returns the region containing [p, p+n), or nil.
func (c *mrCache) find(p uintptr, n int) *userReg {
	i := sort.Search(len(c.regs), func(i int) bool { return c.regs[i].end > p })
	if i < len(c.regs) && c.regs[i].base <= p && p+uintptr(n) <= c.regs[i].end {
		return c.regs[i]
	}
	return nil
}

var errOverlap = errors.New("van/rdma: buffer overlaps a registered buffer")

func (c *mrCache) insert(r *userReg) error {
	i := sort.Search(len(c.regs), func(i int) bool { return c.regs[i].end > r.base })
	if i < len(c.regs) && c.regs[i].base < r.end {
		return errOverlap
	}
	c.regs = append(c.regs, nil)
	copy(c.regs[i+1:], c.regs[i:])
	c.regs[i] = r
	return nil
}

func (c *mrCache) remove(r *userReg) {
	for i, x := range c.regs {
		if x == r {
			c.regs = append(c.regs[:i], c.regs[i+1:]...)
			return
		}
	}
}

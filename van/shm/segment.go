//go:build linux

package shm

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// seals are the memfd seals a segment must carry: nobody can shrink it
// under the other side's mapping (which would turn its reads into SIGBUS).
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// newSegment creates a sealed memfd of size bytes and maps it. The caller
// sends fd with the hello and then closes it.
func newSegment(size int) (mem []byte, fd int, err error) {
	fd, err = unix.MemfdCreate("elasticps-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("van/shm: memfd_create: %w", err)
	}
	if err = unix.Ftruncate(fd, int64(size)); err == nil {
		if _, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err == nil {
			mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		}
	}
	if err != nil {
		_ = unix.Close(fd)
		return nil, -1, fmt.Errorf("van/shm: create a %d-byte segment: %w", size, err)
	}
	return mem, fd, nil
}

// mapSegment maps the segment a dialer sent, after checking that it is a
// sealed memfd of the announced size. It closes fd.
func mapSegment(fd int, size uint64) ([]byte, error) {
	defer func() { _ = unix.Close(fd) }()
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || got&(unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL) != unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL {
		return nil, fmt.Errorf("segment is not a memfd sealed against shrinking (seals %#x, %v)", got, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("segment: %w", err)
	}
	if size == 0 || size > 1<<40 || uint64(st.Size) != size {
		return nil, fmt.Errorf("segment of %d bytes announced as %d", st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map segment: %w", err)
	}
	return mem, nil
}

// mapping is a receiver's mapping of a segment, unmapped when its last
// reference goes: the connection's and one per message holding views.
type mapping struct {
	mem  []byte
	refs atomic.Int64
}

func (m *mapping) unref() {
	if m.refs.Add(-1) == 0 {
		_ = unix.Munmap(m.mem)
	}
}

// ring allocates a sender's data area to messages: each at the lowest
// offset where it fits (first fit), freed by the receiver's release notes
// in any order. Keeping messages low keeps the pages in use few: a
// segment's pages cost a fault each the first time they are written (on
// some virtual machines tens of microseconds each, seconds for a 64 MiB
// area), and a ring that walked the whole area would touch every one of
// them even when a few messages are live at a time.
type ring struct {
	mem     []byte // the data area; nil once unmapped
	maxLive int    // regions live at once at most (the note ring's slots); 0: no limit

	mu   sync.Mutex // guards live: Send allocates, the note reader frees
	live []region   // by offset
}

type region struct{ off, size uint64 }

// alloc reserves n bytes (a multiple of 8), or reports false when they do
// not fit now.
func (r *ring) alloc(n uint64) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxLive > 0 && len(r.live) >= r.maxLive {
		return 0, false
	}
	var end uint64 // of the region before the gap looked at
	i := 0
	for ; i < len(r.live) && r.live[i].off-end < n; i++ {
		end = r.live[i].off + r.live[i].size
	}
	if i == len(r.live) && uint64(len(r.mem))-end < n {
		return 0, false
	}
	r.live = slices.Insert(r.live, i, region{off: end, size: n})
	return end, true
}

// free releases the region at off. It reports false for an offset that is
// not live (a confused peer).
func (r *ring) free(off uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, found := slices.BinarySearchFunc(r.live, off, func(g region, off uint64) int { return cmp.Compare(g.off, off) })
	if found {
		r.live = slices.Delete(r.live, i, i+1)
	}
	return found
}

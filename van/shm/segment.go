//go:build linux

package shm

import (
	"fmt"
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

// ring allocates a sender's segment to messages in FIFO order. Regions are
// freed by the receiver's release notes, in any order; space is reclaimed
// from the oldest one on. An empty ring starts again at offset 0, so that
// light traffic keeps touching the same pages.
type ring struct {
	mem     []byte // the data area; nil once unmapped
	maxLive int    // regions live at once at most (the note ring's slots); 0: no limit

	mu   sync.Mutex // guards live: Send allocates, the note reader frees
	live []region
}

type region struct {
	off, size uint64
	freed     bool
}

// alloc reserves n bytes (a multiple of 8), or reports false when they do
// not fit now.
func (r *ring) alloc(n uint64) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	size := uint64(len(r.mem))
	var off uint64
	if r.maxLive > 0 && len(r.live) >= r.maxLive {
		return 0, false
	}
	if k := len(r.live); k > 0 {
		head := r.live[k-1].off + r.live[k-1].size
		tail := r.live[0].off
		switch {
		case head > tail && size-head >= n:
			off = head
		case head > tail && tail >= n:
			off = 0
		case head <= tail && tail-head >= n && head != tail:
			off = head
		default:
			return 0, false
		}
	} else if n > size {
		return 0, false
	}
	r.live = append(r.live, region{off: off, size: n})
	return off, true
}

// free marks the region at off released and reclaims the freed regions at
// the tail. It reports false for an offset that is not live (a confused
// peer).
func (r *ring) free(off uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	found := false
	for i := range r.live {
		if r.live[i].off == off && !r.live[i].freed {
			r.live[i].freed, found = true, true
			break
		}
	}
	k := 0
	for k < len(r.live) && r.live[k].freed {
		k++
	}
	r.live = append(r.live[:0], r.live[k:]...)
	return found
}

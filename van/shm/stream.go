//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/elasticps/elasticps/van"
)

// A segment is laid out as
//
//	[0, ctlBytes)            control words, each on its own cache line
//	[ctlBytes, +stream)      the message stream (dialer -> listener)
//	[.., +8·noteSlots)       the release-note ring (listener -> dialer)
//	[.., end)                the data area for large frames
//
// The control words are the stream's head (written by the dialer) and
// tail (written by the listener), the listener's "asleep" flag, and the
// note ring's head (listener) and tail (dialer). Counters only grow; a
// position is a counter modulo the ring's size. Each side checks what the
// other wrote before using it.
const (
	ctlBytes       = 4096
	offHead        = 0
	offTail        = 64
	offAsleep      = 128
	offNoteHead    = 192
	offNoteTail    = 256
	noteSlots      = 4096
	minStreamBytes = 4096
	maxStreamBytes = 1 << 30
	maxNoteSlots   = 1 << 20
)

// layout is the geometry of a segment, as the hello announces it.
type layout struct {
	size, stream, notes uint64 // bytes, bytes, slots
}

func (l layout) dataOff() uint64 { return ctlBytes + l.stream + 8*l.notes }

// check validates a layout a peer announced.
func (l layout) check() error {
	pow2 := func(n uint64) bool { return n&(n-1) == 0 }
	switch {
	case l.stream < minStreamBytes || l.stream > maxStreamBytes || !pow2(l.stream):
		return fmt.Errorf("stream of %d bytes (a power of two in [%d, %d] expected)", l.stream, minStreamBytes, maxStreamBytes)
	case l.notes == 0 || l.notes > maxNoteSlots || !pow2(l.notes):
		return fmt.Errorf("note ring of %d slots (a power of two in [1, %d] expected)", l.notes, maxNoteSlots)
	case l.size < l.dataOff()+8:
		return fmt.Errorf("segment of %d bytes too small for its %d-byte stream and %d note slots", l.size, l.stream, l.notes)
	}
	return nil
}

// ctl is a view of a segment's control words.
type ctl struct {
	head, tail, noteHead, noteTail *atomic.Uint64
	asleep                         *atomic.Uint32
}

func ctlOf(seg []byte) ctl {
	at := func(off int) unsafe.Pointer { return unsafe.Pointer(&seg[off]) }
	return ctl{
		head:     (*atomic.Uint64)(at(offHead)),
		tail:     (*atomic.Uint64)(at(offTail)),
		noteHead: (*atomic.Uint64)(at(offNoteHead)),
		noteTail: (*atomic.Uint64)(at(offNoteTail)),
		asleep:   (*atomic.Uint32)(at(offAsleep)),
	}
}

// errGone: the connection of a stream ended while a writer waited for space.
var errGone = errors.New("connection closed")

// streamWriter is the dialer's end of the message stream. Its user
// serialises calls (the peer's lock).
type streamWriter struct {
	ctl       ctl
	buf       []byte
	head      uint64 // written so far
	published uint64 // last head stored in the segment
	conn      *net.UnixConn
	dead      *atomic.Bool // the connection ended
	bell      [1]byte
}

// write copies bufs into the stream, waiting for space when the reader
// lags, and wakes the reader if it sleeps.
func (w *streamWriter) write(bufs ...[]byte) error {
	size := uint64(len(w.buf))
	for _, b := range bufs {
		for len(b) > 0 {
			free, err := w.space()
			if err != nil {
				return err
			}
			n := min(free, uint64(len(b)))
			pos := w.head & (size - 1)
			k := copy(w.buf[pos:], b[:n])
			copy(w.buf, b[k:n])
			w.head += n
			b = b[n:]
		}
	}
	return w.publish()
}

// publish makes the bytes written visible and rings the reader's doorbell
// (one byte on the socket) if it went to sleep.
func (w *streamWriter) publish() error {
	if w.published == w.head {
		return nil
	}
	w.published = w.head
	w.ctl.head.Store(w.head)
	if w.ctl.asleep.Load() == 1 && w.ctl.asleep.CompareAndSwap(1, 0) {
		if _, err := w.conn.Write(w.bell[:]); err != nil {
			return err
		}
	}
	return nil
}

// space returns the free bytes of the stream, waiting (yielding, then
// sleeping up to a millisecond at a time) while there are none: a full
// stream means the receiver is not taking messages, so there is no hurry.
func (w *streamWriter) space() (uint64, error) {
	size := uint64(len(w.buf))
	var pause time.Duration
	for {
		tail := w.ctl.tail.Load()
		used := w.head - tail
		if used > size {
			return 0, fmt.Errorf("the receiver's stream tail %d is not within the %d bytes before head %d", tail, size, w.head)
		}
		if used < size {
			return size - used, nil
		}
		if err := w.publish(); err != nil {
			return 0, err
		}
		if w.dead.Load() {
			return 0, errGone
		}
		if pause == 0 {
			runtime.Gosched()
			pause = 10 * time.Microsecond
			continue
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}

// streamReader is the listener's end of the message stream, an io.Reader
// that polls for up to spin after the stream ran dry and then sleeps on
// the socket until the writer rings.
type streamReader struct {
	ctl  ctl
	buf  []byte
	tail uint64
	conn *net.UnixConn
	spin time.Duration
	bell [64]byte
}

func (r *streamReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	avail, err := r.wait()
	if err != nil {
		return 0, err
	}
	size := uint64(len(r.buf))
	n := min(avail, uint64(len(p)))
	pos := r.tail & (size - 1)
	k := copy(p[:n], r.buf[pos:])
	copy(p[k:n], r.buf)
	r.tail += n
	r.ctl.tail.Store(r.tail)
	return int(n), nil
}

// wait returns how many bytes the stream holds, once it holds some. While
// it polls, it yields to the process's other goroutines (with one P, the
// one it handed the last message to) and to other threads of the host
// (the sender's, on a host with fewer cores than busy threads).
func (r *streamReader) wait() (uint64, error) {
	size := uint64(len(r.buf))
	var start time.Time
	for polled := false; ; polled = true {
		head := r.ctl.head.Load()
		avail := head - r.tail
		if avail > size {
			return 0, &van.FrameError{Err: fmt.Errorf("%w: stream head %d is not within the %d bytes after tail %d", errFatal, head, size, r.tail)}
		}
		if avail > 0 {
			return avail, nil
		}
		if !polled {
			start = time.Now()
		}
		if r.spin > 0 && time.Since(start) < r.spin {
			runtime.Gosched()
			_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		r.ctl.asleep.Store(1)
		if r.ctl.head.Load() != r.tail {
			// Data came after all; if the writer took the flag back, a
			// doorbell byte is on its way and wakes a later sleep early.
			r.ctl.asleep.CompareAndSwap(1, 0)
		} else if _, err := r.conn.Read(r.bell[:]); err != nil {
			return 0, err
		}
		polled = false
		start = time.Time{}
	}
}

// noteWriter is the listener's end of the release-note ring.
type noteWriter struct {
	ctl   ctl
	slots []byte
	head  uint64
}

// put appends a release note, or reports false when the ring is full,
// which a sender keeping to its limit of live regions never lets happen.
func (w *noteWriter) put(off uint64) bool {
	n := uint64(len(w.slots) / 8)
	if tail := w.ctl.noteTail.Load(); w.head-tail >= n {
		return false
	}
	binary.LittleEndian.PutUint64(w.slots[(w.head&(n-1))*8:], off)
	w.head++
	w.ctl.noteHead.Store(w.head)
	return true
}

// noteReader is the dialer's end of the release-note ring, drained by Send.
type noteReader struct {
	ctl   ctl
	slots []byte
	tail  uint64
}

// drain frees the regions of the notes written since the last drain.
func (nr *noteReader) drain(r *ring) error {
	n := uint64(len(nr.slots) / 8)
	head := nr.ctl.noteHead.Load()
	if head-nr.tail > n {
		return fmt.Errorf("release-note head %d is not within the %d slots after tail %d", head, n, nr.tail)
	}
	for ; nr.tail != head; nr.tail++ {
		off := binary.LittleEndian.Uint64(nr.slots[(nr.tail&(n-1))*8:])
		if !r.free(off) {
			return fmt.Errorf("release note for offset %d, a region not in use", off)
		}
	}
	nr.ctl.noteTail.Store(nr.tail)
	return nil
}

//go:build rdma && cgo

package rdma

import (
	"errors"
	"time"
	"unsafe"
)

// device is everything the van protocol needs from an RDMA library. The
// libfabric and ibverbs backends implement it; nothing above it knows which
// one runs. All methods may be called concurrently unless noted.
type device interface {
	// describe names the provider and device, for logs.
	describe() string

	// listen accepts links at host:port (port 0: any), retrying up to
	// maxRetry random ports if the port is taken. Incoming links are
	// reported to the linkSink given at construction.
	listen(host string, port, maxRetry int) (int, error)

	// dial establishes a link to the listener at host:port, presenting h,
	// and returns the listener's answer. It gives up at deadline or when
	// stop is closed.
	dial(host string, port int, h hello, deadline time.Time, stop <-chan struct{}) (devLink, hello, error)

	// closeLink tears a link down; the peer's linkSink sees it closed.
	closeLink(l devLink)

	// reg registers [p, p+n) for local use and remote writes.
	reg(p unsafe.Pointer, n int) (memReg, error)
	dereg(m memReg)

	// maxSGE is how many local segments one write may gather.
	maxSGE() int

	// sendCtrl sends a control message on l. The bytes are copied. It
	// returns errAgain when the queue is full: retry after progress.
	sendCtrl(l devLink, m *[ctrlSize]byte) error

	// write gathers sg into one write of (raddr, rkey) on l's peer with
	// imm as immediate data. Its completion is reported with op. It
	// returns errAgain when the send queue is full.
	write(l devLink, sg []sge, raddr, rkey uint64, imm uint32, op uint64) error

	// poll waits up to timeout for events and stores them in ev. Only one
	// goroutine polls.
	poll(ev []event, timeout time.Duration) (int, error)

	// wake makes a concurrent poll return.
	wake()

	// shutdown stops all data movement: listeners, links and endpoints
	// go, posted operations are dropped, and the device no longer touches
	// registered memory. Only dereg and close may follow.
	shutdown()

	// close releases what is left; every region must be deregistered.
	close()
}

// devLink is a backend's handle of one link.
type devLink any

// hello is what the two ends of a link tell each other while connecting:
// the node id of the dialler (message.Empty for an anonymous one; the
// listener's answer carries its own) and each side's local link id.
type hello struct {
	node int32
	link uint32
}

// linkSink receives a backend's incoming-link events.
type linkSink interface {
	// linkAccepted is called for a link the peer dialled; it returns the
	// answer to the peer's hello, or an error to refuse the link.
	linkAccepted(l devLink, h hello) (hello, error)
	// linkClosed is called once when any link (dialled or accepted) is gone.
	linkClosed(l devLink)
	// garbage reports a bootstrap connection that was not one of ours.
	garbage(from string, err error)
}

// memReg is a registered region.
type memReg struct {
	h    uint64  // backend handle
	desc uint64  // local descriptor for sge
	rkey uint64  // remote key
	base uintptr // start of the region
	virt bool    // remote addresses are virtual addresses (else offsets)
}

// remoteAddr is how a peer addresses p inside the region.
func (m memReg) remoteAddr(p uintptr) uint64 {
	if m.virt {
		return uint64(p)
	}
	return uint64(p - m.base)
}

// sge is one local segment of a write.
type sge struct {
	addr uintptr
	len  uint64
	desc uint64
}

type evKind uint8

const (
	evDone     evKind = iota + 1 // op completed
	evError                      // op failed with err
	evRecv                       // control message in data
	evWriteImm                   // a peer wrote into slot imm
	evFatal                      // the device failed
)

type event struct {
	kind evKind
	op   uint64
	imm  uint32
	len  uint64
	err  error
	data [ctrlSize]byte
}

// errAgain is a full queue: retry after the next completions.
var errAgain = errors.New("van/rdma: resource temporarily unavailable")

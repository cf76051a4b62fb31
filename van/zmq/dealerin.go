//go:build cgo

package zmq

/*
#include <stdlib.h>
#include "dealerin.h"
*/
import "C"

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/elasticps/elasticps/message"
)

// The BytePS fork's servers (and scheduler) answer a worker's data requests
// on the worker's own connection: their ROUTER sends [ "ps<worker>",
// "ps<self>", meta, data... ] back down the DEALER the worker connected to
// them, not to the worker's ROUTER (zmq_van.h, NonWorkerSendMsg). On the
// fork's wire (PS_WIRE=bytedance) a node whose id is a worker's by the fork's
// rule (odd, 9 and up) therefore also receives on each DEALER to a server or
// the scheduler:
//
//   - a reader goroutine per such DEALER waits for the socket's ZMQ_FD and
//     moves each message, without a copy, to an inproc PUSH socket of the
//     peer, under the peer's lock (libzmq sockets are not thread-safe);
//     Send does the same after each send, because a send can consume the
//     wakeup of a message that arrived meanwhile;
//   - Recv waits on the ROUTER and on the inproc PULL the PUSHes feed,
//     alternately first, and reads either the same way: a forwarded
//     message has the ROUTER's layout, the fork's sender frame standing
//     where the ROUTER puts the peer identity.
//
// A DEALER is connected to one known node, so a message on it whose sender
// frame names another is dropped (and logged).

// dealerWaitMax bounds a reader's wait on ZMQ_FD. Missed wakeups are
// covered by Send; this only limits how long a bug there could delay a
// message, and how long a reader outlives its socket.
const dealerWaitMax = 100 * time.Millisecond

// dealerIn is the receiving end: the inproc PULL that every forwarding PUSH
// connects to. Owned by Recv (t.recvMu) like the ROUTER.
type dealerIn struct {
	pull     *zsocket
	endpoint string
	turn     int // which socket Recv tries first, alternating
}

var dealerInSeq atomic.Uint64

// dealerForward is a peer's forwarding state, guarded by the peer's mu.
type dealerForward struct {
	push   *zsocket
	expect *C.char // "ps<peer id>", C memory
	nexp   C.size_t
	fd     C.int
}

// forkAnswersOnDealer reports whether a fork node would answer a node with
// id myID on its own DEALER: the fork decides by the recipient's id alone
// (GetRoleFromId: odd ids from 9 are workers) and only for peers that are
// not workers.
func (t *Transport) forkAnswersOnDealer(peer message.Node, myID int32) bool {
	return t.cfg.Wire == message.WireBytedance && myID >= 9 && myID%2 == 1 && peer.Role != message.RoleWorker
}

// startDealerIn binds the inproc PULL, if this transport may receive on its
// DEALERs. Caller holds t.recvMu and t.mu (write).
func (t *Transport) startDealerIn() error {
	if t.cfg.Wire != message.WireBytedance {
		return nil
	}
	pull, err := t.newSocket(C.ZMQ_PULL)
	if err != nil {
		return fmt.Errorf("van/zmq: new PULL socket for DEALER receives: %w", err)
	}
	// Unbounded: a PUSH blocked at a high-water mark would stall Send on
	// the peer whose lock it holds. What queues here are responses to this
	// node's own requests.
	endpoint := "inproc://elasticps-dealer-in-" + strconv.FormatUint(dealerInSeq.Add(1), 10)
	err = pull.setInt(C.ZMQ_RCVHWM, 0)
	if err == nil {
		err = pull.bind(endpoint)
	}
	if err != nil {
		_ = pull.close()
		return fmt.Errorf("van/zmq: bind %s: %w", endpoint, err)
	}
	t.dealerIn = &dealerIn{pull: pull, endpoint: endpoint}
	return nil
}

// closeDealerIn closes the PULL. Caller holds t.recvMu.
func (t *Transport) closeDealerIn() {
	if t.dealerIn != nil {
		_ = t.dealerIn.pull.close()
		t.dealerIn = nil
	}
}

// recvInto receives one message on the ROUTER, or on the ROUTER or the
// DEALER PULL (see eps_recv_either). Caller holds t.recvMu.
func (t *Transport) recvInto(in *inBuf, dontwait bool) C.int {
	dw := C.int(0)
	if dontwait {
		dw = 1
	}
	d := t.dealerIn
	if d == nil {
		return C.eps_recv(t.router.p, in.c, dw)
	}
	d.turn ^= 1
	return C.eps_recv_either(t.router.p, d.pull.p, in.c, dw, C.int(d.turn))
}

// watchDealer sets up forwarding for p, a new DEALER to node, when a fork
// node would answer on it. Caller holds t.mu (write); p is not shared yet.
func (t *Transport) watchDealer(p *peer, node message.Node, myID int32) error {
	if !t.forkAnswersOnDealer(node, myID) || !t.bound.Load() {
		return nil
	}
	push, err := t.newSocket(C.ZMQ_PUSH)
	if err != nil {
		return err
	}
	fd, err := func() (C.int, error) {
		if err := push.setInt(C.ZMQ_SNDHWM, 0); err != nil {
			return 0, err
		}
		if err := push.connect(t.dealerIn.endpoint); err != nil {
			return 0, err
		}
		var fd C.int
		n := C.size_t(unsafe.Sizeof(fd))
		if rc, err := C.zmq_getsockopt(p.sock.p, C.ZMQ_FD, unsafe.Pointer(&fd), &n); rc != 0 {
			return 0, callErr(err)
		}
		return fd, nil
	}()
	if err != nil {
		_ = push.close()
		return fmt.Errorf("forwarding its DEALER: %w", err)
	}
	ident := "ps" + strconv.Itoa(int(node.ID))
	p.fwd = &dealerForward{push: push, expect: C.CString(ident), nexp: C.size_t(len(ident)), fd: fd}
	go t.readDealer(p, node.ID)
	return nil
}

// readDealer forwards what arrives on p's DEALER until p is closed.
func (t *Transport) readDealer(p *peer, id int32) {
	for {
		p.mu.Lock()
		if p.sock == nil {
			p.mu.Unlock()
			return
		}
		n, err := t.forwardLocked(p, id)
		fd := p.fwd.fd
		p.mu.Unlock()
		if err != nil {
			if err != errTerm && !t.closed.Load() {
				t.log.Warn("van/zmq: receiving on the DEALER failed; the node's answers on it are lost", "node", id, "err", err)
			}
			return
		}
		if n == 0 {
			C.eps_wait_fd(fd, C.int(dealerWaitMax/time.Millisecond))
		}
	}
}

// forwardLocked moves the messages queued on p's DEALER to the PULL and
// returns how many it took off the DEALER. Caller holds p.mu; p.sock is
// open.
func (t *Transport) forwardLocked(p *peer, id int32) (int, error) {
	f := p.fwd
	r := C.eps_forward(p.sock.p, f.push.p, f.expect, f.nexp)
	if r.dropped > 0 {
		t.log.Warn("van/zmq: dropped messages on the DEALER to a node: their sender frame names another node",
			"node", id, "dropped", int(r.dropped))
	}
	n := int(r.forwarded) + int(r.dropped)
	if r.err != 0 {
		return n, errno(r.err)
	}
	return n, nil
}

// close releases the forwarding state. Caller holds the peer's mu.
func (f *dealerForward) close() {
	_ = f.push.setInt(optLinger, int(replacedLinger/time.Millisecond))
	_ = f.push.close()
	C.free(unsafe.Pointer(f.expect))
}

// sendCopies sends frames as one multipart message on s, copying each
// (tests stand in for a fork node's ROUTER with it). Caller owns s.
func sendCopies(s *zsocket, frames [][]byte) error {
	var o outBuf
	defer o.free()
	total := 0
	for _, f := range frames {
		total += len(f)
	}
	o.grow(len(frames), total)
	scratch := unsafe.Slice((*byte)(o.scratch), o.nscratch)
	table := unsafe.Slice(o.frames, len(frames))
	off := 0
	for i, f := range frames {
		copy(scratch[off:], f)
		table[i] = C.eps_frame{addr: C.uintptr_t(uintptr(o.scratch) + uintptr(off)), len: C.size_t(len(f))}
		off += len(f)
	}
	if res := C.eps_send(s.p, o.frames, C.int(len(frames))); res.err != 0 {
		return errno(res.err)
	}
	return nil
}

// recvCopies receives one multipart message on s and returns copies of its
// frames (tests use it with sendCopies).
func recvCopies(s *zsocket) ([][]byte, error) {
	in, err := newInBuf(16)
	if err != nil {
		return nil, err
	}
	defer in.free()
	if rc := C.eps_recv(s.p, in.c, 0); rc != 0 {
		return nil, errno(rc)
	}
	out := make([][]byte, int(in.c.nframes))
	for i := range out {
		out[i] = append([]byte(nil), in.view(i)...)
	}
	return out, nil
}

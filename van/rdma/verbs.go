//go:build rdma && cgo

package rdma

/*
#cgo pkg-config: libibverbs librdmacm
#include <stdlib.h>
#include "verbs.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// verbsDev is the ibverbs backend: RC queue pairs connected by rdma_cm,
// one PD and CQ on the chosen device (verbs.c), and a goroutine that
// handles connection-manager events.
type verbsDev struct {
	sink linkSink
	cfg  Config

	// mu is held (read) around calls that use a QP, the PD or the CQ, and
	// (write) to destroy a QP or the whole device.
	mu    sync.RWMutex
	down  atomic.Bool
	v     *C.epsr_verbs
	desc  string
	evbuf []C.epsr_event

	// cmMu guards links; it is held across epsr_verbs_connect so that the
	// event loop cannot see a link's first event before it is known.
	cmMu   sync.Mutex
	links  map[*C.epsr_vlink]*vlink
	cmDone chan struct{}
}

type vlink struct {
	p      *C.epsr_vlink
	active bool
	hello  [verbsHelloSize]byte // active: what rdma_connect sends
	res    chan vresult         // active: the outcome of the dial
	closed atomic.Bool
}

type vresult struct {
	h   hello
	err error
}

// The hello in the rdma_cm private data (<= 56 bytes for a connect request):
// magic "EPSV" | version u8 | 3 pad | node i32 | link u32.
const (
	verbsHelloSize = 16
	verbsMagic     = "EPSV"
)

func putVerbsHello(b *[verbsHelloSize]byte, h hello) {
	copy(b[:], verbsMagic)
	b[4] = 1
	binary.LittleEndian.PutUint32(b[8:], uint32(h.node))
	binary.LittleEndian.PutUint32(b[12:], h.link)
}

func parseVerbsHello(b []byte) (hello, error) {
	if len(b) < verbsHelloSize || string(b[:4]) != verbsMagic || b[4] != 1 {
		return hello{}, fmt.Errorf("connection request without an elasticps hello")
	}
	return hello{node: nodeOrEmpty(int32(binary.LittleEndian.Uint32(b[8:]))), link: binary.LittleEndian.Uint32(b[12:])}, nil
}

func verbsErr(call string, ret C.int) error {
	code := int(-ret)
	if code == int(syscall.EAGAIN) {
		return errAgain
	}
	return &Error{Call: call, Code: code, Msg: syscall.Errno(code).Error()}
}

// openVerbs checks for a device first, so that a host without one gets
// ErrNoDevice at once, then opens the device behind the node's interface.
func openVerbs(cfg Config, sink linkSink) (*verbsDev, error) {
	if C.epsr_verbs_devices(nil, 0) == 0 {
		return nil, ErrNoDevice
	}
	nic, err := pickDevice(cfg)
	if err != nil {
		return nil, err
	}
	var cdev *C.char
	if nic.device != "" {
		cdev = C.CString(nic.device)
		defer C.free(unsafe.Pointer(cdev))
	}
	d := &verbsDev{sink: sink, cfg: cfg, links: map[*C.epsr_vlink]*vlink{}, cmDone: make(chan struct{})}
	var what *C.char
	var name [64]C.char
	ret := C.epsr_verbs_open(cdev, C.int(4*maxOps), C.int(cfg.SendDepth), C.int(cfg.RxDepth), &d.v, &what, &name[0])
	if ret == -C.EPS_VERBS_ENODEV {
		return nil, ErrNoDevice
	}
	if ret != 0 {
		return nil, verbsErr(C.GoString(what), ret)
	}
	port := nic.port
	if port == "" {
		port = "1"
	}
	d.desc = fmt.Sprintf("ibverbs device %s port %s", C.GoString(&name[0]), port)
	if nic.iface != "" {
		d.desc += fmt.Sprintf(" for interface %s (%s)", nic.iface, nic.why)
	} else {
		d.desc += " (" + nic.why + ")"
	}
	d.evbuf = make([]C.epsr_event, 64)
	go d.cmLoop()
	return d, nil
}

func (d *verbsDev) describe() string { return d.desc }
func (d *verbsDev) maxSGE() int      { return 4 }

func (d *verbsDev) listen(host string, port, maxRetry int) (int, error) {
	chost := C.CString(host)
	defer C.free(unsafe.Pointer(chost))
	for attempt := 0; ; attempt++ {
		var bound C.int
		var what *C.char
		d.mu.RLock()
		ret := C.epsr_verbs_listen(d.v, chost, C.int(port), &bound, &what)
		d.mu.RUnlock()
		if ret == 0 {
			return int(bound), nil
		}
		err := verbsErr(C.GoString(what), ret)
		if ret != -C.int(syscall.EADDRINUSE) || attempt >= maxRetry {
			return 0, fmt.Errorf("van/rdma: listen on %s:%d: %w", host, port, err)
		}
		port = retryPortMin + int(time.Now().UnixNano()%int64(retryPortMax-retryPortMin))
	}
}

// cmLoop handles connection-manager events until shutdown.
func (d *verbsDev) cmLoop() {
	defer close(d.cmDone)
	var ev C.epsr_cm_event
	for !d.down.Load() {
		ret := C.epsr_verbs_cm_wait(d.v, &ev, 200)
		if ret < 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if ret == 0 || d.down.Load() {
			continue
		}
		d.handleCM(&ev)
	}
}

func (d *verbsDev) handleCM(ev *C.epsr_cm_event) {
	p := ev.link
	priv := C.GoBytes(unsafe.Pointer(&ev.priv[0]), ev.priv_len)
	name := C.GoString(&ev.name[0])
	if ev._type == C.EPS_CM_CONNECT_REQUEST {
		d.accept(p, priv)
		return
	}
	d.cmMu.Lock()
	l := d.links[p]
	d.cmMu.Unlock()
	if l == nil {
		return
	}
	fail := func(err error) {
		if l.active {
			select {
			case l.res <- vresult{err: err}:
			default:
			}
		}
		d.drop(l)
	}
	switch ev._type {
	case C.EPS_CM_ADDR_RESOLVED:
		if ret := C.epsr_verbs_resolve_route(p); ret != 0 {
			fail(verbsErr("rdma_resolve_route", ret))
		}
	case C.EPS_CM_ROUTE_RESOLVED:
		var what *C.char
		d.mu.RLock()
		ret := C.epsr_verbs_establish(d.v, p, unsafe.Pointer(&l.hello[0]), verbsHelloSize, &what)
		d.mu.RUnlock()
		if ret != 0 {
			fail(verbsErr(C.GoString(what), ret))
		}
	case C.EPS_CM_ESTABLISHED:
		if l.active {
			h, err := parseVerbsHello(priv)
			l.res <- vresult{h: h, err: err}
		}
	case C.EPS_CM_FAILED:
		fail(fmt.Errorf("rdma_cm %s (status %d)", name, int(ev.status)))
	case C.EPS_CM_DISCONNECTED:
		d.drop(l)
	}
}

// accept answers a connection request with the transport's hello.
func (d *verbsDev) accept(p *C.epsr_vlink, priv []byte) {
	h, err := parseVerbsHello(priv)
	if err != nil {
		d.sink.garbage("rdma_cm peer", err)
		C.epsr_verbs_reject(p)
		d.destroy(p)
		return
	}
	l := &vlink{p: p}
	d.cmMu.Lock()
	d.links[p] = l
	d.cmMu.Unlock()
	reply, err := d.sink.linkAccepted(l, h)
	if err != nil {
		C.epsr_verbs_reject(p)
		d.cmMu.Lock()
		delete(d.links, p)
		d.cmMu.Unlock()
		d.destroy(p)
		return
	}
	var b [verbsHelloSize]byte
	putVerbsHello(&b, reply)
	var what *C.char
	d.mu.RLock()
	ret := C.epsr_verbs_accept(d.v, p, unsafe.Pointer(&b[0]), verbsHelloSize, &what)
	d.mu.RUnlock()
	if ret != 0 {
		d.sink.garbage("rdma_cm peer", verbsErr(C.GoString(what), ret))
		C.epsr_verbs_reject(p)
		d.drop(l)
	}
}

// drop forgets l, tells the transport, and releases its QP and id.
func (d *verbsDev) drop(l *vlink) {
	if l.closed.Swap(true) {
		return
	}
	d.cmMu.Lock()
	delete(d.links, l.p)
	d.cmMu.Unlock()
	d.sink.linkClosed(l)
	d.destroy(l.p)
}

func (d *verbsDev) destroy(p *C.epsr_vlink) {
	C.epsr_verbs_wake(d.v) // let a blocked poll give up mu
	d.mu.Lock()
	if !d.down.Load() {
		C.epsr_verbs_destroy_link(d.v, p)
	}
	d.mu.Unlock()
}

func (d *verbsDev) dial(host string, port int, h hello, deadline time.Time, stop <-chan struct{}) (devLink, hello, error) {
	l := &vlink{active: true, res: make(chan vresult, 1)}
	putVerbsHello(&l.hello, h)
	chost := C.CString(host)
	defer C.free(unsafe.Pointer(chost))
	var csrc *C.char
	if d.cfg.Host != "" {
		csrc = C.CString(d.cfg.Host)
		defer C.free(unsafe.Pointer(csrc))
	}
	var what *C.char
	d.cmMu.Lock()
	d.mu.RLock()
	if d.down.Load() {
		d.mu.RUnlock()
		d.cmMu.Unlock()
		return nil, hello{}, fmt.Errorf("transport closed")
	}
	ret := C.epsr_verbs_connect(d.v, csrc, chost, C.int(port), &l.p, &what)
	d.mu.RUnlock()
	if ret == 0 {
		d.links[l.p] = l
	}
	d.cmMu.Unlock()
	if ret != 0 {
		return nil, hello{}, verbsErr(C.GoString(what), ret)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case r := <-l.res:
		if r.err != nil {
			return nil, hello{}, fmt.Errorf("connect to %s:%d: %w", host, port, r.err)
		}
		return l, r.h, nil
	case <-timer.C:
	case <-stop:
	}
	d.closeLink(l)
	return nil, hello{}, fmt.Errorf("connect to %s:%d: timed out or stopped", host, port)
}

func (d *verbsDev) closeLink(dl devLink) {
	l := dl.(*vlink)
	if l.closed.Load() {
		return
	}
	d.mu.RLock()
	if !d.down.Load() {
		C.epsr_verbs_disconnect(l.p)
	}
	d.mu.RUnlock()
}

func (d *verbsDev) reg(p unsafe.Pointer, n int) (memReg, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var h, lkey, rkey C.uint64_t
	if ret := C.epsr_verbs_reg(d.v, p, C.size_t(n), &h, &lkey, &rkey); ret != 0 {
		return memReg{}, verbsErr("ibv_reg_mr", ret)
	}
	return memReg{h: uint64(h), desc: uint64(lkey), rkey: uint64(rkey), base: uintptr(p), virt: true}, nil
}

func (d *verbsDev) dereg(m memReg) { C.epsr_verbs_dereg(C.uint64_t(m.h)) }

func (d *verbsDev) sendCtrl(dl devLink, m *[ctrlSize]byte) error {
	l := dl.(*vlink)
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.down.Load() || l.closed.Load() {
		return fmt.Errorf("van/rdma: connection closed")
	}
	if ret := C.epsr_verbs_send_ctrl(l.p, unsafe.Pointer(&m[0])); ret != 0 {
		return verbsErr("ibv_post_send", ret)
	}
	return nil
}

func (d *verbsDev) write(dl devLink, sg []sge, raddr, rkey uint64, imm uint32, op uint64) error {
	l := dl.(*vlink)
	var csg [4]C.epsr_sge
	if len(sg) > len(csg) {
		return fmt.Errorf("van/rdma: %d segments exceed 4", len(sg))
	}
	for i, s := range sg {
		csg[i] = C.epsr_sge{addr: C.uint64_t(s.addr), len: C.uint64_t(s.len), desc: C.uint64_t(s.desc)}
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.down.Load() || l.closed.Load() {
		return fmt.Errorf("van/rdma: connection closed")
	}
	if ret := C.epsr_verbs_write(l.p, &csg[0], C.int(len(sg)), C.uint64_t(raddr), C.uint64_t(rkey), C.uint32_t(imm), C.uint64_t(op)); ret != 0 {
		return verbsErr("ibv_post_send", ret)
	}
	return nil
}

func (d *verbsDev) poll(ev []event, timeout time.Duration) (int, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.down.Load() {
		return 0, nil
	}
	n := min(len(ev), len(d.evbuf))
	ret := C.epsr_verbs_poll(d.v, &d.evbuf[0], C.int(n), C.int(timeout.Milliseconds()))
	if ret < 0 {
		return 0, verbsErr("ibv_poll_cq", ret)
	}
	for i := range int(ret) {
		convertEvent(&d.evbuf[i], &ev[i], "RDMA write completion", wcStatusText)
	}
	return int(ret), nil
}

func wcStatusText(code int) string {
	return C.GoString(C.epsr_verbs_wc_status(C.int(code))) + " (ibv_wc_status " + strconv.Itoa(code) + ")"
}

func (d *verbsDev) wake() { C.epsr_verbs_wake(d.v) }

func (d *verbsDev) shutdown() {
	d.down.Store(true)
	C.epsr_verbs_wake(d.v)
	<-d.cmDone
	d.mu.Lock()
	C.epsr_verbs_shutdown(d.v)
	d.mu.Unlock()
}

func (d *verbsDev) close() { C.epsr_verbs_close(d.v) }

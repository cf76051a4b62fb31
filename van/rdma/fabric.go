//go:build rdma && cgo

package rdma

/*
#cgo pkg-config: libfabric
#include <stdlib.h>
#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include "fabric.h"
*/
import "C"

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// fabricDev is the libfabric backend: one FI_EP_RDM endpoint, its address
// vector and completion queue (fabric.c), plus the TCP bootstrap.
type fabricDev struct {
	sink linkSink

	// mu is held (read) around every call into libfabric that uses the
	// endpoint, and (write) by shutdown, which closes it.
	mu   sync.RWMutex
	down atomic.Bool // set before shutdown takes mu
	f    *C.epsr_fab
	info C.epsr_fab_info
	name []byte // our endpoint address
	sge  int

	evbuf []C.epsr_event // used by poll only

	bootMu sync.Mutex
	ln     net.Listener
	links  map[*fabLink]struct{}
	av     map[string]uint64 // endpoint address -> fi_addr_t
	wg     sync.WaitGroup
}

// fabLink is a link of the fabric backend: the peer's fi_addr_t and the
// bootstrap connection whose closing ends the link.
type fabLink struct {
	addr uint64
	conn net.Conn
	once sync.Once
}

func fabErr(call string, ret C.int) error {
	code := int(-ret)
	if code == C.FI_EAGAIN {
		return errAgain
	}
	return &Error{Call: call, Code: code, Msg: C.GoString(C.epsr_fab_strerror(C.int(code)))}
}

// openFabric opens the endpoint on cfg.Host with cfg.Provider.
func openFabric(cfg Config, sink linkSink) (*fabricDev, error) {
	var cprov, cnode *C.char
	if cfg.Provider != "" {
		cprov = C.CString(cfg.Provider)
		defer C.free(unsafe.Pointer(cprov))
	}
	if cfg.Host != "" {
		cnode = C.CString(cfg.Host)
		defer C.free(unsafe.Pointer(cnode))
	}
	d := &fabricDev{sink: sink, links: map[*fabLink]struct{}{}, av: map[string]uint64{}}
	var what *C.char
	ret := C.epsr_fab_open(cprov, cnode, C.int(cfg.RxDepth), C.int(maxOps), C.int(4*maxOps+cfg.RxDepth),
		&d.f, &d.info, &what)
	if ret != 0 {
		err := fabErr(C.GoString(what), ret)
		if ret == -C.FI_ENODATA {
			prov := cfg.Provider
			if prov == "" {
				prov = "any (FI_PROVIDER unset)"
			}
			return nil, fmt.Errorf("van/rdma: no libfabric provider offers FI_EP_RDM with FI_RMA and remote CQ data on %q (provider %s); "+
				"list them with: fi_info -t FI_EP_RDM -c 'FI_RMA|FI_MSG': %w", cfg.Host, prov, err)
		}
		return nil, err
	}
	buf := make([]byte, 256)
	n := C.size_t(len(buf))
	if ret := C.epsr_fab_name(d.f, unsafe.Pointer(&buf[0]), &n); ret != 0 {
		C.epsr_fab_shutdown(d.f)
		C.epsr_fab_close(d.f)
		return nil, fabErr("fi_getname", ret)
	}
	d.name = buf[:n]
	d.sge = int(d.info.iov_limit)
	d.evbuf = make([]C.epsr_event, 64)
	return d, nil
}

func (d *fabricDev) describe() string {
	progress := "auto"
	if d.info.progress == C.FI_PROGRESS_MANUAL {
		progress = "manual"
	}
	return fmt.Sprintf("libfabric provider %q fabric %q domain %q (mr_local=%v mr_virt_addr=%v inject=%d iov_limit=%d cq_data=%dB progress=%s)",
		C.GoString(&d.info.prov[0]), C.GoString(&d.info.fabric[0]), C.GoString(&d.info.domain[0]),
		d.info.mr_local != 0, d.info.mr_virt != 0, d.info.inject, d.info.iov_limit, d.info.cq_data, progress)
}

func (d *fabricDev) maxSGE() int { return d.sge }

func (d *fabricDev) listen(host string, port, maxRetry int) (int, error) {
	ln, err := listenTCP(host, port, maxRetry)
	if err != nil {
		return 0, err
	}
	d.bootMu.Lock()
	if d.down.Load() {
		d.bootMu.Unlock()
		ln.Close()
		return 0, fmt.Errorf("van/rdma: listen: transport closed")
	}
	d.ln = ln
	d.wg.Add(1)
	d.bootMu.Unlock()
	go d.acceptLoop(ln)
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (d *fabricDev) acceptLoop(ln net.Listener) {
	defer d.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if d.down.Load() {
				return
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		d.wg.Add(1)
		go d.handshake(c)
	}
}

// handshake runs the listener's side of the bootstrap on c.
func (d *fabricDev) handshake(c net.Conn) {
	defer d.wg.Done()
	_ = c.SetDeadline(time.Now().Add(bootTimeout))
	m, err := readBoot(c)
	if err != nil {
		d.sink.garbage(c.RemoteAddr().String(), err)
		c.Close()
		return
	}
	addr, err := d.insert(m.addr)
	if err != nil {
		d.sink.garbage(c.RemoteAddr().String(), err)
		c.Close()
		return
	}
	l := &fabLink{addr: addr, conn: c}
	if !d.track(l) {
		_ = writeBoot(c, bootMsg{status: bootStatusBye})
		c.Close()
		return
	}
	reply, err := d.sink.linkAccepted(l, hello{node: nodeOrEmpty(m.node), link: m.link})
	if err != nil {
		_ = writeBoot(c, bootMsg{status: bootStatusBye})
		d.closeLink(l)
		d.untrack(l)
		return
	}
	if err := writeBoot(c, bootMsg{status: bootStatusOK, node: reply.node, link: reply.link, addr: d.name}); err != nil {
		d.closeLink(l)
		d.untrack(l)
		d.sink.linkClosed(l)
		return
	}
	_ = c.SetDeadline(time.Time{})
	d.watch(l)
}

// watch blocks until l's bootstrap connection closes (the peer sends
// nothing after the hello), then reports the link closed.
func (d *fabricDev) watch(l *fabLink) {
	var b [1]byte
	_, _ = l.conn.Read(b[:])
	d.closeLink(l)
	d.untrack(l)
	d.sink.linkClosed(l)
}

func (d *fabricDev) track(l *fabLink) bool {
	d.bootMu.Lock()
	defer d.bootMu.Unlock()
	if d.down.Load() {
		return false
	}
	d.links[l] = struct{}{}
	return true
}

func (d *fabricDev) untrack(l *fabLink) {
	d.bootMu.Lock()
	delete(d.links, l)
	d.bootMu.Unlock()
}

// insert adds a peer endpoint address to the address vector once; entries
// stay until the device closes (a removed entry could still be the target
// of a write in flight).
func (d *fabricDev) insert(name []byte) (uint64, error) {
	// Every node of a job runs the same provider, so a peer's address has
	// the format of ours: same length and, for socket addresses, the same
	// leading family field. A provider handed anything else reads past it
	// or, as tcp;ofi_rxm does, fails and leaves the endpoint broken.
	if len(name) != len(d.name) || !bytes.Equal(name[:min(2, len(name))], d.name[:min(2, len(d.name))]) {
		return 0, fmt.Errorf("endpoint address of %d bytes (% x...) is not in this provider's format (%d bytes)",
			len(name), name[:min(4, len(name))], len(d.name))
	}
	d.bootMu.Lock()
	defer d.bootMu.Unlock()
	if a, ok := d.av[string(name)]; ok {
		return a, nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.down.Load() {
		return 0, fmt.Errorf("transport closed")
	}
	// C copies the address during the call.
	var a C.uint64_t
	if ret := C.epsr_fab_av_insert(d.f, unsafe.Pointer(&name[0]), &a); ret != 0 {
		return 0, fabErr("fi_av_insert", ret)
	}
	d.av[string(name)] = uint64(a)
	return uint64(a), nil
}

func (d *fabricDev) dial(host string, port int, h hello, deadline time.Time, stop <-chan struct{}) (devLink, hello, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, hello{}, err
	}
	// Closing the connection is what interrupts a handshake on stop.
	stopHandshake := context.AfterFunc(ctx, func() { c.Close() })
	_ = c.SetDeadline(deadline)
	err = writeBoot(c, bootMsg{node: h.node, link: h.link, addr: d.name})
	var m bootMsg
	if err == nil {
		m, err = readBoot(c)
	}
	if !stopHandshake() {
		err = fmt.Errorf("connect to %s:%d interrupted", host, port)
	}
	if err == nil && m.status != bootStatusOK {
		err = fmt.Errorf("%s:%d refused the connection (it is closing)", host, port)
	}
	var addr uint64
	if err == nil {
		addr, err = d.insert(m.addr)
	}
	if err != nil {
		c.Close()
		return nil, hello{}, err
	}
	_ = c.SetDeadline(time.Time{})
	l := &fabLink{addr: addr, conn: c}
	if !d.track(l) {
		c.Close()
		return nil, hello{}, fmt.Errorf("transport closed")
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.watch(l)
	}()
	return l, hello{node: nodeOrEmpty(m.node), link: m.link}, nil
}

func (d *fabricDev) closeLink(dl devLink) {
	l := dl.(*fabLink)
	l.once.Do(func() { l.conn.Close() })
}

func (d *fabricDev) reg(p unsafe.Pointer, n int) (memReg, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.down.Load() {
		return memReg{}, fmt.Errorf("van/rdma: register memory: transport closed")
	}
	var h, desc, key C.uint64_t
	if ret := C.epsr_fab_reg(d.f, p, C.size_t(n), &h, &desc, &key); ret != 0 {
		return memReg{}, fabErr("fi_mr_reg", ret)
	}
	return memReg{h: uint64(h), desc: uint64(desc), rkey: uint64(key), base: uintptr(p), virt: d.info.mr_virt != 0}, nil
}

// dereg works after shutdown too: regions outlive the endpoint.
func (d *fabricDev) dereg(m memReg) { C.epsr_fab_dereg(C.uint64_t(m.h)) }

func (d *fabricDev) sendCtrl(dl devLink, m *[ctrlSize]byte) error {
	l := dl.(*fabLink)
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.down.Load() {
		return fmt.Errorf("van/rdma: transport closed")
	}
	if ret := C.epsr_fab_send_ctrl(d.f, C.uint64_t(l.addr), unsafe.Pointer(&m[0])); ret != 0 {
		return fabErr("fi_inject", ret)
	}
	return nil
}

func (d *fabricDev) write(dl devLink, sg []sge, raddr, rkey uint64, imm uint32, op uint64) error {
	l := dl.(*fabLink)
	var csg [8]C.epsr_sge
	if len(sg) > len(csg) || len(sg) > d.sge {
		return fmt.Errorf("van/rdma: %d segments exceed the provider's iov limit %d", len(sg), d.sge)
	}
	for i, s := range sg {
		csg[i] = C.epsr_sge{addr: C.uint64_t(s.addr), len: C.uint64_t(s.len), desc: C.uint64_t(s.desc)}
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.down.Load() {
		return fmt.Errorf("van/rdma: transport closed")
	}
	if ret := C.epsr_fab_write(d.f, C.uint64_t(l.addr), &csg[0], C.int(len(sg)), C.uint64_t(raddr), C.uint64_t(rkey),
		C.uint32_t(imm), C.uint64_t(op)); ret != 0 {
		return fabErr("fi_writemsg", ret)
	}
	return nil
}

func (d *fabricDev) poll(ev []event, timeout time.Duration) (int, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.down.Load() {
		return 0, nil
	}
	n := min(len(ev), len(d.evbuf))
	ret := C.epsr_fab_poll(d.f, &d.evbuf[0], C.int(n), C.int(timeout.Milliseconds()))
	if ret < 0 {
		return 0, fabErr("fi_cq_read", ret)
	}
	for i := range int(ret) {
		convertEvent(&d.evbuf[i], &ev[i], "fi_writemsg completion", fabErrText)
	}
	return int(ret), nil
}

func fabErrText(code int) string { return C.GoString(C.epsr_fab_strerror(C.int(code))) }

// convertEvent copies a C event into a Go one; errText names error codes.
func convertEvent(c *C.epsr_event, e *event, call string, errText func(int) string) {
	*e = event{kind: evKind(c.kind), op: uint64(c.op), imm: uint32(c.imm), len: uint64(c.len)}
	switch e.kind {
	case evRecv:
		copy(e.data[:], unsafe.Slice((*byte)(unsafe.Pointer(&c.data[0])), ctrlSize))
	case evError, evFatal:
		code := int(c.err)
		if code < 0 {
			code = -code
		}
		msg := errText(code)
		if c.prov != 0 {
			msg += fmt.Sprintf(" (provider error %d)", int(c.prov))
		}
		e.err = &Error{Call: call, Code: code, Msg: msg}
	}
}

func (d *fabricDev) wake() {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.down.Load() {
		C.epsr_fab_wake(d.f)
	}
}

func (d *fabricDev) shutdown() {
	d.bootMu.Lock()
	d.down.Store(true)
	if d.ln != nil {
		d.ln.Close()
	}
	links := make([]*fabLink, 0, len(d.links))
	for l := range d.links {
		links = append(links, l)
	}
	d.bootMu.Unlock()
	d.mu.Lock()
	C.epsr_fab_shutdown(d.f)
	d.mu.Unlock()
	for _, l := range links {
		d.closeLink(l)
	}
	d.wg.Wait()
}

func (d *fabricDev) close() { C.epsr_fab_close(d.f) }

//go:build cgo

package zmq

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

// eps_event reads the event number of a monitor event's first frame
// (uint16 event, uint32 value, in host order).
static uint16_t eps_event(const void *p) { uint16_t e; memcpy(&e, p, sizeof e); return e; }
*/
import "C"

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// curve is a Transport's CURVE state (Options.Encryption set): the job's
// keys, the ZAP handler that admits only clients with the job's key, and
// the refusals waiting for Recv to report them.
type curve struct {
	keys curveKeys

	refused atomic.Int64 // handshakes refused, all reasons

	mu      sync.Mutex
	pending []*van.FrameError // refusals Recv has not returned yet; bounded
}

// maxPendingRefusals bounds curve.pending: past it, refusals are only
// counted (a stranger redialling in a loop must not grow memory).
const maxPendingRefusals = 256

// zapEndpoint is where libzmq asks a context's ZAP handler (RFC 27).
const zapEndpoint = "inproc://zeromq.zap.01"

// zapDomain is set on every ROUTER so that libzmq consults the handler.
const zapDomain = "elasticps"

// errNoCurve is returned when libzmq was built without CURVE (libsodium).
var errNoCurve = errors.New("van/zmq: PS_ENCRYPT=on needs libzmq with CURVE support, and this libzmq has none (zmq_has(\"curve\") = 0): install a libzmq built with libsodium (Debian's libzmq5 is), or use DMLC_PS_VAN_TYPE=tcp, whose encryption is TLS")

// startCurve loads the keys and starts the context's ZAP handler. It runs
// in New, before any socket can take a handshake.
func (t *Transport) startCurve() error {
	enc := t.cfg.Encryption
	name := C.CString("curve")
	has := C.zmq_has(name)
	C.free(unsafe.Pointer(name))
	if has == 0 {
		return errNoCurve
	}
	keys, err := loadCurveKeys(enc)
	if err != nil {
		return err
	}
	zap, err := t.ctx.socket(C.ZMQ_REP)
	if err != nil {
		return fmt.Errorf("van/zmq: ZAP socket: %w", err)
	}
	_ = zap.setInt(optLinger, 0)
	if err := zap.bind(zapEndpoint); err != nil {
		_ = zap.close()
		return fmt.Errorf("van/zmq: bind the ZAP handler at %s: %w", zapEndpoint, err)
	}
	t.curve = &curve{keys: keys}
	go t.curve.serveZAP(zap)
	return nil
}

// curveServer makes the ROUTER a CURVE server and starts watching its
// failed handshakes. Caller holds t.mu (write); sock is not bound yet.
func (t *Transport) curveServer(sock *zsocket) error {
	c := t.curve
	if c == nil {
		return nil
	}
	if err := sock.setInt(C.ZMQ_CURVE_SERVER, 1); err != nil {
		return fmt.Errorf("van/zmq: set ZMQ_CURVE_SERVER: %w", err)
	}
	if err := sock.setBytes(C.ZMQ_CURVE_SECRETKEY, string(c.keys.secret[:])); err != nil {
		return fmt.Errorf("van/zmq: set ZMQ_CURVE_SECRETKEY: %w", err)
	}
	if err := sock.setBytes(C.ZMQ_ZAP_DOMAIN, zapDomain); err != nil {
		return fmt.Errorf("van/zmq: set ZMQ_ZAP_DOMAIN: %w", err)
	}
	if err := sock.setInt(C.ZMQ_RCVTIMEO, int(refusalPoll/time.Millisecond)); err != nil {
		return fmt.Errorf("van/zmq: set ZMQ_RCVTIMEO: %w", err)
	}
	// Failed handshakes of strangers (a plaintext peer, a wrong server key)
	// never reach the ZAP handler: count them from the socket's monitor.
	endpoint := "inproc://elasticps-curve-monitor-" + strconv.FormatUint(uint64(uintptr(sock.p)), 16)
	ce := C.CString(endpoint)
	defer C.free(unsafe.Pointer(ce))
	events := C.int(C.ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | C.ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
	if rc, err := C.zmq_socket_monitor(sock.p, ce, events); rc != 0 {
		return fmt.Errorf("van/zmq: monitor the ROUTER's handshakes: %w", callErr(err))
	}
	mon, err := t.ctx.socket(C.ZMQ_PAIR)
	if err != nil {
		return fmt.Errorf("van/zmq: monitor socket: %w", err)
	}
	_ = mon.setInt(optLinger, 0)
	if err := mon.connect(endpoint); err != nil {
		_ = mon.close()
		return fmt.Errorf("van/zmq: connect the monitor: %w", err)
	}
	go c.watch(mon)
	return nil
}

// curveClient makes a DEALER a CURVE client of the job's server key.
func (t *Transport) curveClient(sock *zsocket) error {
	c := t.curve
	if c == nil {
		return nil
	}
	for _, o := range []struct {
		opt  C.int
		name string
		key  *[32]byte
	}{
		{C.ZMQ_CURVE_SERVERKEY, "ZMQ_CURVE_SERVERKEY", &c.keys.public},
		{C.ZMQ_CURVE_PUBLICKEY, "ZMQ_CURVE_PUBLICKEY", &c.keys.public},
		{C.ZMQ_CURVE_SECRETKEY, "ZMQ_CURVE_SECRETKEY", &c.keys.secret},
	} {
		if err := sock.setBytes(o.opt, string(o.key[:])); err != nil {
			return fmt.Errorf("set %s: %w", o.name, err)
		}
	}
	return nil
}

// serveZAP answers libzmq's authentication requests until the context is
// terminated: a CURVE client is admitted only with the job's public key.
func (c *curve) serveZAP(sock *zsocket) {
	defer func() { _ = sock.close() }()
	for {
		req, err := recvParts(sock)
		if err != nil {
			return // ETERM: the transport is closing
		}
		// version, request id, domain, address, routing id, mechanism,
		// credentials (CURVE: the client's long-term public key).
		status, text := "400", "malformed ZAP request"
		if len(req) >= 7 && string(req[0]) == "1.0" {
			addr := string(req[3])
			switch {
			case string(req[5]) != "CURVE":
				text = "mechanism " + string(req[5]) + " refused"
			case string(req[6]) != string(c.keys.public[:]):
				text = "client key is not the job's"
			default:
				status, text = "200", "OK"
			}
			if status != "200" {
				c.refuse(addr, text)
			}
		}
		id := []byte(nil)
		if len(req) >= 2 {
			id = req[1]
		}
		if sendParts(sock, []byte("1.0"), id, []byte(status), []byte(text), nil, nil) != nil {
			return
		}
	}
}

// watch counts the ROUTER's failed handshakes until the context is
// terminated.
func (c *curve) watch(mon *zsocket) {
	defer func() { _ = mon.close() }()
	for {
		ev, err := recvParts(mon)
		if err != nil {
			return
		}
		if len(ev) < 1 || len(ev[0]) < 6 {
			continue
		}
		switch C.eps_event(unsafe.Pointer(&ev[0][0])) {
		case C.ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, C.ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
			// libzmq names the listening endpoint, not the peer.
			c.refuse("unknown peer", "CURVE handshake failed: a peer without the job's keys (plaintext ZeroMQ, another protocol, or another server key)")
		}
	}
}

// refuse counts one refused handshake and queues it for Recv.
func (c *curve) refuse(peer, why string) {
	c.refused.Add(1)
	c.mu.Lock()
	if len(c.pending) < maxPendingRefusals {
		c.pending = append(c.pending, &van.FrameError{Peer: peer, Reason: van.ReasonEncrypt,
			Err: errors.New(why + " (PS_ENCRYPT=on: every node needs the job's token or key file)")})
	}
	c.mu.Unlock()
}

// refusalPoll is how long the encrypted ROUTER's blocking receive waits
// before Recv looks for refusals to report (ZMQ_RCVTIMEO).
const refusalPoll = 100 * time.Millisecond

// errAgain is a receive that timed out (ZMQ_RCVTIMEO).
const errAgain = errno(C.EAGAIN)

// recvEncrypted is Recv with encryption on: it returns the refusals the
// ZAP handler and the monitor recorded as *van.FrameError (so that the node
// counts and logs them, as any refused peer), within refusalPoll even when
// no message arrives. Caller holds t.recvMu.
func (t *Transport) recvEncrypted() (*message.Message, error) {
	for {
		if err := t.nextRefusal(); err != nil {
			return nil, err
		}
		m, err := t.recvLocked()
		if !errors.Is(err, errAgain) {
			return m, err
		}
	}
}

// nextRefusal returns a queued refusal, or nil.
func (t *Transport) nextRefusal() error {
	c := t.curve
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	fe := c.pending[0]
	c.pending[0] = nil
	c.pending = c.pending[1:]
	return fe
}

// EncryptionRefusals is the number of handshakes the ROUTER refused since
// New (0 without encryption): peers without the job's CURVE keys.
func (t *Transport) EncryptionRefusals() int64 {
	if t.curve == nil {
		return 0
	}
	return t.curve.refused.Load()
}

// recvParts receives one multipart message into Go memory, retrying EINTR.
func recvParts(s *zsocket) ([][]byte, error) {
	var parts [][]byte
	for {
		var m C.zmq_msg_t
		C.zmq_msg_init(&m)
		for {
			rc, err := C.zmq_msg_recv(&m, s.p, 0)
			if rc >= 0 {
				break
			}
			if e := callErr(err); e != errIntr {
				C.zmq_msg_close(&m)
				return nil, e
			}
		}
		parts = append(parts, C.GoBytes(C.zmq_msg_data(&m), C.int(C.zmq_msg_size(&m))))
		more := C.zmq_msg_more(&m)
		C.zmq_msg_close(&m)
		if more == 0 {
			return parts, nil
		}
	}
}

// sendParts sends parts as one multipart message, retrying EINTR.
func sendParts(s *zsocket, parts ...[]byte) error {
	for i, p := range parts {
		flags := C.int(0)
		if i < len(parts)-1 {
			flags = C.ZMQ_SNDMORE
		}
		var ptr unsafe.Pointer
		if len(p) > 0 {
			ptr = unsafe.Pointer(&p[0])
		}
		for {
			rc, err := C.zmq_send(s.p, ptr, C.size_t(len(p)), flags)
			if rc >= 0 {
				break
			}
			if e := callErr(err); e != errIntr {
				return e
			}
		}
	}
	return nil
}

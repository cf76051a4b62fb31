//go:build rdma && cgo

package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/elasticps/elasticps/message"
)

// The fabric backend bootstraps each link over a TCP connection to the
// node's advertised host:port (as BytePS's fabric van bootstraps through
// ZeroMQ): the dialler sends a hello with its node id, its link id and its
// endpoint address (fi_getname); the listener answers with its own. The
// connection then stays open, idle, for the link's lifetime: its closing is
// how each side learns that the other went away.
//
//	magic "EPSB" | version u8 | status u8 | addr length u16 | node i32 | link u32 | addr
const (
	bootMagic     = "EPSB"
	bootVersion   = 1
	bootHdr       = 16
	bootMaxAddr   = 512
	bootTimeout   = 10 * time.Second
	bootStatusOK  = 0
	bootStatusBye = 1 // refused: the listener is closing

	retryPortMin, retryPortMax = 10000, 50000
)

type bootMsg struct {
	status uint8
	node   int32
	link   uint32
	addr   []byte
}

func writeBoot(w io.Writer, m bootMsg) error {
	b := make([]byte, bootHdr+len(m.addr))
	copy(b, bootMagic)
	b[4] = bootVersion
	b[5] = m.status
	binary.LittleEndian.PutUint16(b[6:], uint16(len(m.addr)))
	binary.LittleEndian.PutUint32(b[8:], uint32(m.node))
	binary.LittleEndian.PutUint32(b[12:], m.link)
	copy(b[bootHdr:], m.addr)
	_, err := w.Write(b)
	return err
}

var errNotBoot = errors.New("not an elasticps RDMA bootstrap hello")

func readBoot(r io.Reader) (bootMsg, error) {
	var m bootMsg
	var h [bootHdr]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return m, err
	}
	if string(h[:4]) != bootMagic {
		return m, fmt.Errorf("%w (starts with %q)", errNotBoot, h[:4])
	}
	if h[4] != bootVersion {
		return m, fmt.Errorf("bootstrap version %d, want %d", h[4], bootVersion)
	}
	n := int(binary.LittleEndian.Uint16(h[6:]))
	if n > bootMaxAddr {
		return m, fmt.Errorf("bootstrap address of %d bytes exceeds %d", n, bootMaxAddr)
	}
	m.status = h[5]
	m.node = int32(binary.LittleEndian.Uint32(h[8:]))
	m.link = binary.LittleEndian.Uint32(h[12:])
	m.addr = make([]byte, n)
	if _, err := io.ReadFull(r, m.addr); err != nil {
		return m, err
	}
	return m, nil
}

// listenTCP binds host:port, retrying random ports on EADDRINUSE.
func listenTCP(host string, port, maxRetry int) (net.Listener, error) {
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return ln, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("van/rdma: listen on %s:%d: %w", host, port, err)
		}
		if attempt >= maxRetry {
			return nil, fmt.Errorf("van/rdma: listen on %s:%d: %w (gave up after %d random retries)", host, port, err, maxRetry)
		}
		port = retryPortMin + rand.IntN(retryPortMax-retryPortMin)
	}
}

func nodeOrEmpty(id int32) int32 {
	if id < 0 {
		return message.Empty
	}
	return id
}

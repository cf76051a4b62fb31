package vantest

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Recorder is a TCP proxy that records every byte it forwards, both ways:
// an eavesdropper on the wire between two nodes.
type Recorder struct {
	ln     net.Listener
	target string

	mu   sync.Mutex
	seen []byte
	wg   sync.WaitGroup
}

// NewRecorder proxies connections to its own port (Port) to target
// (host:port) until the test ends.
func NewRecorder(t testing.TB, target string) *Recorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &Recorder{ln: ln, target: target}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		assert.NoError(t, ln.Close())
		r.wg.Wait()
	})
	return r
}

// Port is the port to connect to instead of the target's.
func (r *Recorder) Port() int32 { return int32(r.ln.Addr().(*net.TCPAddr).Port) }

// Seen reports whether pattern crossed the proxy, in either direction, in
// the clear; n is the number of bytes recorded.
func (r *Recorder) Seen(pattern []byte) (found bool, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Contains(r.seen, pattern), len(r.seen)
}

func (r *Recorder) accept() {
	defer r.wg.Done()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		conns = append(conns, c, up)
		r.wg.Add(2)
		go r.pipe(up, c)
		go r.pipe(c, up)
	}
}

// pipe copies from src to dst, recording, until either side closes.
func (r *Recorder) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			r.seen = append(r.seen, buf[:n]...)
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF or a closed connection: the stream ended
		}
	}
}

package tcp

import (
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// zmtpGreeting is what a ZeroMQ socket sends first on a new connection.
var zmtpGreeting = []byte{0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F}

// A listener that greets in ZMTP and drops the connection (as libzmq does
// with a peer that answers in another protocol) is reported once, and is
// redialled with a growing delay, not in a busy loop.
func TestDialZMTPListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var accepts atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			_, _ = c.Write(zmtpGreeting)
			_ = c.Close()
		}
	}()
	var logs testutil.SyncBuffer
	tr, err := New(Config{Options: van.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	require.NoError(t, err)
	defer tr.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, tr.Connect(message.Node{ID: 1, Hostname: "127.0.0.1", Port: int32(port)}, message.Empty))
	testutil.WaitFor(t, 20*time.Second, func() bool { return accepts.Load() >= 4 },
		func() string { return "the listener was not redialled" })
	addr := "127.0.0.1:" + itoa(port)
	want := "a peer at " + addr + " speaks ZeroMQ (ZMTP); this node uses DMLC_PS_VAN_TYPE=tcp: set the same van type on every node"
	assert.Equal(t, 1, strings.Count(logs.String(), want), logs.String())
	tr.mu.RLock()
	p := tr.peers[1]
	tr.mu.RUnlock()
	p.mu.Lock()
	wait := p.wait
	p.mu.Unlock()
	assert.GreaterOrEqual(t, wait, 4*redialMin, "redials of a connection dropped at once back off")
}

// A ZeroMQ dialer's greeting is recognised at once (a ZMTP dialer sends
// its 10-byte signature and waits), reported once per host however often
// it reconnects, and never reaches Recv as a malformed message.
func TestAcceptZMTPDialer(t *testing.T) {
	var logs testutil.SyncBuffer
	tr, err := New(Config{Options: van.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	require.NoError(t, err)
	defer tr.Close()
	port, err := tr.Bind(message.Node{Hostname: "127.0.0.1"}, 0)
	require.NoError(t, err)
	closed := make(chan struct{}, 3)
	for range 3 {
		c, err := net.Dial("tcp", "127.0.0.1:"+itoa(port))
		require.NoError(t, err)
		_, err = c.Write(zmtpGreeting)
		require.NoError(t, err)
		go func() {
			var b [1]byte
			_, _ = c.Read(b[:]) // returns when the van closes it
			_ = c.Close()
			closed <- struct{}{}
		}()
	}
	for range 3 {
		testutil.Recv(t, closed, 20*time.Second, func() string { return "the van kept a ZMTP connection open" })
	}
	want := "a peer at 127.0.0.1 speaks ZeroMQ (ZMTP); this node uses DMLC_PS_VAN_TYPE=tcp: set the same van type on every node"
	assert.Equal(t, 1, strings.Count(logs.String(), want), logs.String())
	assert.Empty(t, tr.inbox, "nothing for Recv")
}

func itoa(i int) string { return strconv.Itoa(i) }

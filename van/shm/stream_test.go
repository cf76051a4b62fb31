//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/vantest"
)

// TestStreamWrapsAndWaits: messages larger than a 4 KiB stream, and many
// small ones, cross its end again and again and arrive intact, whether the
// receiver polls or sleeps at once.
func TestStreamWrapsAndWaits(t *testing.T) {
	for _, spin := range []time.Duration{-1, 0} {
		t.Run(spin.String(), func(t *testing.T) {
			cfg := Config{StreamBytes: 4096, InlineMax: 1 << 30, Spin: spin}
			server, worker := connectedPair(t, cfg)
			sizes := []int{10 << 10, 1, 1000, 4096, 3000, 64 << 10}
			go func() {
				for i := range 60 {
					if _, err := worker.Send(kvMsg(8, int32(i), pattern(byte(i), sizes[i%len(sizes)]))); err != nil {
						t.Errorf("send %d: %v", i, err)
						return
					}
				}
			}()
			for i := range 60 {
				m, err := vantest.RecvWithin(t, server)
				require.NoError(t, err)
				require.Equal(t, int32(i), m.Meta.Timestamp)
				require.Equal(t, pattern(byte(i), sizes[i%len(sizes)]), m.Data[1], "message %d", i)
				server.Release(m)
			}
		})
	}
}

// TestNotesReclaimTheDataArea: release notes travel through the note ring,
// so that a segment filled by messages kept and then let go takes large
// frames again.
func TestNotesReclaimTheDataArea(t *testing.T) {
	server, worker := connectedPair(t, Config{RingBytes: 1 << 20})
	_, err := worker.Send(kvMsg(8, 0, nil)) // queued until connected: inline
	require.NoError(t, err)
	_, err = vantest.RecvWithin(t, server)
	require.NoError(t, err)
	views := func() int {
		server.viewsMu.Lock()
		defer server.viewsMu.Unlock()
		return len(server.views)
	}
	for round := range 3 {
		var kept []*message.Message
		for i := range 3 {
			_, err := worker.Send(kvMsg(8, int32(i), pattern(byte(round+i), 300<<10)))
			require.NoError(t, err)
			m, err := vantest.RecvWithin(t, server)
			require.NoError(t, err)
			kept = append(kept, m)
		}
		require.Equal(t, 3, views(), "round %d: all three in the data area", round)
		for _, m := range kept {
			server.Release(m)
		}
	}
}

// rawHello sends a hello of the given version with a fresh segment.
func rawHello(t *testing.T, c *net.UnixConn, version byte, lay layout) []byte {
	seg, fd, err := newSegment(int(lay.size))
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(seg) })
	defer func() { _ = unix.Close(fd) }()
	h := make([]byte, helloLen)
	copy(h, helloMagic[:])
	h[4] = version
	binary.LittleEndian.PutUint32(h[8:], 9)
	binary.LittleEndian.PutUint64(h[12:], lay.size)
	binary.LittleEndian.PutUint32(h[20:], uint32(lay.stream))
	binary.LittleEndian.PutUint32(h[24:], uint32(lay.notes))
	if version == 1 {
		h = h[:20]
	}
	_, _, err = c.WriteMsgUnix(h, unix.UnixRights(fd), nil)
	require.NoError(t, err)
	return seg
}

func frameError(t *testing.T, tr van.Transport) *van.FrameError {
	t.Helper()
	_, err := vantest.RecvWithin(t, tr)
	var fe *van.FrameError
	require.True(t, errors.As(err, &fe), "want a *van.FrameError, got %v", err)
	return fe
}

// TestOtherVersionRefused: a listener refuses a hello of another protocol
// version with an error naming both, and answers with its own, so that
// the dialer can say why; a dialer refuses a listener of another version.
func TestOtherVersionRefused(t *testing.T) {
	server, sn := bindServer(t, Config{})
	c := dial(t, sn.Port)
	rawHello(t, c, 1, Config{}.layout())
	fe := frameError(t, server)
	assert.ErrorContains(t, fe.Err, "version 1, this node 2")
	var ack [ackLen]byte
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := c.Read(ack[:])
	require.NoError(t, err)
	assert.Equal(t, byte(protoVersion), ack[4])

	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: Addr(int(sn.Port) + 1), Net: "unix"})
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		var h [helloLen]byte
		_, _, _, _, _ = c.ReadMsgUnix(h[:], make([]byte, 64))
		_, _ = c.Write(append(helloMagic[:], 3, 0, 0, 0))
		_, _ = c.Read(h[:])
	}()
	_, err = sendHello(dial(t, sn.Port+1), 9, Config{}.layout())
	var ve *versionError
	require.ErrorAs(t, err, &ve)
	assert.ErrorContains(t, err, "version 3, this node 2")
}

// TestBadStreamHeadIsFatal: a sender whose stream head runs more than the
// stream's size ahead is cut off with a FrameError, not trusted.
func TestBadStreamHeadIsFatal(t *testing.T) {
	server, sn := bindServer(t, Config{})
	c := dial(t, sn.Port)
	o, err := sendHello(c, 9, Config{RingBytes: 1 << 20, StreamBytes: 4096}.layout())
	require.NoError(t, err)
	t.Cleanup(o.unmap)
	o.w.head = 1 << 40
	require.NoError(t, o.w.publish())
	fe := frameError(t, server)
	assert.ErrorContains(t, fe.Err, "stream head")
	assert.ErrorIs(t, fe.Err, errFatal)
}

// TestBadLayoutRefused: a hello whose stream and note ring do not fit its
// segment is refused.
func TestBadLayoutRefused(t *testing.T) {
	server, sn := bindServer(t, Config{})
	rawHello(t, dial(t, sn.Port), protoVersion, layout{size: 1 << 16, stream: 1 << 20, notes: 8})
	fe := frameError(t, server)
	assert.ErrorContains(t, fe.Err, "too small")
}

func TestConfigFromEnv(t *testing.T) {
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) { return v, k == SpinEnv }
	}
	cfg, err := ConfigFromEnv(env("250"))
	require.NoError(t, err)
	assert.Equal(t, 250*time.Microsecond, cfg.Spin)
	cfg, err = ConfigFromEnv(env("0"))
	require.NoError(t, err)
	assert.Negative(t, cfg.Spin, "0: never poll")
	_, err = ConfigFromEnv(env("-3"))
	assert.ErrorContains(t, err, SpinEnv)
	cfg, err = ConfigFromEnv(env(""))
	require.NoError(t, err)
	assert.Zero(t, cfg.Spin)
}

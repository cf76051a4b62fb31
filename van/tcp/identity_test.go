package tcp

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
	"github.com/elasticps/elasticps/van/internal/peerauth"
)

// With a token, a connection that announces a node id without that id's
// tag (a stranger using a live node's id) gets its messages marked
// UnverifiedSender; the tagged hello of a token holder, and an anonymous
// one, do not. A real dialer with the token sends the tag.
func TestHelloTagMarksUnverifiedSenders(t *testing.T) {
	key := []byte("the-job-secret")
	tr, err := New(Config{Options: van.Options{AuthKey: key}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	port, err := tr.Bind(message.Node{Hostname: "127.0.0.1"}, 0)
	require.NoError(t, err)
	type got struct {
		m   *message.Message
		err error
	}
	recv := func() *message.Message {
		g := testutil.Within(t, 10*time.Second, func() got {
			m, err := tr.Recv()
			return got{m, err}
		}, func() string { return "nothing arrived" })
		require.NoError(t, g.err)
		return g.m
	}
	for _, c := range []struct {
		name       string
		id         int32
		tag        []byte
		unverified bool
	}{
		{"no tag", 9, nil, true},
		{"forged tag", 9, make([]byte, peerauth.TagLen), true},
		{"another id's tag", 9, peerauth.Tag(key, 11), true},
		{"its tag", 9, peerauth.Tag(key, 9), false},
		{"anonymous", message.Empty, nil, false},
	} {
		conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		require.NoError(t, err)
		require.NoError(t, writeHello(conn, c.id, c.tag))
		writeMsg(t, conn, pushMeta(1), []byte{7})
		m := recv()
		assert.Equal(t, c.id, m.Meta.Sender, c.name)
		assert.Equal(t, c.unverified, m.UnverifiedSender, c.name)
		tr.Release(m)
		_ = conn.Close()
	}

	dialer, err := New(Config{Options: van.Options{AuthKey: key}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dialer.Close() })
	require.NoError(t, dialer.Connect(message.Node{ID: 1, Hostname: "127.0.0.1", Port: int32(port)}, 9))
	out := &message.Message{Meta: message.NewMeta()}
	out.Meta.Recver = 1
	_, err = dialer.Send(out)
	require.NoError(t, err)
	m := recv()
	assert.Equal(t, int32(9), m.Meta.Sender)
	assert.False(t, m.UnverifiedSender, "a token holder's connection")
}

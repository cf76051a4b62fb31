//go:build cgo

package zmq

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// A fork server answers a worker on the worker's DEALER (ROUTER→DEALER):
// on the bytedance wire the worker's Recv returns those answers, with the
// sender the fork's sender frame names, and drops one whose sender frame is
// not the node the DEALER was dialled to.
func TestBytedanceReceivesAnswersOnDealer(t *testing.T) {
	worker, err := New(Config{Options: van.Options{Wire: message.WireBytedance}})
	require.NoError(t, err)
	defer worker.Close()
	_, err = worker.Bind(message.Node{Hostname: "127.0.0.1"}, 10)
	require.NoError(t, err)

	// The fork server's ROUTER, driven by hand.
	ctx, err := newContext()
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.term()) }()
	router, err := ctx.socket(sockRouter)
	require.NoError(t, err)
	defer router.close()
	require.NoError(t, router.setInt(optLinger, 0))
	require.NoError(t, router.bind("tcp://127.0.0.1:*"))
	ep, err := router.lastEndpoint()
	require.NoError(t, err)
	port, err := strconv.Atoi(ep[strings.LastIndexByte(ep, ':')+1:])
	require.NoError(t, err)

	const workerID, serverID = 9, 8
	server := message.Node{ID: serverID, Role: message.RoleServer, Hostname: "127.0.0.1", Port: int32(port)}
	require.NoError(t, worker.Connect(server, workerID))

	push := &message.Message{Meta: message.NewMeta()}
	push.Meta.Recver, push.Meta.Request, push.Meta.Push, push.Meta.Timestamp = serverID, true, true, 7
	_, err = worker.Send(push)
	require.NoError(t, err)
	got, err := recvCopies(router)
	require.NoError(t, err)
	require.Equal(t, "ps9", string(got[0]), "the worker's DEALER identity")

	answer := func(sender string, ts int32) {
		t.Helper()
		m := message.NewMeta()
		m.Push, m.Timestamp, m.Request = true, ts, false
		meta, err := message.WireBytedance.Append(nil, &m)
		require.NoError(t, err)
		require.NoError(t, sendCopies(router, [][]byte{[]byte("ps9"), []byte(sender), meta}))
	}
	answer("ps10", 1) // names another node: dropped
	answer("ps8", 7)
	msg, err := worker.Recv()
	require.NoError(t, err)
	assert.Equal(t, int32(serverID), msg.Meta.Sender)
	assert.Equal(t, int32(workerID), msg.Meta.Recver)
	assert.Equal(t, int32(7), msg.Meta.Timestamp, "the answer from ps8, not the one naming ps10")
	assert.False(t, msg.Meta.Request)
	worker.Release(msg)
}

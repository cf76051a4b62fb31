package postoffice_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van/zmq"
	zmq4 "github.com/pebbe/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pushFrames is a push request of sumVals times 100 for sumKeys, as a
// worker sends it: what a stranger would add to the job's sums.
func pushFrames(ts int32) [][]byte {
	m := message.NewMeta()
	m.AppID, m.CustomerID, m.Timestamp, m.Request, m.Push = 0, 0, ts, true, true
	m.DataType = []message.DataType{message.Uint64, message.Float}
	keys, vals := make([]byte, 0, 8*len(sumKeys)), make([]byte, 0, 4*len(sumVals))
	for i, k := range sumKeys {
		keys = binary.LittleEndian.AppendUint64(keys, k)
		vals = binary.LittleEndian.AppendUint32(vals, math.Float32bits(100*sumVals[i]))
	}
	return [][]byte{message.EncodeMeta(&m), keys, vals}
}

func sendFrames(t *testing.T, s *zmq4.Socket, frames [][]byte) {
	t.Helper()
	_, err := s.SendMessage(frames)
	require.NoError(t, err)
}

func alive(t *testing.T, j *jobtest.Job) {
	t.Helper()
	for _, p := range j.All() {
		select {
		case <-p.Done():
			t.Fatalf("node %v stopped", p.MyNode())
		default:
		}
	}
}

// With a token, a stranger connecting under a live node's ZeroMQ identity
// (the plain "ps<id>" ps-lite uses, or one with a forged tag) neither
// takes that node's connection over nor gets anything acted on: its
// pushes under a live worker's id and its TERMINATE under the scheduler's
// are refused, counted and logged once per peer; the job's sums stay
// exact.
func TestAuthStrangerCannotTakeOverALiveIdentity(t *testing.T) {
	j, logs := authJob(t, 1, 2, nil)
	ws := kvNodes(t, j)
	pushRounds(t, ws, 1, 0) // every node has proven itself to the others
	srv, w0 := j.Servers[0], j.Workers[0]
	victim := j.Workers[1].MyNode().ID
	plain := stranger(t, srv.MyNode(), fmt.Sprintf("ps%d", victim))
	forged := stranger(t, srv.MyNode(), fmt.Sprintf("ps%d:%s", victim, strings.Repeat("0", 32)))
	sched := stranger(t, w0.MyNode(), "ps1")
	const n = 50
	for i := range n {
		sendFrames(t, plain, pushFrames(int32(i)))
		sendFrames(t, forged, pushFrames(int32(i)))
		send(t, sched, message.CmdTerminate, nil)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return srv.AuthRefused("identity") == 2*n && w0.AuthRefused("identity") == n
	}, func() string {
		return fmt.Sprintf("server %d, worker %d refusals\n%s", srv.AuthRefused("identity"), w0.AuthRefused("identity"), logs.String())
	})
	// the real nodes' connections were never cut: pushes and pulls go on,
	// with exact sums (nothing of the strangers' was added, nothing of the
	// job's lost)
	pushRounds(t, ws, 2, 1)
	alive(t, j)
	assert.Equal(t, 1, refusalLines(logs, fmt.Sprint(victim), "identity"), "one line per peer and reason")
	assert.Equal(t, 1, refusalLines(logs, "1", "identity"))
	assert.NotContains(t, logs.String(), zmq.Identity([]byte(jobToken), victim), "the tag is a credential, never logged")
}

// A flood of refused messages from one peer costs a bounded number of log
// lines (one per peer and reason per postoffice.LogInterval), while every
// refusal is counted.
func TestAuthRefusalFloodLogsBoundedLines(t *testing.T) {
	j, logs := authJob(t, 1, 1, nil)
	w := j.Workers[0]
	s := stranger(t, w.MyNode(), "ps99")
	const n = 2000
	start := time.Now()
	for range n {
		send(t, s, message.CmdTerminate, nil)
	}
	testutil.WaitFor(t, 20*time.Second, func() bool { return w.AuthRefused("not_scheduler") == n },
		func() string { return fmt.Sprint(w.AuthRefused("not_scheduler")) })
	intervals := int(time.Since(start)/postoffice.LogInterval) + 1
	lines := refusalLines(logs, "99", "not_scheduler")
	assert.GreaterOrEqual(t, lines, 1)
	assert.LessOrEqual(t, lines, intervals, "refusals are logged once per peer and reason per interval, not per message")
	alive(t, j)
}

// holdIdentity is a raw DEALER to n under ident whose ZMTP handshake has
// completed: a connection of a dead process that the kernel did not close
// (a half-open one), still holding the identity at n's ROUTER.
func holdIdentity(t *testing.T, n message.Node, ident string) {
	t.Helper()
	s, err := zmq4.NewSocket(zmq4.DEALER)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_ = s.SetLinger(0)
	require.NoError(t, s.SetIdentity(ident))
	mon := fmt.Sprintf("inproc://hold-%s-%d", strings.ReplaceAll(ident, ":", "-"), n.Port)
	require.NoError(t, s.Monitor(mon, zmq4.EVENT_HANDSHAKE_SUCCEEDED))
	m, err := zmq4.NewSocket(zmq4.PAIR)
	require.NoError(t, err)
	defer func() { _ = m.Close() }()
	require.NoError(t, m.Connect(mon))
	require.NoError(t, m.SetRcvtimeo(10*time.Second))
	require.NoError(t, s.Connect(fmt.Sprintf("tcp://%s:%d", n.Hostname, n.Port)))
	ev, _, _, err := m.RecvEvent(0)
	require.NoError(t, err, "no handshake with %v", n)
	require.Equal(t, zmq4.EVENT_HANDSHAKE_SUCCEEDED, ev)
}

// With a token, a server that dies and is replaced still takes its id
// back, even while the scheduler's and the worker's ROUTERs hold a
// connection of the dead process under its identity (half-open: never
// closed by the kernel): the identity is the same for every process of
// the node, and libzmq hands it to the newest connection.
func TestAuthServerRecoveryTakesItsIdentityBack(t *testing.T) {
	j, logs := authJob(t, 2, 1, deathHeartbeats)
	jobtest.Barrier(t, j.All(), message.AllGroup)
	old := j.Servers[1].MyNode()
	j.Servers[1].Stop()
	ident := zmq.Identity([]byte(jobToken), old.ID)
	holdIdentity(t, j.Scheduler.MyNode(), ident)
	holdIdentity(t, j.Workers[0].MyNode(), ident)

	repl := j.NewNode(message.RoleServer, nil)
	require.NoError(t, repl.Start(0))
	me := repl.MyNode()
	require.Equal(t, old.ID, me.ID)
	require.True(t, repl.IsRecovery())
	// repl -> worker: a data message arrives from the recovered server
	w := j.Workers[0]
	got := make(chan *message.Message, 16)
	require.NoError(t, w.AddCustomer(5, 5, acceptFunc(func(m *message.Message) { got <- m })))
	testutil.WaitFor(t, 10*time.Second, func() bool {
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.AppID, m.Meta.CustomerID, m.Meta.Recver, m.Meta.Request = 5, 5, w.MyNode().ID, true
		if _, err := repl.Send(m); err != nil {
			return false
		}
		select {
		case r := <-got:
			return r.Meta.Sender == me.ID
		case <-time.After(200 * time.Millisecond):
			return false
		}
	}, func() string { return logs.String() })
	// repl -> scheduler, and every other path: a barrier of all
	jobtest.Barrier(t, []*postoffice.Postoffice{j.Scheduler, j.Servers[0], repl, w}, message.AllGroup)
}

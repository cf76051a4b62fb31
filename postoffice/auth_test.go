package postoffice_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van/anyvan"
	zmq4 "github.com/pebbe/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const jobToken = "the-job-secret"

// authJob starts a job whose nodes hold jobToken, logging into the
// returned buffer.
func authJob(t *testing.T, ns, nw int, mod func(*postoffice.Config)) (*jobtest.Job, *testutil.SyncBuffer) {
	t.Helper()
	if anyvan.TestKind() != "zmq" {
		t.Skip("a raw ZeroMQ peer plays the stranger")
	}
	logs := &testutil.SyncBuffer{}
	j := startJob(t, ns, nw, func(c *postoffice.Config) {
		c.AuthToken = jobToken
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		if mod != nil {
			mod(c)
		}
	})
	return j, logs
}

// stranger is a raw ZeroMQ DEALER to n under identity ident ("" for an
// anonymous one), which knows no token.
func stranger(t *testing.T, n message.Node, ident string) *zmq4.Socket {
	t.Helper()
	s, err := zmq4.NewSocket(zmq4.DEALER)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_ = s.SetLinger(0)
	if ident != "" {
		require.NoError(t, s.SetIdentity(ident))
	}
	require.NoError(t, s.Connect(fmt.Sprintf("tcp://%s:%d", n.Hostname, n.Port)))
	return s
}

// send sends a meta-only control message cmd over s.
func send(t *testing.T, s *zmq4.Socket, cmd message.Command, edit func(*message.Meta)) {
	t.Helper()
	m := message.NewMeta()
	m.Control.Cmd = cmd
	if edit != nil {
		edit(&m)
	}
	_, err := s.SendBytes(message.EncodeMeta(&m), 0)
	require.NoError(t, err)
}

// refusalLines counts the log lines refusing messages from peer for reason.
func refusalLines(logs *testutil.SyncBuffer, peer, reason string) int {
	n := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "refused a message") && strings.Contains(l, "peer="+peer+" ") && strings.Contains(l, "reason="+reason+" ") {
			n++
		}
	}
	return n
}

// pushPullSums runs rounds of pushes of integer-valued floats from every
// worker and checks the exact sums they pull.
func pushPullSums(t *testing.T, j *jobtest.Job) {
	t.Helper()
	pushRounds(t, kvNodes(t, j), 3, 0)
}

var sumKeys, sumVals = []uint64{1, 1 << 40, 1<<63 + 5}, []float32{1, 2, 3}

// kvNodes makes every server of j a KV server with the default handler
// and returns a KV worker on every worker.
func kvNodes(t *testing.T, j *jobtest.Job) []*kv.Worker {
	t.Helper()
	for _, po := range j.Servers {
		srv, err := kv.NewServer(po, 0)
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		h := kv.NewDefaultHandler()
		srv.SetRequestHandler(h.Handle)
	}
	ws := make([]*kv.Worker, len(j.Workers))
	for i, po := range j.Workers {
		var err error
		ws[i], err = kv.NewWorker(po, 0, 0)
		require.NoError(t, err)
		t.Cleanup(ws[i].Close)
	}
	return ws
}

// pushRounds pushes sumVals rounds times from every worker of ws, after
// done such rounds, and checks the exact sums every worker pulls.
func pushRounds(t *testing.T, ws []*kv.Worker, rounds, done int) {
	t.Helper()
	keys, vals := sumKeys, sumVals
	for range rounds {
		for _, w := range ws {
			ts, err := kv.Push(w, keys, vals, nil, kv.Options{})
			require.NoError(t, err)
			require.NoError(t, w.Wait(ts))
		}
	}
	n := float32((done + rounds) * len(ws))
	for _, w := range ws {
		var got []float32
		ts, err := kv.Pull(w, keys, &got, nil, kv.Options{})
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts))
		assert.Equal(t, []float32{n, 2 * n, 3 * n}, got)
	}
}

// A stranger without the token cannot register, end the job, release a
// barrier, or change what the workers pull; every attempt is refused,
// counted and logged once per peer and reason.
func TestAuthStrangerCannotDisturbTheJob(t *testing.T) {
	j, logs := authJob(t, 1, 2, nil)
	sched, w0 := j.Scheduler, j.Workers[0]

	// join: an anonymous ADD_NODE without a proof, then with a bad one
	reg := stranger(t, sched.MyNode(), "")
	me := message.Node{Role: message.RoleServer, ID: message.Empty, Hostname: "127.0.0.1", Port: 4242, CustomerID: 0}
	for range 3 {
		send(t, reg, message.CmdAddNode, func(m *message.Meta) { m.Control.Nodes = []message.Node{me} })
	}
	send(t, reg, postoffice.CmdAuthRegister, func(m *message.Meta) {
		m.Control.Nodes = []message.Node{me}
		m.Body = make([]byte, 64)
	})
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return sched.AuthRefused("no_proof") == 3 && sched.AuthRefused("bad_proof") == 1
	}, func() string { return logs.String() })

	// TERMINATE and barrier release from a non-scheduler id
	barrier := make(chan error, 1)
	go func() { barrier <- w0.Barrier(0, message.WorkerGroup) }() // waits for worker 1
	other := stranger(t, w0.MyNode(), "ps99")
	for range 3 {
		send(t, other, message.CmdTerminate, nil)
		send(t, other, message.CmdBarrier, func(m *message.Meta) { m.Control.BarrierGroup = message.WorkerGroup })
	}
	testutil.WaitFor(t, 10*time.Second, func() bool { return w0.AuthRefused("not_scheduler") == 6 },
		func() string { return logs.String() })
	select {
	case err := <-barrier:
		t.Fatalf("the barrier returned (%v) before worker 1 joined it", err)
	case <-w0.Done():
		t.Fatal("worker 0 stopped")
	default:
	}
	require.NoError(t, j.Workers[1].Barrier(0, message.WorkerGroup))
	require.NoError(t, testutil.Recv(t, barrier, 10*time.Second, func() string { return logs.String() }))

	pushPullSums(t, j)
	for _, p := range j.All() {
		select {
		case <-p.Done():
			t.Fatalf("node %v stopped", p.MyNode())
		default:
		}
	}
	assert.Equal(t, 1, refusalLines(logs, "anonymous", "no_proof"), "one log line per peer and reason")
	assert.Equal(t, 1, refusalLines(logs, "anonymous", "bad_proof"))
	assert.Equal(t, 1, refusalLines(logs, "99", "not_scheduler"))
}

// An elasticps node with the wrong token cannot join.
func TestAuthWrongTokenCannotJoin(t *testing.T) {
	j, logs := authJob(t, 1, 1, nil)
	intruder := j.NewNode(message.RoleServer, func(c *postoffice.Config) { c.AuthToken = "a-guess" })
	go func() { _ = intruder.Start(0) }()
	testutil.WaitFor(t, 10*time.Second, func() bool { return j.Scheduler.AuthRefused("bad_proof") >= 1 },
		func() string { return logs.String() })
	testutil.WaitFor(t, 10*time.Second, func() bool { return j.Scheduler.AuthRefused("no_proof") >= 1 },
		func() string { return logs.String() })
	select {
	case <-intruder.Ready():
		t.Fatal("a node with the wrong token joined")
	default:
	}
	intruder.Stop()
	pushPullSums(t, j)
	assert.Equal(t, 1, refusalLines(logs, "anonymous", "bad_proof"))
}

// Forged heartbeats in a dead server's name do not keep it alive: its
// proof ran out with it, and the stranger cannot renew it.
func TestAuthForgedHeartbeatsDoNotKeepADeadNodeAlive(t *testing.T) {
	j, logs := authJob(t, 2, 1, deathHeartbeats)
	victim := j.Servers[1].MyNode()
	// every node proves itself to the scheduler with its barrier request
	jobtest.Barrier(t, j.All(), message.AllGroup)
	require.Empty(t, j.Scheduler.DeadNodes(deathTimeout))
	j.Servers[1].Stop()
	forger := stranger(t, j.Scheduler.MyNode(), fmt.Sprintf("ps%d", victim.ID))
	stop, stopped := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-stopped }() // before the socket closes
	go func() {
		defer close(stopped)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		m := message.NewMeta()
		m.Control.Cmd = message.CmdHeartbeat
		b := message.EncodeMeta(&m)
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_, _ = forger.SendBytes(b, zmq4.DONTWAIT)
			}
		}
	}()
	testutil.WaitFor(t, 20*time.Second, func() bool {
		d := j.Scheduler.DeadNodes(deathTimeout)
		return len(d) == 1 && d[0] == victim.ID
	}, func() string { return logs.String() })
	select {
	case <-j.Scheduler.Done():
		t.Fatal("the scheduler stopped")
	default:
	}
}

// Token settings: both variables, a missing file and an empty one are
// refused with an error that names the variable and the fix.
func TestAuthTokenEnv(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(good, []byte("from-file\nignored\n"), 0o600))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	c, err := postoffice.ConfigFromEnv(workerEnv(map[string]string{"PS_AUTH_TOKEN_FILE": good}))
	require.NoError(t, err)
	assert.Equal(t, "from-file", c.AuthToken)
	c, err = postoffice.ConfigFromEnv(workerEnv(map[string]string{"PS_AUTH_TOKEN": "t"}))
	require.NoError(t, err)
	assert.Equal(t, "t", c.AuthToken)
	_, err = postoffice.ConfigFromEnv(workerEnv(map[string]string{"PS_AUTH_TOKEN_FILE": filepath.Join(dir, "missing")}))
	assert.ErrorContains(t, err, "PS_AUTH_TOKEN_FILE: cannot read the job's token")
	assert.ErrorContains(t, err, "missing")
	_, err = postoffice.ConfigFromEnv(workerEnv(map[string]string{"PS_AUTH_TOKEN_FILE": empty}))
	assert.ErrorContains(t, err, "the first line is empty")
	_, err = postoffice.ConfigFromEnv(workerEnv(map[string]string{"PS_AUTH_TOKEN": "t", "PS_AUTH_TOKEN_FILE": good}))
	assert.ErrorContains(t, err, "both PS_AUTH_TOKEN and PS_AUTH_TOKEN_FILE")
}

// Without a token the job is ps-lite's, open, and the scheduler says so
// once; the authority checks that need no token still apply.
func TestAuthOpenJob(t *testing.T) {
	if anyvan.TestKind() != "zmq" {
		t.Skip("a raw ZeroMQ peer plays the stranger")
	}
	logs := &testutil.SyncBuffer{}
	j := startJob(t, 1, 1, func(c *postoffice.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	w := j.Workers[0]
	s := stranger(t, w.MyNode(), "ps99")
	send(t, s, message.CmdTerminate, nil)
	testutil.WaitFor(t, 10*time.Second, func() bool { return w.AuthRefused("not_scheduler") == 1 }, func() string { return logs.String() })
	pushPullSums(t, j)
	assert.Equal(t, 1, strings.Count(logs.String(), "the job is open"))
}

// workerEnv is a one-worker job's environment with extra's variables set
// on top, for the tests of ConfigFromEnv's refusals.
func workerEnv(extra map[string]string) postoffice.Getenv {
	base := map[string]string{"DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9000", "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "1"}
	return func(k string) (string, bool) {
		if v, ok := extra[k]; ok {
			return v, true
		}
		v, ok := base[k]
		return v, ok
	}
}

package postoffice_test

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loggedNode is a node whose logs (its postoffice's and its transport's)
// go to log, started in the background.
type loggedNode struct {
	po    *postoffice.Postoffice
	log   *testutil.SyncBuffer
	start chan error
}

func openLogged(t *testing.T, role message.Role, van string, port int) *loggedNode {
	t.Helper()
	n := &loggedNode{log: &testutil.SyncBuffer{}, start: make(chan error, 1)}
	po, err := postoffice.Open(postoffice.Config{
		Role: role, NumServers: 1, NumWorkers: 0, VanType: van,
		SchedulerHost: "127.0.0.1", SchedulerPort: port, NodeHost: "127.0.0.1",
		Logger: slog.New(slog.NewTextHandler(n.log, nil)),
	})
	require.NoError(t, err)
	n.po = po
	t.Cleanup(po.Stop)
	go func() { n.start <- po.Start(0) }()
	return n
}

// logged waits until n's log contains text.
func (n *loggedNode) logged(t *testing.T, text string) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, func() bool { return strings.Contains(n.log.String(), text) },
		func() string { return "log does not contain " + text + ":\n" + n.log.String() })
}

// stop stops n and checks that its Start gave up with ErrStopped.
func (n *loggedNode) stop(t *testing.T) {
	t.Helper()
	n.po.Stop()
	err := testutil.Recv(t, n.start, 10*time.Second, func() string { return "Start did not return after Stop" })
	assert.True(t, errors.Is(err, postoffice.ErrStopped), "Start: %v", err)
}

// A node whose van differs from the scheduler's hears nothing, whichever
// side has the tcp van: that van recognises the ZeroMQ greeting and says
// so, once per peer, and the waiting node names the causes.
func TestVanMismatchIsReported(t *testing.T) {
	defer postoffice.SetWaitReport(200*time.Millisecond, time.Second)()
	const mismatch = "speaks ZeroMQ (ZMTP); this node uses DMLC_PS_VAN_TYPE=tcp: set the same van type on every node"
	for _, tc := range []struct{ name, schedVan, nodeVan string }{
		{"tcp node, zmq scheduler", "zmq", "tcp"},
		{"zmq node, tcp scheduler", "tcp", "zmq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := porttest.Free(t)
			sched := openLogged(t, message.RoleScheduler, tc.schedVan, port)
			server := openLogged(t, message.RoleServer, tc.nodeVan, port)
			tcpSide := sched
			if tc.nodeVan == "tcp" {
				tcpSide = server
			}
			tcpSide.logged(t, mismatch)
			server.logged(t, "server still waiting for the job: no node list from the scheduler at 127.0.0.1:")
			server.logged(t, "this node's DMLC_PS_VAN_TYPE="+tc.nodeVan+" differs from the scheduler's")
			sched.logged(t, "scheduler still waiting for nodes to register")
			sched.logged(t, "0 of 1 servers, 0 of 0 workers")
			// Reported again as the wait goes on, the mismatch once.
			testutil.WaitFor(t, 20*time.Second, func() bool { return strings.Count(server.log.String(), "server still waiting") >= 2 },
				func() string { return "the wait is not reported again:\n" + server.log.String() })
			assert.Equal(t, 1, strings.Count(tcpSide.log.String(), mismatch), tcpSide.log.String())
			server.stop(t)
			sched.stop(t)
		})
	}
}

// A node without a scheduler says what it waits for, from whom, where, and
// why that usually happens, and says it again while it waits.
func TestWaitingForAbsentScheduler(t *testing.T) {
	defer postoffice.SetWaitReport(100*time.Millisecond, 200*time.Millisecond)()
	port := porttest.Free(t)
	server := openLogged(t, message.RoleServer, "zmq", port)
	server.logged(t, "server up; registering with the scheduler")
	want := "server still waiting for the job: no node list from the scheduler at 127.0.0.1:" + itoa(port)
	server.logged(t, want)
	testutil.WaitFor(t, 20*time.Second, func() bool { return strings.Count(server.log.String(), want) >= 3 },
		func() string { return "the wait is not reported again:\n" + server.log.String() })
	for _, cause := range []string{"the scheduler is not started", "DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT do not point at it",
		"DMLC_PS_VAN_TYPE=zmq differs from the scheduler's", "level=WARN"} {
		assert.Contains(t, server.log.String(), cause)
	}
	server.stop(t)
}

// A job's scheduler and servers say when they are up and when the job is
// complete, at the default level.
func TestUpAndCompleteLines(t *testing.T) {
	port := porttest.Free(t)
	sched := openLogged(t, message.RoleScheduler, "zmq", port)
	server := openLogged(t, message.RoleServer, "zmq", port)
	for _, n := range []*loggedNode{sched, server} {
		require.NoError(t, testutil.Recv(t, n.start, 20*time.Second, func() string { return n.log.String() }))
	}
	sched.logged(t, `level=INFO msg="scheduler up" role=scheduler id=1 addr=127.0.0.1:`+itoa(port)+" van=zmq servers=1 workers=0")
	sched.logged(t, `level=INFO msg="job complete: all nodes registered" role=scheduler servers=1 workers=0`)
	server.logged(t, `level=INFO msg="server up; registering with the scheduler" role=server addr=127.0.0.1:`)
	server.logged(t, `level=INFO msg="server ready: job complete" role=server rank=0 id=8 addr=127.0.0.1:`)
	assert.NotContains(t, server.log.String()+sched.log.String(), "still waiting")
}

func itoa(i int) string { return strconv.Itoa(i) }

// PS_VERBOSE=2 logs every message with its payload sizes and no INT_MAX
// for the ids a message does not set.
func TestVerboseLogsPayloadSizes(t *testing.T) {
	var logs testutil.SyncBuffer
	j := jobtest.Start(t, jobtest.Options{Servers: 1, Workers: 1, Configure: func(c *postoffice.Config) {
		c.Verbose = 2
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	}})
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.AppID, m.Meta.CustomerID, m.Meta.Request = 0, 0, true
	m.Meta.Recver = j.Servers[0].MyNode().ID
	m.AddData(message.Uint64, make([]byte, 24))
	m.AddData(message.Float, make([]byte, 12))
	_, err := j.Workers[0].Send(m)
	require.NoError(t, err)
	want := "push=false pull=false simple_app=false head=unassigned dtype=[UINT64 FLOAT] data_size=24 data_size=12"
	testutil.WaitFor(t, 10*time.Second, func() bool { return strings.Count(logs.String(), want) == 2 },
		func() string { return "no send and recv line with the sizes:\n" + logs.String() })
	assert.NotContains(t, logs.String(), "2147483647")
}

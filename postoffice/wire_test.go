package postoffice_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

func bytedanceWire(c *postoffice.Config) { c.Wire = message.WireBytedance }

// A job whose every node speaks the BytePS fork's raw meta forms, ranks its
// nodes as usual and runs barriers on every group.
func TestBytedanceWireJob(t *testing.T) {
	j := jobtest.Start(t, jobtest.Options{Servers: 2, Workers: 2, Van: "zmq", Configure: bytedanceWire})
	var ids []int32
	for _, p := range j.All() {
		ids = append(ids, p.MyNode().ID)
	}
	assert.ElementsMatch(t, []int32{1, 8, 10, 9, 11}, ids, "node ids")
	jobtest.Barrier(t, j.All(), message.AllGroup)
	jobtest.Barrier(t, append(j.Servers[:2:2], j.Workers...), message.ServerGroup|message.WorkerGroup)
	jobtest.Barrier(t, j.Workers, message.WorkerGroup)
	for _, p := range j.All() {
		assert.Zero(t, p.Stats().Malformed.Load(), "%s rejected frames", p.MyNode())
	}
	for _, p := range j.All() {
		require.NoError(t, p.Finalize(0, false))
	}
}

// PS_WIRE selects the wire; a bad value, or the bytedance wire on a van that
// does not speak it, is refused at configuration time.
func TestWireFromEnv(t *testing.T) {
	base := map[string]string{"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1",
		"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9000", "DMLC_NODE_HOST": "127.0.0.1"}
	cfg := func(extra map[string]string) (postoffice.Config, error) {
		return postoffice.ConfigFromEnv(func(k string) (string, bool) {
			if v, ok := extra[k]; ok {
				return v, true
			}
			v, ok := base[k]
			return v, ok
		})
	}
	c, err := cfg(nil)
	require.NoError(t, err)
	assert.Equal(t, message.WireDmlc, c.Wire, "unset")
	c, err = cfg(map[string]string{"PS_WIRE": "bytedance"})
	require.NoError(t, err)
	assert.Equal(t, message.WireBytedance, c.Wire)
	_, err = cfg(map[string]string{"PS_WIRE": "protobuf"})
	var ee *postoffice.EnvError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "PS_WIRE", ee.Var)
	_, err = cfg(map[string]string{"PS_WIRE": "bytedance", "DMLC_PS_VAN_TYPE": "tcp"})
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "PS_WIRE", ee.Var)
	assert.Contains(t, err.Error(), "DMLC_PS_VAN_TYPE=zmq")
	_, err = postoffice.NewTransport(postoffice.Config{Role: message.RoleWorker, VanType: "tcp", Wire: message.WireBytedance})
	assert.ErrorContains(t, err, "PS_WIRE=bytedance needs the zmq van")
}

// A job whose nodes disagree on PS_WIRE does not hang: the scheduler, which
// receives the odd node's registration, fails Start with an error naming
// PS_WIRE and both wires, whichever side the odd node is on.
func TestWireMismatchFailsStart(t *testing.T) {
	for _, tc := range []struct {
		name            string
		sched, srv, wkr message.Wire
		want            string
	}{
		{"dmlc worker in a bytedance job", message.WireBytedance, message.WireBytedance, message.WireDmlc,
			"the peer sent a dmlc-wire meta but this node speaks bytedance (PS_WIRE=bytedance)"},
		{"bytedance server and worker, dmlc scheduler", message.WireDmlc, message.WireBytedance, message.WireBytedance,
			"the peer sent a bytedance-wire meta but this node speaks dmlc (PS_WIRE unset or dmlc)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mismatchedJob(t, tc.sched, tc.srv, tc.wkr)
			require.Error(t, err)
			assert.True(t, message.IsWireMismatch(err), "%v", err)
			assert.Contains(t, err.Error(), "postoffice: scheduler cannot form a job with its peers")
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "set the same PS_WIRE on every node")
		})
	}
}

// mismatchedJob starts a 1-server 1-worker job with the given wires and
// returns the scheduler's Start error. The others are stopped at the end.
func mismatchedJob(t *testing.T, sched, srv, wkr message.Wire) error {
	t.Helper()
	for attempt := 0; ; attempt++ {
		port := porttest.Free(t)
		node := func(role message.Role, w message.Wire) *postoffice.Postoffice {
			p, err := postoffice.Open(postoffice.Config{Role: role, NumServers: 1, NumWorkers: 1,
				SchedulerHost: "127.0.0.1", SchedulerPort: port, NodeHost: "127.0.0.1",
				VanType: "zmq", Wire: w, Logger: jobtest.Logger()})
			require.NoError(t, err)
			t.Cleanup(p.Stop)
			return p
		}
		s := node(message.RoleScheduler, sched)
		done := make(chan error, 1)
		go func() { done <- s.Start(0) }()
		for _, n := range []*postoffice.Postoffice{node(message.RoleServer, srv), node(message.RoleWorker, wkr)} {
			go func() { _ = n.Start(0) }() // ends with the node's Stop
		}
		err := testutil.Recv(t, done, 20*time.Second, func() string { return "the scheduler's Start still waits" })
		if err != nil && strings.Contains(err.Error(), "cannot listen") && attempt < 3 {
			continue // another process took the port in between
		}
		if err == nil {
			return errors.New("the scheduler started")
		}
		return err
	}
}

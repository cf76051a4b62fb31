package postoffice

import (
	"net"
	"testing"

	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSharedProcs(t *testing.T) {
	for _, c := range []struct{ procs, local, floor, want int }{
		{2, 1, 1, 2},   // alone on the host
		{2, 3, 1, 1},   // a TCP job of three on two cores
		{2, 5, 2, 2},   // a ZeroMQ node keeps its second P
		{96, 9, 2, 10}, // 8 workers and a server on a 96-core host
		{1, 4, 2, 1},   // never raised to the floor
		{8, 3, 1, 2},
	} {
		assert.Equal(t, c.want, sharedProcs(c.procs, c.local, c.floor), "sharedProcs(%d, %d, %d)", c.procs, c.local, c.floor)
	}
	assert.Equal(t, 1, procsFloor("tcp"), "procsFloor(tcp)")
	assert.Equal(t, 1, procsFloor("shm"), "procsFloor(shm)")
	assert.Equal(t, 2, procsFloor("zmq"), "procsFloor(zmq)")
	assert.Equal(t, 2, procsFloor("fabric"), "procsFloor(fabric)")
}

func TestNodesOnHost(t *testing.T) {
	nodes := []message.Node{
		{Role: message.RoleServer, ID: 8, Hostname: "10.0.0.1", Port: 9000},
		{Role: message.RoleWorker, ID: 9, Hostname: "10.0.0.1", Port: 9001},
		{Role: message.RoleWorker, ID: 11, Hostname: "10.0.0.2", Port: 9001},
		{Role: message.RoleWorker, ID: 9, Hostname: "10.0.0.1", Port: 9001}, // listed twice
		{Role: message.RoleScheduler, ID: 1, Hostname: "10.0.0.1", Port: 8000},
	}
	assert.Equal(t, 3, nodesOnHost("10.0.0.1", true, nodes), "on the scheduler's host: server, worker, scheduler")
	assert.Equal(t, 1, nodesOnHost("10.0.0.2", false, nodes), "on another host")
}

func TestOnThisHost(t *testing.T) {
	for _, c := range []struct {
		addr, me string
		want     bool
	}{
		{"10.9.8.7", "10.9.8.7", true}, // the node's own address
		{"127.0.0.1", "192.0.2.2", true},
		{"localhost", "192.0.2.2", true},
		{"::1", "192.0.2.2", true},
		{"203.0.113.77", "192.0.2.2", false}, // TEST-NET-3: no interface has it
		{"scheduler.example", "192.0.2.2", false},
	} {
		assert.Equal(t, c.want, onThisHost(c.addr, c.me), "onThisHost(%q, %q)", c.addr, c.me)
	}
	// An address of one of this machine's interfaces, other than the node's.
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			assert.True(t, onThisHost(n.IP.String(), "203.0.113.1"), "onThisHost(%s): an address of this machine", n.IP)
			break
		}
	}
}

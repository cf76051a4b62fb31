package postoffice

import (
	"testing"

	"github.com/elasticps/elasticps/message"
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
		if got := sharedProcs(c.procs, c.local, c.floor); got != c.want {
			t.Errorf("sharedProcs(%d, %d, %d) = %d, want %d", c.procs, c.local, c.floor, got, c.want)
		}
	}
	if procsFloor("tcp") != 1 || procsFloor("zmq") != 2 || procsFloor("fabric") != 2 {
		t.Errorf("procsFloor: tcp %d, zmq %d, fabric %d; want 1, 2, 2", procsFloor("tcp"), procsFloor("zmq"), procsFloor("fabric"))
	}
}

func TestNodesOnHost(t *testing.T) {
	nodes := []message.Node{
		{Role: message.RoleServer, ID: 8, Hostname: "10.0.0.1", Port: 9000},
		{Role: message.RoleWorker, ID: 9, Hostname: "10.0.0.1", Port: 9001},
		{Role: message.RoleWorker, ID: 11, Hostname: "10.0.0.2", Port: 9001},
		{Role: message.RoleWorker, ID: 9, Hostname: "10.0.0.1", Port: 9001}, // listed twice
		{Role: message.RoleScheduler, ID: 1, Hostname: "10.0.0.1", Port: 8000},
	}
	if got := nodesOnHost("10.0.0.1", "10.0.0.1", nodes); got != 3 {
		t.Errorf("on the scheduler's host: %d nodes, want 3 (server, worker, scheduler)", got)
	}
	if got := nodesOnHost("10.0.0.2", "10.0.0.1", nodes); got != 1 {
		t.Errorf("on another host: %d nodes, want 1", got)
	}
}

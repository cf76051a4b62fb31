package postoffice

import (
	"net"
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
	if got := nodesOnHost("10.0.0.1", true, nodes); got != 3 {
		t.Errorf("on the scheduler's host: %d nodes, want 3 (server, worker, scheduler)", got)
	}
	if got := nodesOnHost("10.0.0.2", false, nodes); got != 1 {
		t.Errorf("on another host: %d nodes, want 1", got)
	}
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
		if got := onThisHost(c.addr, c.me); got != c.want {
			t.Errorf("onThisHost(%q, %q) = %v, want %v", c.addr, c.me, got, c.want)
		}
	}
	// An address of one of this machine's interfaces, other than the node's.
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			if !onThisHost(n.IP.String(), "203.0.113.1") {
				t.Errorf("onThisHost(%s): false for an address of this machine", n.IP)
			}
			break
		}
	}
}

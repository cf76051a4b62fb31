package postoffice

import (
	"net"
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"

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

// TestShareHostCPUsInJob checks that a node that may share lowers
// GOMAXPROCS once it has the scheduler's node list: a worker of a 1x1 job
// on 127.0.0.1 shares the host with the server and the scheduler.
func TestShareHostCPUsInJob(t *testing.T) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		t.Skip("GOMAXPROCS is set: nodes leave it as it is")
	}
	before := runtime.GOMAXPROCS(6)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	j := startJob(t, 1, 1, func(c *Config) {
		if c.Role == message.RoleWorker {
			c.ShareHostCPUs = true
			c.VanType = "tcp"
		}
	})
	if got, want := runtime.GOMAXPROCS(0), sharedProcs(6, 3, 1); got != want {
		t.Errorf("GOMAXPROCS after the job started = %d, want %d (6 shared by 3 nodes)", got, want)
	}
	w := j.workers[0]
	assert.True(t, w.HostCPUsLowered(), "the worker lowered GOMAXPROCS")
	assert.False(t, j.servers[0].HostCPUsLowered(), "the server (ShareHostCPUs off) lowered nothing")

	// Restoring gives back what the runtime had, once, and for good: a
	// later node list does not lower it again.
	w.RestoreHostCPUs("test")
	assert.Equal(t, 6, runtime.GOMAXPROCS(0), "GOMAXPROCS after RestoreHostCPUs")
	assert.False(t, w.HostCPUsLowered())
	runtime.GOMAXPROCS(5)
	w.RestoreHostCPUs("test")
	assert.Equal(t, 5, runtime.GOMAXPROCS(0), "a second RestoreHostCPUs changed GOMAXPROCS")
	me := message.Node{Hostname: "127.0.0.1", Port: 1, Role: message.RoleWorker}
	w.shareHostCPUs(me, []message.Node{me, {Hostname: "127.0.0.1", Port: 2, Role: message.RoleServer}})
	assert.Equal(t, 5, runtime.GOMAXPROCS(0), "GOMAXPROCS lowered again after RestoreHostCPUs")
}

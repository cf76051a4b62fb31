package postoffice

import (
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// Nodes of one job that share a host share its CPUs.
//
// The Go runtime sizes GOMAXPROCS to the CPUs the process may use, as if it
// were alone on them. When several nodes of a job run on one host (a server
// next to its workers, as BytePS deploys; a whole job on one machine), each
// runtime then keeps up to GOMAXPROCS threads busy, and every goroutine a
// node readies wakes a thread of its own to look for work: thread switches
// the cores do not have time for. On a two-core host with TCP-van jobs of
// three and five processes, one P per node measured 15-45% more goodput in
// most cells of the benchmark matrix (docs/performance.md).
//
// So a node that may (Config.ShareHostCPUs, and GOMAXPROCS not set by the
// user) divides the runtime's GOMAXPROCS by the number of the job's nodes on
// its host — counted once, from the scheduler's first node list — but not
// below the floor its van needs: a van that waits for messages inside a C
// library (ZeroMQ, RDMA) holds a P while it waits, so other goroutines need
// a second one.

// sharedProcs returns the GOMAXPROCS for a node that shares a host with
// local-1 other nodes of its job, from the runtime's procs, keeping at least
// floor (and never raising procs).
func sharedProcs(procs, local, floor int) int {
	if local <= 1 || procs <= floor {
		return procs
	}
	return max(procs/local, floor)
}

// procsFloor is the fewest Ps the van needs: 1 when receiving is pure Go
// (the TCP van waits in the netpoller; the shm van polls its segment,
// yielding, then waits there too, and with one P the goroutine it hands a
// message to runs on its thread at its next yield, without waking
// another), else 2.
func procsFloor(van string) int {
	if van == "tcp" || van == "shm" {
		return 1
	}
	return 2
}

// nodesOnHost counts the job's nodes on host: the servers and workers of
// nodes (each address once), and the scheduler when schedLocal.
func nodesOnHost(host string, schedLocal bool, nodes []message.Node) int {
	n := 0
	if schedLocal {
		n++
	}
	seen := map[int32]bool{}
	for _, nd := range nodes {
		if nd.Role == message.RoleScheduler || nd.Hostname != host || seen[nd.Port] {
			continue
		}
		seen[nd.Port] = true
		n++
	}
	return n
}

// cpuShare is what shareHostCPUs did, so that RestoreHostCPUs can undo it.
type cpuShare struct {
	mu       sync.Mutex
	lowered  atomic.Bool // GOMAXPROCS is below was because of this node
	was      int
	restored bool // RestoreHostCPUs was called: never lower again
}

// shareHostCPUs applies sharedProcs once the node knows the job's nodes.
func (p *Postoffice) shareHostCPUs(me message.Node, nodes []message.Node) {
	if !p.cfg.ShareHostCPUs {
		return
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return
	}
	local := nodesOnHost(me.Hostname, onThisHost(p.cfg.SchedulerHost, me.Hostname), nodes)
	p.cpus.mu.Lock()
	defer p.cpus.mu.Unlock()
	if p.cpus.restored || p.cpus.lowered.Load() {
		return
	}
	procs := runtime.GOMAXPROCS(0)
	want := sharedProcs(procs, local, procsFloor(p.cfg.VanType))
	if want == procs {
		return
	}
	runtime.GOMAXPROCS(want)
	p.cpus.was = procs
	p.cpus.lowered.Store(true)
	p.vlog(1, "nodes of this job share the host: GOMAXPROCS lowered (set GOMAXPROCS to choose it yourself)",
		"host", me.Hostname, "nodes_on_host", local, "gomaxprocs", want, "was", procs)
}

// HostCPUsLowered reports whether the node lowered GOMAXPROCS because other
// nodes of its job share the host (Config.ShareHostCPUs) and has not
// restored it. It is one atomic load, cheap enough for the data path.
func (p *Postoffice) HostCPUsLowered() bool { return p.cpus.lowered.Load() }

// RestoreHostCPUs gives the Go runtime back the GOMAXPROCS it had before
// the node lowered it, and keeps the node from lowering it later; why is
// logged. The C bridge calls it when a thread of the host program starts
// calling into Go: such a thread keeps a P whenever it returns from Go
// (the runtime treats the return to C as a system call), and with one P
// the node's goroutines would wait for the runtime to take it back.
func (p *Postoffice) RestoreHostCPUs(why string) {
	p.cpus.mu.Lock()
	defer p.cpus.mu.Unlock()
	p.cpus.restored = true
	if !p.cpus.lowered.Load() {
		return
	}
	p.cpus.lowered.Store(false)
	now := runtime.GOMAXPROCS(p.cpus.was)
	p.vlog(1, "GOMAXPROCS restored: "+why, "gomaxprocs", p.cpus.was, "was", now)
}

// onThisHost reports whether addr (the scheduler's DMLC_PS_ROOT_URI) names
// this host: the node's own address, a loopback name or address, or an
// address of one of its interfaces.
func onThisHost(addr, me string) bool {
	if addr == me || addr == "localhost" {
		return true
	}
	ip := net.ParseIP(addr)
	return ip != nil && van.LocalIP(ip)
}

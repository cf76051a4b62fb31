// Package ports picks free loopback ports for local jobs and tests, below
// the kernel's ephemeral range (net.ipv4.ip_local_port_range): the ports
// nodes get by binding port 0, and the source ports of connections, come
// from that range, so a port picked here is never handed to one of them
// between the pick and the bind (a restarted node binding its old port
// again, a scheduler binding the port the launcher picked for it).
// Another program binding a fixed port may still take one.
package ports

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Free returns n consecutive ports (port, port+1, ...) that could be
// listened on on 127.0.0.1 a moment ago, or 0 when none was found.
func Free(n int) int {
	if lo := EphemeralLow(); lo > 2048+n {
		first := max(1024, lo-16384)
		for range 64 {
			if port := first + rand.IntN(lo-n-first); runFree(port, n) {
				return port
			}
		}
	}
	for range 20 { // no room below the range: a port the kernel hands out
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if runFree(port, n) {
			return port
		}
	}
	return 0
}

// runFree reports whether ports port to port+n-1 can be listened on.
func runFree(port, n int) bool {
	if port+n-1 > 65535 {
		return false
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for p := port; p < port+n; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		ls = append(ls, l)
	}
	return true
}

// EphemeralLow is the low end of the kernel's ephemeral port range, or 0
// where it cannot be read.
func EphemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

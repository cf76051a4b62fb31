package van

import "net"

// LocalIP reports whether ip is this host's: a loopback or unspecified
// address, or an address of one of its interfaces (false when they cannot
// be listed).
func LocalIP(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

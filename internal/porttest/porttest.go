// Package porttest helps tests that start nodes on loopback ports: it
// picks free ports and starts a job again when the port it picked was taken
// before the job bound it.
package porttest

import (
	"net"
	"strings"
	"testing"
)

// Free returns a TCP port on 127.0.0.1 that the kernel handed out a moment
// ago. Another process may take it before the caller binds it; see
// StartRetrying.
func Free(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("no free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// attempts is how often StartRetrying starts a job in all.
const attempts = 3

// StartRetrying returns start's job. When start fails because an address
// was already in use (a port from Free taken in between, as happens under
// go test ./..., which runs packages at once), it stops the half-started
// job and starts it again, which picks other ports, up to three attempts
// in all; any other failure, or the last one, fails the test.
func StartRetrying[J any](t testing.TB, start func() (J, error), stop func(J)) J {
	t.Helper()
	for attempt := 1; ; attempt++ {
		j, err := start()
		if err == nil {
			return j
		}
		if attempt < attempts && strings.Contains(err.Error(), "address already in use") {
			t.Logf("the job did not start (%v); starting it again on another port", err)
			stop(j)
			continue
		}
		t.Fatal(err)
	}
}

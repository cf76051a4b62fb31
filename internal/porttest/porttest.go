// Package porttest helps tests that start nodes on loopback ports: it
// picks free ports and starts a job again when the port it picked was taken
// before the job bound it.
package porttest

import (
	"strings"
	"testing"

	"github.com/elasticps/elasticps/internal/ports"
)

// Free returns a TCP port on 127.0.0.1 that was free a moment ago, with
// the next two free too (an elastic scheduler's control API and gossip
// use them), below the kernel's ephemeral range (package ports): no node
// binding port 0 and no connection's source port takes it in between,
// also when a test binds it again after a restart. Another test picking
// ports at random may still take it first; see StartRetrying.
func Free(t testing.TB) int {
	t.Helper()
	port := ports.Free(3)
	if port == 0 {
		t.Fatal("no free loopback port")
	}
	return port
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

//go:build linux

package straggler

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDumpNodesQuitsOnlyStragglerChildren starts two children of the test
// binary, one looking like a straggler node, and checks that only that one
// is sent SIGQUIT: a Go program then dumps its goroutines and exits 2 (or,
// in a -race build, dies of the signal).
func TestDumpNodesQuitsOnlyStragglerChildren(t *testing.T) {
	if os.Getenv("ELASTICPS_STRAGGLER_TEST_SLEEP") != "" {
		fmt.Println("ready") // the runtime's signal handlers are installed
		time.Sleep(time.Minute)
		return
	}
	start := func(extra string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDumpNodesQuitsOnlyStragglerChildren$", extra)
		cmd.Env = append(os.Environ(), "ELASTICPS_STRAGGLER_TEST_SLEEP=1")
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
		return cmd
	}
	node := start(NodeCommand)
	other := start("other")
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	dumpNodes()
	done := make(chan error, 1)
	go func() { done <- node.Wait() }()
	defer func() { _ = node.Process.Kill() }() // still running only after a timeout
	err := testutil.Recv(t, done, 10*time.Second, func() string { return "the straggler-node child did not get SIGQUIT" })
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "node exited with %v", err)
	ws := ee.Sys().(syscall.WaitStatus)
	assert.True(t, ws.ExitStatus() == 2 || ws.Signaled() && ws.Signal() == syscall.SIGQUIT,
		"node exited with %v, want exit status 2 or death by SIGQUIT", err)
	assert.NoError(t, other.Process.Signal(syscall.Signal(0)), "the other child is gone")
}

//go:build linux

package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDumpNodesQuitsOnlyStragglerChildren starts two children of the test
// binary, one looking like a straggler node, and checks that only that one
// is sent SIGQUIT (a Go program then dumps its goroutines and exits 2).
func TestDumpNodesQuitsOnlyStragglerChildren(t *testing.T) {
	if os.Getenv("ELASTICPS_STRAGGLER_TEST_SLEEP") != "" {
		time.Sleep(time.Minute)
		return
	}
	start := func(extra string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDumpNodesQuitsOnlyStragglerChildren$", extra)
		cmd.Env = append(os.Environ(), "ELASTICPS_STRAGGLER_TEST_SLEEP=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	node := start("straggler-node")
	other := start("other")
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	time.Sleep(200 * time.Millisecond)
	stragDumpNodes()
	done := make(chan error, 1)
	go func() { done <- node.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "exit status 2") {
			t.Errorf("node exited with %v, want exit status 2 (SIGQUIT)", err)
		}
	case <-time.After(10 * time.Second):
		_ = node.Process.Kill()
		t.Fatal("the straggler-node child did not get SIGQUIT")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the other child is gone: %v", err)
	}
}

// Package e2e runs whole jobs as real processes: the elasticps binary in
// the scheduler and server roles, and this test binary itself as the worker
// program (TestMain dispatches on ELASTICPS_E2E_NODE), all launched by the
// launcher package as `elasticps local` would.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// elasticpsBin is the CLI built once for the whole package.
var elasticpsBin string

func TestMain(m *testing.M) {
	if node := os.Getenv("ELASTICPS_E2E_NODE"); node != "" {
		if err := runNode(node); err != nil {
			fmt.Fprintf(os.Stderr, "e2e node %s: %v\n", node, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	skipRaceExitSleep()
	dir, err := os.MkdirTemp("", "elasticps-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	elasticpsBin = filepath.Join(dir, "elasticps")
	build := exec.Command("go", "build", "-o", elasticpsBin, "github.com/elasticps/elasticps/cmd/elasticps")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building elasticps:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// skipRaceExitSleep adds atexit_sleep_ms=0 to GORACE in this process's
// environment, which every node of the tests' jobs inherits: a process
// built with -race (the workers are this test binary) sleeps 1 s before it
// exits, so every job took a second longer (e.g. 1.2 s instead of 0.2 s).
// Races are detected and reported as before, and the test binary itself is
// unaffected (its runtime read GORACE at start). A GORACE that sets
// atexit_sleep_ms itself is left as it is.
func skipRaceExitSleep() {
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		_ = os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
}

func selfExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return exe
}

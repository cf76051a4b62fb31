package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chaosCppSeed fixes the moments and victims of TestChaosReplicatedCppServers.
const chaosCppSeed = 21

// compatProgram is a program of ../compat_tests built against the bridge
// (make -C compat_tests), from COMPAT_BIN_DIR if set; without it the test
// is skipped.
func compatProgram(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("COMPAT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join("..", "compat_tests", "build")
	}
	path, err := filepath.Abs(filepath.Join(dir, name))
	require.NoError(t, err)
	if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		if os.Getenv("ELASTICPS_REQUIRE_CPP") != "" {
			t.Fatalf("%s is not built, and ELASTICPS_REQUIRE_CPP is set (make compat builds it first)", path)
		}
		t.Skipf("%s is not built: run 'make -C compat_tests' (or set COMPAT_BIN_DIR to the directory of the compat programs) to run the C++ server test", path)
	}
	return path
}

// TestChaosReplicatedCppServers is TestChaosReplicatedServers with C++
// servers through the bridge (compat_tests' test_replicated, serving with
// KVServerDefaultHandle, replicated through its state hook): 3 servers, 2
// Go chaos workers, PS_REPLICAS=1, 3 seeded SIGKILLs one at a time, a C++
// standby joined before each and the next kill only once every new backup
// was seeded. No push fails and the pulled values are the exact sums of
// the acknowledged pushes. Asynchronous and BSP (the C++ server's sync
// gate is configured from PS_SYNC_MODE alone).
func TestChaosReplicatedCppServers(t *testing.T) {
	cppServers := chaosServers{
		cmd: []string{compatProgram(t, "test_replicated")},
		env: []string{"REPL_SERVER=default"},
		survived: func(t *testing.T, p *proc, _ bool) {
			// the program logs what Finalize reports (the job lost
			// nodes) and exits 0
			p.wait(t)
			assert.NotContains(t, p.output(), "COMPAT FAIL", p.name)
		},
	}
	for _, mode := range []string{"asp", "bsp"} {
		t.Run(mode, func(t *testing.T) { runChaos(t, chaosCppSeed, mode, cppServers) })
	}
}

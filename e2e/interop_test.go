package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/launcher"
)

// Mixed jobs of Go nodes and reference C++ ps-lite nodes (dmlc). They need
// the reference build, which this repository does not ship: point
// PSLITE_REF_TESTS at the directory of ps-lite's built test programs
// (test_connection, test_kv_app). Without it the test is skipped.
func TestInteropWithCppPsLite(t *testing.T) {
	dir := os.Getenv("PSLITE_REF_TESTS")
	if dir == "" {
		t.Skip("PSLITE_REF_TESTS is not set: build dmlc/ps-lite's tests and point it at their directory to run the mixed Go/C++ jobs")
	}
	cpp := func(name string) []string { return []string{filepath.Join(dir, name)} }
	goSched, goServer, goWorker := goRoleCommands(t)
	cases := []struct {
		name                  string
		sched, server, worker []string
		ns, nw                int
		wantWorkerOutput      string
	}{
		{"go scheduler, C++ servers and workers", goSched, cpp("test_kv_app"), cpp("test_kv_app"), 2, 2, ""},
		{"C++ scheduler, Go servers, C++ workers", cpp("test_kv_app"), goServer, cpp("test_kv_app"), 2, 2, ""},
		{"C++ scheduler and servers, Go workers", cpp("test_kv_app"), cpp("test_kv_app"), goWorker, 2, 2, "KV OK"},
		{"Go scheduler and servers, C++ workers", goSched, goServer, cpp("test_kv_app"), 3, 2, ""},
		{"Go scheduler, C++ servers, Go workers", goSched, cpp("test_kv_app"), goWorker, 2, 2, "KV OK"},
		{"C++ scheduler, Go servers and workers", cpp("test_kv_app"), goServer, goWorker, 2, 2, "KV OK"},
		{"Go scheduler, C++ connection test", goSched, cpp("test_connection"), cpp("test_connection"), 2, 2, ""},
		{"C++ scheduler, Go connection nodes", cpp("test_connection"), goServer, goWorker, 1, 4, "rank 3 id 15"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kind := "kv"
			if strings.Contains(tc.name, "connection") {
				kind = "connection"
			}
			out := runJob(t, tc.ns, tc.nw, kind, func(j *launcher.Job) {
				j.SchedulerCommand, j.ServerCommand, j.WorkerCommand = tc.sched, tc.server, tc.worker
			})
			require.Contains(t, out, tc.wantWorkerOutput, "workers did not print %q", tc.wantWorkerOutput)
			fmt.Fprintf(os.Stderr, "PASS %s\n", tc.name)
		})
	}
}

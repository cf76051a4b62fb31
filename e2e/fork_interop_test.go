package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/launcher"
)

// forkBuildEnv names the directory scripts/build-fork.sh built the BytePS
// fork of ps-lite (bytedance/ps-lite) into.
const forkBuildEnv = "ELASTICPS_FORK_PSLITE"

// Mixed jobs of Go nodes and nodes of the BytePS fork of ps-lite over
// ZeroMQ with the fork's wire (PS_WIRE=bytedance), in every combination of
// roles. The fork's side is fork_kv (e2e/testdata/fork_kv.cc), which does
// what the Go kv worker does; every worker, of either kind, checks exact
// sums and prints "KV OK". This repository does not ship the fork: build it
// with scripts/build-fork.sh and point ELASTICPS_FORK_PSLITE at the output
// directory. Without it the test is skipped.
func TestInteropWithForkPsLite(t *testing.T) {
	dir := os.Getenv(forkBuildEnv)
	if dir == "" {
		t.Skip(forkBuildEnv + " is not set: build the BytePS fork with scripts/build-fork.sh <bytedance/ps-lite source> <dir> and set " + forkBuildEnv + "=<dir> to run the mixed Go/fork jobs")
	}
	forkKV := filepath.Join(dir, "fork_kv")
	_, err := os.Stat(forkKV)
	require.NoError(t, err, "%s=%s has no fork_kv: rebuild it with scripts/build-fork.sh", forkBuildEnv, dir)
	fork := []string{forkKV}
	goSched, goServer, goWorker := goRoleCommands(t)
	cases := []struct {
		name                  string
		sched, server, worker []string
	}{
		{"fork scheduler, servers and workers", fork, fork, fork},
		{"Go scheduler, fork servers, Go workers", goSched, fork, goWorker},
		{"fork scheduler, Go servers, fork workers", fork, goServer, fork},
		{"Go scheduler and servers, fork workers", goSched, goServer, fork},
		{"fork scheduler and servers, Go workers", fork, fork, goWorker},
		{"Go scheduler, fork servers and workers", goSched, fork, fork},
		{"fork scheduler, Go servers and workers", fork, goServer, goWorker},
	}
	const ns, nw = 2, 2
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := runJob(t, ns, nw, "kv", func(j *launcher.Job) {
				j.SchedulerCommand, j.ServerCommand, j.WorkerCommand = tc.sched, tc.server, tc.worker
				j.Env = append(j.Env, "PS_WIRE=bytedance")
			})
			assert.Equal(t, nw, strings.Count(out, "KV OK"), "every worker checks its sums and prints KV OK; job output:\n%s", out)
			fmt.Fprintf(os.Stderr, "PASS %s\n", tc.name)
		})
	}
}

// goRoleCommands are the Go nodes of the mixed jobs: the elasticps CLI as
// scheduler and server, this test binary as the kv worker.
func goRoleCommands(t *testing.T) (sched, server, worker []string) {
	return []string{elasticpsBin, "scheduler"}, []string{elasticpsBin, "server"}, []string{selfExe(t)}
}

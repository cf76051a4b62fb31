package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/launcher"
)

// envInt is the integer environment variable name, or def when unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s=%q: expected an integer", name, v)
	return n
}

// Issue 24, as a user runs it: 2x2 KV jobs of processes (elasticps
// scheduler and servers, Go workers, launched as `elasticps local` does)
// with PS_RESEND=1 under PS_DROP_MSG loss. Every job passes with exact
// sums, and no node gives up on a message or stops with a barrier release
// unacknowledged. The longer run sets the variables, e.g.
//
//	ELASTICPS_RESEND_JOBS=100 ELASTICPS_RESEND_DROP=5 ELASTICPS_RESEND_TIMEOUT_MS=1000 \
//	  go test ./e2e -run TestResendUnderLossProcesses -count=1 -timeout 2h -v
func TestResendUnderLossProcesses(t *testing.T) {
	t.Parallel() // waits on resend timers, not the CPU; its own ports (reads, never sets, the environment)
	jobs := envInt(t, "ELASTICPS_RESEND_JOBS", 3)
	drop := envInt(t, "ELASTICPS_RESEND_DROP", 10)
	timeoutMS := envInt(t, "ELASTICPS_RESEND_TIMEOUT_MS", 100)
	var passed atomic.Int32
	for i := range jobs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			out := runJob(t, 2, 2, "kv", func(j *launcher.Job) {
				j.Env = append(j.Env, "PS_RESEND=1", fmt.Sprintf("PS_DROP_MSG=%d", drop), fmt.Sprintf("PS_RESEND_TIMEOUT=%d", timeoutMS))
			})
			ok := assert.Equal(t, 2, strings.Count(out, "KV OK"), out)
			ok = assert.NotContains(t, out, "giving up") && ok
			ok = assert.NotContains(t, out, "stopping although") && ok
			require.Contains(t, out, "PS_DROP_MSG: dropping", "the job saw no loss")
			if ok {
				passed.Add(1)
			}
		})
	}
	t.Logf("%d of %d jobs passed (2x2, PS_RESEND=1 PS_RESEND_TIMEOUT=%d PS_DROP_MSG=%d)", passed.Load(), jobs, timeoutMS, drop)
}

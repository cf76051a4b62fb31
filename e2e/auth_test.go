package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/elasticps/elasticps/launcher"
	"github.com/stretchr/testify/require"
)

// A job of processes whose nodes read the token from PS_AUTH_TOKEN_FILE:
// every registration and peer proves itself, the workers' sums are exact,
// nothing is refused and the scheduler does not call the job open.
func TestKVProcessesWithToken(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tok, []byte("e2e-secret\n"), 0o600))
	out := runJob(t, 2, 2, "kv", func(j *launcher.Job) {
		j.Env = append(j.Env, "PS_AUTH_TOKEN_FILE="+tok, "PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=5")
	})
	require.Equal(t, 2, strings.Count(out, "KV OK"), out)
	require.NotContains(t, out, "refused a message", out)
	require.NotContains(t, out, "the job is open", out)
}

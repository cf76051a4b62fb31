package postoffice

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/van/samehost"
	"github.com/elasticps/elasticps/van/tcp"
)

// TestNewTransportReadsTheConfigsEnv: the vans' own variables come from
// where the configuration came from, not from the process environment: a
// C++ program that setenv()s BYTEPS_ENABLE_IPC=1 before StartPS (as the
// BytePS fork's test_ipc_benchmark does) reaches its bridge node only
// through the bridge's getenv.
func TestNewTransportReadsTheConfigsEnv(t *testing.T) {
	t.Setenv(samehost.AliasEnv, "0")
	for ipc, want := range map[string]any{"1": &samehost.Transport{}, "0": &tcp.Transport{}} {
		env := map[string]string{
			"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1",
			"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9000",
			"DMLC_PS_VAN_TYPE": "tcp", samehost.AliasEnv: ipc,
		}
		cfg, err := ConfigFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		require.NoError(t, err)
		tr, err := NewTransport(cfg)
		require.NoError(t, err, "BYTEPS_ENABLE_IPC=%s", ipc)
		assert.IsType(t, want, tr, "BYTEPS_ENABLE_IPC=%s", ipc)
		assert.NoError(t, tr.Close())
	}
}

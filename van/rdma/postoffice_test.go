package rdma_test

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/van/rdma"
)

// TestSelectedFromEnvironment: DMLC_ENABLE_RDMA / DMLC_PS_VAN_TYPE reach
// this package through postoffice's config and transport factory, in builds
// with and without the rdma tag.
func TestSelectedFromEnvironment(t *testing.T) {
	base := map[string]string{
		"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1",
		"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9091", "DMLC_NODE_HOST": "127.0.0.1",
	}
	for _, tc := range []struct{ key, val, want string }{
		{"DMLC_ENABLE_RDMA", "fabric", "fabric"},
		{"DMLC_ENABLE_RDMA", "1", "ibverbs"},
		{"DMLC_ENABLE_RDMA", "ibverbs", "ibverbs"},
		{"DMLC_ENABLE_RDMA", "0", "zmq"},
		{"DMLC_PS_VAN_TYPE", "fabric", "fabric"},
		{"DMLC_PS_VAN_TYPE", "ibverbs", "ibverbs"},
	} {
		env := map[string]string{tc.key: tc.val}
		for k, v := range base {
			env[k] = v
		}
		cfg, err := postoffice.ConfigFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		require.NoError(t, err, "%s=%s", tc.key, tc.val)
		assert.Equal(t, tc.want, cfg.VanType, "%s=%s", tc.key, tc.val)
	}
	env := map[string]string{"DMLC_ENABLE_RDMA": "ucx"}
	for k, v := range base {
		env[k] = v
	}
	_, err := postoffice.ConfigFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	assert.Error(t, err, "DMLC_ENABLE_RDMA=ucx accepted")

	cfg := postoffice.Config{Role: message.RoleWorker, NumWorkers: 1, NumServers: 1, SchedulerHost: "127.0.0.1",
		SchedulerPort: 9091, NodeHost: "127.0.0.1", VanType: "fabric",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	tr, err := postoffice.NewTransport(cfg)
	if errors.Is(err, rdma.ErrNotBuilt) {
		assert.Nil(t, tr, "a failed NewTransport returns a nil transport")
		return
	}
	require.NoError(t, err, "fabric over the default provider")
	assert.IsType(t, &rdma.Transport{}, tr)
	assert.NoError(t, tr.Close())
}

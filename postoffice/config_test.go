package postoffice

import (
	"testing"
	"time"

	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/syncctl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func envOf(kv map[string]string) Getenv {
	return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
}

func baseEnv() map[string]string {
	return map[string]string{
		"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1",
		"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9091", "DMLC_NODE_HOST": "127.0.0.1",
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := baseEnv()
	env["PS_HEARTBEAT_INTERVAL"] = "2"
	env["PS_HEARTBEAT_TIMEOUT"] = "5"
	env["PS_RESEND"] = "1"
	env["PS_VERBOSE"] = "2"
	env["DMLC_LOCAL"] = "1"
	env["PORT"] = "7777"
	env["PS_INLINE_HANDOVER_US"] = "500"
	c, err := ConfigFromEnv(envOf(env))
	require.NoError(t, err)
	assert.Equal(t, message.RoleWorker, c.Role)
	assert.Equal(t, 2, c.NumWorkers)
	assert.Equal(t, 1, c.NumServers)
	assert.Equal(t, 9091, c.SchedulerPort)
	assert.Equal(t, 2*time.Second, c.HeartbeatInterval)
	assert.Equal(t, 5*time.Second, c.HeartbeatTimeout)
	assert.True(t, c.Resend)
	assert.Equal(t, time.Second, c.ResendTimeout)
	assert.Equal(t, 2, c.Verbose)
	assert.True(t, c.Local)
	assert.Equal(t, 7777, c.Port)
	assert.Equal(t, "127.0.0.1", c.NodeHost)
	assert.Equal(t, 500*time.Microsecond, c.InlineHandOver)
	assert.False(t, c.KeepMalloc)
	assert.Empty(t, c.SnapshotDir, "snapshots off by default")
	assert.Equal(t, DefaultSnapshotInterval, c.SnapshotInterval)
	env["PS_SNAPSHOT_DIR"], env["PS_SNAPSHOT_INTERVAL"] = "/tmp/snaps", "5"
	c, err = ConfigFromEnv(envOf(env))
	require.NoError(t, err)
	assert.Equal(t, "/tmp/snaps", c.SnapshotDir)
	assert.Equal(t, 5*time.Second, c.SnapshotInterval)
	env["PS_ZMQ_TUNE_MALLOC"] = "0"
	c, err = ConfigFromEnv(envOf(env))
	require.NoError(t, err, "PS_ZMQ_TUNE_MALLOC=0")
	assert.True(t, c.KeepMalloc, "PS_ZMQ_TUNE_MALLOC=0")
}

func TestSyncConfigFromEnv(t *testing.T) {
	c, err := ConfigFromEnv(envOf(baseEnv()))
	require.NoError(t, err)
	assert.Equal(t, SyncConfig{Mode: syncctl.ASP, Staleness: DefaultStaleness, Sigmoid: true}, c.Sync, "defaults")

	env := baseEnv()
	env["PS_SYNC_MODE"], env["PS_STALENESS"], env["PS_PAUSE_PROB"], env["PS_SYNC_SEED"] = "fluent", "0", "0.25", "-7"
	c, err = ConfigFromEnv(envOf(env))
	require.NoError(t, err)
	assert.Equal(t, SyncConfig{Mode: syncctl.Fluent, Staleness: 0, PauseProb: 0.25, Seed: -7}, c.Sync)

	env["PS_PAUSE_PROB"] = "sigmoid"
	c, err = ConfigFromEnv(envOf(env))
	require.NoError(t, err)
	assert.True(t, c.Sync.Sigmoid)
}

// A Config built in Go gets its sync parameters checked by New.
func TestSyncConfigValidate(t *testing.T) {
	for _, s := range []SyncConfig{{Staleness: -1}, {PauseProb: 2}, {PauseProb: -0.1}, {Mode: syncctl.Fluent + 1}} {
		assert.Error(t, s.validate(), "%+v", s)
	}
	assert.NoError(t, SyncConfig{Mode: syncctl.SSP, Staleness: 2, PauseProb: 1}.validate())
}

// Each missing or invalid variable is named in one clear message.
func TestConfigFromEnvErrors(t *testing.T) {
	cases := []struct {
		name, key, val, wantVar, wantText string
	}{
		{"missing role", "DMLC_ROLE", "", "DMLC_ROLE", "is not set: set it to worker, server or scheduler"},
		{"bad role", "DMLC_ROLE", "master", "DMLC_ROLE", `DMLC_ROLE="master" is invalid: expected worker, server or scheduler`},
		{"missing workers", "DMLC_NUM_WORKER", "", "DMLC_NUM_WORKER", "is not set"},
		{"bad workers", "DMLC_NUM_WORKER", "two", "DMLC_NUM_WORKER", "expected the number of workers"},
		{"negative servers", "DMLC_NUM_SERVER", "-1", "DMLC_NUM_SERVER", "integer >= 0"},
		{"missing uri", "DMLC_PS_ROOT_URI", "", "DMLC_PS_ROOT_URI", "scheduler's IP address"},
		{"missing port", "DMLC_PS_ROOT_PORT", "", "DMLC_PS_ROOT_PORT", "is not set"},
		{"port range", "DMLC_PS_ROOT_PORT", "70000", "DMLC_PS_ROOT_PORT", "1-65535"},
		{"bad heartbeat", "PS_HEARTBEAT_INTERVAL", "1s", "PS_HEARTBEAT_INTERVAL", "seconds"},
		{"bad hand-over", "PS_INLINE_HANDOVER_US", "-2", "PS_INLINE_HANDOVER_US", "-1 to run every handler on its customer's goroutine"},
		{"bad van", "DMLC_PS_VAN_TYPE", "carrier-pigeon", "DMLC_PS_VAN_TYPE", "zmq"},
		{"bad malloc tuning", "PS_ZMQ_TUNE_MALLOC", "yes", "PS_ZMQ_TUNE_MALLOC", "0 or 1"},
		{"bad sync mode", "PS_SYNC_MODE", "bulk", "PS_SYNC_MODE", `PS_SYNC_MODE="bulk" is invalid: expected asp (the default: never wait), bsp, ssp or fluent`},
		{"sync mode case", "PS_SYNC_MODE", "BSP", "PS_SYNC_MODE", "bsp, ssp or fluent"},
		{"negative staleness", "PS_STALENESS", "-1", "PS_STALENESS", "an integer >= 0"},
		{"fractional staleness", "PS_STALENESS", "1.5", "PS_STALENESS", "an integer >= 0"},
		{"pause prob above 1", "PS_PAUSE_PROB", "1.5", "PS_PAUSE_PROB", `PS_PAUSE_PROB="1.5" is invalid: expected a probability from 0 to 1, or sigmoid`},
		{"pause prob NaN", "PS_PAUSE_PROB", "NaN", "PS_PAUSE_PROB", "from 0 to 1, or sigmoid"},
		{"pause prob word", "PS_PAUSE_PROB", "often", "PS_PAUSE_PROB", "from 0 to 1, or sigmoid"},
		{"bad seed", "PS_SYNC_SEED", "0x", "PS_SYNC_SEED", "an integer"},
		{"zero snapshot interval", "PS_SNAPSHOT_INTERVAL", "0", "PS_SNAPSHOT_INTERVAL", `PS_SNAPSHOT_INTERVAL="0" is invalid: expected seconds >= 1`},
		{"snapshot interval unit", "PS_SNAPSHOT_INTERVAL", "30s", "PS_SNAPSHOT_INTERVAL", "seconds >= 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := baseEnv()
			if tc.val == "" {
				delete(env, tc.key)
			} else {
				env[tc.key] = tc.val
			}
			_, err := ConfigFromEnv(envOf(env))
			var ee *EnvError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, tc.wantVar, ee.Var)
			assert.ErrorContains(t, err, tc.wantText)
		})
	}
}

func TestConfigReplicas(t *testing.T) {
	env := baseEnv()
	env["DMLC_NUM_SERVER"] = "3"
	c, err := ConfigFromEnv(envOf(env))
	require.NoError(t, err)
	assert.Zero(t, c.Replicas, "no copies by default")
	env["PS_REPLICAS"] = "2"
	_, err = ConfigFromEnv(envOf(env))
	assert.ErrorContains(t, err, "PS_ELASTIC=1")
	env["PS_ELASTIC"] = "1"
	c, err = ConfigFromEnv(envOf(env))
	require.NoError(t, err)
	assert.Equal(t, 2, c.Replicas)
	env["PS_SYNC_MODE"] = "bsp" // backups carry the sync state
	_, err = ConfigFromEnv(envOf(env))
	assert.NoError(t, err)
	delete(env, "PS_SYNC_MODE")
	env["PS_REPLICAS"] = "3"
	_, err = ConfigFromEnv(envOf(env))
	assert.ErrorContains(t, err, "fewer than DMLC_NUM_SERVER=3")
	env["PS_REPLICAS"] = "-1"
	_, err = ConfigFromEnv(envOf(env))
	var ee *EnvError
	assert.ErrorAs(t, err, &ee)

	// copies need something that finds a dead server: gossip (on by
	// default in an elastic job) or heartbeats
	env["PS_REPLICAS"], env["PS_GOSSIP_PORT"] = "1", "0"
	_, err = ConfigFromEnv(envOf(env))
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "PS_REPLICAS", ee.Var)
	assert.ErrorContains(t, err, "nothing would find a dead server")
	env["PS_HEARTBEAT_INTERVAL"], env["PS_HEARTBEAT_TIMEOUT"] = "1", "3"
	_, err = ConfigFromEnv(envOf(env))
	assert.NoError(t, err, "heartbeats find it")
}

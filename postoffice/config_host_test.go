package postoffice

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A host name in DMLC_PS_ROOT_URI or DMLC_NODE_HOST becomes its address,
// which is what ZeroMQ can bind ("localhost" used to fail with "No such
// device", ZeroMQ taking it for an interface name).
func TestConfigFromEnvResolvesHostNames(t *testing.T) {
	for _, role := range []string{"scheduler", "worker"} {
		env := baseEnv()
		env["DMLC_ROLE"] = role
		env["DMLC_PS_ROOT_URI"] = "localhost"
		env["DMLC_NODE_HOST"] = "localhost"
		c, err := ConfigFromEnv(envOf(env))
		require.NoError(t, err, role)
		assert.Equal(t, "127.0.0.1", c.SchedulerHost, role)
		if role == "worker" {
			assert.Equal(t, "127.0.0.1", c.NodeHost)
		}
	}

	for _, key := range []string{"DMLC_PS_ROOT_URI", "DMLC_NODE_HOST"} {
		env := baseEnv()
		env[key] = "no-such-host.invalid"
		_, err := ConfigFromEnv(envOf(env))
		var ee *EnvError
		require.ErrorAs(t, err, &ee, key)
		assert.Equal(t, key, ee.Var)
		assert.ErrorContains(t, err, `="no-such-host.invalid" is invalid: expected`)
		assert.ErrorContains(t, err, "a host name that resolves (lookup no-such-host.invalid")
	}
}

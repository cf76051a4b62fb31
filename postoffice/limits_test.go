package postoffice

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/van"
)

func TestLimitsFromEnv(t *testing.T) {
	c, err := ConfigFromEnv(envOf(baseEnv()))
	require.NoError(t, err)
	assert.Equal(t, Limits{Limits: van.DefaultLimits(), MaxNodes: DefaultMaxNodes}, c.Limits, "unset: the defaults")
	assert.Equal(t, van.Limits{MaxFrames: 16, MaxMessageBytes: 2 << 30, MaxMetaBytes: 1 << 20,
		MaxPendingBytes: 4 << 30, RegisterTimeout: time.Minute}, c.Limits.Limits)

	env := baseEnv()
	env["PS_MAX_META_BYTES"], env["PS_MAX_FRAMES"], env["PS_MAX_MESSAGE_BYTES"] = "4096", "8", "1000000"
	env["PS_MAX_PENDING_BYTES"], env["PS_REGISTER_TIMEOUT"], env["PS_MAX_NODES"] = "3000000", "5", "64"
	c, err = ConfigFromEnv(envOf(env))
	require.NoError(t, err)
	assert.Equal(t, Limits{Limits: van.Limits{MaxFrames: 8, MaxMessageBytes: 1000000, MaxMetaBytes: 4096,
		MaxPendingBytes: 3000000, RegisterTimeout: 5 * time.Second}, MaxNodes: 64}, c.Limits)

	for _, k := range []string{"PS_MAX_META_BYTES", "PS_MAX_FRAMES", "PS_MAX_MESSAGE_BYTES", "PS_MAX_PENDING_BYTES", "PS_REGISTER_TIMEOUT", "PS_MAX_NODES"} {
		env := baseEnv()
		env[k] = "0"
		_, err := ConfigFromEnv(envOf(env))
		var ee *EnvError
		require.ErrorAs(t, err, &ee, k)
		assert.Equal(t, k, ee.Var)
	}
}

func TestZeroLimitsTakeDefaults(t *testing.T) {
	l := Limits{Limits: van.Limits{MaxFrames: 4}}
	require.NoError(t, l.withDefaults())
	want := van.DefaultLimits()
	want.MaxFrames = 4
	assert.Equal(t, Limits{Limits: want, MaxNodes: DefaultMaxNodes}, l)
	assert.Error(t, (&Limits{MaxNodes: -1}).withDefaults())
}

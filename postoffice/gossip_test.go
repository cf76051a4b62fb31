package postoffice

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/membership"
)

func TestGossipTimingsFromEnv(t *testing.T) {
	c, err := ConfigFromEnv(envOf(baseEnv()))
	require.NoError(t, err)
	assert.Equal(t, membership.FastProbeInterval, c.GossipProbeInterval, "default")
	assert.Equal(t, membership.FastProbeTimeout, c.GossipProbeTimeout, "default")
	assert.Equal(t, membership.FastSuspicionMult, c.GossipSuspicionMult, "default")

	env := baseEnv()
	env["PS_GOSSIP_PROBE_INTERVAL"], env["PS_GOSSIP_PROBE_TIMEOUT"], env["PS_GOSSIP_SUSPICION_MULT"] = "1000", "500", "4"
	c, err = ConfigFromEnv(envOf(env))
	require.NoError(t, err)
	assert.Equal(t, time.Second, c.GossipProbeInterval)
	assert.Equal(t, 500*time.Millisecond, c.GossipProbeTimeout)
	assert.Equal(t, 4, c.GossipSuspicionMult)

	// An unset timeout follows a short interval down.
	env = baseEnv()
	env["PS_GOSSIP_PROBE_INTERVAL"] = "60"
	c, err = ConfigFromEnv(envOf(env))
	require.NoError(t, err)
	assert.Equal(t, 30*time.Millisecond, c.GossipProbeTimeout)
}

func TestGossipTimingErrors(t *testing.T) {
	cases := []struct {
		name     string
		env      map[string]string
		wantVar  string
		wantText string
	}{
		{"unit", map[string]string{"PS_GOSSIP_PROBE_INTERVAL": "200ms"}, "PS_GOSSIP_PROBE_INTERVAL", `PS_GOSSIP_PROBE_INTERVAL="200ms" is invalid: expected milliseconds >= 2`},
		{"zero interval", map[string]string{"PS_GOSSIP_PROBE_INTERVAL": "0"}, "PS_GOSSIP_PROBE_INTERVAL", "milliseconds >= 2"},
		{"zero timeout", map[string]string{"PS_GOSSIP_PROBE_TIMEOUT": "0"}, "PS_GOSSIP_PROBE_TIMEOUT", "milliseconds >= 1"},
		{"timeout not below interval", map[string]string{"PS_GOSSIP_PROBE_INTERVAL": "100", "PS_GOSSIP_PROBE_TIMEOUT": "100"}, "PS_GOSSIP_PROBE_TIMEOUT",
			`PS_GOSSIP_PROBE_TIMEOUT="100" is invalid: expected fewer milliseconds than PS_GOSSIP_PROBE_INTERVAL=100`},
		{"zero multiplier", map[string]string{"PS_GOSSIP_SUSPICION_MULT": "0"}, "PS_GOSSIP_SUSPICION_MULT", "an integer >= 1"},
		{"fractional multiplier", map[string]string{"PS_GOSSIP_SUSPICION_MULT": "1.5"}, "PS_GOSSIP_SUSPICION_MULT", "an integer >= 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := baseEnv()
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := ConfigFromEnv(envOf(env))
			var ee *EnvError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, tc.wantVar, ee.Var)
			assert.ErrorContains(t, err, tc.wantText)
		})
	}
}

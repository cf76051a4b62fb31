package rebalance

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfig(t *testing.T) {
	p, err := NewPlanner(DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, DefaultConfig(), p.Config(), "defaults are valid and already normalised")

	c := DefaultConfig()
	c.BytesWeight, c.RequestsWeight = 3, 1
	p, err = NewPlanner(c)
	require.NoError(t, err)
	assert.Equal(t, 0.75, p.Config().BytesWeight)
	assert.Equal(t, 0.25, p.Config().RequestsWeight)

	tests := []struct {
		edit func(*Config)
		err  string
	}{
		{func(c *Config) { c.MigrationBudgetBytes = -1 }, "MigrationBudgetBytes -1 < 0"},
		{func(c *Config) { c.MaxMovesPerPlan = -1 }, "MaxMovesPerPlan -1 < 0"},
		{func(c *Config) { c.Hysteresis = 1 }, "Hysteresis 1 not in [0, 1)"},
		{func(c *Config) { c.Hysteresis = math.NaN() }, "Hysteresis NaN"},
		{func(c *Config) { c.Cooldown = -1 }, "Cooldown -1 < 0"},
		{func(c *Config) { c.ApplyTimeout = 0 }, "ApplyTimeout 0 < 1"},
		{func(c *Config) { c.SettleSteps = -1 }, "SettleSteps -1 < 0"},
		{func(c *Config) { c.ExploreEvery = -1 }, "ExploreEvery -1 < 0"},
		{func(c *Config) { c.ExploreFraction = 0 }, "ExploreFraction 0 not in (0, 1]"},
		{func(c *Config) { c.MinSamples = -1 }, "MinSamples -1 < 0"},
		{func(c *Config) { c.MaxRelStd = 0 }, "MaxRelStd 0 not > 0"},
		{func(c *Config) { c.ReprobeAfter = 0 }, "ReprobeAfter 0s not > 0"},
		{func(c *Config) { c.SlowRatio = 1.5 }, "SlowRatio 1.5 not in (0, 1]"},
		{func(c *Config) { c.ScaleOutThreshold = 0 }, "ScaleOutThreshold 0 not > 0"},
		{func(c *Config) { c.ScaleInThreshold = 0.9 }, "ScaleInThreshold 0.9 not in [0, ScaleOutThreshold 0.85)"},
		{func(c *Config) { c.ScaleCooldown = 0 }, "ScaleCooldown 0 < 1"},
		{func(c *Config) { c.MinServers = 0 }, "MinServers 0 < 1"},
		{func(c *Config) { c.MinServers, c.MaxServers = 4, 3 }, "MaxServers 3 < MinServers 4"},
		{func(c *Config) { c.BytesWeight, c.RequestsWeight = 0, 0 }, "not both 0"},
		{func(c *Config) { c.BytesWeight = -1 }, "BytesWeight -1"},
		{func(c *Config) { c.RequestsWeight = math.Inf(1) }, "RequestsWeight +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.err, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			_, err := NewPlanner(c)
			assert.ErrorContains(t, err, tt.err)
		})
	}

	_, err = NewPlanner(Config{})
	assert.ErrorContains(t, err, "ApplyTimeout 0 < 1", "the zero Config is not usable: start from DefaultConfig")
}

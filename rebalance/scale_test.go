package rebalance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scaleConfig is exactConfig with scaling on: servers of byte rate 10 make
// T = bytes/10.
func scaleConfig() Config {
	c := exactConfig()
	c.ScaleOutThreshold = 0.85
	c.ScaleInThreshold = 0.3
	c.ScaleCooldown = 1
	return c
}

func TestScale(t *testing.T) {
	busy := []Block{blk(1, 4, 8), blk(2, 5, 8), blk(3, 4, 10), blk(4, 5, 10)} // T = 0.9, 0.9
	idle := []Block{blk(1, 1, 8), blk(2, 1, 10), blk(3, 1, 12)}
	tests := []struct {
		name    string
		cfg     func(*Config)
		blocks  []Block
		servers []Server
		out     int
		in      []int32
		reason  string
	}{
		{name: "balanced but above ScaleOutThreshold: scale out",
			blocks: busy, servers: []Server{u(8, 10), u(10, 10)}, out: 1, reason: "scale out: balanced plan leaves server 8 at 0.900 > 0.85"},
		{name: "no scale out at MaxServers",
			cfg:    func(c *Config) { c.MaxServers = 2 },
			blocks: busy, servers: []Server{u(8, 10), u(10, 10)}},
		{name: "no scale out while a standby is unused",
			blocks: busy, servers: []Server{u(8, 10), u(10, 10), standby(12)}},
		{name: "no scale out when one indivisible block is the bottleneck",
			blocks: []Block{blk(1, 9, 8), blk(2, 1, 10)}, servers: []Server{u(8, 10), u(10, 10)}},
		{name: "no scale decision while a server drains",
			blocks:  []Block{blk(1, 1, 12), blk(2, 9, 8), blk(3, 9, 10)},
			servers: []Server{u(8, 10), u(10, 10), draining(u(12, 10))}, reason: "drain"},
		{name: "all below ScaleInThreshold: drain the slowest",
			blocks: idle, servers: []Server{u(8, 10), u(10, 10), u(12, 5)}, in: []int32{12},
			reason: "scale in: every server below 0.30; without server 12 the slowest would be 0.200"},
		{name: "scale in prefers a server holding nothing",
			blocks: idle[:2], servers: []Server{u(8, 10), u(10, 10), u(12, 10)}, in: []int32{12}},
		{name: "scale in vetoed by measured utilisation",
			blocks: idle, servers: []Server{u(8, 10), u(10, 10), {ID: 12, Capacity: u(12, 5).Capacity, Utilization: 0.5}}},
		{name: "no scale in at MinServers",
			cfg:    func(c *Config) { c.MinServers = 3 },
			blocks: idle, servers: []Server{u(8, 10), u(10, 10), u(12, 5)}},
		{name: "no scale in if the others would need a scale out",
			cfg:    func(c *Config) { c.ScaleInThreshold = 0.5 },
			blocks: busy, servers: []Server{u(8, 20), u(10, 20)}}, // 0.45 each; 0.9 > 0.85·0.95 after
		{name: "no scale in without measured load",
			blocks: []Block{{ID: 1, Bytes: 1, Server: 8}}, servers: []Server{u(8, 10), u(10, 10)}, reason: "no load measured"},
		{name: "no scale in with a pinned block on the candidate",
			blocks: []Block{blk(1, 1, 8), blk(2, 1, 10), pinned(blk(3, 1, 12))}, servers: []Server{u(8, 10), u(10, 10), u(12, 5)}, in: []int32{10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := scaleConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			plan := newPlanner(t, cfg).Step(Observation{Now: t0}, tt.blocks, tt.servers)
			require.NoError(t, plan.Err)
			assert.Equal(t, tt.out, plan.ScaleOut, plan.Reason)
			assert.Equal(t, tt.in, plan.ScaleIn, plan.Reason)
			if tt.out > 0 || len(tt.in) > 0 {
				assert.Equal(t, Exploit, plan.Kind)
			}
			assert.Contains(t, plan.Reason, tt.reason)
		})
	}
}

// TestScaleCooldown: the first decision waits ScaleCooldown steps (warm-up)
// and a request the coordinator has not carried out is repeated only every
// ScaleCooldown steps.
func TestScaleCooldown(t *testing.T) {
	cfg := scaleConfig()
	cfg.ScaleCooldown = 3
	p := newPlanner(t, cfg)
	blocks := []Block{blk(1, 4, 8), blk(2, 5, 8), blk(3, 4, 10), blk(4, 5, 10)}
	servers := []Server{u(8, 10), u(10, 10)}
	var got []int
	for i := range 9 {
		got = append(got, p.Step(Observation{Now: t0.Add(time.Duration(i) * time.Second)}, blocks, servers).ScaleOut)
	}
	assert.Equal(t, []int{0, 0, 1, 0, 0, 1, 0, 0, 1}, got)
}

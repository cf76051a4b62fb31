package paramstore

import (
	"math"
	"testing"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	one := func() int { return 1 }
	for _, tc := range []struct {
		name string
		edit func(*Config)
		err  string // "" for valid
	}{
		{"default is the sum store", func(*Config) {}, ""},
		{"zero config", func(c *Config) { *c = Config{} }, ""},
		{"sgd", func(c *Config) { c.Optimizer = SGD }, ""},
		{"adam with defaults", func(c *Config) { c.Optimizer = Adam }, ""},
		{"mean without workers", func(c *Config) { c.Aggregate = Mean }, "Mean aggregation needs Config.Workers"},
		{"mean with workers", func(c *Config) { c.Aggregate, c.Workers = Mean, one }, ""},
		{"unknown aggregate", func(c *Config) { c.Aggregate = 7 }, "aggregation Aggregate(7)"},
		{"unknown optimizer", func(c *Config) { c.Optimizer = -1 }, "optimizer Optimizer(-1)"},
		{"zero lr", func(c *Config) { c.Optimizer, c.LR = SGD, 0 }, "learning rate 0 for sgd: it must be > 0"},
		{"NaN lr", func(c *Config) { c.Optimizer, c.LR = Momentum, math.NaN() }, "learning rate NaN"},
		{"lr is unused without optimizer", func(c *Config) { c.LR = -1 }, ""},
		{"momentum 1", func(c *Config) { c.Optimizer, c.Momentum = Momentum, 1 }, "momentum 1: it must be in [0, 1)"},
		{"beta1 negative", func(c *Config) { c.Optimizer, c.Beta1 = Adam, -0.1 }, "beta1 -0.1"},
		{"beta2 1", func(c *Config) { c.Optimizer, c.Beta2 = Adam, 1 }, "beta2 1"},
		{"epsilon 0", func(c *Config) { c.Optimizer, c.Epsilon = Adam, 0 }, "epsilon 0: it must be > 0"},
		{"weight decay without optimizer", func(c *Config) { c.WeightDecay = 0.1 }, "weight decay needs an optimizer"},
		{"negative weight decay", func(c *Config) { c.Optimizer, c.WeightDecay = SGD, -1 }, "weight decay -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			_, newErr := New(c)
			if tc.err == "" {
				assert.NoError(t, err)
				assert.NoError(t, newErr)
				return
			}
			assert.ErrorContains(t, err, tc.err)
			assert.Equal(t, err, newErr, "New validates")
		})
	}
}

func TestParseNames(t *testing.T) {
	for s, want := range map[string]Optimizer{"none": None, "sgd": SGD, "Momentum": Momentum, " adam ": Adam} {
		o, err := ParseOptimizer(s)
		assert.NoError(t, err)
		assert.Equal(t, want, o)
		if s == "sgd" {
			assert.Equal(t, "sgd", o.String())
		}
	}
	_, err := ParseOptimizer("rmsprop")
	assert.EqualError(t, err, `unknown optimizer "rmsprop": use one of none, sgd, momentum, adam`)
	a, err := ParseAggregate("mean")
	assert.NoError(t, err)
	assert.Equal(t, Mean, a)
	_, err = ParseAggregate("avg")
	assert.EqualError(t, err, `unknown aggregation "avg": use one of sum, mean`)
}

// TestInvalidPushesChangeNothing sends pushes that cannot be applied, each
// next to a valid key: each fails with a message naming the problem, and
// every value is as before.
func TestInvalidPushesChangeNothing(t *testing.T) {
	workers, round := 2, 0
	cfg := withOpt(Momentum, 0.5)
	cfg.Aggregate = Mean
	cfg.Workers = func() int { return workers }
	cfg.RoundSize = func() int { return round }
	s := newStore(t, cfg)
	require.NoError(t, push(s, []uint64{1, 2}, []float32{1, 2, 3, 4}))
	require.NoError(t, push(s, []uint64{1}, []float32{2, 2})) // momentum state exists
	before, err := s.Export(0, math.MaxUint64)
	require.NoError(t, err)
	require.NoError(t, s.Import(before))
	f32 := func(v ...float32) []byte { return kv.AsBytes(v) }
	for _, tc := range []struct {
		name  string
		meta  kv.ReqMeta
		data  kv.KVPairs
		setup func()
		err   string
	}{
		{name: "wrong length", meta: kv.ReqMeta{Push: true, DataType: message.Float},
			data: kv.KVPairs{Keys: []uint64{1, 2}, Vals: f32(1, 1, 1), Lens: []int32{2, 1}},
			err:  "push of 4 bytes of FLOAT to key 2, which holds 8 bytes of FLOAT"},
		{name: "wrong type", meta: kv.ReqMeta{Push: true, DataType: message.Double},
			data: kv.KVPairs{Keys: []uint64{1}, Vals: kv.AsBytes([]float64{1, 1})},
			err:  "push of 16 bytes of DOUBLE to key 1, which holds 8 bytes of FLOAT"},
		{name: "optimizer on integers", meta: kv.ReqMeta{Push: true, DataType: message.Int32},
			data: kv.KVPairs{Keys: []uint64{3}, Vals: kv.AsBytes([]int32{1})},
			err:  "initial push of key 3: optimizer momentum works on FLOAT and DOUBLE values, not INT32"},
		{name: "lens do not add up", meta: kv.ReqMeta{Push: true, DataType: message.Float},
			data: kv.KVPairs{Keys: []uint64{1, 2}, Vals: f32(1, 1, 1, 1), Lens: []int32{2, 1}},
			err:  "lens add up to 12 bytes but vals has 16"},
		{name: "negative lens", meta: kv.ReqMeta{Push: true, DataType: message.Float},
			data: kv.KVPairs{Keys: []uint64{1, 2}, Vals: f32(1, 1, 1, 1), Lens: []int32{5, -1}},
			err:  "lens[1]=-1 is negative"},
		{name: "uneven split", meta: kv.ReqMeta{Push: true, DataType: message.Float},
			data: kv.KVPairs{Keys: []uint64{1, 2}, Vals: f32(1, 1, 1)},
			err:  "12 bytes of vals cannot be split evenly over 2 keys of FLOAT"},
		{name: "new key twice with two lengths", meta: kv.ReqMeta{Push: true, DataType: message.Float},
			data: kv.KVPairs{Keys: []uint64{1, 5, 5}, Vals: f32(1, 1, 1, 1, 1), Lens: []int32{2, 1, 2}},
			err:  "key 5 appears twice in the push with 4 and 8 bytes"},
		{name: "no workers to divide by", meta: kv.ReqMeta{Push: true, DataType: message.Float},
			data: kv.KVPairs{Keys: []uint64{6, 1}, Vals: f32(1, 1, 1, 1)}, setup: func() { workers = 0 },
			err: "mean aggregation divides by the number of workers, which is 0 now"},
		{name: "negative round size", meta: kv.ReqMeta{Push: true, DataType: message.Float},
			data: kv.KVPairs{Keys: []uint64{1}, Vals: f32(1, 1)}, setup: func() { round = -2 },
			err: "the round size is -2; it must be >= 0 (0 applies every push at once)"},
		{name: "pull of a key never pushed", meta: kv.ReqMeta{Pull: true, DataType: message.Float},
			data: kv.KVPairs{Keys: []uint64{1, 9}},
			err:  "pull of key 9, which has no value (it was never pushed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			workers, round = 2, 0
			if tc.setup != nil {
				tc.setup()
			}
			_, err := s.apply(tc.meta, tc.data)
			assert.EqualError(t, err, tc.err)
			after, err := s.Export(0, math.MaxUint64)
			require.NoError(t, err)
			require.NoError(t, s.Import(after))
			assert.Equal(t, before, after, "the store changed")
		})
	}
}

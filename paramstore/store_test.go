package paramstore

import (
	"testing"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newStore is New(cfg) that must succeed.
func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	require.NoError(t, err)
	return s
}

// push pushes vals (one key per len(vals)/len(keys) elements) as a worker
// would, through the store's request path.
func push[F float32 | float64](s *Store, keys []uint64, vals []F) error {
	_, err := s.apply(kv.ReqMeta{Push: true, DataType: kv.DataTypeOf[F]()},
		kv.KVPairs{Keys: keys, Vals: kv.AsBytes(vals)})
	return err
}

// pull returns the values of keys as F.
func pull[F float32 | float64](t testing.TB, s *Store, keys ...uint64) []F {
	t.Helper()
	res, err := s.apply(kv.ReqMeta{Pull: true, DataType: kv.DataTypeOf[F]()}, kv.KVPairs{Keys: keys})
	require.NoError(t, err)
	require.Equal(t, keys, res.Keys)
	out, err := kv.FromBytes[F](res.Vals)
	require.NoError(t, err)
	return append([]F(nil), out...)
}

func sgd(lr float64) Config {
	c := DefaultConfig()
	c.Optimizer, c.LR = SGD, lr
	return c
}

func TestFirstPushInitializesLaterPushesAreSGDGradients(t *testing.T) {
	s := newStore(t, sgd(0.5))
	require.NoError(t, push(s, []uint64{7}, []float32{1, 2, 3}))
	assert.Equal(t, []float32{1, 2, 3}, pull[float32](t, s, 7), "the first push is the value")
	require.NoError(t, push(s, []uint64{7}, []float32{2, 4, -2}))
	assert.Equal(t, []float32{0, 0, 4}, pull[float32](t, s, 7), "w -= 0.5*g")
	require.NoError(t, push(s, []uint64{7}, []float32{1, 1, 1}))
	assert.Equal(t, []float32{-0.5, -0.5, 3.5}, pull[float32](t, s, 7))
	v, dt, ok := s.Value(7)
	require.True(t, ok)
	assert.Equal(t, message.Float, dt)
	assert.Equal(t, kv.AsBytes([]float32{-0.5, -0.5, 3.5}), v)
	assert.Equal(t, 1, s.Len())
}

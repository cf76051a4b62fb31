package kv

import (
	"math"
	"testing"

	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDefaultHandlerSnapshotRestore: Snapshot copies a range without
// removing it, and Restore into an empty store gives the same values.
func TestDefaultHandlerSnapshotRestore(t *testing.T) {
	h := NewDefaultHandler()
	i64 := func(v ...int64) []byte { return AsBytes(v) }
	_, err := h.apply(ReqMeta{Push: true, DataType: message.Int64}, KVPairs{Keys: []uint64{1, 5, 9}, Vals: i64(10, 20, 50, 60, 90), Lens: []int32{2, 2, 1}})
	require.NoError(t, err)
	_, err = h.apply(ReqMeta{Push: true, DataType: message.Double}, KVPairs{Keys: []uint64{7}, Vals: AsBytes([]float64{1.5, -2})})
	require.NoError(t, err)

	all, err := h.Snapshot(0, math.MaxUint64)
	require.NoError(t, err)
	assert.Equal(t, 4, h.Len(), "Snapshot leaves the keys in the store")
	part, err := h.Snapshot(5, 9)
	require.NoError(t, err)

	r := NewDefaultHandler()
	require.NoError(t, r.Restore(all))
	require.Equal(t, 4, r.Len())
	for _, k := range []uint64{1, 5, 7, 9} {
		want, wdt, _ := h.Value(k)
		got, gdt, ok := r.Value(k)
		require.True(t, ok, "key %d", k)
		assert.Equal(t, want, got, "key %d", k)
		assert.Equal(t, wdt, gdt, "key %d", k)
	}
	got, _, _ := r.Value(5)
	assert.Equal(t, i64(50, 60), got)

	p := NewDefaultHandler()
	require.NoError(t, p.Restore(part))
	assert.Equal(t, 2, p.Len(), "[5, 9) holds keys 5 and 7")
	_, _, ok := p.Value(9)
	assert.False(t, ok)
}

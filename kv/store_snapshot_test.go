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

// TestDefaultHandlerReplace: a backup installing its primary's copy of
// [5, 9) holds exactly the copy's keys there, overwritten in the buffers
// it had, and keeps its other keys; a copy holding a key outside the range
// changes nothing.
func TestDefaultHandlerReplace(t *testing.T) {
	i64 := func(v ...int64) []byte { return AsBytes(v) }
	push := func(h *DefaultHandler, keys []uint64, vals []int64, lens []int32) {
		_, err := h.apply(ReqMeta{Push: true, DataType: message.Int64}, KVPairs{Keys: keys, Vals: i64(vals...), Lens: lens})
		require.NoError(t, err)
	}
	primary, backup := NewDefaultHandler(), NewDefaultHandler()
	push(primary, []uint64{1, 5, 7}, []int64{10, 50, 51, 70}, []int32{1, 2, 1})
	push(backup, []uint64{1, 6, 7}, []int64{-1, -6, -7}, []int32{1, 1, 1})
	buf := backup.store[7].val
	for round := range 3 {
		push(primary, []uint64{5, 7}, []int64{1, 1, 1}, []int32{2, 1}) // sums: each round adds 1
		copied, err := primary.AppendSnapshot([]byte{0xee}, 5, 9)
		require.NoError(t, err)
		require.Equal(t, byte(0xee), copied[0])
		require.NoError(t, backup.Replace(5, 9, copied[1:]))
		got, _, _ := backup.Value(5)
		assert.Equal(t, i64(50+int64(round)+1, 51+int64(round)+1), got, "round %d", round)
		got, _, _ = backup.Value(7)
		assert.Equal(t, i64(70+int64(round)+1), got, "round %d", round)
		assert.Same(t, &buf[0], &backup.store[7].val[0], "round %d: key 7's buffer is reused", round)
	}
	_, _, ok := backup.Value(6)
	assert.False(t, ok, "a key the copy lacks is dropped")
	got, _, _ := backup.Value(1)
	assert.Equal(t, i64(-1), got, "a key outside the range is kept")

	all, err := primary.Snapshot(0, math.MaxUint64)
	require.NoError(t, err)
	require.ErrorContains(t, backup.Replace(5, 9, all), "holds key 1")
	require.Error(t, backup.Replace(5, 9, all[:len(all)-1]), "truncated")
	got, _, _ = backup.Value(1)
	assert.Equal(t, i64(-1), got, "nothing changed")
	assert.Equal(t, 3, backup.Len())
}

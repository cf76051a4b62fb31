package kv

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
)

// values is what h holds, by key, except key MaxUint64 (no range ends
// above it, so no export carries it).
func values(h *DefaultHandler) map[uint64]storedValue {
	out := map[uint64]storedValue{}
	for k, v := range h.store {
		if k != math.MaxUint64 {
			out[k] = *v
		}
	}
	return out
}

// FuzzDefaultHandlerImport feeds DefaultHandler snapshots (a migration's
// state from another server, a snapshot file's) to Import: it never
// panics, installs nothing when it fails, and what it installs exports to
// a snapshot that imports to the same store.
func FuzzDefaultHandlerImport(f *testing.F) {
	h := NewDefaultHandler()
	require.NoError(f, h.push(message.Float, KVPairs{Keys: []uint64{3}, Vals: AsBytes([]float32{1, 2})}))
	require.NoError(f, h.push(message.Double, KVPairs{Keys: []uint64{1 << 40}, Vals: AsBytes([]float64{-1})}))
	one, err := h.Snapshot(3, 4)
	require.NoError(f, err)
	all, err := h.Snapshot(0, math.MaxUint64)
	require.NoError(f, err)
	testutil.FuzzSeeds(f, one, all, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		h := NewDefaultHandler()
		if err := h.Import(b); err != nil {
			require.Empty(t, h.store, "a failed import installed keys")
			return
		}
		enc, err := h.Snapshot(0, math.MaxUint64)
		require.NoError(t, err)
		h2 := NewDefaultHandler()
		require.NoError(t, h2.Import(enc))
		require.Equal(t, values(h), values(h2), "round trip changed the store")
	})
}

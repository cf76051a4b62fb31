package routing

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKeyRangesAreEqualSlicesOfTheKeySpace(t *testing.T) {
	assert.Equal(t, []Range{{0, 9223372036854775807}, {9223372036854775807, 18446744073709551614}}, KeyRanges(2))
	assert.Equal(t, []Range{{0, 18446744073709551615}}, KeyRanges(1))
}

func TestIdentityTableRoutesRangeIToServerRankI(t *testing.T) {
	tab := NewIdentityTable(3)
	r := tab.Current()
	require.Len(t, r.Intervals, 3)
	for i, iv := range r.Intervals {
		assert.Equal(t, int32(8+2*i), iv.Node)
		assert.Equal(t, tab.Ranges()[i], Range{iv.Begin, iv.End})
	}
	assert.Zero(t, tab.Epoch())
}

func TestTableUpdateTakesOnlyNewerEpochsAndSignals(t *testing.T) {
	tab := NewIdentityTable(2)
	changed := tab.Changed()
	next := tab.Current().Clone()
	next.Epoch = 2
	require.True(t, tab.Update(next))
	select {
	case <-changed:
	default:
		t.Fatal("Changed was not closed by a newer table")
	}
	older := next.Clone()
	older.Epoch = 1
	assert.False(t, tab.Update(older), "an older epoch must not replace the current table")
	assert.Equal(t, uint64(2), tab.Epoch())
}

func TestRoutesMarshalRoundTrip(t *testing.T) {
	r := IdentityRoutes(KeyRanges(2))
	r.Epoch = 7
	r.Intervals[1].Prev, r.Intervals[1].CutSeq = 8, 42
	got, err := UnmarshalRoutes(r.Marshal())
	require.NoError(t, err)
	assert.Equal(t, r, got)
	_, err = UnmarshalRoutes(r.Marshal()[:5])
	assert.Error(t, err)
}

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

func TestRoutesWithBackupsRoundTrip(t *testing.T) {
	r := IdentityRoutes(KeyRanges(3))
	r.Epoch = 3
	plain := r.Marshal()
	r.Intervals[0].Backups = []int32{10, 12}
	r.Intervals[2].Backups = []int32{8}
	b := r.Marshal()
	assert.Len(t, b, len(plain)+3*4+3*4, "a backup count per interval and an id per backup")
	got, err := UnmarshalRoutes(b)
	require.NoError(t, err)
	assert.Equal(t, r, got)
	assert.True(t, got.Replicated())
	for cut := 12; cut < len(b); cut += 7 {
		_, err := UnmarshalRoutes(b[:cut])
		assert.Error(t, err, "truncated at %d bytes", cut)
	}
	_, err = UnmarshalRoutes(append(b, 0))
	assert.ErrorContains(t, err, "after the last interval")
}

func TestRoutesWithoutBackupsKeepTheFixedEncoding(t *testing.T) {
	r := IdentityRoutes(KeyRanges(2))
	assert.False(t, r.Replicated())
	assert.Len(t, r.Marshal(), 12+2*intervalWire)
}

func TestValidateRejectsBadBackups(t *testing.T) {
	for name, bs := range map[string][]int32{"the owner": {8}, "a repeat": {10, 10}, "no node": {0}} {
		r := IdentityRoutes(KeyRanges(2))
		r.Intervals[0].Backups = bs
		assert.ErrorContains(t, r.Validate(), "invalid backup list", name)
	}
}

func TestCoalesceKeepsIntervalsWithOtherBackupsApart(t *testing.T) {
	r := &Routes{Intervals: []Interval{
		{Begin: 0, End: 5, Node: 8, Backups: []int32{10}},
		{Begin: 5, End: 9, Node: 8, Backups: []int32{10}},
		{Begin: 9, End: 20, Node: 8, Backups: []int32{12}},
	}}
	r.Coalesce()
	assert.Equal(t, []Interval{{Begin: 0, End: 9, Node: 8, Backups: []int32{10}}, {Begin: 9, End: 20, Node: 8, Backups: []int32{12}}}, r.Intervals)
}

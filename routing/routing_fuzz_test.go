package routing

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// FuzzUnmarshalRoutes feeds MsgRoutes bodies (a scheduler's table, as a
// node receives it) to UnmarshalRoutes: it never panics, and a table it
// accepts re-encodes to bytes that decode to the same table, stably.
func FuzzUnmarshalRoutes(f *testing.F) {
	migrating := IdentityRoutes(KeyRanges(3))
	migrating.Epoch = 7
	migrating = migrating.Split(100, 200)
	for i := range migrating.Intervals {
		if migrating.Intervals[i].Begin == 100 {
			migrating.Intervals[i].Node, migrating.Intervals[i].Prev, migrating.Intervals[i].CutSeq = 12, 8, 41
		}
	}
	replicated := IdentityRoutes(KeyRanges(3))
	replicated.Epoch = 3
	for i := range replicated.Intervals {
		replicated.Intervals[i].Backups = []int32{8 + 2*int32((i+1)%3), 8 + 2*int32((i+2)%3)}
	}
	testutil.FuzzSeeds(f,
		NewIdentityTable(1).Current().Marshal(),
		NewIdentityTable(4).Current().Marshal(),
		migrating.Marshal(),
		replicated.Marshal(),
		(&Routes{}).Marshal(),
	)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := UnmarshalRoutes(b)
		if err != nil {
			require.Nil(t, r)
			return
		}
		enc := r.Marshal()
		r2, err := UnmarshalRoutes(enc)
		require.NoError(t, err, "re-encoded table %x does not decode", enc)
		require.Equal(t, r, r2, "round trip changed the table")
		require.Equal(t, enc, r2.Marshal(), "encoding is not stable")
	})
}

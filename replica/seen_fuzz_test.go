package replica

import (
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// records splits an Export into its entries, sorted (Export walks a map).
func records(b []byte) []string {
	var out []string
	for ; len(b) >= seenWire; b = b[seenWire:] {
		out = append(out, string(b[:seenWire]))
	}
	slices.Sort(out)
	return out
}

// FuzzSeenImport feeds applied-push records (the tail of a MsgSeed or
// MsgShip body, from an interval's primary) to Seen.Import: it never
// panics, and what it accepts exports to records that import to the same
// record.
func FuzzSeenImport(f *testing.F) {
	one := NewSeen()
	one.Note(9<<8|1, 0, 0)
	many := NewSeen()
	for ts := range int32(300) {
		if ts%3 != 0 {
			many.Note(9<<8|1, 100, ts)
		}
		many.Note(11<<8|2, 5, ts*2)
	}
	many.Note(13<<8|1, 7, math.MaxInt32)
	testutil.FuzzSeeds(f, one.Export(0, math.MaxUint64), many.Export(0, 10), many.Export(100, 101), nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewSeen()
		if err := s.Import(b); err != nil {
			require.NotZero(t, len(b)%seenWire)
			return
		}
		enc := s.Export(0, math.MaxUint64)
		s2 := NewSeen()
		require.NoError(t, s2.Import(enc))
		enc2 := s2.Export(0, math.MaxUint64)
		require.Equal(t, records(enc), records(enc2), "round trip changed the record")
	})
}

package snapshot

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// FuzzDecode feeds snapshot file contents (whatever is on the disk at
// PS_SNAPSHOT_DIR) to Decode: it never panics, and a file it accepts
// re-encodes to a file that decodes the same.
func FuzzDecode(f *testing.F) {
	at := time.Unix(1700000000, 123456789)
	testutil.FuzzSeeds(f,
		Encode(Header{Rank: 0, Begin: 0, End: 1 << 40, Seq: 1, Time: at}, []byte("PSTO state")),
		Encode(Header{Rank: 3, Begin: 10, End: 20, Seq: 1 << 33, Time: at}, nil),
	)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, state, err := Decode(b)
		if err != nil {
			return
		}
		enc := Encode(h, state)
		h2, state2, err := Decode(enc)
		require.NoError(t, err, "re-encoded file %x does not decode", enc)
		require.Equal(t, enc, Encode(h2, state2), "encoding is not stable")
		require.True(t, h.Time.Equal(h2.Time), "time %v became %v", h.Time, h2.Time)
		h.Time, h2.Time = time.Time{}, time.Time{}
		require.Equal(t, h, h2)
		require.Equal(t, state, state2)
	})
}

// FuzzParseName feeds file names found in the snapshot directory to
// parseName: a name it takes is the one FileName gives its rank and
// sequence, or a spelling of it (leading zeros, a sign).
func FuzzParseName(f *testing.F) {
	testutil.FuzzSeeds(f, []byte(FileName(0, 1)), []byte(FileName(12, 1<<40)), []byte(FileName(3, 7)+tmpSuffix))
	f.Fuzz(func(t *testing.T, b []byte) {
		rank, seq, ok := parseName(string(b))
		if !ok {
			return
		}
		require.GreaterOrEqual(t, rank, 0)
		r2, s2, ok := parseName(FileName(rank, seq))
		require.True(t, ok)
		require.Equal(t, rank, r2)
		require.Equal(t, seq, s2)
	})
}

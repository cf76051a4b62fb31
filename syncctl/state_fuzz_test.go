package syncctl

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// FuzzImportState feeds sync state (the part of a migration's, seed's or
// round ship's state that the keys' sync gate exported) to the decoder
// and to Import on controllers of every mode: nothing panics, what the
// decoder accepts re-encodes to a state that decodes the same, and a failed Import
// changes nothing.
func FuzzImportState(f *testing.F) {
	testutil.FuzzSeeds(f,
		encodeState(nil),
		encodeState([]*keyState{{key: 1, tmin: 1, entries: []entry{
			{w: Worker{Node: 9, Customer: 0}, clock: 2, owes: true}, {w: Worker{Node: 11}, clock: 1}, {w: Worker{Node: 13}, placeholder: true, clock: 1}}}}),
		encodeState([]*keyState{{key: 0, entries: []entry{{w: Worker{Node: 9}}}}, {key: math.MaxUint64, tmin: -3, entries: []entry{{w: Worker{Node: 9, Customer: 2}, clock: math.MaxInt64}}}}),
	)
	modes := []Config{{Mode: BSP}, {Mode: SSP, Staleness: 1}, {Mode: Fluent, Staleness: 1, PauseProb: 0.5, Rand: func() float64 { return 0.25 }}, {Mode: ASP}}
	f.Fuzz(func(t *testing.T, b []byte) {
		ks, err := decodeState(b)
		if err == nil {
			enc := encodeState(ks)
			ks2, err := decodeState(enc)
			require.NoError(t, err, "re-encoded state %x does not decode", enc)
			require.Equal(t, ks, ks2, "round trip changed the state")
			require.Equal(t, enc, encodeState(ks2), "encoding is not stable")
		}
		for _, cfg := range modes {
			c, err := New(cfg)
			require.NoError(t, err)
			c.Join(9)
			if _, ierr := c.Import(b); ierr != nil {
				require.Equal(t, Stats{}, c.Stats())
				again, _, _ := c.Export(0, math.MaxUint64)
				require.Equal(t, encodeState(nil), again, "a failed import left state")
			} else if err == nil {
				_, _, _ = c.Export(0, math.MaxUint64)
			}
		}
	})
}

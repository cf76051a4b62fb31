package message_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/message"
)

// FuzzDecodeRawMeta checks that DecodeRawMeta never panics, reports failures
// as *DecodeError inside the frame, and that whatever it accepts is a fixed
// point of encode-then-decode. Seeds: the golden frames (added here) and
// testdata/fuzz/FuzzDecodeRawMeta (frames with the elasticps flags and
// trailer, and damaged ones).
func FuzzDecodeRawMeta(f *testing.F) {
	for _, r := range loadRawGolden(f) {
		if len(r.meta) <= 1768 {
			f.Add(r.meta)
		}
	}
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, b []byte) {
		var m message.Meta
		if err := message.DecodeRawMeta(b, &m); err != nil {
			var de *message.DecodeError
			require.ErrorAs(t, err, &de)
			require.True(t, de.Offset >= 0 && de.Offset <= len(b), "error offset %d outside the %d-byte frame: %v", de.Offset, len(b), err)
			return
		}
		enc, err := message.EncodeRawMeta(&m)
		require.NoError(t, err, "a decoded meta must encode\nmeta %s", dump(&m))
		require.Len(t, enc, m.RawEncodedLen(), "RawEncodedLen")
		var m2 message.Meta
		require.NoError(t, message.DecodeRawMeta(enc, &m2), "re-encoded %x does not decode\nmeta %s", enc, dump(&m))
		require.True(t, metaEqual(&m, &m2), "round trip changed the meta\nfirst  %s\nsecond %s", dump(&m), dump(&m2))
		enc2, err := message.EncodeRawMeta(&m2)
		require.NoError(t, err)
		require.Equal(t, enc, enc2, "encoding is not stable")
		// Decoding into a Meta full of other data gives the same result.
		dirty := addNodeMeta()
		dirty.Body = []byte("stale")
		dirty.DataType = []message.DataType{1, 2, 3, 4}
		dirty.Ext.Epoch, dirty.DataSize, dirty.Sender, dirty.Raw.Key = 99, 5, 3, 8
		dirty.Control.Nodes[0].Standby = true
		require.NoError(t, message.DecodeRawMeta(b, &dirty), "decoding into a used Meta")
		require.True(t, metaEqual(&dirty, &m), "decoding into a used Meta\n got %s\nwant %s", dump(&dirty), dump(&m))
	})
}

package message_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
)

// FuzzDecodeMeta checks that DecodeMeta never panics, reports failures as
// *DecodeError, and that whatever it accepts is a fixed point of
// encode-then-decode: re-encoding yields a frame that decodes to an equal
// Meta and re-encodes to the same bytes.
func FuzzDecodeMeta(f *testing.F) {
	// Every golden vector is a seed; every 100th goes to the committed
	// corpus as well (the vectors are committed already).
	var seeds [][]byte
	for i, r := range loadDmlcGolden(f) {
		if i%100 == 0 {
			seeds = append(seeds, r.meta)
		} else {
			f.Add(r.meta)
		}
	}
	kv, an := kvPushMeta(), addNodeMeta()
	kv.Ext = message.Ext{Epoch: 2, SendNanos: -5, RecvNanos: 6, HandleNano: 7, PushSeq: 8, Iteration: 9}
	kv.Raw = message.RawFields{Key: 10, Addr: 11, ValLen: -12, Option: 13}
	testutil.FuzzSeeds(f, append(seeds, message.EncodeMeta(&kv), message.EncodeMeta(&an),
		[]byte(pb{}.u(9, 8).lp(9, pb{}.varint(9)).key(20, 3).u(1, 1).key(20, 4).lp(3, pb{}.i32(1, 3).i32(3, -1))),
		[]byte{})...)

	f.Fuzz(func(t *testing.T, b []byte) {
		var m message.Meta
		if err := message.DecodeMeta(b, &m); err != nil {
			var de *message.DecodeError
			require.ErrorAs(t, err, &de)
			require.True(t, de.Offset >= 0 && de.Offset <= len(b), "error offset %d outside the %d-byte frame: %v", de.Offset, len(b), err)
			return
		}
		enc := message.EncodeMeta(&m)
		require.Len(t, enc, m.EncodedLen(), "EncodedLen")
		var m2 message.Meta
		require.NoError(t, message.DecodeMeta(enc, &m2), "re-encoded %x does not decode\nmeta %s", enc, dump(&m))
		require.True(t, metaEqual(&m, &m2), "round trip changed the meta\nfirst  %s\nsecond %s", dump(&m), dump(&m2))
		require.Equal(t, enc, message.EncodeMeta(&m2), "encoding is not stable")
		// Decoding into a Meta full of other data must give the same result.
		dirty := addNodeMeta()
		dirty.Body = []byte("stale")
		dirty.DataType = []message.DataType{1, 2, 3, 4}
		dirty.Ext.Epoch, dirty.DataSize, dirty.Sender = 99, 5, 3
		dirty.Raw = message.RawFields{Key: 9, SID: 4}
		require.NoError(t, message.DecodeMeta(b, &dirty), "decoding into a used Meta")
		require.True(t, metaEqual(&dirty, &m), "decoding into a used Meta\n got %s\nwant %s", dump(&dirty), dump(&m))
	})
}

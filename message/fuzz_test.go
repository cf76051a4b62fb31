package message_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/elasticps/elasticps/message"
)

// FuzzDecodeMeta checks that DecodeMeta never panics, reports failures as
// *DecodeError, and that whatever it accepts is a fixed point of
// encode-then-decode: re-encoding yields a frame that decodes to an equal
// Meta and re-encodes to the same bytes.
func FuzzDecodeMeta(f *testing.F) {
	if rows, ok := loadDmlcGolden(f); ok {
		for _, r := range rows {
			f.Add(r.meta)
		}
	}
	kv, an := kvPushMeta(), addNodeMeta()
	kv.Ext = message.Ext{Epoch: 2, SendNanos: -5, RecvNanos: 6, HandleNano: 7, PushSeq: 8, Iteration: 9}
	f.Add(message.EncodeMeta(&kv))
	f.Add(message.EncodeMeta(&an))
	f.Add([]byte(pb{}.u(9, 8).lp(9, pb{}.varint(9)).key(20, 3).u(1, 1).key(20, 4).lp(3, pb{}.i32(1, 3).i32(3, -1))))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, b []byte) {
		var m message.Meta
		if err := message.DecodeMeta(b, &m); err != nil {
			var de *message.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T %v is not a *DecodeError", err, err)
			}
			if de.Offset < 0 || de.Offset > len(b) {
				t.Fatalf("error offset %d outside the %d-byte frame: %v", de.Offset, len(b), err)
			}
			return
		}
		enc := message.EncodeMeta(&m)
		if len(enc) != m.EncodedLen() {
			t.Fatalf("EncodedLen %d, EncodeMeta wrote %d bytes", m.EncodedLen(), len(enc))
		}
		var m2 message.Meta
		if err := message.DecodeMeta(enc, &m2); err != nil {
			t.Fatalf("re-encoded %x does not decode: %v\nmeta %s", enc, err, dump(&m))
		}
		if !metaEqual(&m, &m2) {
			t.Fatalf("round trip changed the meta\nfirst  %s\nsecond %s", dump(&m), dump(&m2))
		}
		if enc2 := message.EncodeMeta(&m2); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%x\n%x", enc, enc2)
		}
		// Decoding into a Meta full of other data must give the same result.
		dirty := addNodeMeta()
		dirty.Body = []byte("stale")
		dirty.DataType = []message.DataType{1, 2, 3, 4}
		dirty.Ext.Epoch, dirty.DataSize, dirty.Sender = 99, 5, 3
		if err := message.DecodeMeta(b, &dirty); err != nil {
			t.Fatalf("decoding into a used Meta failed: %v", err)
		}
		if !metaEqual(&dirty, &m) {
			t.Fatalf("decoding into a used Meta\n got %s\nwant %s", dump(&dirty), dump(&m))
		}
	})
}

//go:build rdma && cgo

package rdma

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/van"
)

// The peer writes a slot's image and sends the control messages: both are
// bytes from outside.

var fuzzLimits = van.Limits{MaxFrames: 8, MaxMessageBytes: 1 << 20}

// image lays msg out as sendPlanned does, under header h (its sizes are
// set here).
func image(h header, msg *message.Message) []byte {
	meta := message.EncodeMeta(&msg.Meta)
	b := make([]byte, hdrSize, hdrSize+8*len(msg.Data)+len(meta))
	for _, d := range msg.Data {
		b = binary.LittleEndian.AppendUint64(b, uint64(len(d)))
	}
	b = append(b, meta...)
	for _, d := range msg.Data {
		b = append(b, d...)
	}
	h.metaLen, h.nframes, h.total = uint32(len(meta)), uint32(len(msg.Data)), uint64(len(b))
	h.put(b)
	return b
}

// FuzzImage feeds a slot's contents to the checks progress.go and Recv
// make: no panic, and a message that decodes lays out again to an image
// that decodes to the same message.
func FuzzImage(f *testing.F) {
	push := &message.Message{Meta: message.NewMeta()}
	push.Meta.Request, push.Meta.Push, push.Meta.Timestamp = true, true, 7
	push.AddData(message.Uint64, binary.LittleEndian.AppendUint64(nil, 3))
	push.AddData(message.Float, []byte{0, 0, 128, 63, 0, 0, 0, 64, 1})
	ctl := &message.Message{Meta: message.NewMeta()}
	ctl.Meta.Control = message.Control{Cmd: message.CmdBarrier, BarrierGroup: 7}
	req := header{flags: flagLanding, link: 3, seq: 1, landing: remoteSlot{1, 0x7f0000, 42, 4096}}
	resp := header{flags: flagGrant, link: 2, seq: 9, grant: remoteSlot{5, 0x7f1000, 43, 1 << 20}, grantLink: 4}
	testutil.FuzzSeeds(f, image(req, push), image(resp, push), image(header{link: 1}, ctl))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err != nil || h.total < hdrSize || h.total > uint64(len(b)) {
			return
		}
		msg, err := decodeImage(b[:h.total], h, fuzzLimits)
		if err != nil {
			return
		}
		again := image(h, msg)
		h2, err := parseHeader(again)
		require.NoError(t, err)
		msg2, err := decodeImage(again, h2, fuzzLimits)
		require.NoError(t, err, "a re-laid image does not decode")
		require.Equal(t, message.EncodeMeta(&msg.Meta), message.EncodeMeta(&msg2.Meta), "the meta changed")
		require.Equal(t, msg.Meta.DataSize, msg2.Meta.DataSize)
		require.Equal(t, msg.Data, msg2.Data, "the data frames changed")
		h.metaLen, h.nframes, h.total = h2.metaLen, h2.nframes, h2.total
		require.Equal(t, h, h2, "the header changed")
	})
}

// FuzzParseCtrl feeds control messages (rendezvous START and REPLY) to
// parseCtrl: no panic, and what it accepts writes back to bytes that parse
// the same.
func FuzzParseCtrl(f *testing.F) {
	var seeds [][]byte
	for _, m := range []ctrlMsg{
		{typ: ctrlStart, flags: startWantCache, link: 4, token: 5, size: 1 << 20, key: chanKey{7, 3}, replace: 8},
		{typ: ctrlStart, link: 1, token: 1, size: 4096},
		{typ: ctrlReply, flags: replyCached, link: 4, token: 5, status: replyOK, slot: remoteSlot{1, 0x7f0000, 42, 1 << 20}},
		{typ: ctrlReply, link: 2, token: 6, status: replyTooBig},
	} {
		var b [ctrlSize]byte
		m.put(&b)
		seeds = append(seeds, b[:])
	}
	testutil.FuzzSeeds(f, seeds...)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseCtrl(b)
		if err != nil {
			return
		}
		var out [ctrlSize]byte
		m.put(&out)
		m2, err := parseCtrl(out[:])
		require.NoError(t, err)
		require.Equal(t, m, m2)
	})
}

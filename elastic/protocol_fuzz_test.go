package elastic

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/replica"
	"github.com/elasticps/elasticps/routing"
)

// The bodies of elastic control messages come from other nodes of the job
// (or from whoever reaches a node's port): each decoder below returns an
// error for any input, and what it accepts survives a re-encoding.

func FuzzUnmarshalMove(f *testing.F) {
	testutil.FuzzSeeds(f,
		MarshalMove(Move{Begin: 10, End: 20, From: 8, To: 10, Epoch: 3}, nil),
		MarshalMove(Move{Begin: 0, End: math.MaxUint64, From: 12, To: 8, Epoch: 1 << 40}, []byte("state")),
		MarshalMove(Move{Begin: 5, End: 6, From: 8, To: 10}, []byte("the export failed: disk full")),
	)
	f.Fuzz(func(t *testing.T, b []byte) {
		mv, rest, err := UnmarshalMove(b)
		if err != nil {
			return
		}
		require.Less(t, mv.Begin, mv.End)
		enc := MarshalMove(mv, rest)
		require.Equal(t, b, enc, "the encoding has one form")
		mv2, rest2, err := UnmarshalMove(enc)
		require.NoError(t, err)
		require.Equal(t, mv, mv2)
		require.Equal(t, rest, rest2)
	})
}

func FuzzUnmarshalSpans(f *testing.F) {
	testutil.FuzzSeeds(f,
		MarshalSpans(nil),
		MarshalSpans(routing.Spans{{Begin: 0, End: 10}, {Begin: 20, End: math.MaxUint64}}),
		MarshalSpans(routing.Spans{{Begin: 5, End: 6}}),
	)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := UnmarshalSpans(b)
		if err != nil {
			return
		}
		for i, r := range s {
			require.Less(t, r.Begin, r.End)
			if i > 0 {
				require.Less(t, s[i-1].End, r.Begin, "sorted, disjoint, not adjacent")
			}
		}
		s2, err := UnmarshalSpans(MarshalSpans(s))
		require.NoError(t, err)
		require.Equal(t, s, s2)
	})
}

// forwardMessage is the push a primary would forward as p.
func forwardMessage(p forwardedPush) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.Sender, m.Meta.CustomerID = p.worker>>8, p.worker&0xff
	m.Meta.Timestamp, m.Meta.Head, m.Meta.Push = p.ts, p.req.Cmd, true
	m.Meta.Ext.Iteration = p.iter
	m.AddData(message.Uint64, kv.KeysToBytes(p.req.Data.Keys))
	m.AddData(p.req.DataType, p.req.Data.Vals)
	if p.req.Data.Lens != nil {
		m.AddData(message.Int32, kv.LensToBytes(p.req.Data.Lens))
	}
	return m
}

func FuzzDecodeForward(f *testing.F) {
	plain := forwardedPush{worker: 9<<8 | 1, ts: 4, iter: 2, req: kv.LocalRequest{Push: true, DataType: message.Float,
		Data: kv.KVPairs{Keys: []uint64{1, 5, 9}, Vals: kv.AsBytes([]float32{1, 2, 3})}}}
	lens := forwardedPush{worker: 11 << 8, ts: math.MaxInt32, req: kv.LocalRequest{Push: true, Cmd: 3, DataType: message.Double,
		Data: kv.KVPairs{Keys: []uint64{7, 8}, Vals: kv.AsBytes([]float64{1, 2, 3}), Lens: []int32{1, 2}}}}
	testutil.FuzzSeeds(f, encodeForward(forwardMessage(plain)), encodeForward(forwardMessage(lens)))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeForward(b)
		if err != nil {
			return
		}
		require.NotEmpty(t, p.req.Data.Keys)
		enc := encodeForward(forwardMessage(p))
		p2, err := decodeForward(enc)
		require.NoError(t, err, "re-encoded push %x does not decode", enc)
		p.iter = max(p.iter, 0) // kv.Iteration: a push carries no negative iteration
		require.Equal(t, p, p2, "round trip changed the push")
		require.Equal(t, enc, encodeForward(forwardMessage(p2)), "encoding is not stable")
	})
}

func FuzzParseReport(f *testing.F) {
	srv := &LoadReport{Interval: time.Second, Busy: 300 * time.Millisecond,
		Blocks: []BlockLoad{{Begin: 0, End: 10, Requests: 40, Bytes: 1600}, {Begin: 10, End: 1 << 40, Requests: 1, Bytes: 8}}}
	testutil.FuzzSeeds(f, srv.Marshal(), (&LoadReport{Interval: time.Second}).Marshal(),
		(&WorkerReport{Interval: time.Second, Ops: 120, MeanRTT: 2 * time.Millisecond, MeanHandling: 300 * time.Microsecond}).Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		lr, wr, err := ParseReport(b)
		if err != nil {
			require.True(t, lr == nil && wr == nil)
			return
		}
		require.True(t, (lr == nil) != (wr == nil), "exactly one report")
		var enc []byte
		if lr != nil {
			enc = lr.Marshal()
		} else {
			enc = wr.Marshal()
		}
		require.Equal(t, b, enc, "the encoding has one form")
		lr2, wr2, err := ParseReport(enc)
		require.NoError(t, err)
		require.Equal(t, lr, lr2)
		require.Equal(t, wr, wr2)
	})
}

// FuzzSeedBody feeds MsgSeed and MsgShip bodies (an interval's state from
// its primary) through the decoding a backup does before it installs
// anything: the move, the state's sync wrapper, the handler's format byte
// and the applied-push record.
func FuzzSeedBody(f *testing.F) {
	seen := replica.NewSeen()
	seen.Note(9<<8|1, 0, 3)
	seen.Note(9<<8|1, 0, 5)
	mv := Move{Begin: 0, End: 100, From: 8, To: 10, Epoch: 4}
	syncState := []byte("syncctl1\x00") // an empty gate's export
	wrapped := func(h byte, st []byte) []byte {
		out := append([]byte{stateSync, stateSyncVersion}, byte(len(syncState)))
		return append(append(append(out, syncState...), h), st...)
	}
	testutil.FuzzSeeds(f,
		seedBody(mv, append([]byte{stateMigrator}, "PSTO..."...), seen.Export(0, 100)),
		seedBody(mv, append([]byte{stateFallback}, make([]byte, 24)...), nil),
		seedBody(mv, wrapped(stateMigrator, []byte("PSTO")), seen.Export(0, 100)),
		seedBody(Move{Begin: 100, End: 200, From: 10, Epoch: 9}, wrapped(stateFallback, nil), nil),
	)
	f.Fuzz(func(t *testing.T, b []byte) {
		mv, state, seenRec, err := splitSeed(b)
		if err != nil {
			return
		}
		require.Equal(t, b, seedBody(mv, state, seenRec), "the encoding has one form")
		if err := replica.NewSeen().Import(seenRec); err != nil {
			require.NotZero(t, len(seenRec)%(4+8+4+replica.Window/8))
		}
		if len(state) == 0 || state[0] != stateSync {
			return
		}
		part, rest, err := splitSyncState(state)
		if err != nil {
			return
		}
		require.True(t, len(rest) == 0 || rest[0] != stateSync, "a nested sync wrapper was accepted")
		out := append(binary.AppendUvarint([]byte{stateSync, stateSyncVersion}, uint64(len(part))), part...)
		sync2, rest2, err := splitSyncState(append(out, rest...))
		require.NoError(t, err)
		require.Equal(t, part, sync2)
		require.Equal(t, rest, rest2)
	})
}

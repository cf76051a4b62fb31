package coord

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/testutil"
)

// FuzzControlQuery feeds request queries of the control API (POST /move,
// POST /drain; anyone who reaches PS_CTL_ADDR sends them) to their
// parsers: no panic, and what parses is what the query says.
func FuzzControlQuery(f *testing.F) {
	testutil.FuzzSeeds(f,
		[]byte(url.Values{"begin": {"0"}, "end": {"100"}, "to": {"10"}}.Encode()),
		[]byte(url.Values{"begin": {"18446744073709551614"}, "end": {"18446744073709551615"}, "to": {"2147483647"}}.Encode()),
		[]byte(url.Values{"node": {"12"}}.Encode()),
		[]byte("begin=1&begin=2&end=%zz&to=-1;node=x"),
	)
	f.Fuzz(func(t *testing.T, b []byte) {
		q := string(b)
		if begin, end, to, err := parseMove(q); err == nil {
			again := url.Values{"begin": {strconv.FormatUint(begin, 10)}, "end": {strconv.FormatUint(end, 10)}, "to": {strconv.Itoa(int(to))}}.Encode()
			b2, e2, to2, err := parseMove(again)
			require.NoError(t, err)
			require.Equal(t, []any{begin, end, to}, []any{b2, e2, to2})
		}
		if id, err := parseDrain(q); err == nil {
			id2, err := parseDrain(url.Values{"node": {strconv.Itoa(int(id))}}.Encode())
			require.NoError(t, err)
			require.Equal(t, id, id2)
		}
	})
}

// FuzzStatusJSON feeds answers of the control API to the decoding that
// `elasticps ctl` does (encoding/json into Status, MoveStatus and
// DrainStatus): no panic, and what decodes encodes to JSON that decodes
// to the same value.
func FuzzStatusJSON(f *testing.F) {
	mv := MoveStatus{Begin: 0, End: 100, From: 8, To: 10, Bytes: 400, Ms: 12.5}
	st := Status{Epoch: 3, Moves: 1, LastMoves: []MoveStatus{mv, {Begin: 5, End: 6, From: 10, To: 12, Error: "no answer"}},
		Servers:   []ServerStatus{{Rank: 0, NodeID: 8, Address: "10.0.0.1:9000", Intervals: 1, Health: "ok"}, {Rank: 1, NodeID: 10, Standby: true, Health: "dead"}},
		Intervals: []IntervalStatus{{Begin: 0, End: 100, Server: 10, MigratingFrom: 8, CutSeq: 4, Backups: []int32{12}}},
		LastPlan:  &PlanStatus{AtMs: 1500, Kind: "exploit", Reason: "server 8 busy", Moves: 1, MovedOK: 1}}
	body := func(v any) []byte {
		w := httptest.NewRecorder()
		writeJSON(w, v)
		return w.Body.Bytes()
	}
	testutil.FuzzSeeds(f, body(st), body(Status{}), body(mv), body(DrainStatus{Node: 10, Left: true, Moves: []MoveStatus{mv}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, &Status{}, &Status{})
		roundTrip(t, b, &MoveStatus{}, &MoveStatus{})
		roundTrip(t, b, &DrainStatus{}, &DrainStatus{})
	})
}

// roundTrip decodes b into v and, if that works, v's encoding into v2,
// which must then encode the same (values may differ where omitempty
// turns an empty list into none).
func roundTrip[T any](t *testing.T, b []byte, v, v2 *T) {
	if json.Unmarshal(b, v) != nil {
		return
	}
	enc, err := json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(enc, v2), "re-encoded %s does not decode", enc)
	enc2, err := json.Marshal(v2)
	require.NoError(t, err)
	require.Equal(t, string(enc), string(enc2), "round trip changed the value")
}

package elastic

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/elasticps/elasticps/routing"
)

// AppID is the app id of elasticps's elastic control messages
// (routing tables, migrations, load reports). They travel as SimpleApp
// messages between the scheduler's coordinator and the nodes' agents, so
// the ps-lite wire format is unchanged. Only jobs whose nodes are all
// elasticps enable elastic mode (PS_ELASTIC): a C++ ps-lite node would
// abort on a message for an app it does not know.
const AppID = 0x7e1a

// Heads (Meta.Head) of the elastic control messages.
const (
	// MsgRoutes: scheduler -> node, body = routing.Routes.Marshal().
	MsgRoutes int32 = 1 + iota
	// MsgPrepare: scheduler -> old owner, body = move; the reply body is
	// the cut-over push sequence number (8 bytes).
	MsgPrepare
	// MsgExport: old owner -> scheduler, body = move + state.
	MsgExport
	// MsgImport: scheduler -> new owner, body = move + state; replied
	// once installed.
	MsgImport
	// MsgAbort: scheduler -> old and new owner, body = move; the reply
	// body is 1 byte, 1 when the old owner had exported the keys already
	// (their state is on its way to the scheduler).
	MsgAbort
	// MsgReport: server -> scheduler, body = a load report.
	MsgReport
	// MsgLeave: scheduler -> drained server: leave the job.
	MsgLeave
	// MsgAccept: scheduler -> new owner, before a move: can it take
	// the keys? (answered with an error when it cannot)
	MsgAccept
	// MsgExportFailed: old owner -> scheduler, body = move + the
	// error's text: the export failed, abort the move now rather than
	// after the timeout.
	MsgExportFailed
	// MsgReplicate: primary -> backup (PS_REPLICAS), body = one push (see
	// forward): apply it; answered once applied (or found applied before).
	MsgReplicate
	// MsgSeed: primary -> new backup, body = move (From the primary, To
	// the backup) + a copy of the interval's state and its applied-push
	// record: replace what the backup holds of the interval with it.
	MsgSeed
	// MsgShip: primary -> backup under BSP (PS_SYNC_MODE=bsp), once per
	// closed round of an interval, body as MsgSeed's (the interval's
	// state with its sync state and applied-push record): replace the
	// backup's copy with it.
	MsgShip
	// MsgSeeded: primary -> scheduler (PS_REPLICAS), body = the seed's
	// move (From the primary, To the backup): the backup installed its
	// copy, so it counts as a live copy of the keys from now on.
	MsgSeeded
	// MsgMoves: scheduler -> server, empty body: a restarted scheduler
	// asks which moves this server is in the middle of; the reply body is
	// MarshalMoveReports' (see MoveReport).
	MsgMoves
	// MsgCopies: scheduler -> server (PS_REPLICAS), empty body: a
	// restarted scheduler asks which keys this server holds a seeded copy
	// of as a backup; the reply body is MarshalSpans'.
	MsgCopies
)

// MessageName names an elastic control message for logs and
// metrics ("routes", "prepare", ...).
func MessageName(head int32) string {
	switch head {
	case MsgRoutes:
		return "routes"
	case MsgPrepare:
		return "prepare"
	case MsgExport:
		return "export"
	case MsgImport:
		return "import"
	case MsgAbort:
		return "abort"
	case MsgReport:
		return "report"
	case MsgLeave:
		return "leave"
	case MsgAccept:
		return "accept"
	case MsgExportFailed:
		return "export-failed"
	case MsgReplicate:
		return "replicate"
	case MsgSeed:
		return "seed"
	case MsgShip:
		return "ship"
	case MsgSeeded:
		return "seeded"
	case MsgMoves:
		return "moves"
	case MsgCopies:
		return "copies"
	}
	return "message " + strconv.Itoa(int(head))
}

// ErrNoAnswer is wrapped by the error of an elastic call that the peer did
// not answer within its timeout. Each one is counted in
// elasticps_elastic_unanswered_total{node,message} on the calling node.
var ErrNoAnswer = errors.New("no answer")

// ErrNodeDead is the error of a Call to a node that the job declared dead
// (heartbeats, memberlist) while the call waited.
var ErrNodeDead = errors.New("declared dead")

// Move names one migration: keys [Begin, End) go from node From to node
// To, in routing epoch Epoch.
type Move struct {
	Begin, End uint64
	From, To   int32
	Epoch      uint64
}

const moveWire = 8 + 8 + 4 + 4 + 8

// MarshalMove encodes m followed by payload.
func MarshalMove(m Move, payload []byte) []byte {
	b := make([]byte, moveWire, moveWire+len(payload))
	binary.LittleEndian.PutUint64(b, m.Begin)
	binary.LittleEndian.PutUint64(b[8:], m.End)
	binary.LittleEndian.PutUint32(b[16:], uint32(m.From))
	binary.LittleEndian.PutUint32(b[20:], uint32(m.To))
	binary.LittleEndian.PutUint64(b[24:], m.Epoch)
	return append(b, payload...)
}

// UnmarshalMove decodes MarshalMove's output.
func UnmarshalMove(b []byte) (Move, []byte, error) {
	if len(b) < moveWire {
		return Move{}, nil, fmt.Errorf("elastic: move message of %d bytes is shorter than %d", len(b), moveWire)
	}
	m := Move{Begin: binary.LittleEndian.Uint64(b), End: binary.LittleEndian.Uint64(b[8:]),
		From: int32(binary.LittleEndian.Uint32(b[16:])), To: int32(binary.LittleEndian.Uint32(b[20:])),
		Epoch: binary.LittleEndian.Uint64(b[24:])}
	if m.End <= m.Begin {
		return m, nil, fmt.Errorf("elastic: move [%d, %d) is empty", m.Begin, m.End)
	}
	return m, b[moveWire:], nil
}

// MarshalSpans encodes s: its count, then each range's begin and end (8
// bytes each, little endian).
func MarshalSpans(s routing.Spans) []byte {
	b := make([]byte, 0, 4+16*len(s))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	for _, r := range s {
		b = binary.LittleEndian.AppendUint64(b, r.Begin)
		b = binary.LittleEndian.AppendUint64(b, r.End)
	}
	return b
}

// UnmarshalSpans decodes MarshalSpans' output.
func UnmarshalSpans(b []byte) (routing.Spans, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("elastic: spans of %d bytes lack their 4-byte count", len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(len(b)-4) != 16*uint64(n) {
		return nil, fmt.Errorf("elastic: %d spans need %d bytes after the count, got %d", n, 16*uint64(n), len(b)-4)
	}
	var s routing.Spans
	for i := range int(n) {
		begin, end := binary.LittleEndian.Uint64(b[4+16*i:]), binary.LittleEndian.Uint64(b[12+16*i:])
		if begin >= end {
			return nil, fmt.Errorf("elastic: span %d, [%d, %d), is empty", i, begin, end)
		}
		s = s.Add(begin, end)
	}
	return s, nil
}

func encodeU64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

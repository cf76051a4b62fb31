package elastic

import (
	"encoding/binary"
	"fmt"
)

// MoveStage is where a server stands in a move it has not seen the end of
// (no table after the move's has reached it): what a restarted scheduler
// learns from each server (MsgMoves) to finish or undo the moves its
// predecessor left half-done.
type MoveStage byte

const (
	// MoveKept: the old owner fixed the cut-over and holds the keys (it
	// has not exported them, or their export was installed back on it).
	MoveKept MoveStage = 1 + iota
	// MoveExported: the old owner exported the keys; it holds none of
	// them, only the export (MoveReport.State), kept until the move ends.
	MoveExported
	// MoveParked: the new owner parks requests for the keys and has not
	// installed them.
	MoveParked
	// MoveInstalled: the new owner installed the keys and waits for the
	// table that commits the move.
	MoveInstalled
)

func (s MoveStage) String() string {
	switch s {
	case MoveKept:
		return "kept"
	case MoveExported:
		return "exported"
	case MoveParked:
		return "parked"
	case MoveInstalled:
		return "installed"
	case 0:
		return "none"
	}
	return fmt.Sprintf("stage %d", byte(s))
}

// MoveReport is one unfinished move as a server reports it.
type MoveReport struct {
	Stage MoveStage
	Move  Move
	State []byte // MoveExported: the export; empty otherwise
}

// MarshalMoveReports encodes reports: per report, the stage byte, the
// move (MarshalMove), the uvarint length of the state and the state.
func MarshalMoveReports(reports []MoveReport) []byte {
	var b []byte
	for _, r := range reports {
		b = append(b, byte(r.Stage))
		b = append(b, MarshalMove(r.Move, nil)...)
		b = binary.AppendUvarint(b, uint64(len(r.State)))
		b = append(b, r.State...)
	}
	return b
}

// UnmarshalMoveReports decodes MarshalMoveReports' output.
func UnmarshalMoveReports(b []byte) ([]MoveReport, error) {
	var out []MoveReport
	for len(b) > 0 {
		st := MoveStage(b[0])
		if st < MoveKept || st > MoveInstalled {
			return nil, fmt.Errorf("elastic: move report %d has unknown stage %d (1-4 are known): run one version of elasticps on every node", len(out), b[0])
		}
		mv, rest, err := UnmarshalMove(b[1:])
		if err != nil {
			return nil, fmt.Errorf("elastic: move report %d: %w", len(out), err)
		}
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return nil, fmt.Errorf("elastic: move report %d (keys [%d, %d)) is truncated: its state's length is cut off or longer than the %d bytes left", len(out), mv.Begin, mv.End, len(rest))
		}
		rest = rest[w:]
		out = append(out, MoveReport{Stage: st, Move: mv, State: append([]byte(nil), rest[:n]...)})
		b = rest[n:]
	}
	return out, nil
}

// moveReports lists the moves this server is in the middle of (MsgMoves).
func (e *serverAgent) moveReports() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []MoveReport
	for _, c := range e.cuts {
		switch {
		case !c.exported || c.returned:
			out = append(out, MoveReport{Stage: MoveKept, Move: c.mv})
		case c.state != nil:
			out = append(out, MoveReport{Stage: MoveExported, Move: c.mv, State: c.state})
		default:
			// Exporting now: the state follows to the scheduler
			// (MsgExport), which takes it as the move's.
			out = append(out, MoveReport{Stage: MoveExported, Move: c.mv})
		}
	}
	for _, mv := range e.installed {
		out = append(out, MoveReport{Stage: MoveInstalled, Move: mv})
	}
	for _, in := range e.ins {
		if !in.installed {
			out = append(out, MoveReport{Stage: MoveParked, Move: in.mv})
		}
	}
	return MarshalMoveReports(out)
}

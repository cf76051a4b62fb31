package elastic

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
)

// The generic hand-over, for handlers that do not implement Migrator
// (unchanged MXNet or BytePS servers behind the C++ bridge): the old owner
// captures each key's value by sending its own handler a pull, with the
// cmd and type last seen pushed for that key, and the new owner installs it
// by sending its handler that value as an initializing push (the first
// push of a key). Both requests go through the server's queue like any
// other, and their responses are captured instead of sent.
//
// What it cannot carry: state the handler keeps beside the values (an
// optimizer's momentum, MXNet's pending merge buffers, BytePS's per-key
// engine state), handlers whose pull returns something other than the
// stored value, and handlers whose first push does not simply store the
// value (BytePS holds init pushes until every worker sent one: its install
// would never be answered, and the move is aborted after the timeout).

// keyMeta is what the elastic agent remembers of a key's pushes.
type keyMeta struct {
	cmd int32
	dt  message.DataType
}

// noteKeys records the cmd and type of a push's keys. Caller holds e.mu.
func (e *serverAgent) noteKeys(m *message.Message, keys []uint64) {
	if e.keys == nil {
		e.keys = map[uint64]keyMeta{}
	}
	km := keyMeta{cmd: m.Meta.Head, dt: message.Float}
	if len(m.Meta.DataType) >= 2 {
		km.dt = m.Meta.DataType[1]
	}
	for _, k := range keys {
		e.keys[k] = km
	}
}

// localTimeout bounds a capture or install request's wait for the handler.
const localTimeout = 30 * time.Second

// fallbackExport captures [begin, end) through the handler's pull path.
func (e *serverAgent) fallbackExport(begin, end uint64) ([]byte, error) {
	type group struct {
		km   keyMeta
		keys []uint64
	}
	e.mu.Lock()
	var groups []*group
	for k, km := range e.keys {
		if k < begin || k >= end {
			continue
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.km == km })
		if i < 0 {
			groups = append(groups, &group{km: km})
			i = len(groups) - 1
		}
		groups[i].keys = append(groups[i].keys, k)
	}
	e.mu.Unlock()
	var out []byte
	for _, g := range groups {
		slices.Sort(g.keys)
		res, err := e.s.HandleLocal(kv.LocalRequest{Cmd: g.km.cmd, DataType: g.km.dt, Data: kv.KVPairs{Keys: g.keys}}, localTimeout)
		if err != nil {
			return nil, fmt.Errorf("capturing %d keys by a pull: %w", len(g.keys), err)
		}
		if !slices.Equal(res.Keys, g.keys) {
			return nil, fmt.Errorf("capturing pull answered %d keys for %d asked", len(res.Keys), len(g.keys))
		}
		out = binary.LittleEndian.AppendUint32(out, uint32(g.km.cmd))
		out = binary.LittleEndian.AppendUint32(out, uint32(g.km.dt))
		out = binary.LittleEndian.AppendUint32(out, uint32(len(res.Keys)))
		out = binary.LittleEndian.AppendUint32(out, uint32(len(res.Lens)))
		out = binary.LittleEndian.AppendUint64(out, uint64(len(res.Vals)))
		out = append(out, kv.KeysToBytes(res.Keys)...)
		out = append(out, kv.LensToBytes(res.Lens)...)
		out = append(out, res.Vals...)
	}
	return out, nil
}

// fallbackImport installs fallbackExport's state by initializing pushes.
func (e *serverAgent) fallbackImport(state []byte) error {
	for len(state) > 0 {
		if len(state) < 24 {
			return fmt.Errorf("fallback state truncated: %d bytes left", len(state))
		}
		cmd := int32(binary.LittleEndian.Uint32(state))
		dt := message.DataType(binary.LittleEndian.Uint32(state[4:]))
		nk := int(binary.LittleEndian.Uint32(state[8:]))
		nl := int(binary.LittleEndian.Uint32(state[12:]))
		nv := binary.LittleEndian.Uint64(state[16:])
		state = state[24:]
		need := uint64(nk)*8 + uint64(nl)*4 + nv
		if need > uint64(len(state)) {
			return fmt.Errorf("fallback state claims %d bytes, %d left", need, len(state))
		}
		keys, err := kv.BytesToKeys(state[:nk*8])
		if err != nil {
			return err
		}
		lens, err := kv.BytesToLens(state[nk*8 : nk*8+nl*4])
		if err != nil {
			return err
		}
		vals := state[nk*8+nl*4 : need]
		state = state[need:]
		if _, err := e.s.HandleLocal(kv.LocalRequest{Push: true, Cmd: cmd, DataType: dt, Data: kv.KVPairs{Keys: slices.Clone(keys), Vals: vals, Lens: slices.Clone(lens)}}, localTimeout); err != nil {
			return fmt.Errorf("installing %d keys by an initializing push: %w", nk, err)
		}
	}
	return nil
}

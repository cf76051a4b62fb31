package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

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

// captured is a handler's answer to a local capture or install request.
type captured struct {
	res KVPairs
	err error
}

// noteKeys records the cmd and type of a push's keys. Caller holds e.mu.
func (e *serverElastic) noteKeys(m *message.Message, keys []uint64) {
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

// local runs one request through the server's queue and handler and waits
// for the handler's response.
func (e *serverElastic) local(m *message.Message) (KVPairs, error) {
	ch := make(chan captured, 1)
	e.mu.Lock()
	if e.captures == nil {
		e.captures = map[*message.Message]chan captured{}
	}
	e.captures[m] = ch
	e.mu.Unlock()
	e.s.c.enqueue(m, nil)
	select {
	case c := <-ch:
		return c.res, c.err
	case <-time.After(30 * time.Second):
		e.mu.Lock()
		delete(e.captures, m)
		e.mu.Unlock()
		return KVPairs{}, errors.New("the handler did not answer a local request within 30s")
	case <-e.po.Done():
		return KVPairs{}, errors.New("node stopped")
	}
}

// takeCapture returns the capture channel if m is a local request.
func (e *serverElastic) takeCapture(m *message.Message) chan captured {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch := e.captures[m]
	delete(e.captures, m)
	return ch
}

func (e *serverElastic) localRequest(push bool, cmd int32, keys []uint64, dt message.DataType, vals []byte, lens []int32) *message.Message {
	m := &message.Message{Meta: message.NewMeta()}
	m.Meta.AppID = e.s.c.appID
	m.Meta.CustomerID = e.s.c.appID
	m.Meta.Sender = e.me()
	m.Meta.Recver = e.me()
	m.Meta.Timestamp = -1
	m.Meta.Request = true
	m.Meta.Push, m.Meta.Pull = push, !push
	m.Meta.Head = cmd
	m.AddData(message.Uint64, KeysToBytes(keys))
	m.AddData(dt, vals)
	if len(lens) > 0 {
		m.AddData(message.Int32, LensToBytes(lens))
	}
	return m
}

// fallbackExport captures [begin, end) through the handler's pull path.
func (e *serverElastic) fallbackExport(begin, end uint64) ([]byte, error) {
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
		res, err := e.local(e.localRequest(false, g.km.cmd, g.keys, g.km.dt, nil, nil))
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
		out = append(out, KeysToBytes(res.Keys)...)
		out = append(out, LensToBytes(res.Lens)...)
		out = append(out, res.Vals...)
	}
	return out, nil
}

// fallbackImport installs fallbackExport's state by initializing pushes.
func (e *serverElastic) fallbackImport(state []byte) error {
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
		keys, err := BytesToKeys(state[:nk*8])
		if err != nil {
			return err
		}
		lens, err := BytesToLens(state[nk*8 : nk*8+nl*4])
		if err != nil {
			return err
		}
		vals := state[nk*8+nl*4 : need]
		state = state[need:]
		if _, err := e.local(e.localRequest(true, cmd, slices.Clone(keys), dt, vals, slices.Clone(lens))); err != nil {
			return fmt.Errorf("installing %d keys by an initializing push: %w", nk, err)
		}
	}
	return nil
}

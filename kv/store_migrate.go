package kv

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/elasticps/elasticps/message"
)

// Export removes the keys in [begin, end) from the store and returns them
// as a snapshot for Import: per key, key (8 bytes), data type (4), value
// length (4) and the value bytes.
func (h *DefaultHandler) Export(begin, end uint64) ([]byte, error) {
	return h.encode(nil, begin, end, true), nil
}

// Snapshot returns the keys in [begin, end) as Export does, at one point in
// time, but leaves them in the store (snapshot files, PS_SNAPSHOT_DIR).
func (h *DefaultHandler) Snapshot(begin, end uint64) ([]byte, error) {
	return h.encode(nil, begin, end, false), nil
}

// AppendSnapshot appends Snapshot's output to dst (a backup's copy, written
// once, into the message that carries it).
func (h *DefaultHandler) AppendSnapshot(dst []byte, begin, end uint64) ([]byte, error) {
	return h.encode(dst, begin, end, false), nil
}

// Restore installs a snapshot from Snapshot or Export, as Import.
func (h *DefaultHandler) Restore(state []byte) error { return h.Import(state) }

const storeEntryHeader = 16

func (h *DefaultHandler) encode(dst []byte, begin, end uint64, remove bool) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	size := 0
	for k, v := range h.store {
		if k >= begin && k < end {
			size += storeEntryHeader + len(v.val)
		}
	}
	b := slices.Grow(dst, size)
	for k, v := range h.store {
		if k < begin || k >= end {
			continue
		}
		b = binary.LittleEndian.AppendUint64(b, k)
		b = binary.LittleEndian.AppendUint32(b, uint32(v.dt))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(v.val)))
		b = append(b, v.val...)
		if remove {
			delete(h.store, k)
		}
	}
	return b
}

// Import installs a snapshot from Export, replacing any stored value of the
// same keys.
func (h *DefaultHandler) Import(state []byte) error {
	views, err := parseStore(state)
	if err != nil {
		return err
	}
	vals := make([]*storedValue, len(views))
	for i, v := range views {
		vals[i] = v.install(nil)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, v := range views {
		h.store[v.key] = vals[i]
	}
	return nil
}

// Replace makes the keys in [begin, end) those of a snapshot of that range
// (a backup's copy of its primary's): keys it lacks are dropped, the others
// overwritten in place when their sizes match. A snapshot Import would
// refuse, or one holding a key outside the range, changes nothing.
func (h *DefaultHandler) Replace(begin, end uint64, state []byte) error {
	views, err := parseStore(state)
	if err != nil {
		return err
	}
	for _, v := range views {
		if v.key < begin || v.key >= end {
			return fmt.Errorf("kv: cannot install the copy of keys [%d, %d): it holds key %d", begin, end, v.key)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := make(map[uint64]bool, len(views))
	for _, v := range views {
		kept[v.key] = true
		h.store[v.key] = v.install(h.store[v.key])
	}
	for k := range h.store {
		if k >= begin && k < end && !kept[k] {
			delete(h.store, k)
		}
	}
	return nil
}

// storeView is one key of a parsed snapshot; val aliases the snapshot.
type storeView struct {
	key uint64
	dt  message.DataType
	val []byte
}

// install returns a stored value holding v: old overwritten in place when
// it has v's type and size, or a new one.
func (v storeView) install(old *storedValue) *storedValue {
	if old == nil || old.dt != v.dt || len(old.val) != len(v.val) {
		old = &storedValue{dt: v.dt, val: alignedBytes(len(v.val))}
	}
	copy(old.val, v.val)
	return old
}

func parseStore(state []byte) ([]storeView, error) {
	var views []storeView
	for len(state) > 0 {
		if len(state) < storeEntryHeader {
			return nil, fmt.Errorf("kv: store snapshot truncated: %d bytes left, need a 16-byte entry header", len(state))
		}
		k := binary.LittleEndian.Uint64(state)
		dt := message.DataType(binary.LittleEndian.Uint32(state[8:]))
		n := int(binary.LittleEndian.Uint32(state[12:]))
		state = state[storeEntryHeader:]
		if n > len(state) {
			return nil, fmt.Errorf("kv: store snapshot: key %d claims %d bytes, %d left", k, n, len(state))
		}
		views = append(views, storeView{key: k, dt: dt, val: state[:n:n]})
		state = state[n:]
	}
	return views, nil
}

package kv

import (
	"encoding/binary"
	"fmt"

	"github.com/elasticps/elasticps/message"
)

// Export removes the keys in [begin, end) from the store and returns them
// as a snapshot for Import: per key, key (8 bytes), data type (4), value
// length (4) and the value bytes.
func (h *DefaultHandler) Export(begin, end uint64) ([]byte, error) {
	return h.encode(begin, end, true), nil
}

// Snapshot returns the keys in [begin, end) as Export does, at one point in
// time, but leaves them in the store (snapshot files, PS_SNAPSHOT_DIR).
func (h *DefaultHandler) Snapshot(begin, end uint64) ([]byte, error) {
	return h.encode(begin, end, false), nil
}

// Restore installs a snapshot from Snapshot or Export, as Import.
func (h *DefaultHandler) Restore(state []byte) error { return h.Import(state) }

func (h *DefaultHandler) encode(begin, end uint64, remove bool) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b []byte
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
	type entry struct {
		k uint64
		v *storedValue
	}
	var entries []entry
	for len(state) > 0 {
		if len(state) < 16 {
			return fmt.Errorf("kv: store snapshot truncated: %d bytes left, need a 16-byte entry header", len(state))
		}
		k := binary.LittleEndian.Uint64(state)
		dt := message.DataType(binary.LittleEndian.Uint32(state[8:]))
		n := int(binary.LittleEndian.Uint32(state[12:]))
		state = state[16:]
		if n > len(state) {
			return fmt.Errorf("kv: store snapshot: key %d claims %d bytes, %d left", k, n, len(state))
		}
		val := alignedBytes(n)
		copy(val, state[:n])
		state = state[n:]
		entries = append(entries, entry{k, &storedValue{dt: dt, val: val}})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range entries {
		h.store[e.k] = e.v
	}
	return nil
}

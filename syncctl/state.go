package syncctl

import (
	"encoding/binary"
	"fmt"
)

// The encoding of exported sync state:
//
//	"syncctl1"  header, the version is its last byte
//	uvarint     number of keys, then per key in ascending order:
//	  uvarint   key
//	  varint    t_min
//	  uvarint   number of entries, then per entry:
//	    byte    flags: entryPlaceholder, entryOwes
//	    varint  node
//	    varint  customer (not for a placeholder)
//	    varint  clock
//
// The clocks are the per-iteration push counts: the number of workers that
// pushed iteration i is the number of clocks >= i.
const stateHeader = "syncctl1"

const (
	entryPlaceholder = 1 << iota
	entryOwes
)

func encodeState(keys []*keyState) []byte {
	b := append([]byte(nil), stateHeader...)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, ks := range keys {
		b = binary.AppendUvarint(b, ks.key)
		b = binary.AppendVarint(b, ks.tmin)
		b = binary.AppendUvarint(b, uint64(len(ks.entries)))
		for _, e := range ks.entries {
			var f byte
			if e.placeholder {
				f |= entryPlaceholder
			}
			if e.owes {
				f |= entryOwes
			}
			b = append(b, f)
			b = binary.AppendVarint(b, int64(e.w.Node))
			if !e.placeholder {
				b = binary.AppendVarint(b, int64(e.w.Customer))
			}
			b = binary.AppendVarint(b, e.clock)
		}
	}
	return b
}

// stateReader reads the encoding; the first error sticks.
type stateReader struct {
	b   []byte
	err error
	at  string // what is being read, for the error
}

func (r *stateReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("sync state import: "+format, args...)
	}
}

func (r *stateReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("truncated or bad number in %s: the state is not a complete Export", r.at)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("truncated or bad number in %s: the state is not a complete Export", r.at)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) int32() int32 {
	v := r.varint()
	if v != int64(int32(v)) {
		r.fail("%s: node or customer %d out of range", r.at, v)
	}
	return int32(v)
}

func (r *stateReader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("truncated in %s: the state is not a complete Export", r.at)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// decodeState reads an encoding and checks it is one Export could make.
func decodeState(b []byte) ([]*keyState, error) {
	if len(b) < len(stateHeader) || string(b[:len(stateHeader)-1]) != stateHeader[:len(stateHeader)-1] {
		return nil, fmt.Errorf("sync state import: %d bytes without the %q header: not a syncctl Export", len(b), stateHeader)
	}
	if b[len(stateHeader)-1] != stateHeader[len(stateHeader)-1] {
		return nil, fmt.Errorf("sync state import: version %q, this controller reads %q", b[len(stateHeader)-1], stateHeader[len(stateHeader)-1])
	}
	r := &stateReader{b: b[len(stateHeader):], at: "the key count"}
	n := r.uvarint()
	if n > uint64(len(r.b)) { // every key takes at least a byte
		r.fail("%d keys in %d bytes: the state is truncated", n, len(r.b))
	}
	var keys []*keyState
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.at = fmt.Sprintf("key #%d", i)
		ks := &keyState{key: r.uvarint(), tmin: r.varint()}
		if len(keys) > 0 && ks.key <= keys[len(keys)-1].key && r.err == nil {
			r.fail("key %d after key %d: keys must ascend", ks.key, keys[len(keys)-1].key)
		}
		r.at = fmt.Sprintf("key %d", ks.key)
		m := r.uvarint()
		if m > uint64(len(r.b)) {
			r.fail("key %d: %d entries in %d bytes: the state is truncated", ks.key, m, len(r.b))
		}
		for j := uint64(0); j < m && r.err == nil; j++ {
			r.at = fmt.Sprintf("key %d entry #%d", ks.key, j)
			f := r.byte()
			e := entry{placeholder: f&entryPlaceholder != 0, owes: f&entryOwes != 0}
			e.w.Node = r.int32()
			if !e.placeholder {
				e.w.Customer = r.int32()
			}
			e.clock = r.varint()
			switch {
			case r.err != nil:
			case f&^(entryPlaceholder|entryOwes) != 0:
				r.fail("%s: unknown flags %#x", r.at, f)
			case e.placeholder && e.owes:
				r.fail("%s: a placeholder cannot owe a pull", r.at)
			case e.clock < ks.tmin:
				r.fail("%s: clock %d below t_min %d", r.at, e.clock, ks.tmin)
			case ks.clashes(e):
				r.fail("%s: worker %d/%d appears twice", r.at, e.w.Node, e.w.Customer)
			}
			ks.entries = append(ks.entries, e)
		}
		keys = append(keys, ks)
	}
	if r.err == nil && len(r.b) > 0 {
		r.fail("%d bytes after the last key", len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return keys, nil
}

// clashes tells whether e's worker is already in ks (a node's placeholder
// and its customers exclude each other).
func (ks *keyState) clashes(e entry) bool {
	for _, o := range ks.entries {
		if o.w.Node == e.w.Node && (o.placeholder || e.placeholder || o.w.Customer == e.w.Customer) {
			return true
		}
	}
	return false
}

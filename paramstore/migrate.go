package paramstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/elasticps/elasticps/message"
)

// The snapshot format of Export, version 1, little-endian:
//
//	header  magic "PSTO" (4), version (2), optimizer (1), aggregate (1), keys (4)
//	per key key (8), data type (4), flags (4), step (8), pending (4),
//	        value bytes n (4), value (n), then n bytes each of the
//	        first moment, second moment and round sum the flags name
//	trailer CRC-32C of everything before it (4)
//
// Keys come in ascending order.
const (
	snapshotMagic   = "PSTO"
	snapshotVersion = 1
	headerSize      = 12
	entryHeaderSize = 32
	hasM            = 1 << 0
	hasV            = 1 << 1
	hasAcc          = 1 << 2
	knownFlags      = hasM | hasV | hasAcc
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Export removes the keys in [begin, end) from the store (it stops serving
// them) and returns their values and optimizer state as a snapshot for
// Import. It is the elastic Migrator's Export.
func (s *Store) Export(begin, end uint64) ([]byte, error) {
	return s.encode(nil, begin, end, true), nil
}

// Snapshot returns the keys in [begin, end) with their optimizer state as
// Export does, at one point in time, but leaves them in the store
// (snapshot files, PS_SNAPSHOT_DIR).
func (s *Store) Snapshot(begin, end uint64) ([]byte, error) {
	return s.encode(nil, begin, end, false), nil
}

// AppendSnapshot appends Snapshot's output to dst: a backup's copy goes
// into the message that carries it with one pass over the values.
func (s *Store) AppendSnapshot(dst []byte, begin, end uint64) ([]byte, error) {
	return s.encode(dst, begin, end, false), nil
}

// Restore installs a snapshot from Snapshot or Export, as Import.
func (s *Store) Restore(state []byte) error { return s.Import(state) }

func (s *Store) encode(dst []byte, begin, end uint64, remove bool) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []uint64
	size := headerSize + 4
	for k, e := range s.keys {
		if k >= begin && k < end {
			keys = append(keys, k)
			size += entryHeaderSize + len(e.val)*(1+len(buffers(e)))
		}
	}
	slices.Sort(keys)
	b := slices.Grow(dst, size)
	at := len(b)
	b = append(b, snapshotMagic...)
	b = binary.LittleEndian.AppendUint16(b, snapshotVersion)
	b = append(b, byte(s.cfg.Optimizer), byte(s.cfg.Aggregate))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		e := s.keys[k]
		var flags uint32
		if e.m != nil {
			flags |= hasM
		}
		if e.v != nil {
			flags |= hasV
		}
		if e.pending > 0 {
			flags |= hasAcc
		}
		b = binary.LittleEndian.AppendUint64(b, k)
		b = binary.LittleEndian.AppendUint32(b, uint32(e.dt))
		b = binary.LittleEndian.AppendUint32(b, flags)
		b = binary.LittleEndian.AppendUint64(b, e.step)
		b = binary.LittleEndian.AppendUint32(b, e.pending)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e.val)))
		b = append(b, e.val...)
		for _, buf := range buffers(e) {
			b = append(b, buf...)
		}
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[at:], castagnoli))
	if remove {
		for _, k := range keys {
			delete(s.keys, k)
		}
	}
	return b
}

// buffers are the state buffers of e that a snapshot carries, in order.
func buffers(e *entry) [][]byte {
	var out [][]byte
	for _, b := range [][]byte{e.m, e.v} {
		if b != nil {
			out = append(out, b)
		}
	}
	if e.pending > 0 {
		out = append(out, e.acc)
	}
	return out
}

// Import installs a snapshot from Export, replacing the keys it holds. A
// snapshot that is corrupt, of another version, or from a store with
// another optimizer or aggregation is an error, and nothing is installed.
// It is the elastic Migrator's Import.
func (s *Store) Import(state []byte) error {
	views, err := s.parse(state)
	if err != nil {
		return fmt.Errorf("paramstore: cannot import the snapshot: %w", err)
	}
	entries := make([]*entry, len(views))
	for i := range views {
		entries[i] = views[i].install(nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range entries {
		s.keys[views[i].key] = e
	}
	return nil
}

// Replace makes the keys in [begin, end) those of a snapshot of that range
// (a backup's copy of a primary's round): keys it lacks are dropped, the
// others overwritten in the buffers they have when their sizes match, so
// that a backup installing a copy per round allocates nothing. A snapshot
// that Import would refuse, or that holds a key outside [begin, end),
// changes nothing.
func (s *Store) Replace(begin, end uint64, state []byte) error {
	views, err := s.parse(state)
	if err != nil {
		return fmt.Errorf("paramstore: cannot install the copy: %w", err)
	}
	for _, v := range views {
		if v.key < begin || v.key >= end {
			return fmt.Errorf("paramstore: cannot install the copy of keys [%d, %d): it holds key %d", begin, end, v.key)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := make(map[uint64]bool, len(views))
	for i := range views {
		v := &views[i]
		kept[v.key] = true
		s.keys[v.key] = v.install(s.keys[v.key])
	}
	for k := range s.keys {
		if k >= begin && k < end && !kept[k] {
			delete(s.keys, k)
		}
	}
	return nil
}

// keyView is one key of a parsed snapshot; its buffers alias the snapshot.
type keyView struct {
	key       uint64
	dt        message.DataType
	step      uint64
	pending   uint32
	val       []byte
	m, v, acc []byte // nil when the snapshot has none
}

// install returns an entry holding v's values: old, overwritten in place
// where its buffers have the right size, or a new one.
func (v *keyView) install(old *entry) *entry {
	if old == nil || old.dt != v.dt || len(old.val) != len(v.val) {
		old = &entry{}
	}
	e := old
	e.dt, e.step, e.pending = v.dt, v.step, v.pending
	e.val = fill(e.val, v.val)
	e.m = fill(e.m, v.m)
	e.v = fill(e.v, v.v)
	if v.acc != nil {
		e.acc = fill(e.acc, v.acc)
	}
	return e
}

// fill copies src into dst when it has src's size, else into a new
// aligned buffer; nil for a nil src.
func fill(dst, src []byte) []byte {
	if src == nil {
		return nil
	}
	if len(dst) != len(src) {
		dst = alignedBytes(len(src))
	}
	copy(dst, src)
	return dst
}

// parse checks a snapshot whole and returns its keys, aliasing b.
func (s *Store) parse(b []byte) ([]keyView, error) {
	if len(b) < headerSize+4 {
		return nil, fmt.Errorf("%d bytes is shorter than a snapshot's header and checksum (%d)", len(b), headerSize+4)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if string(body[:4]) != snapshotMagic {
		return nil, fmt.Errorf("it does not start with %q: not a paramstore snapshot", snapshotMagic)
	}
	if v := binary.LittleEndian.Uint16(body[4:]); v != snapshotVersion {
		return nil, fmt.Errorf("format version %d, this store reads version %d: run the same elasticps on every server", v, snapshotVersion)
	}
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("checksum mismatch (stored %08x, computed %08x): the snapshot is corrupt", sum, got)
	}
	if o, a := Optimizer(body[6]), Aggregate(body[7]); o != s.cfg.Optimizer || a != s.cfg.Aggregate {
		return nil, fmt.Errorf("it comes from a store with optimizer %s and aggregation %s, this one has %s and %s: give every server the same flags", o, a, s.cfg.Optimizer, s.cfg.Aggregate)
	}
	count := binary.LittleEndian.Uint32(body[8:])
	p := body[headerSize:]
	views := make([]keyView, 0, min(int(count), len(p)/entryHeaderSize))
	seen := make(map[uint64]bool, cap(views))
	for i := range count {
		if len(p) < entryHeaderSize {
			return nil, fmt.Errorf("truncated at key %d of %d", i, count)
		}
		v := keyView{
			key:     binary.LittleEndian.Uint64(p),
			dt:      message.DataType(binary.LittleEndian.Uint32(p[8:])),
			step:    binary.LittleEndian.Uint64(p[16:]),
			pending: binary.LittleEndian.Uint32(p[24:]),
		}
		k := v.key
		flags := binary.LittleEndian.Uint32(p[12:])
		n := int(binary.LittleEndian.Uint32(p[28:]))
		p = p[entryHeaderSize:]
		if err := s.canStore(v.dt); err != nil {
			return nil, fmt.Errorf("key %d: %w", k, err)
		}
		if n%v.dt.Size() != 0 {
			return nil, fmt.Errorf("key %d: %d bytes is not a whole number of %s values", k, n, v.dt)
		}
		if flags&^knownFlags != 0 {
			return nil, fmt.Errorf("key %d: unknown flags %#x", k, flags&^knownFlags)
		}
		if (flags&hasAcc != 0) != (v.pending > 0) {
			return nil, fmt.Errorf("key %d: flags %#x do not match %d pending gradients", k, flags, v.pending)
		}
		if seen[k] {
			return nil, fmt.Errorf("key %d appears twice", k)
		}
		seen[k] = true
		for _, f := range []struct {
			bit uint32
			dst *[]byte
		}{{0, &v.val}, {hasM, &v.m}, {hasV, &v.v}, {hasAcc, &v.acc}} {
			if f.bit != 0 && flags&f.bit == 0 {
				continue
			}
			if len(p) < n {
				return nil, fmt.Errorf("key %d: %d bytes left, its value needs %d", k, len(p), n)
			}
			*f.dst, p = p[:n:n], p[n:]
		}
		views = append(views, v)
	}
	if len(p) != 0 {
		return nil, errors.New("bytes after the last key")
	}
	return views, nil
}

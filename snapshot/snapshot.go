// Package snapshot writes and reads a server's snapshot files, for
// restarting a whole job from where it was (PS_SNAPSHOT_DIR,
// docs/fault-tolerance.md). It knows nothing of the store it saves: the
// state is the store's own export encoding.
//
// A server of rank r writes DIR/server-<r>-<seq>.snap, little-endian:
//
//	magic "EPSSNAP\x00" (8), format version (2), reserved (2), rank (4),
//	key range begin (8), end (8), sequence (8), time in Unix ns (8),
//	state length (8), state, CRC-32C of everything before it (4)
//
// A file is written to a temporary name, fsync'ed, renamed and its
// directory fsync'ed, so a crash leaves either the complete file or none
// under a .snap name.
package snapshot

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	magic      = "EPSSNAP\x00"
	version    = 1
	headerSize = 8 + 2 + 2 + 4 + 8 + 8 + 8 + 8 + 8
	tmpSuffix  = ".tmp"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header describes a snapshot: whose it is and when it was taken.
type Header struct {
	Rank       int    // the server's rank
	Begin, End uint64 // the server's key range [Begin, End)
	Seq        uint64 // grows by one per snapshot of the rank
	Time       time.Time
}

// Snapshot is a decoded snapshot file.
type Snapshot struct {
	Header
	Path  string
	State []byte // the store's export of its keys
}

// Encode returns the file contents of a snapshot.
func Encode(h Header, state []byte) []byte {
	b := make([]byte, 0, headerSize+len(state)+4)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint16(b, version)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.Rank))
	b = binary.LittleEndian.AppendUint64(b, h.Begin)
	b = binary.LittleEndian.AppendUint64(b, h.End)
	b = binary.LittleEndian.AppendUint64(b, h.Seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.Time.UnixNano()))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(state)))
	b = append(b, state...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// Decode checks and decodes the contents of a snapshot file; the state
// aliases b.
func Decode(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < headerSize+4 {
		return h, nil, fmt.Errorf("%d bytes is shorter than a snapshot's header and checksum (%d): the file is partial", len(b), headerSize+4)
	}
	if string(b[:8]) != magic {
		return h, nil, fmt.Errorf("it does not start with %q: not an elasticps snapshot", magic)
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != version {
		return h, nil, fmt.Errorf("format version %d, this elasticps reads version %d", v, version)
	}
	n := binary.LittleEndian.Uint64(b[48:])
	if n != uint64(len(b)-headerSize-4) {
		return h, nil, fmt.Errorf("its header announces %d bytes of state, the file holds %d: the file is partial", n, len(b)-headerSize-4)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return h, nil, fmt.Errorf("checksum mismatch (stored %08x, computed %08x): the file is corrupt", sum, got)
	}
	h.Rank = int(binary.LittleEndian.Uint32(b[12:]))
	h.Begin = binary.LittleEndian.Uint64(b[16:])
	h.End = binary.LittleEndian.Uint64(b[24:])
	h.Seq = binary.LittleEndian.Uint64(b[32:])
	h.Time = time.Unix(0, int64(binary.LittleEndian.Uint64(b[40:])))
	return h, body[headerSize:], nil
}

// FileName is the name of rank's snapshot number seq.
func FileName(rank int, seq uint64) string {
	return fmt.Sprintf("server-%d-%d.snap", rank, seq)
}

// parseName returns the rank and sequence of a snapshot file name; temp
// files and other files are not snapshots.
func parseName(name string) (rank int, seq uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, "server-")
	if !ok {
		return 0, 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".snap")
	if !ok {
		return 0, 0, false
	}
	r, s, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	rank, err1 := strconv.Atoi(r)
	seq, err2 := strconv.ParseUint(s, 10, 64)
	return rank, seq, err1 == nil && err2 == nil && rank >= 0
}

// Write writes a snapshot of h.Rank atomically into dir (created if
// missing) and returns its path.
func Write(dir string, h Header, state []byte) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	path := filepath.Join(dir, FileName(h.Rank, h.Seq))
	tmp := path + tmpSuffix
	if err := writeSynced(tmp, Encode(h, state)); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("snapshot: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("snapshot: %w", err)
	}
	// the rename is durable only once the directory is synced
	d, err := os.Open(dir)
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return "", fmt.Errorf("snapshot: sync of %s: %w", dir, err)
	}
	return path, nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// file is a snapshot file found in a directory.
type file struct {
	name string
	seq  uint64
}

// list returns rank's snapshot files in dir, newest first, and its
// leftover temp files; a missing dir has none.
func list(dir string, rank int) (snaps []file, tmps []file, err error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		base, tmp := strings.CutSuffix(name, tmpSuffix)
		r, seq, ok := parseName(base)
		if !ok || r != rank || e.IsDir() {
			continue
		}
		if tmp {
			tmps = append(tmps, file{name, seq})
		} else {
			snaps = append(snaps, file{name, seq})
		}
	}
	slices.SortFunc(snaps, func(a, b file) int { return cmp.Compare(b.seq, a.seq) })
	return snaps, tmps, nil
}

// Latest returns rank's newest snapshot in dir that is complete (its
// checksum verifies) and that check accepts (nil accepts all), or nil if
// there is none. Every file it skips is logged at WARN with what is wrong.
// The returned maxSeq is the highest sequence of any of rank's files, usable or
// not, so that new snapshots never take an old name.
func Latest(dir string, rank int, check func(Header) error, log *slog.Logger) (snap *Snapshot, maxSeq uint64, err error) {
	if log == nil {
		log = slog.Default()
	}
	snaps, tmps, err := list(dir, rank)
	if err != nil {
		return nil, 0, err
	}
	for _, t := range tmps {
		maxSeq = max(maxSeq, t.seq)
	}
	if len(snaps) > 0 {
		maxSeq = max(maxSeq, snaps[0].seq)
	}
	for _, f := range snaps {
		path := filepath.Join(dir, f.name)
		s, err := read(path, rank, f.seq, check)
		if err != nil {
			log.Warn("snapshot: skipping an unusable snapshot file", "file", path, "err", err)
			continue
		}
		return s, maxSeq, nil
	}
	return nil, maxSeq, nil
}

func read(path string, rank int, seq uint64, check func(Header) error) (*Snapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	h, state, err := Decode(b)
	if err != nil {
		return nil, err
	}
	if h.Rank != rank || h.Seq != seq {
		return nil, fmt.Errorf("its header says rank %d, sequence %d, its name rank %d, sequence %d: the file was renamed", h.Rank, h.Seq, rank, seq)
	}
	if check != nil {
		if err := check(h); err != nil {
			return nil, err
		}
	}
	return &Snapshot{Header: h, Path: path, State: state}, nil
}

// Prune removes rank's snapshot files and leftover temp files in dir whose
// sequence is below keepFrom.
func Prune(dir string, rank int, keepFrom uint64) error {
	snaps, tmps, err := list(dir, rank)
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range append(snaps, tmps...) {
		if f.seq < keepFrom {
			if err := os.Remove(filepath.Join(dir, f.name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("snapshot: pruning: %w", err)
	}
	return nil
}

package snapshot

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memStore is a Store of uint64 counters: the state is key, value pairs.
type memStore struct{ vals map[uint64]uint64 }

func (m *memStore) Snapshot(begin, end uint64) ([]byte, error) {
	var b []byte
	keys := make([]uint64, 0, len(m.vals))
	for k := range m.vals {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k >= begin && k < end {
			b = binary.LittleEndian.AppendUint64(b, k)
			b = binary.LittleEndian.AppendUint64(b, m.vals[k])
		}
	}
	return b, nil
}

func (m *memStore) Restore(state []byte) error {
	for ; len(state) >= 16; state = state[16:] {
		m.vals[binary.LittleEndian.Uint64(state)] = binary.LittleEndian.Uint64(state[8:])
	}
	return nil
}

func (m *memStore) Len() int { return len(m.vals) }

func newLog() (*slog.Logger, *testutil.SyncBuffer) {
	var buf testutil.SyncBuffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	h := Header{Rank: 3, Begin: 100, End: 200, Seq: 7, Time: time.Unix(1700000000, 123)}
	path, err := Write(dir, h, []byte("state bytes"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "server-3-7.snap"), path)

	snap, maxSeq, err := Latest(dir, 3, nil, nil)
	require.NoError(t, err)
	require.NotNil(t, snap)
	assert.Equal(t, uint64(7), maxSeq)
	assert.Equal(t, h.Rank, snap.Rank)
	assert.Equal(t, h.Begin, snap.Begin)
	assert.Equal(t, h.End, snap.End)
	assert.Equal(t, h.Seq, snap.Seq)
	assert.True(t, h.Time.Equal(snap.Time))
	assert.Equal(t, []byte("state bytes"), snap.State)
	assert.Equal(t, path, snap.Path)

	none, _, err := Latest(dir, 4, nil, nil)
	require.NoError(t, err)
	assert.Nil(t, none, "another rank's files are not this rank's")
	none, maxSeq, err = Latest(filepath.Join(dir, "missing"), 3, nil, nil)
	require.NoError(t, err)
	assert.Nil(t, none)
	assert.Zero(t, maxSeq)
}

func TestPartialTempFileIsIgnored(t *testing.T) {
	dir := t.TempDir()
	_, err := Write(dir, Header{Rank: 0, Seq: 1}, []byte("one"))
	require.NoError(t, err)
	// a crash during the write of seq 2 leaves its temp file
	full := Encode(Header{Rank: 0, Seq: 2}, []byte("two"))
	require.NoError(t, os.WriteFile(filepath.Join(dir, FileName(0, 2)+tmpSuffix), full[:len(full)/2], 0o644))

	log, buf := newLog()
	snap, maxSeq, err := Latest(dir, 0, nil, log)
	require.NoError(t, err)
	require.NotNil(t, snap)
	assert.Equal(t, uint64(1), snap.Seq)
	assert.Equal(t, []byte("one"), snap.State)
	assert.Equal(t, uint64(2), maxSeq, "the next snapshot must not reuse the temp file's number")
	assert.Empty(t, buf.String(), "a temp file is not a snapshot: nothing to report")
}

func TestCorruptFilesAreSkippedAndLogged(t *testing.T) {
	dir := t.TempDir()
	_, err := Write(dir, Header{Rank: 1, Seq: 1}, []byte("good"))
	require.NoError(t, err)
	flipped, err := Write(dir, Header{Rank: 1, Seq: 2}, []byte("flipped"))
	require.NoError(t, err)
	b, err := os.ReadFile(flipped)
	require.NoError(t, err)
	b[headerSize+2] ^= 0x10
	require.NoError(t, os.WriteFile(flipped, b, 0o644))
	truncated, err := Write(dir, Header{Rank: 1, Seq: 3}, []byte("truncated"))
	require.NoError(t, err)
	require.NoError(t, os.Truncate(truncated, headerSize+3))

	log, buf := newLog()
	snap, maxSeq, err := Latest(dir, 1, nil, log)
	require.NoError(t, err)
	require.NotNil(t, snap)
	assert.Equal(t, uint64(1), snap.Seq, "the newest complete snapshot")
	assert.Equal(t, []byte("good"), snap.State)
	assert.Equal(t, uint64(3), maxSeq)
	out := buf.String()
	assert.Equal(t, 2, bytes.Count([]byte(out), []byte("\n")), "one line per skipped file: %s", out)
	assert.Contains(t, out, "file="+flipped)
	assert.Contains(t, out, "checksum mismatch")
	assert.Contains(t, out, "file="+truncated)
	assert.Contains(t, out, "the file is partial")
}

func TestCheckRejectsAndFallsBack(t *testing.T) {
	dir := t.TempDir()
	_, err := Write(dir, Header{Rank: 0, Begin: 0, End: 10, Seq: 1}, []byte("a"))
	require.NoError(t, err)
	_, err = Write(dir, Header{Rank: 0, Begin: 0, End: 5, Seq: 2}, []byte("b"))
	require.NoError(t, err)
	k := &Keeper{Dir: dir, Rank: 0, Begin: 0, End: 10}
	log, buf := newLog()
	k.Log = log
	s := &memStore{vals: map[uint64]uint64{}}
	snap, err := k.Resume(s)
	require.NoError(t, err)
	require.NotNil(t, snap)
	assert.Equal(t, uint64(1), snap.Seq)
	assert.Contains(t, buf.String(), "it holds key range [0, 5), this server's is [0, 10)")
}

func TestKeeperResumesAndPrunes(t *testing.T) {
	dir := t.TempDir()
	log, buf := newLog()
	k := &Keeper{Dir: dir, Rank: 2, Begin: 0, End: 1000, Log: log}
	s := &memStore{vals: map[uint64]uint64{}}
	snap, err := k.Resume(s)
	require.NoError(t, err)
	assert.Nil(t, snap)
	assert.Contains(t, buf.String(), "starts empty")

	for i := range uint64(4) {
		s.vals[i] = 10 * (i + 1)
		s.vals[5000] = i // outside the range: not saved
		_, err := k.Take(s)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"server-2-3.snap", "server-2-4.snap"}, names(t, dir), "the last 2 complete snapshots are kept")

	// a restart: a new store, the same directory
	s2 := &memStore{vals: map[uint64]uint64{}}
	k2 := &Keeper{Dir: dir, Rank: 2, Begin: 0, End: 1000, Log: log}
	snap, err = k2.Resume(s2)
	require.NoError(t, err)
	require.NotNil(t, snap)
	assert.Equal(t, uint64(4), snap.Seq)
	assert.Equal(t, map[uint64]uint64{0: 10, 1: 20, 2: 30, 3: 40}, s2.vals)
	assert.Contains(t, buf.String(), "keys=4")

	path, err := k2.Take(s2)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "server-2-5.snap"), path, "numbers go on after the restored one")
	assert.Equal(t, []string{"server-2-4.snap", "server-2-5.snap"}, names(t, dir))

	k2.Skip = func() string { return "moved" }
	path, err = k2.Take(s2)
	require.NoError(t, err)
	assert.Empty(t, path)
	assert.Equal(t, []string{"server-2-4.snap", "server-2-5.snap"}, names(t, dir))
	assert.Contains(t, buf.String(), "reason=moved")
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

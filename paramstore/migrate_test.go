package paramstore

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trainer pushes the same deterministic gradient sequence to any store:
// keys 0..5 of float64 (and key 100 of float32), gradient of key k at step
// i is ((k+i)%5 - 2) * 0.5.
type trainer struct{ step int }

var trainKeys = []uint64{0, 1, 2, 3, 4, 5}

func (tr *trainer) init(t *testing.T, s *Store) {
	vals := make([]float64, 2*len(trainKeys))
	for i := range vals {
		vals[i] = float64(i)
	}
	require.NoError(t, push(s, trainKeys, vals))
	require.NoError(t, push(s, []uint64{100}, []float32{1, 2, 3}))
}

func (tr *trainer) run(t *testing.T, n int, stores ...*Store) {
	for range n {
		g := make([]float64, 2*len(trainKeys))
		for i := range g {
			g[i] = float64((i/2+tr.step)%5-2) * 0.5
		}
		for _, s := range stores {
			require.NoError(t, push(s, trainKeys, g))
			require.NoError(t, push(s, []uint64{100}, []float32{float32(tr.step), -1, 0.5}))
		}
		tr.step++
	}
}

// TestExportImportMidTraining moves keys [2, 101) from a store to a new one
// in the middle of training (with momentum or Adam state and open rounds);
// the pair then continues exactly as a store that never moved.
func TestExportImportMidTraining(t *testing.T) {
	for _, opt := range []Optimizer{None, SGD, Momentum, Adam} {
		t.Run(opt.String(), func(t *testing.T) {
			cfg := withOpt(opt, 0.125)
			cfg.RoundSize = func() int { return 3 }
			old, moved, ref := newStore(t, cfg), newStore(t, cfg), newStore(t, cfg)
			var tr trainer
			tr.init(t, old)
			tr.init(t, ref)
			tr.run(t, 7, old, ref) // two rounds applied, one open with one push

			snap, err := old.Export(2, 101)
			require.NoError(t, err)
			assert.Equal(t, 2, old.Len(), "Export stops serving the keys")
			_, _, ok := old.Value(2)
			assert.False(t, ok)
			require.NoError(t, moved.Import(snap))
			assert.Equal(t, 5, moved.Len())

			for range 8 {
				g := tr
				tr.run(t, 1, ref)
				// the same gradients, to whichever store holds the key
				for _, k := range []uint64{0, 1} {
					require.NoError(t, push(old, []uint64{k}, gradOf(g.step, k)))
				}
				for _, k := range trainKeys[2:] {
					require.NoError(t, push(moved, []uint64{k}, gradOf(g.step, k)))
				}
				require.NoError(t, push(moved, []uint64{100}, []float32{float32(g.step), -1, 0.5}))
			}
			for _, k := range trainKeys {
				holder := old
				if k >= 2 {
					holder = moved
				}
				assert.Equal(t, pull[float64](t, ref, k), pull[float64](t, holder, k), "key %d", k)
			}
			assert.Equal(t, pull[float32](t, ref, 100), pull[float32](t, moved, 100))

			// back again: Export and Import may run several times for one range
			snap, err = moved.Export(0, math.MaxUint64)
			require.NoError(t, err)
			require.NoError(t, old.Import(snap))
			assert.Equal(t, 7, old.Len())
			assert.Equal(t, 0, moved.Len())
			assert.Equal(t, pull[float32](t, ref, 100), pull[float32](t, old, 100))
		})
	}
}

func gradOf(step int, k uint64) []float64 {
	g := float64((int(k)+step)%5-2) * 0.5
	return []float64{g, g}
}

// resum rewrites a snapshot's checksum after a test changed its body.
func resum(b []byte) []byte {
	body := b[:len(b)-4]
	return binary.LittleEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, castagnoli))
}

func TestImportRejectsCorruptSnapshots(t *testing.T) {
	cfg := withOpt(Adam, 0.125)
	cfg.RoundSize = func() int { return 2 }
	src := newStore(t, cfg)
	var tr trainer
	tr.init(t, src)
	tr.run(t, 3, src)
	good, err := src.Export(0, math.MaxUint64)
	require.NoError(t, err)
	require.NoError(t, src.Import(good))

	dst := newStore(t, cfg)
	require.NoError(t, push(dst, []uint64{1}, []float64{42, 43}))
	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		snap []byte
		err  string
	}{
		{"empty", nil, "0 bytes is shorter than a snapshot's header and checksum (16)"},
		{"not a snapshot", edit(func(b []byte) []byte { b[0] = 'X'; return b }), `it does not start with "PSTO"`},
		{"a flipped bit", edit(func(b []byte) []byte { b[40] ^= 4; return b }), "checksum mismatch"},
		{"truncated", good[:len(good)-9], "checksum mismatch"},
		{"another version", edit(func(b []byte) []byte { b[4] = 2; return resum(b) }), "format version 2, this store reads version 1"},
		{"another optimizer", edit(func(b []byte) []byte { b[6] = byte(SGD); return resum(b) }),
			"it comes from a store with optimizer sgd and aggregation sum, this one has adam and sum"},
		{"more keys than bytes", edit(func(b []byte) []byte { b[8]++; return resum(b) }), "truncated at key 7 of 8"},
		{"a value cut short", edit(func(b []byte) []byte { return resum(b[:headerSize+entryHeaderSize+8+4]) }),
			"key 0: 8 bytes left, its value needs 16"},
		{"bytes after the last key", edit(func(b []byte) []byte { return resum(append(b[:len(b)-4], 0, 0, 0, 0, 0)) }),
			"bytes after the last key"},
		{"unknown flags", edit(func(b []byte) []byte { b[headerSize+12] |= 8; return resum(b) }), "key 0: unknown flags 0x8"},
		{"a round sum without pending gradients", edit(func(b []byte) []byte { b[headerSize+24] = 0; return resum(b) }),
			"key 0: flags 0x7 do not match 0 pending gradients"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := dst.Import(tc.snap)
			assert.ErrorContains(t, err, tc.err)
			assert.ErrorContains(t, err, "paramstore: cannot import the snapshot: ")
			assert.Equal(t, 1, dst.Len(), "nothing installed")
			assert.Equal(t, []float64{42, 43}, pull[float64](t, dst, 1))
		})
	}
	require.NoError(t, dst.Import(good))
	assert.Equal(t, 7, dst.Len())
}

// TestSnapshotRestore takes a snapshot mid-training (optimizer state and
// an open round included), trains on, and restores it into a new store:
// it continues exactly as the original did after the snapshot, and the
// snapshot left the original untouched.
func TestSnapshotRestore(t *testing.T) {
	for _, opt := range []Optimizer{None, Momentum, Adam} {
		t.Run(opt.String(), func(t *testing.T) {
			cfg := withOpt(opt, 0.125)
			cfg.RoundSize = func() int { return 3 }
			orig, restored := newStore(t, cfg), newStore(t, cfg)
			var tr trainer
			tr.init(t, orig)
			tr.run(t, 7, orig)

			snap, err := orig.Snapshot(0, math.MaxUint64)
			require.NoError(t, err)
			assert.Equal(t, 7, orig.Len(), "Snapshot leaves the keys in the store")
			require.NoError(t, restored.Restore(snap))
			assert.Equal(t, 7, restored.Len())

			tr.run(t, 8, orig, restored)
			for _, k := range trainKeys {
				assert.Equal(t, pull[float64](t, orig, k), pull[float64](t, restored, k), "key %d", k)
			}
			assert.Equal(t, pull[float32](t, orig, 100), pull[float32](t, restored, 100))

			part, err := orig.Snapshot(2, 4)
			require.NoError(t, err)
			only := newStore(t, cfg)
			require.NoError(t, only.Restore(part))
			assert.Equal(t, 2, only.Len(), "a range's snapshot holds only its keys")
		})
	}
}

// TestReplaceInstallsABackupsCopy: a backup that installs its primary's
// copy of [2, 101) every round continues exactly as the primary (values,
// Adam state and open rounds), keeps what it holds outside the range,
// drops the keys the copy lacks, and reuses its buffers.
func TestReplaceInstallsABackupsCopy(t *testing.T) {
	cfg := withOpt(Adam, 0.125)
	cfg.RoundSize = func() int { return 3 }
	primary, backup := newStore(t, cfg), newStore(t, cfg)
	var tr trainer
	tr.init(t, primary)
	require.NoError(t, push(backup, []uint64{1}, []float64{42, 43}))   // outside: kept
	require.NoError(t, push(backup, []uint64{50}, []float64{7, 7, 7})) // inside, not in the copy: dropped
	for round := range 4 {
		tr.run(t, 2, primary) // a round applied, or one open with a push
		copied, err := primary.AppendSnapshot([]byte("head"), 2, 101)
		require.NoError(t, err)
		require.Equal(t, "head", string(copied[:4]), "appended after what dst held")
		var before *byte
		if round > 0 {
			before = &backup.keys[3].val[0]
		}
		require.NoError(t, backup.Replace(2, 101, copied[4:]))
		if round > 0 {
			assert.Same(t, before, &backup.keys[3].val[0], "round %d: the key's buffer is reused", round)
		}
	}
	assert.Equal(t, []float64{42, 43}, pull[float64](t, backup, 1))
	_, _, ok := backup.Value(50)
	assert.False(t, ok, "a key the copy lacks is dropped")
	assert.Equal(t, 6, backup.Len(), "keys 1, 2-5 and 100")
	before := pull[float64](t, backup, 2)

	// a copy holding a key outside the range changes nothing
	all, err := primary.Snapshot(0, math.MaxUint64)
	require.NoError(t, err)
	require.ErrorContains(t, backup.Replace(2, 101, all), "holds key 0")
	assert.Equal(t, before, pull[float64](t, backup, 2))
	require.Error(t, backup.Replace(2, 101, all[:len(all)-1]), "a corrupt copy")
	assert.Equal(t, 6, backup.Len())

	// promoted, the backup trains on as the primary does
	tr2 := tr
	tr.run(t, 4, primary)
	tr2.run(t, 4, backup)
	for _, k := range trainKeys[2:] {
		assert.Equal(t, pull[float64](t, primary, k), pull[float64](t, backup, k), "key %d", k)
	}
	assert.Equal(t, pull[float32](t, primary, 100), pull[float32](t, backup, 100))
}

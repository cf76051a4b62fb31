package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/porttest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/paramstore"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/snapshot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snapshotKeys are the keys the snapshot workers use: two per server.
func snapshotKeys(po *postoffice.Postoffice) []uint64 {
	var keys []uint64
	for _, r := range po.ServerKeyRanges() {
		keys = append(keys, r.Begin+1, r.Begin+2)
	}
	return keys
}

// snapshotPusher pushes its rank+1 to every key until it is killed.
func snapshotPusher(po *postoffice.Postoffice) error {
	w, do, err := startedWorker(po)
	if err != nil {
		return err
	}
	defer w.Close()
	keys := snapshotKeys(po)
	vals := make([]float32, len(keys))
	for i := range vals {
		vals[i] = float32(po.MyRank() + 1)
	}
	fmt.Println("snapshot worker pushing")
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		if err := do(kv.Push(w, keys, vals, nil, kv.Options{})); err != nil {
			return err
		}
	}
	return errors.New("not killed within 60s")
}

// snapshotPuller pulls every key once and prints "key=value" pairs.
func snapshotPuller(po *postoffice.Postoffice) error {
	w, do, err := startedWorker(po)
	if err != nil {
		return err
	}
	defer w.Close()
	keys := snapshotKeys(po)
	var got []float32
	if err := do(kv.Pull(w, keys, &got, nil, kv.Options{})); err != nil {
		return err
	}
	var b strings.Builder
	for i, k := range keys {
		fmt.Fprintf(&b, " %d=%v", k, got[i])
	}
	fmt.Printf("pulled:%s\n", b.String())
	return po.Finalize(0, true)
}

// A job of elasticps servers snapshots every second while two workers
// push; once each server has written a couple of snapshots every process
// is killed with SIGKILL. The job started again with the same directory
// (one worker, which only pulls) reads the values of each server's latest
// complete snapshot, read here with the snapshot package.
func TestSnapshotWholeJobRestart(t *testing.T) {
	t.Parallel() // waits on the 1 s snapshot timer, not the CPU; its own ports and directory
	dir := t.TempDir()
	port, p0, p1 := porttest.Free(t), porttest.Free(t), porttest.Free(t)
	job := func(workers int, kind string) []*proc {
		env := func(extra ...string) []string {
			return append([]string{"DMLC_NUM_SERVER=2", fmt.Sprintf("DMLC_NUM_WORKER=%d", workers),
				"DMLC_PS_ROOT_URI=127.0.0.1", fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", port), "DMLC_NODE_HOST=127.0.0.1",
				"PS_SNAPSHOT_DIR=" + dir, "PS_SNAPSHOT_INTERVAL=1"}, extra...)
		}
		ps := []*proc{
			start(t, "scheduler", env("DMLC_ROLE=scheduler"), elasticpsBin, "scheduler"),
			start(t, "server-a", env("DMLC_ROLE=server", fmt.Sprintf("PORT=%d", p0)), elasticpsBin, "server"),
			start(t, "server-b", env("DMLC_ROLE=server", fmt.Sprintf("PORT=%d", p1)), elasticpsBin, "server"),
		}
		for i := range workers {
			ps = append(ps, start(t, fmt.Sprintf("%s-%d", kind, i), env("DMLC_ROLE=worker", "ELASTICPS_E2E_NODE="+kind), selfExe(t)))
		}
		t.Cleanup(func() {
			if t.Failed() {
				for _, p := range ps {
					t.Logf("%s:\n%s", p.name, p.output())
				}
			}
		})
		return ps
	}

	first := job(2, "snapshot-push")
	for _, w := range first[3:] {
		w.waitFor(t, "snapshot worker pushing")
	}
	for _, s := range first[1:3] {
		s.waitFor(t, "no usable snapshot for this server; it starts empty")
	}
	// two snapshots of each rank after the workers began: taken mid-run
	testutil.WaitFor(t, 30*time.Second, func() bool {
		for rank := range 2 {
			if _, err := os.Stat(filepath.Join(dir, snapshot.FileName(rank, 2))); err != nil {
				return false
			}
		}
		return true
	}, func() string { return "the servers wrote no second snapshot" })
	for _, p := range first {
		kill9(t, p)
	}

	want := map[uint64]float32{}
	var files []string
	for rank := range 2 {
		snap, _, err := snapshot.Latest(dir, rank, nil, nil)
		require.NoError(t, err)
		require.NotNil(t, snap, "rank %d has a complete snapshot", rank)
		files = append(files, snap.Path)
		store, err := paramstore.New(paramstore.DefaultConfig())
		require.NoError(t, err)
		require.NoError(t, store.Restore(snap.State))
		require.Equal(t, 2, store.Len(), "rank %d's snapshot holds its two keys", rank)
		for _, k := range []uint64{snap.Begin + 1, snap.Begin + 2} {
			b, _, ok := store.Value(k)
			require.True(t, ok, "key %d", k)
			v := math.Float32frombits(binary.LittleEndian.Uint32(b))
			require.Positive(t, v, "key %d was pushed before the snapshot", k)
			want[k] = v
		}
	}

	second := job(1, "snapshot-pull")
	for _, s := range second[1:3] {
		s.waitFor(t, "snapshot: restored the store from a snapshot")
	}
	restored := second[1].output() + second[2].output()
	for _, f := range files {
		assert.Contains(t, restored, "file="+f)
	}
	puller := second[3]
	puller.wait(t)
	var line string
	for l := range strings.SplitSeq(puller.output(), "\n") {
		if strings.HasPrefix(l, "pulled:") {
			line = l
		}
	}
	require.NotEmpty(t, line, "the puller printed its values")
	got := map[uint64]float32{}
	for _, f := range strings.Fields(strings.TrimPrefix(line, "pulled:")) {
		var k uint64
		var v float32
		_, err := fmt.Sscanf(f, "%d=%g", &k, &v)
		require.NoError(t, err, f)
		got[k] = v
	}
	assert.Equal(t, want, got, "the values of the snapshots")
	for _, p := range second[:3] {
		p.wait(t)
	}
}

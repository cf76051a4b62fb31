package paramstore

import (
	"testing"
	"time"

	"github.com/elasticps/elasticps/elastic"
	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Store is the elastic Migrator that 'elasticps server' hands to
// elastic's NewServer.
var _ elastic.Migrator = (*Store)(nil)

// TestNoneIsTheSumStore replays one request sequence through two servers of
// one node, one with the store without optimizer and one with
// kv.DefaultHandler: the same answers, the same errors.
func TestNoneIsTheSumStore(t *testing.T) {
	j := jobtest.Start(t, jobtest.Options{Servers: 1, Workers: 1})
	s := newStore(t, Config{})
	var srvs []*kv.Server
	for app, h := range []kv.ServerHandler{s.Handle, kv.NewDefaultHandler().Handle} {
		srv, err := kv.NewServerWith(j.Servers[0], app, kv.ServerOptions{Handler: h, ReleaseRequests: true})
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	i32 := func(v ...int32) []byte { return kv.AsBytes(v) }
	reqs := []kv.LocalRequest{
		{Push: true, DataType: message.Int32, Data: kv.KVPairs{Keys: []uint64{1, 2}, Vals: i32(1, 2, 3, 4)}},
		{Push: true, DataType: message.Int32, Data: kv.KVPairs{Keys: []uint64{1, 1}, Vals: i32(10, 20, 30, 40)}},
		{Push: true, DataType: message.Int32, Data: kv.KVPairs{Keys: []uint64{2, 3}, Vals: i32(5, 6, 7), Lens: []int32{2, 1}}},
		{DataType: message.Int32, Data: kv.KVPairs{Keys: []uint64{1, 2, 3}}},
		{DataType: message.Int32, Data: kv.KVPairs{Keys: []uint64{3}, Lens: []int32{0}}},
		{DataType: message.Int32, Data: kv.KVPairs{Keys: []uint64{4}}},
		{DataType: message.Float, Data: kv.KVPairs{Keys: []uint64{1}}},
		{Push: true, DataType: message.Int32, Data: kv.KVPairs{Keys: []uint64{1}, Vals: i32(1)}},
		{Push: true, DataType: message.Int32, Data: kv.KVPairs{Keys: []uint64{8, 8}, Vals: i32(1, 2, 3), Lens: []int32{1, 2}}},
		{Push: true, DataType: message.Double, Data: kv.KVPairs{Keys: []uint64{9}, Vals: kv.AsBytes([]float64{0.5, 1})}},
		{Push: true, DataType: message.Double, Data: kv.KVPairs{Keys: []uint64{9}, Vals: kv.AsBytes([]float64{0.25, -1})}},
		{DataType: message.Double, Data: kv.KVPairs{Keys: []uint64{9}}},
		{Push: true, DataType: message.Uint8, Data: kv.KVPairs{Keys: []uint64{5}, Vals: []byte{250, 1}}},
		{Push: true, DataType: message.Uint8, Data: kv.KVPairs{Keys: []uint64{5}, Vals: []byte{10, 1}}},
		{DataType: message.Uint8, Data: kv.KVPairs{Keys: []uint64{5, 1}}},
	}
	for i, r := range reqs {
		got, gotErr := srvs[0].HandleLocal(r, 10*time.Second)
		want, wantErr := srvs[1].HandleLocal(r, 10*time.Second)
		assert.Equal(t, wantErr, gotErr, "request %d", i)
		assert.Equal(t, want, got, "request %d", i)
	}
	assert.Equal(t, 5, s.Len())
}

// TestSyncSGDThroughWorkers trains three keys on two servers with two
// workers over the job's van: worker 0 initializes, then every round both
// workers push a gradient and, once both pushed, both pull the update
// w -= lr * (g0+g1)/2.
func TestSyncSGDThroughWorkers(t *testing.T) {
	j := jobtest.Start(t, jobtest.Options{Servers: 2, Workers: 2})
	for _, po := range j.Servers {
		cfg := withOpt(SGD, 0.5)
		cfg.Aggregate, cfg.Workers = Mean, po.NumWorkers
		cfg.RoundSize = po.NumWorkers
		s := newStore(t, cfg)
		srv, err := kv.NewServerWith(po, 0, kv.ServerOptions{Handler: s.Handle, ReleaseRequests: true})
		require.NoError(t, err)
		t.Cleanup(srv.Close)
	}
	var ws []*kv.Worker
	for _, po := range j.Workers {
		w, err := kv.NewWorker(po, 0, 0)
		require.NoError(t, err)
		t.Cleanup(w.Close)
		ws = append(ws, w)
	}
	r := j.Workers[0].ServerKeyRanges()
	keys := []uint64{r[0].Begin, r[0].Begin + 1, r[1].Begin}
	lens := []int32{2, 1, 3}
	wait := func(w *kv.Worker, ts int32, err error) {
		t.Helper()
		require.NoError(t, err)
		require.NoError(t, w.Wait(ts))
	}
	want := []float32{8, 4, 0, -2, 6, 1}
	ts, err := kv.Push(ws[0], keys, want, lens, kv.Options{})
	wait(ws[0], ts, err)
	for round := range 4 {
		// worker 0 pushes 2*(round+1) everywhere, worker 1 pushes index-valued
		// gradients: the mean is exact in binary
		g := [][]float32{make([]float32, 6), make([]float32, 6)}
		for i := range want {
			g[0][i] = float32(2 * (round + 1))
			g[1][i] = float32(i)
			want[i] -= 0.5 * (g[0][i] + g[1][i]) / 2
		}
		for i, w := range ws {
			ts, err := kv.Push(w, keys, g[i], lens, kv.Options{})
			wait(w, ts, err)
		}
		for i, w := range ws {
			var got []float32
			var gotLens []int32
			ts, err := kv.Pull(w, keys, &got, &gotLens, kv.Options{})
			wait(w, ts, err)
			assert.Equal(t, want, got, "round %d, worker %d", round, i)
			assert.Equal(t, lens, gotLens)
		}
	}
}

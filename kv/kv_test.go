package kv

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/elasticps/elasticps/routing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const waitLimit = 20 * time.Second

// spreadKeys returns perServer keys in every server's range:
// ranges[i].Begin + j, as MXNet and BytePS build them.
func spreadKeys(ranges []routing.Range, perServer int) []uint64 {
	var keys []uint64
	for _, r := range ranges {
		for j := range perServer {
			keys = append(keys, r.Begin+uint64(j))
		}
	}
	return keys
}

// testValues returns integer-valued float32 values for keys (so sums are
// exact): with lens, key i has 1+i%3 elements; without, 2 each.
func testValues(keys []uint64, withLens bool) ([]float32, []int32) {
	var vals []float32
	var lens []int32
	for i := range keys {
		n := 2
		if withLens {
			n = 1 + i%3
			lens = append(lens, int32(n))
		}
		for e := range n {
			vals = append(vals, float32(i*10+e+1))
		}
	}
	return vals, lens
}

func scaled(vals []float32, f float32) []float32 {
	out := make([]float32, len(vals))
	for i, v := range vals {
		out[i] = v * f
	}
	return out
}

func wait(t *testing.T, w *Worker, ts int32, err error) {
	t.Helper()
	if !assert.NoError(t, err, "issue") {
		return
	}
	assert.NoError(t, testutil.Within(t, waitLimit, func() error { return w.Wait(ts) }, func() string { return fmt.Sprintf("Wait(%d)", ts) }), "Wait(%d)", ts)
}

// TestPushPullSum: two workers push integer-valued floats several times to
// 1, 2 and 3 servers running the default handler, meet at a barrier, and
// pull exactly rounds*workers*vals; then one push-pull adds one more round.
func TestPushPullSum(t *testing.T) {
	for _, ns := range []int{1, 2, 3} {
		for _, withLens := range []bool{false, true} {
			t.Run(fmt.Sprintf("servers=%d/lens=%v", ns, withLens), func(t *testing.T) {
				const nw, rounds = 2, 3
				j := startJob(t, ns, nw)
				j.startDefaultServers()
				keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 5)
				vals, lens := testValues(keys, withLens)
				want := scaled(vals, rounds*nw)
				workers := []*Worker{j.newWorker(0, 0), j.newWorker(1, 0)}
				var wg sync.WaitGroup
				for wi, w := range workers {
					wg.Go(func() {
						// Several pushes outstanding at once.
						var tss []int32
						for range rounds {
							ts, err := Push(w, keys, vals, lens, Options{})
							if !assert.NoError(t, err, "push") {
								return
							}
							tss = append(tss, ts)
						}
						for _, ts := range tss {
							wait(t, w, ts, nil)
						}
						if !assert.NoError(t, j.Workers[wi].Barrier(0, message.WorkerGroup), "barrier") {
							return
						}
						// Into an empty destination, with lens.
						var got []float32
						var gotLens []int32
						ts, err := Pull(w, keys, &got, &gotLens, Options{})
						wait(t, w, ts, err)
						assert.Equal(t, want, got, "worker %d pulled", wi)
						wantLens := lens
						if !withLens {
							wantLens = slices.Repeat([]int32{2}, len(keys))
						}
						assert.Equal(t, wantLens, gotLens, "worker %d pulled lens", wi)
						// Into a pre-sized destination, raw bytes.
						pre := make([]byte, 4*len(vals))
						ts, err = w.Pull(keys, &pre, nil, Options{})
						wait(t, w, ts, err)
						f, err := FromBytes[float32](pre)
						assert.NoError(t, err)
						assert.Equal(t, want, f, "worker %d pulled into a pre-sized buffer", wi)
					})
				}
				wg.Wait()

				// One push-pull from worker 0 returns the new sum...
				var out []float32
				var outLens []int32
				if withLens {
					outLens = slices.Clone(lens) // sent with the push, then overwritten
				}
				ts, err := PushPull(workers[0], keys, vals, &out, &outLens, Options{})
				wait(t, workers[0], ts, err)
				want = scaled(vals, rounds*nw+1)
				assert.Equal(t, want, out, "push-pull returned")
				// ...which worker 1 then sees.
				var got []float32
				ts, err = Pull(workers[1], keys, &got, nil, Options{})
				wait(t, workers[1], ts, err)
				assert.Equal(t, want, got, "after push-pull worker 1 pulled")
			})
		}
	}
}

// TestTypedValues pushes and pulls every summable element type.
func TestTypedValues(t *testing.T) {
	j := startJob(t, 2, 1)
	j.startDefaultServers()
	w := j.newWorker(0, 0)
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 3)
	t.Run("int32", func(t *testing.T) { typedRoundTrip(t, w, keys, 100, []int32{-1, 2, -3, 4, 5, 6}) })
	t.Run("int64", func(t *testing.T) { typedRoundTrip(t, w, keys, 200, []int64{-1 << 40, 2, 3, 4, 5, 6}) })
	t.Run("uint64", func(t *testing.T) { typedRoundTrip(t, w, keys, 300, []uint64{1 << 60, 2, 3, 4, 5, 6}) })
	t.Run("float64", func(t *testing.T) { typedRoundTrip(t, w, keys, 400, []float64{0.5, 2, 3, 4, 5, 1e300}) })
	t.Run("uint8", func(t *testing.T) { typedRoundTrip(t, w, keys, 500, []uint8{1, 2, 3, 4, 5, 250}) })
}

func typedRoundTrip[T Number](t *testing.T, w *Worker, keys []uint64, offset uint64, vals []T) {
	keys = slices.Clone(keys)
	for i := range keys {
		keys[i] += offset
	}
	for range 2 {
		ts, err := Push(w, keys, vals, nil, Options{})
		wait(t, w, ts, err)
	}
	var got []T
	ts, err := Pull(w, keys, &got, nil, Options{})
	wait(t, w, ts, err)
	require.Len(t, got, len(vals))
	for i := range vals {
		require.Equal(t, vals[i]+vals[i], got[i], "value %d", i)
	}
	// The same key pulled as another type is refused by the store.
	var wrong []float32
	ts, err = Pull(w, keys, &wrong, nil, Options{})
	require.NoError(t, err)
	var se *ServerError
	if err := w.Wait(ts); DataTypeOf[T]() != message.Float {
		require.ErrorAs(t, err, &se, "pull as the wrong type")
	}
}

// TestSimpleAppGroupAll: the scheduler sends 100 requests to group 7; every
// node, the scheduler included, handles exactly 100 and every response
// comes back.
func TestSimpleAppGroupAll(t *testing.T) {
	j := startJob(t, 2, 2)
	nodes := j.All()
	counts := make([]atomic.Int64, len(nodes))
	var apps []*SimpleApp
	for i, po := range nodes {
		app, err := NewSimpleApp(po, 0, 0)
		require.NoError(t, err)
		t.Cleanup(app.Close)
		app.SetRequestHandler(func(d SimpleData, a *SimpleApp) {
			counts[i].Add(1)
			assert.Equal(t, fmt.Sprint(d.Head), string(d.Body), "node %d: the body of head %d", i, d.Head)
			assert.Equal(t, int32(message.SchedulerID), d.Sender, "node %d: the sender", i)
			assert.NoError(t, a.Response(d, []byte("re:"+string(d.Body))))
		})
		apps = append(apps, app)
	}
	sched := apps[0] // All lists the scheduler first
	var responses atomic.Int64
	sched.SetResponseHandler(func(d SimpleData, _ *SimpleApp) {
		responses.Add(1)
		assert.Equal(t, fmt.Sprint("re:", d.Head), string(d.Body), "response of head %d", d.Head)
	})
	var tss []int32
	for r := range 100 {
		ts, err := sched.Request(int32(r), []byte(fmt.Sprint(r)), message.AllGroup)
		require.NoError(t, err)
		tss = append(tss, ts)
	}
	for _, ts := range tss {
		require.NoError(t, testutil.Within(t, waitLimit, func() error { return sched.Wait(ts) }, func() string { return "SimpleApp.Wait" }))
	}
	for i := range counts {
		assert.EqualValues(t, 100, counts[i].Load(), "node %d (%s) handled", i, nodes[i].Role())
	}
	assert.EqualValues(t, 100*int64(len(nodes)), responses.Load())
	_, err := sched.Request(0, nil, 12345)
	assert.Error(t, err, "Request to an unknown group")
}

// TestServerCommands: simple_app messages reach the SimpleApp embedded in a
// Worker and a Server (how MXNet sends commands to servers), and share the
// worker's timestamps.
func TestServerCommands(t *testing.T) {
	j := startJob(t, 2, 1)
	var cmds atomic.Int64
	for _, srv := range j.startServers(NewDefaultHandler().Handle) {
		srv.Simple().SetRequestHandler(func(d SimpleData, a *SimpleApp) {
			if d.Head == 7 && string(d.Body) == "sync_mode" {
				cmds.Add(1)
			}
			_ = a.Response(d, nil)
		})
	}
	w := j.newWorker(0, 0)
	ts1, err := w.Simple().Request(7, []byte("sync_mode"), message.ServerGroup)
	require.NoError(t, err)
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 1)
	ts2, err := Push(w, keys, []float32{1, 2}, nil, Options{})
	wait(t, w, ts2, err)
	wait(t, w, ts1, nil)
	assert.Equal(t, ts1+1, ts2, "timestamps: the worker and its SimpleApp share one counter")
	assert.EqualValues(t, 2, cmds.Load(), "servers that saw the command")
}

// TestTwoCustomersOneWorker: one worker process with customers 0 and 1
// (two registrations, NumWorkers=2); both KV workers work and one barrier
// round releases both.
func TestTwoCustomersOneWorker(t *testing.T) {
	const rounds = 3
	j := startJobWith(t, jobtest.Options{Servers: 2, Workers: 1, CustomersPerWorker: 2})
	j.startDefaultServers()
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 4)
	vals, lens := testValues(keys, true)
	want := scaled(vals, rounds*2)
	var wg sync.WaitGroup
	for c := range 2 {
		w := j.newWorker(0, c)
		wg.Go(func() {
			for range rounds {
				ts, err := Push(w, keys, vals, lens, Options{})
				wait(t, w, ts, err)
			}
			if !assert.NoError(t, j.Workers[0].Barrier(c, message.WorkerGroup), "customer %d barrier", c) {
				return
			}
			var got []float32
			ts, err := Pull(w, keys, &got, nil, Options{})
			wait(t, w, ts, err)
			assert.Equal(t, want, got, "customer %d pulled", c)
		})
	}
	testutil.Within(t, waitLimit, func() bool { wg.Wait(); return true },
		func() string { return "customers did not finish (barrier not released?)" })
}

// TestCallbacksBeforeWait: a callback's effects are visible when Wait
// returns (the race detector checks the ordering), pull callbacks see the
// copied values, and callbacks of empty requests run before the call
// returns.
func TestCallbacksBeforeWait(t *testing.T) {
	j := startJob(t, 2, 1)
	j.startDefaultServers()
	w := j.newWorker(0, 0)
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 3)
	vals, _ := testValues(keys, false)

	pushed := false
	ts, err := Push(w, keys, vals, nil, Options{Callback: func() { pushed = true }})
	wait(t, w, ts, err)
	assert.True(t, pushed, "push callback had not run when Wait returned")

	var got []float32
	sawValues := false
	ts, err = Pull(w, keys, &got, nil, Options{Callback: func() { sawValues = slices.Equal(got, vals) }})
	wait(t, w, ts, err)
	assert.True(t, sawValues, "pull callback did not see the pulled values (got %v)", got)

	ran := false
	ts, err = w.Push(nil, nil, nil, Options{Callback: func() { ran = true }})
	assert.NoError(t, err, "empty push")
	assert.True(t, ran, "empty push: callback ran")
	assert.NoError(t, w.Wait(ts))

	// A failing operation still runs OnError then Callback.
	var order []string
	bad := make([]float32, 1)
	ts, err = Pull(w, keys, &bad, nil, Options{
		OnError:  func(error) { order = append(order, "error") },
		Callback: func() { order = append(order, "callback") },
	})
	require.NoError(t, err)
	assert.Error(t, w.Wait(ts), "pull into a too small buffer")
	assert.Equal(t, []string{"error", "callback"}, order, "the order the failure hooks ran in")
}

// TestAsyncResponse: the server answers from another goroutine after a
// delay, two requests for one key are outstanding at once, and a second
// Response for a request is refused.
func TestAsyncResponse(t *testing.T) {
	j := startJob(t, 1, 1)
	var second atomic.Value
	j.startServers(func(meta ReqMeta, data KVPairs, srv *Server) {
		go func() {
			time.Sleep(30 * time.Millisecond)
			res := KVPairs{}
			if meta.Pull {
				res.Keys = data.Keys
				vals := make([]float32, len(data.Keys))
				for i, k := range data.Keys {
					vals[i] = float32(k) + float32(meta.Cmd)
				}
				res.Vals = AsBytes(vals)
			}
			assert.NoError(t, srv.Response(meta, res))
			second.Store(srv.Response(meta, res))
		}()
	})
	w := j.newWorker(0, 0)
	keys := []uint64{3, 4}
	var a, b []float32
	ts1, err1 := Push(w, keys, []float32{1, 2}, nil, Options{})
	ts2, err2 := Pull(w, keys, &a, nil, Options{Cmd: 10})
	ts3, err3 := Pull(w, keys, &b, nil, Options{Cmd: 20})
	wait(t, w, ts3, err3)
	wait(t, w, ts2, err2)
	wait(t, w, ts1, err1)
	assert.Equal(t, []float32{13, 14}, a, "first pull")
	assert.Equal(t, []float32{23, 24}, b, "second pull")
	time.Sleep(50 * time.Millisecond)
	err, _ := second.Load().(error)
	assert.ErrorIs(t, err, ErrAlreadyResponded, "second Response")
}

// TestRowSparse: MXNet row-sparse requests (a master key of length 0 then
// repeated/row keys, non-decreasing) and their lens pass through unchanged
// both ways.
func TestRowSparse(t *testing.T) {
	j := startJob(t, 2, 1)
	type seen struct {
		keys []uint64
		lens []int32
	}
	var mu sync.Mutex
	var got []seen
	j.startServers(func(meta ReqMeta, data KVPairs, srv *Server) {
		mu.Lock()
		got = append(got, seen{slices.Clone(data.Keys), slices.Clone(data.Lens)})
		mu.Unlock()
		res := KVPairs{}
		if meta.Pull {
			res = data // echo keys, values and lens
		}
		assert.NoError(t, srv.Response(meta, res))
	})
	w := j.newWorker(0, 0)
	r := j.Workers[0].ServerKeyRanges()
	keys := []uint64{r[0].Begin + 5, r[0].Begin + 5, r[0].Begin + 6, r[1].Begin + 2, r[1].Begin + 2}
	lens := []int32{0, 2, 2, 0, 1}
	vals := []float32{1, 2, 3, 4, 5}
	var out []float32
	outLens := slices.Clone(lens)
	ts, err := PushPull(w, keys, vals, &out, &outLens, Options{})
	wait(t, w, ts, err)
	assert.Equal(t, vals, out, "push-pull echoed")
	assert.Equal(t, lens, outLens, "push-pull echoed lens")
	mu.Lock()
	if assert.Len(t, got, 2, "servers that saw the push-pull") {
		assert.True(t, slices.Equal(got[0].keys, keys[:3]) || slices.Equal(got[1].keys, keys[:3]), "servers saw %+v", got)
	}
	for _, s := range got {
		assert.True(t, slices.Equal(s.lens, lens[:3]) || slices.Equal(s.lens, lens[3:]), "server saw lens %v", s.lens)
	}
	mu.Unlock()
	// The master key alone, with no values.
	ts, err = Push[float32](w, keys[:1], nil, lens[:1], Options{})
	wait(t, w, ts, err)
}

// TestErrors: what can be checked up front fails at once; bad replies,
// server errors and wrong destinations fail the operation's Wait; malformed
// requests are rejected by the server, which keeps serving.
func TestErrors(t *testing.T) {
	j := startJob(t, 2, 1)
	j.startDefaultServers()
	w := j.newWorker(0, 0)
	r := j.Workers[0].ServerKeyRanges()
	keys := spreadKeys(r, 2)
	vals, _ := testValues(keys, false)
	ts, err := Push(w, keys, vals, nil, Options{})
	wait(t, w, ts, err)

	upFront := []struct {
		name string
		do   func() (int32, error)
		want string
	}{
		{"unsorted", func() (int32, error) { return Push(w, []uint64{5, 4}, []float32{1, 2}, nil, Options{}) }, "sorted"},
		{"uneven", func() (int32, error) { return Push(w, keys, vals[:3], nil, Options{}) }, "evenly"},
		{"lens count", func() (int32, error) { return Push(w, keys, vals, []int32{1}, Options{}) }, "lens for"},
		{"lens sum", func() (int32, error) { return Push(w, keys[:2], vals[:3], []int32{1, 1}, Options{}) }, "add up"},
		{"negative len", func() (int32, error) { return Push(w, keys[:2], vals[:0], []int32{1, -1}, Options{}) }, "negative"},
		{"out of range", func() (int32, error) {
			return Push(w, []uint64{math.MaxUint64 - 1}, []float32{1}, nil, Options{})
		}, "outside every server key range"},
		{"nil dst", func() (int32, error) { return w.Pull(keys, nil, nil, Options{}) }, "destination"},
		{"bytes not elements", func() (int32, error) {
			return w.Push(keys[:1], []byte{1, 2, 3}, nil, Options{DataType: message.Float})
		}, "evenly"},
	}
	for _, c := range upFront {
		ts, err := c.do()
		assert.ErrorContains(t, err, c.want, c.name)
		assert.Equal(t, int32(-1), ts, c.name)
	}

	// Pre-sized destination of the wrong size: error, nothing written.
	dst := []float32{-1, -1, -1}
	ts, err = Pull(w, keys, &dst, nil, Options{})
	require.NoError(t, err)
	assert.ErrorContains(t, w.Wait(ts), "destination", "wrong-size destination")
	assert.Equal(t, []float32{-1, -1, -1}, dst, "destination was written")
	// Lens destination of the wrong size.
	var out []float32
	badLens := []int32{0}
	ts, _ = Pull(w, keys, &out, &badLens, Options{})
	assert.ErrorContains(t, w.Wait(ts), "lens destination", "wrong-size lens destination")

	// A server error (pull of a key never pushed) comes back through Wait,
	// and the other server's part does not hide it.
	unknown := []uint64{r[0].Begin + 100, r[1].Begin}
	ts, err = Pull(w, unknown, &out, nil, Options{})
	require.NoError(t, err)
	var se *ServerError
	if assert.ErrorAs(t, w.Wait(ts), &se, "pull of an unknown key") {
		assert.Equal(t, int32(8), se.Node, "pull of an unknown key: the node")
		assert.Contains(t, se.Msg, "never pushed", "pull of an unknown key")
	}
	// Waiting again still reports it; a timestamp never issued is an error.
	assert.ErrorAs(t, w.Wait(ts), &se, "second Wait")
	assert.Error(t, w.Wait(1<<30), "Wait on a timestamp never issued")
	// A push whose size does not match the stored value is refused whole.
	ts, err = Push(w, keys, append(slices.Clone(vals), vals...), nil, Options{})
	require.NoError(t, err)
	assert.ErrorAs(t, w.Wait(ts), &se, "push of a different length")
	// The store is unchanged and the job still works.
	ts, err = Pull(w, keys, &out, nil, Options{})
	wait(t, w, ts, err)
	assert.Equal(t, vals, out, "after rejected requests pulled")
}

// TestBadReplies: a server handler that answers wrongly makes the worker's
// operation fail with a descriptive error instead of aborting.
func TestBadReplies(t *testing.T) {
	j := startJob(t, 1, 1)
	f32 := func(v ...float32) []byte { return AsBytes(v) }
	j.startServers(func(meta ReqMeta, data KVPairs, srv *Server) {
		var err error
		switch meta.Cmd {
		case 1: // keys shifted: not in the request
			shifted := make([]uint64, len(data.Keys))
			for i, k := range data.Keys {
				shifted[i] = k + 1
			}
			err = srv.Response(meta, KVPairs{Keys: shifted, Vals: f32(1, 2)})
		case 2: // fewer keys than asked
			err = srv.Response(meta, KVPairs{Keys: data.Keys[:1], Vals: f32(1)})
		case 3: // values not whole float32s
			err = srv.Response(meta, KVPairs{Keys: data.Keys, Vals: []byte{1, 2, 3}})
		case 4: // lens not one per key: Response refuses and sends an error
			assert.Error(t, srv.Response(meta, KVPairs{Keys: data.Keys, Vals: f32(1, 2), Lens: []int32{2}}), "Response with bad lens")
			err = nil
		case 5: // a key twice
			err = srv.Response(meta, KVPairs{Keys: []uint64{data.Keys[0], data.Keys[0], data.Keys[1]}, Vals: f32(1, 2, 3)})
		default:
			err = srv.Response(meta, KVPairs{Keys: data.Keys, Vals: f32(1, 2)})
		}
		assert.NoError(t, err)
	})
	w := j.newWorker(0, 0)
	keys := []uint64{10, 11}
	for cmd, want := range map[int32]string{
		1: "not a contiguous run",
		2: "returned 1 of 2 keys",
		3: "whole number",
		4: "lens for",
		5: "not a contiguous run",
	} {
		var out []float32
		ts, err := Pull(w, keys, &out, nil, Options{Cmd: cmd})
		require.NoError(t, err)
		err = testutil.Within(t, waitLimit, func() error { return w.Wait(ts) }, func() string { return "Wait" })
		assert.ErrorContains(t, err, want, "cmd %d", cmd)
	}
	var out []float32
	ts, err := Pull(w, keys, &out, nil, Options{})
	wait(t, w, ts, err)
	assert.Equal(t, []float32{1, 2}, out, "good reply")
}

// TestMalformedRequest: requests that ps-lite would abort on are answered
// with an error and counted, and the server keeps serving.
func TestMalformedRequest(t *testing.T) {
	j := startJob(t, 1, 1)
	servers := j.startServers(NewDefaultHandler().Handle)
	w := j.newWorker(0, 0)
	send := func(frames ...[]byte) error {
		o := &op{pull: true, esize: 4, waiting: []int32{8}, dst: byteDst{new([]byte)}}
		ts := w.c.newRequest(1, 0, o)
		m := &message.Message{Meta: message.NewMeta()}
		m.Meta.AppID, m.Meta.CustomerID = 0, 0
		m.Meta.Request, m.Meta.Pull = true, true
		m.Meta.Timestamp, m.Meta.Recver = ts, 8
		types := []message.DataType{message.Uint64, message.Float, message.Int32}
		for i, f := range frames {
			m.AddData(types[i], f)
		}
		_, err := j.Workers[0].Send(m)
		require.NoError(t, err)
		return testutil.Within(t, waitLimit, func() error { return w.Wait(ts) }, func() string { return "Wait" })
	}
	cases := []struct {
		name   string
		frames [][]byte
		want   string
	}{
		{"one frame", [][]byte{make([]byte, 8)}, "1 data frames"},
		{"short keys", [][]byte{make([]byte, 7), nil}, "keys frame"},
		{"partial value", [][]byte{make([]byte, 8), make([]byte, 3)}, "whole number"},
		{"lens count", [][]byte{make([]byte, 16), nil, make([]byte, 4)}, "1 lens for 2 keys"},
	}
	for i, c := range cases {
		err := send(c.frames...)
		var se *ServerError
		if assert.ErrorAs(t, err, &se, c.name) {
			assert.Contains(t, se.Msg, c.want, c.name)
		}
		assert.EqualValues(t, int64(i+1), servers[0].Invalid(), "%s: Invalid()", c.name)
	}
	ts, err := Push(w, []uint64{1}, []float32{5}, nil, Options{})
	wait(t, w, ts, err)
}

// TestNoHandler: a server without a handler answers with an error instead
// of aborting (ps-lite CHECK-fails).
func TestNoHandler(t *testing.T) {
	j := startJob(t, 1, 1)
	j.startServers(nil)
	w := j.newWorker(0, 0)
	ts, err := Push(w, []uint64{1}, []float32{5}, nil, Options{})
	require.NoError(t, err)
	var se *ServerError
	assert.ErrorAs(t, testutil.Within(t, waitLimit, func() error { return w.Wait(ts) }, func() string { return "Wait" }), &se, "push to a server without handler")
}

// TestWaitAfterStop: an operation whose server never answers returns
// ErrStopped from Wait when the node stops.
func TestWaitAfterStop(t *testing.T) {
	j := startJob(t, 1, 1)
	j.startServers(func(ReqMeta, KVPairs, *Server) {}) // never responds
	w := j.newWorker(0, 0)
	ts, err := Push(w, []uint64{1}, []float32{5}, nil, Options{})
	require.NoError(t, err)
	go func() {
		time.Sleep(50 * time.Millisecond)
		j.Workers[0].Stop()
	}()
	assert.ErrorIs(t, testutil.Within(t, waitLimit, func() error { return w.Wait(ts) }, func() string { return "Wait" }), postoffice.ErrStopped, "Wait after stop")
	_, err = Push(w, []uint64{1}, []float32{5}, nil, Options{})
	assert.ErrorIs(t, err, postoffice.ErrStopped, "Push after stop")
}

// TestWireFormat checks the request messages a Worker sends, as a raw
// customer on each server sees them: ps-lite's fields, a pull's empty vals
// frame and no lens, lens only when given.
func TestWireFormat(t *testing.T) {
	j := startJob(t, 2, 1)
	got := make(chan *message.Message, 16)
	for _, po := range j.Servers {
		c, err := NewCustomer(po, 3, 3, func(m *message.Message) { got <- m })
		require.NoError(t, err)
		t.Cleanup(c.Close)
	}
	w, err := NewWorker(j.Workers[0], 3, 0)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	r := j.Workers[0].ServerKeyRanges()
	keys := []uint64{r[0].Begin + 1, r[1].Begin + 1, r[1].Begin + 2}
	next := func() *message.Message {
		t.Helper()
		return testutil.Recv(t, got, waitLimit, func() string { return "no request arrived" })
	}
	check := func(what string, push, pull bool, types []message.DataType, frameLens ...[2]int) {
		t.Helper()
		for range 2 {
			m := next()
			mm := m.Meta
			i := 0
			if mm.Recver != 8 {
				i = 1
			}
			type fields struct {
				Request, Push, Pull, SimpleApp bool
				AppID, CustomerID, Head        int32
				Priority, Sender               int32
				DataType                       []message.DataType
				Frames                         int
			}
			if !assert.Equal(t, fields{true, push, pull, false, 3, 0, 42, 3, 9, types, len(types)},
				fields{mm.Request, mm.Push, mm.Pull, mm.SimpleApp, mm.AppID, mm.CustomerID, mm.Head, mm.Priority, mm.Sender, mm.DataType, len(m.Data)},
				"%s: meta %s", what, mm.String()) {
				continue
			}
			for f, d := range m.Data[:min(len(m.Data), 2)] {
				assert.Len(t, d, frameLens[i][f], "%s to %d: frame %d", what, mm.Recver, f)
			}
		}
	}
	opts := Options{Cmd: 42, Priority: 3}
	var dst []float32
	_, err = Pull(w, keys, &dst, nil, opts)
	require.NoError(t, err)
	check("pull", false, true, []message.DataType{message.Uint64, message.Float}, [2]int{8, 0}, [2]int{16, 0})
	_, err = Push(w, keys, []float64{1, 2, 3, 4}, []int32{1, 1, 2}, opts)
	require.NoError(t, err)
	check("push with lens", true, false, []message.DataType{message.Uint64, message.Double, message.Int32}, [2]int{8, 8}, [2]int{16, 24})
	opts.DataType = message.Other
	_, err = w.PushPull(keys, make([]byte, 6), new([]byte), nil, opts)
	require.NoError(t, err)
	check("push-pull", true, true, []message.DataType{message.Uint64, message.Other}, [2]int{8, 2}, [2]int{16, 4})
}

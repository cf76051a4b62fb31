package kv

import (
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

// swapped routes range i to server rank n-1-i and counts completions.
type swapped struct {
	table *routing.Table
	done  atomic.Int64
}

func newSwapped(ranges []routing.Range) *swapped {
	tab := routing.NewIdentityTable(len(ranges))
	r := tab.Current().Clone()
	r.Epoch = 1
	for i := range r.Intervals {
		r.Intervals[i].Node = int32(message.ServerRankToID(len(ranges) - 1 - i))
	}
	tab.Update(r)
	return &swapped{table: tab}
}

func (r *swapped) Table() *routing.Table            { return r.table }
func (r *swapped) NumbersPushes() bool              { return false }
func (r *swapped) OperationDone(_, _ time.Duration) { r.done.Add(1) }

// keyRecorder sums like DefaultHandler and records the keys it was sent.
type keyRecorder struct {
	*DefaultHandler
	mu   sync.Mutex
	keys []uint64
}

func (h *keyRecorder) handle(meta ReqMeta, data KVPairs, s *Server) {
	h.mu.Lock()
	h.keys = append(h.keys, data.Keys...)
	h.mu.Unlock()
	h.Handle(meta, data, s)
}

func (h *keyRecorder) seen() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]uint64(nil), h.keys...)
}

func TestRouterDecidesWhichServerGetsAKey(t *testing.T) {
	j := startJob(t, 2, 1)
	hs := []*keyRecorder{{DefaultHandler: NewDefaultHandler()}, {DefaultHandler: NewDefaultHandler()}}
	i := 0
	j.startServersWith(func(s *Server) { s.SetRequestHandler(hs[j.Servers[i].MyRank()].handle); i++ })
	ranges := j.Workers[0].ServerKeyRanges()
	router := newSwapped(ranges)
	w, err := NewWorkerWith(j.Workers[0], 0, 0, WorkerOptions{Router: router})
	require.NoError(t, err)
	t.Cleanup(w.Close)

	k0, k1 := ranges[0].Begin+1, ranges[1].Begin+1
	keys := []uint64{k0, k1}
	ts, err := Push(w, keys, []float32{3, 4}, nil, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	var got []float32
	ts, err = Pull(w, keys, &got, nil, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))

	assert.Equal(t, []float32{3, 4}, got)
	assert.Equal(t, []uint64{k1, k1}, hs[0].seen(), "rank 0 holds range 1 in this table: its push and its pull")
	assert.Equal(t, []uint64{k0, k0}, hs[1].seen(), "rank 1 holds range 0")
	assert.Equal(t, int64(2), router.done.Load())
}

// holdFirst is a gate that holds back the first request it sees until
// release, and counts what it admits and what is answered.
type holdFirst struct {
	srv      *Server
	held     chan *message.Message
	admits   atomic.Int64
	answered atomic.Int64
	once     sync.Once
}

type answeredCounter struct{ g *holdFirst }

func (a answeredCounter) Answered() { a.g.answered.Add(1) }

func (g *holdFirst) Admit(m *message.Message, keys []uint64) (Admitted, bool) {
	g.admits.Add(1)
	held := false
	g.once.Do(func() { held = true })
	if held {
		g.held <- m
		return nil, false
	}
	return answeredCounter{g}, true
}

func TestGateHoldsARequestUntilReadmitted(t *testing.T) {
	j := startJob(t, 1, 1)
	g := &holdFirst{held: make(chan *message.Message, 1)}
	store := NewDefaultHandler()
	srv, err := NewServerWith(j.Servers[0], 0, ServerOptions{Handler: store.Handle,
		Gate: func(s *Server) RequestGate { g.srv = s; return g }})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	require.Same(t, srv, g.srv, "the gate is built for its own server before it registers")
	w := j.newWorker(0, 0)
	keys := []uint64{7}

	ts, err := Push(w, keys, []float32{5}, nil, Options{})
	require.NoError(t, err)
	held := testutil.Recv(t, g.held, 10*time.Second, func() string { return "the gate never saw the push" })
	assert.Zero(t, g.answered.Load())
	srv.Readmit(held)
	require.NoError(t, testutil.Within(t, 10*time.Second, func() error { return w.Wait(ts) }, func() string { return "readmitted push" }))

	var got []float32
	ts, err = Pull(w, keys, &got, nil, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	assert.Equal(t, []float32{5}, got)
	assert.Equal(t, int64(3), g.admits.Load(), "the push twice (held, readmitted), the pull once")
	// Answered runs after the response was sent: the worker may be first.
	assert.Eventually(t, func() bool { return g.answered.Load() == 2 }, 10*time.Second, time.Millisecond)
}

func TestHandleLocalBypassesTheGate(t *testing.T) {
	j := startJob(t, 1, 1)
	g := &holdFirst{held: make(chan *message.Message, 1)}
	g.once.Do(func() {}) // hold nothing
	store := NewDefaultHandler()
	srv, err := NewServerWith(j.Servers[0], 0, ServerOptions{Handler: store.Handle,
		Gate: func(*Server) RequestGate { return g }})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	keys := []uint64{3, 9}

	_, err = srv.HandleLocal(LocalRequest{Push: true, DataType: message.Float,
		Data: KVPairs{Keys: keys, Vals: AsBytes([]float32{2, 6})}}, 10*time.Second)
	require.NoError(t, err)
	res, err := srv.HandleLocal(LocalRequest{DataType: message.Float, Data: KVPairs{Keys: keys}}, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, keys, res.Keys)
	vals, err := FromBytes[float32](res.Vals)
	require.NoError(t, err)
	assert.Equal(t, []float32{2, 6}, vals)
	assert.Zero(t, g.admits.Load(), "local requests do not pass the gate")

	w := j.newWorker(0, 0)
	var got []float32
	ts, err := Pull(w, keys, &got, nil, Options{})
	require.NoError(t, err)
	require.NoError(t, w.Wait(ts))
	assert.Equal(t, []float32{2, 6}, got)
	assert.Equal(t, int64(1), g.admits.Load())
}

// An elastic job's nodes must use elastic mode's hooks: a worker or server
// without them would route by the static ranges and lose updates during a
// move, so kv refuses to create them and says what to do instead.
func TestElasticJobRefusesWorkersAndServersWithoutHooks(t *testing.T) {
	for _, role := range []message.Role{message.RoleWorker, message.RoleServer} {
		po, err := postoffice.New(postoffice.Config{
			Role: role, NumWorkers: 1, NumServers: 1, Elastic: true,
			SchedulerHost: "127.0.0.1", SchedulerPort: 1, Logger: jobtest.Logger(),
		}, nopTransport{closed: make(chan struct{})})
		require.NoError(t, err)
		t.Cleanup(po.Stop)
		if role == message.RoleWorker {
			_, err = NewWorker(po, 0, 0)
		} else {
			_, err = NewServer(po, 0)
		}
		assert.ErrorContains(t, err, "PS_ELASTIC=1", role.String())
		assert.ErrorContains(t, err, "elastic.Open(po)", role.String())
	}
}

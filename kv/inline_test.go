package kv

import (
	"sync"
	"testing"
	"time"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/postoffice"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBlockedHandlerDoesNotStopReceiving: a server handler of app 0 blocks
// until the same server node's app 1 receives a request. With inline
// handling that handler runs on the receive goroutine, so app 1's request
// can only be received because the receive loop moves to a new goroutine
// (a hand-over); with inline handling off it runs on app 0's own goroutine,
// as in ps-lite. Either way the job must finish, and app 0's requests must
// be handled in the order they were sent, the later ones queued behind the
// blocked one.
func TestBlockedHandlerDoesNotStopReceiving(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handOver  time.Duration
		handOvers bool
	}{
		{"inline", 0, true},
		{"queued", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := startJobWith(t, jobtest.Options{Servers: 1, Workers: 1,
				Configure: func(c *postoffice.Config) { c.InlineHandOver = tc.handOver }})
			release := make(chan struct{})
			var once sync.Once
			var mu sync.Mutex
			var order []int32
			srv0, err := NewServer(j.Servers[0], 0)
			require.NoError(t, err)
			t.Cleanup(srv0.Close)
			srv0.SetRequestHandler(func(meta ReqMeta, data KVPairs, srv *Server) {
				if meta.Cmd == 1 {
					<-release
				}
				mu.Lock()
				order = append(order, meta.Cmd)
				mu.Unlock()
				assert.NoError(t, srv.Response(meta, KVPairs{}))
			})
			srv1, err := NewServer(j.Servers[0], 1)
			require.NoError(t, err)
			t.Cleanup(srv1.Close)
			srv1.SetRequestHandler(func(meta ReqMeta, data KVPairs, srv *Server) {
				once.Do(func() { close(release) })
				assert.NoError(t, srv.Response(meta, KVPairs{}))
			})

			w0 := j.newWorker(0, 0)
			w1, err := NewWorker(j.Workers[0], 1, 0)
			require.NoError(t, err)
			t.Cleanup(w1.Close)
			// Registered last, run first: a failed run must not leave
			// the handler blocked, since closing its server waits for it.
			t.Cleanup(func() { once.Do(func() { close(release) }) })

			var ts []int32
			for cmd := int32(1); cmd <= 5; cmd++ {
				id, err := Push(w0, []uint64{7}, []float32{float32(cmd)}, nil, Options{Cmd: cmd})
				require.NoError(t, err)
				ts = append(ts, id)
			}
			// Let app 0's requests reach the server before app 1's.
			time.Sleep(20 * time.Millisecond)
			id, err := Push(w1, []uint64{7}, []float32{1}, nil, Options{})
			wait(t, w1, id, err)
			for _, id := range ts {
				wait(t, w0, id, nil)
			}
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, []int32{1, 2, 3, 4, 5}, order, "commands app 0 handled")
			got := j.Servers[0].Stats().HandOvers.Load()
			if tc.handOvers {
				assert.NotZero(t, got, "no hand-over counted, yet app 1 was received while app 0's handler blocked")
			} else {
				assert.Zero(t, got, "hand-overs counted with inline handling off")
			}

		})
	}
}

// TestInlineManyRounds: two workers keep up to four pushes in flight to two
// servers, so that requests find their customer sometimes idle (handled on
// the receive goroutine) and sometimes busy (queued); the sums are exact.
func TestInlineManyRounds(t *testing.T) {
	j := startJob(t, 2, 2)
	j.startDefaultServers()
	keys := []uint64{1, 1 << 62}
	const rounds = 300
	var wg sync.WaitGroup
	var ws []*Worker
	for i := range j.Workers {
		w := j.newWorker(i, 0)
		ws = append(ws, w)
		wg.Go(func() {
			var inFlight []int32
			for range rounds {
				ts, err := Push(w, keys, []float32{1, 2}, nil, Options{})
				if !assert.NoError(t, err) {
					return
				}
				inFlight = append(inFlight, ts)
				if len(inFlight) == 4 {
					wait(t, w, inFlight[0], nil)
					inFlight = inFlight[1:]
				}
			}
			for _, ts := range inFlight {
				wait(t, w, ts, nil)
			}
		})
	}
	wg.Wait()
	w := ws[0]
	var got []float32
	ts, err := Pull(w, keys, &got, nil, Options{})
	wait(t, w, ts, err)
	n := float32(rounds * len(j.Workers))
	assert.Equal(t, []float32{n, 2 * n}, got, "pulled")
}

// TestSlowHandlerLeavesTheReceiveGoroutine: a server whose handler takes
// a millisecond for every request stops being handled inline after a few;
// both it and a quick one give exact sums. (That the quick one stays inline
// is not asserted: on a loaded machine even a quick handler may be
// descheduled three times in a row.)
func TestSlowHandlerLeavesTheReceiveGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name       string
		delay      time.Duration
		wantInline bool
	}{
		{"slow", time.Millisecond, false},
		{"quick", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := startJob(t, 1, 1)
			h := NewDefaultHandler()
			srv := j.startServers(func(meta ReqMeta, data KVPairs, s *Server) {
				time.Sleep(tc.delay)
				h.Handle(meta, data, s)
			})[0]
			w := j.newWorker(0, 0)
			const rounds = 20
			for range rounds {
				ts, err := Push(w, []uint64{5}, []float32{2}, nil, Options{})
				wait(t, w, ts, err)
			}
			var got []float32
			ts, err := Pull(w, []uint64{5}, &got, nil, Options{})
			wait(t, w, ts, err)
			assert.Equal(t, []float32{2 * rounds}, got, "pulled")
			srv.c.qmu.Lock()
			inline := srv.c.inline
			srv.c.qmu.Unlock()
			if !tc.wantInline {
				assert.False(t, inline, "customer handles inline after %d requests", rounds)
			}
		})
	}
}

package kv

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elasticps/elasticps/internal/jobtest"
	"github.com/elasticps/elasticps/internal/testutil"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

// A job with instance groups (DMLC_GROUP_SIZE=2) of 2 server and 2 worker
// processes: every instance gets rank process*2+instance, instance i of a
// worker talks only to instance i of the servers (each server process
// holding one key range per instance), and the sums are exact in each
// instance's plane. A BARRIER counts processes; the start and final
// barriers every instance.
func TestInstanceGroupsExactSums(t *testing.T) {
	const groupSize, procs, rounds = 2, 2, 5
	j := startJobWith(t, jobtest.Options{Servers: procs, Workers: procs, GroupSize: groupSize, Start: jobtest.StartWithBarrier})
	for p := range procs {
		for i := range groupSize {
			for _, po := range []*postoffice.Postoffice{j.Servers[p*groupSize+i], j.Workers[p*groupSize+i]} {
				assert.Equal(t, p*groupSize+i, po.MyRank(), "%s of process %d instance %d", po.Role(), p, i)
				assert.Equal(t, p, po.GroupRank())
				assert.Equal(t, procs, po.NumServers(), "NumServers counts processes")
			}
		}
	}
	var mu sync.Mutex
	senders := map[int32]map[int32]bool{} // server node -> worker nodes seen
	var stores []*DefaultHandler
	j.startServersWith(func(s *Server) {
		h := NewDefaultHandler()
		id := s.po.MyNode().ID
		s.SetRequestHandler(func(meta ReqMeta, data KVPairs, srv *Server) {
			mu.Lock()
			if senders[id] == nil {
				senders[id] = map[int32]bool{}
			}
			senders[id][meta.Sender] = true
			mu.Unlock()
			h.Handle(meta, data, srv)
		})
		stores = append(stores, h)
	})
	keys := spreadKeys(j.Workers[0].ServerKeyRanges(), 4)
	workers := make([]*Worker, len(j.Workers))
	planeVals := func(inst int) []float32 {
		vals := make([]float32, len(keys))
		for k := range vals {
			vals[k] = float32(k + 1 + 100*inst) // the planes must not mix
		}
		return vals
	}
	var wg sync.WaitGroup
	for wi := range j.Workers {
		w := j.newWorker(wi, 0)
		workers[wi] = w
		vals := planeVals(wi % groupSize)
		wg.Go(func() {
			for range rounds {
				ts, err := Push(w, keys, vals, nil, Options{})
				wait(t, w, ts, err)
			}
		})
	}
	wg.Wait()
	// Every process has pushed everything: meet at a BARRIER, which
	// counts processes (any one instance of each; the fork's rule), so
	// each process takes part once, through instance 0. A barrier from
	// every instance would let two instances of one process complete a
	// round without the other process.
	for p := range procs {
		wg.Go(func() { assert.NoError(t, j.Workers[p*groupSize].Barrier(0, message.WorkerGroup)) })
	}
	wg.Wait()
	for wi, w := range workers {
		vals := planeVals(wi % groupSize)
		wg.Go(func() {
			var got []float32
			ts, err := Pull(w, keys, &got, nil, Options{})
			wait(t, w, ts, err)
			want := make([]float32, len(keys))
			for k := range want {
				want[k] = vals[k] * rounds * procs
			}
			assert.Equal(t, want, got, "worker instance %d", wi)
		})
	}
	wg.Wait()
	for si, po := range j.Servers {
		inst := si % groupSize
		var want []int32
		for p := range procs {
			want = append(want, int32(message.WorkerRankToID(p*groupSize+inst)))
		}
		var got []int32
		mu.Lock()
		for id := range senders[po.MyNode().ID] {
			got = append(got, id)
		}
		mu.Unlock()
		assert.ElementsMatch(t, want, got, "server %d (instance %d) must hear only worker instances %d", si, inst, inst)
		assert.Equal(t, 4, stores[si].Len(), "server %d holds its process's key range", si)
	}
	// The final barrier waits for every instance of every process.
	var fw sync.WaitGroup
	for _, po := range j.All() {
		fw.Go(func() { assert.NoError(t, po.Finalize(0, true), fmt.Sprint(po.Role())) })
	}
	fw.Wait()
}

// Without a rank an instance cannot start, and says what to set.
func TestInstanceGroupNeedsRank(t *testing.T) {
	cfg := postoffice.Config{Role: message.RoleWorker, NumServers: 1, NumWorkers: 1, SchedulerHost: "127.0.0.1", SchedulerPort: 1, GroupSize: 2}
	tr, err := postoffice.NewTransport(cfg)
	require.NoError(t, err)
	po, err := postoffice.New(cfg, tr)
	require.NoError(t, err)
	defer po.Stop()
	err = po.Start(0)
	require.ErrorContains(t, err, "DMLC_GROUP_SIZE=2 needs this worker's rank: set DMLC_RANK")
}

// A SimpleApp request to a group goes to every instance but, as in the
// BytePS fork, completes after one response per process: with 2 server
// processes of 2 instances, Wait returns while the instance-1 servers
// still hold their answers, and those answers reach the response handler
// afterwards. A group with the scheduler waits for it too; a request to
// one node waits for that node.
func TestInstanceGroupSimpleAppRepliesPerProcess(t *testing.T) {
	const groupSize, procs = 2, 2
	j := startJobWith(t, jobtest.Options{Servers: procs, Workers: 1, GroupSize: groupSize, Start: jobtest.StartWithBarrier})
	release := map[int32]chan struct{}{} // by head: what instance-1 servers wait for
	for h := range int32(3) {
		release[h] = make(chan struct{})
	}
	answer := func(held bool) SimpleHandler {
		return func(d SimpleData, a *SimpleApp) {
			rel := release[d.Head]
			go func() {
				if held {
					<-rel
				}
				assert.NoError(t, a.Response(d, nil))
			}()
		}
	}
	for si, srv := range j.startServers(NewDefaultHandler().Handle) {
		srv.Simple().SetRequestHandler(answer(si%groupSize == 1))
	}
	sched, err := NewSimpleApp(j.Scheduler, 0, 0)
	require.NoError(t, err)
	t.Cleanup(sched.Close)
	sched.SetRequestHandler(answer(false))

	w := j.newWorker(0, 0) // instance 0 of the worker process
	var mu sync.Mutex
	from := map[int32][]int32{} // head -> responders
	w.Simple().SetResponseHandler(func(d SimpleData, _ *SimpleApp) {
		mu.Lock()
		from[d.Head] = append(from[d.Head], d.Sender)
		mu.Unlock()
	})
	responders := func(head int32) []int32 {
		mu.Lock()
		defer mu.Unlock()
		return append([]int32(nil), from[head]...)
	}
	all := j.Workers[0].NodeIDs(message.ServerGroup)
	require.Len(t, all, procs*groupSize)
	inst0 := []int32{all[0], all[2]} // ranks 0 and 2: instance 0 of each process

	for head, group := range map[int32]int{0: message.ServerGroup, 1: message.ServerGroup | message.SchedulerGroup} {
		ts, err := w.Simple().Request(head, nil, group)
		require.NoError(t, err)
		require.NoError(t, testutil.Within(t, waitLimit, func() error { return w.Simple().Wait(ts) },
			func() string { return fmt.Sprintf("Wait for group %d: responders so far %v", group, responders(head)) }))
		want := inst0
		if group&message.SchedulerGroup != 0 {
			want = append([]int32{message.SchedulerID}, inst0...)
		}
		assert.ElementsMatch(t, want, responders(head), "group %d: answered before Wait returned", group)
		close(release[head])
		testutil.WaitFor(t, waitLimit, func() bool { return len(responders(head)) == len(want)+procs },
			func() string {
				return fmt.Sprintf("group %d: the held answers; responders %v", group, responders(head))
			})
		assert.ElementsMatch(t, append(want, all[1], all[3]), responders(head), "group %d: every instance answered", group)
	}

	// One node: its answer, held until released, completes the request.
	ts, err := w.Simple().Request(2, nil, int(all[1]))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, w.Customer().NumResponse(ts), 0, "a request to one held node is outstanding")
	close(release[2])
	require.NoError(t, testutil.Within(t, waitLimit, func() error { return w.Simple().Wait(ts) }, func() string { return "Wait for one node" }))
	assert.Equal(t, []int32{all[1]}, responders(2))
}

// Quickstart: one program for every role of a ps-lite job, run with
//
//	go build -o bin/quickstart ./examples/go/quickstart
//	bin/elasticps local -s 2 -w 2 -- bin/quickstart
//
// Servers keep the built-in sum store; each worker pushes the same values
// -rounds times, waits for the other workers, pulls, and checks that every
// key holds exactly rounds × workers × its value (small integers, so the
// float sums are exact). Any mismatch exits non-zero, which fails the job.
package main

import (
	"flag"
	"fmt"
	"log"

	"github.com/elasticps/elasticps/kv"
	"github.com/elasticps/elasticps/message"
	"github.com/elasticps/elasticps/postoffice"
)

func main() {
	rounds := flag.Int("rounds", 50, "pushes per worker before the check")
	flag.Parse()

	// DMLC_ROLE, DMLC_NUM_SERVER, ... as ps-lite reads them.
	cfg, err := postoffice.ConfigFromEnv(postoffice.OSEnv)
	if err != nil {
		log.Fatal(err)
	}
	po, err := postoffice.Open(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer po.Stop()

	var w *kv.Worker
	switch po.Role() {
	case message.RoleServer:
		srv, err := kv.NewServer(po, 0)
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Close()
		srv.SetRequestHandler(kv.NewDefaultHandler().Handle)
	case message.RoleWorker:
		if w, err = kv.NewWorker(po, 0, 0); err != nil {
			log.Fatal(err)
		}
		defer w.Close()
	}
	if err := po.StartWithBarrier(0); err != nil {
		log.Fatal(err)
	}
	if w != nil {
		if err := work(po, w, *rounds); err != nil {
			log.Fatal(err)
		}
	}
	if err := po.Finalize(0, true); err != nil {
		log.Fatal(err)
	}
}

// work pushes, waits for every worker, pulls and checks the sums.
func work(po *postoffice.Postoffice, w *kv.Worker, rounds int) error {
	// Three keys in each server's range, so every server gets traffic.
	var keys []uint64
	var vals []float32
	for _, r := range po.ServerKeyRanges() {
		for i := range uint64(3) {
			keys = append(keys, r.Begin+i)
			vals = append(vals, float32(len(keys)))
		}
	}
	// wait completes the operation that Push or Pull just started.
	wait := func(ts int32, err error) error {
		if err != nil {
			return err
		}
		return w.Wait(ts)
	}
	for range rounds {
		if err := wait(kv.Push(w, keys, vals, nil, kv.Options{})); err != nil {
			return err
		}
	}
	// Every worker's pushes are in before anyone pulls.
	if err := po.Barrier(0, message.WorkerGroup); err != nil {
		return err
	}
	var got []float32
	if err := wait(kv.Pull(w, keys, &got, nil, kv.Options{})); err != nil {
		return err
	}
	for i, k := range keys {
		if want := vals[i] * float32(rounds*po.NumWorkers()); got[i] != want {
			return fmt.Errorf("key %d: pulled %v, want %v", k, got[i], want)
		}
	}
	fmt.Printf("worker %d: %d keys on %d servers exact after %d rounds of %d workers\n",
		po.MyRank(), len(keys), po.NumServers(), rounds, po.NumWorkers())
	return nil
}

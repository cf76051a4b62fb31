//go:build cgo

package zmq

/*
#include "shim.h"
*/
import "C"

import (
	"log/slog"
	"os"
	"strings"
	"sync"
)

// libzmq mallocs the buffer of every message it receives, and the consumer
// frees it (van/zmq's Release, or ps-lite's SArray) on another thread.
// With glibc's defaults a block of more than 128 KiB is first mapped
// afresh and then, once frees raised the mmap threshold, taken from the
// top of a heap that is given back to the kernel as soon as more than
// twice that block is free there. A node with several large messages in
// flight thus maps, zero-fills and unmaps pages for nearly every message:
// perf showed page faults and unmapping in the IO thread, and a 1x1
// 256 KB pipelined pull ran at about half the speed it does with the
// thresholds below (docs/performance.md).
const (
	// mallocMmapThreshold is glibc's upper bound for M_MMAP_THRESHOLD on
	// 64-bit hosts: blocks below it come from the heap.
	mallocMmapThreshold = 32 << 20
	// mallocTrimThreshold keeps up to this many free bytes at a heap's top
	// instead of giving them back to the kernel: room for eight 4 MB
	// messages in flight, twice over.
	mallocTrimThreshold = 64 << 20
)

// mallocEnv lists the environment settings through which a user tunes
// glibc's malloc thresholds; tuneMalloc leaves malloc alone if any is set.
var mallocEnv = []string{"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}

var tuneMallocOnce sync.Once

// tuneMalloc sets malloc's thresholds for the process once, unless the
// environment sets them already. It reports what it did at debug level.
func tuneMalloc(log *slog.Logger) {
	tuneMallocOnce.Do(func() {
		for _, k := range mallocEnv {
			if _, ok := os.LookupEnv(k); ok {
				log.Debug("van/zmq: malloc thresholds left as the environment sets them", "var", k)
				return
			}
		}
		if t := os.Getenv("GLIBC_TUNABLES"); strings.Contains(t, "glibc.malloc.mmap_threshold") || strings.Contains(t, "glibc.malloc.trim_threshold") {
			log.Debug("van/zmq: malloc thresholds left as GLIBC_TUNABLES sets them")
			return
		}
		if C.eps_tune_malloc(mallocMmapThreshold, mallocTrimThreshold) == 0 {
			log.Debug("van/zmq: malloc thresholds not set (not glibc)")
			return
		}
		log.Debug("van/zmq: malloc mmap threshold 32 MiB, trim threshold 64 MiB (PS_ZMQ_TUNE_MALLOC=0 keeps glibc's defaults)")
	})
}

// mmappedChunks is eps_mmapped_chunks, for tests.
func mmappedChunks(n int) int { return int(C.eps_mmapped_chunks(C.size_t(n))) }

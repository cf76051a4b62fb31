/*
 * Customer::WaitRequest: a short spin in C, then a wait in Go.
 *
 * A C++ thread that waits in Go parks a goroutine locked to its thread;
 * waking it takes the Go scheduler's hand-over of a P to that thread and
 * puts the thread that received the reply to sleep, two thread switches
 * per operation that a Go caller does not pay. So when the request is the
 * app's only one in flight and this thread's recent waits ended within
 * psb_wait_spin_ns (PS_WAIT_SPIN_US, default 200 us), the thread registers
 * a waiter word with the request (psgo_app_wait_begin) and spins on it,
 * yielding the CPU between checks; the goroutine that completes the
 * request writes the outcome into the word (psb_waiter_wake). A spin that
 * runs out, and a wait that does not spin, wait in Go. (Sleeping on the
 * word in the kernel instead measured slower: a third of the goodput for
 * 4 MB pushes over the TCP van; docs/performance.md.) Only a failed
 * request costs one more call into Go, for the error.
 */
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shims.h"
#include "_cgo_export.h"

enum {
  WAITING = PSB_WAIT_WAITING,
  DONE = PSB_WAIT_DONE,
  FAILED = PSB_WAIT_FAILED,
  CLOSED = PSB_WAIT_CLOSED
};

/* How long a Wait may spin; set by the node (Go). */
int64_t psb_wait_spin_ns = 0;

/* The waiter word of this thread (one wait at a time). */
static __thread uint32_t waiter;

/* The mean duration of this thread's recent waits for a request that was
 * its app's only one in flight. */
static __thread int64_t avg_wait_ns;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void psb_waiter_wake(void *p, uint32_t outcome) {
  __atomic_store_n((uint32_t *)p, outcome, __ATOMIC_RELEASE);
}

static int done(uint32_t *w) {
  return __atomic_load_n(w, __ATOMIC_ACQUIRE) >= DONE;
}

/* spin reports whether the request completed before deadline. */
static int spin(uint32_t *w, int64_t deadline) {
  for (;;) {
    for (int i = 0; i < 64; i++) {
      if (done(w)) {
        return 1;
      }
      cpu_relax();
    }
    if (now_ns() >= deadline) {
      return 0;
    }
    /* Let whatever else wants this CPU (the thread that receives the
     * reply, on a machine with few cores) run first. */
    sched_yield();
  }
}

static char *closed_error(void) {
  static const char msg[] =
      "Wait: the app was closed (its KVWorker, SimpleApp or Customer "
      "destroyed) while this thread waited on it; destroy an app only after "
      "its Waits returned";
  char *p = malloc(sizeof msg);
  if (p != NULL) {
    memcpy(p, msg, sizeof msg);
  }
  return p;
}

/* record adds a wait of d ns to this thread's moving average, over about
 * its last 8 waits, each counted as at most 4 spins' worth (so that one
 * long wait does not stop spinning for long). */
static void record(int64_t d, int64_t budget) {
  if (d > 4 * budget) {
    d = 4 * budget;
  }
  avg_wait_ns += (d - avg_wait_ns) / 8;
}

/* wait_spinning is ps_app_wait with a spin budget; start is when it began. */
static char *wait_spinning(uint64_t handle, int timestamp, int64_t budget,
                           int64_t start) {
  char *err = NULL;
  /* Spin only while this thread's waits have been short enough to end
   * within the spin: a spin that runs out is CPU taken from the rest. */
  if (avg_wait_ns >= budget) {
    return psgo_app_wait(handle, timestamp);
  }
  uint32_t *w = &waiter;
  __atomic_store_n(w, WAITING, __ATOMIC_RELAXED);
  /* Spin only for the app's one request in flight: with more, the replies
   * to the others need the CPU this thread would spin on. Any other is
   * waited for in Go right away. */
  if (!psgo_app_wait_begin(handle, timestamp, w, &err)) {
    return err;
  }
  if (!spin(w, start + budget) && psgo_app_wait_disarm(handle, timestamp)) {
    return psgo_app_wait(handle, timestamp);
  }
  /* The outcome is in w (disarm fails only once it is: the notice runs
   * under the request lock that disarm takes). */
  switch (__atomic_load_n(w, __ATOMIC_ACQUIRE)) {
    case DONE:
      return NULL;
    case CLOSED:
      /* The handle may be gone already: do not call into Go with it. */
      return closed_error();
  }
  return psgo_app_wait(handle, timestamp); /* failed: Go has the error */
}

char *ps_app_wait(uint64_t handle, int timestamp) {
  int64_t budget = __atomic_load_n(&psb_wait_spin_ns, __ATOMIC_RELAXED);
  if (budget <= 0) {
    return psgo_app_wait(handle, timestamp);
  }
  int64_t start = now_ns();
  char *err = wait_spinning(handle, timestamp, budget, start);
  record(now_ns() - start, budget);
  return err;
}

/*
 * Customer::WaitRequest: spin in C, then sleep in C or in Go.
 *
 * A C++ thread that waits in Go parks a goroutine locked to its thread;
 * waking it takes the Go scheduler's hand-over of a P to that thread and
 * puts the thread that received the reply to sleep, two thread switches
 * per operation that a Go caller does not pay. So when the request is the
 * app's only one in flight and this thread's recent waits ended within
 * psb_wait_spin_ns (PS_WAIT_SPIN_US, default 100 us), the thread registers
 * a waiter word with the request (psgo_app_wait_begin) and spins on it,
 * yielding the CPU between checks; the goroutine that completes the
 * request writes the outcome into the word (psb_waiter_wake). A spin that
 * runs out, or a wait that does not spin, sleeps: on the word in the
 * kernel (a futex; psb_wait_sleep_in_c, the TCP van) or in Go (the other
 * vans), whichever measured faster. Only a failed request costs one more
 * call into Go, for the error. PS_WAIT_SPIN_US=-1 always waits in Go.
 */
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "shims.h"
#include "_cgo_export.h"

enum {
  WAITING = PSB_WAIT_WAITING,
  SLEEPING = PSB_WAIT_SLEEPING,
  DONE = PSB_WAIT_DONE,
  FAILED = PSB_WAIT_FAILED,
  CLOSED = PSB_WAIT_CLOSED
};

/* How long a Wait spins before it sleeps, and whether it sleeps here (or
 * in Go); set by the node (Go). */
int64_t psb_wait_spin_ns = 0;
int psb_wait_sleep_in_c = 0;

/* The waiter word lives in thread-local storage, not on the stack: a wake
 * may touch it (the futex call) after the waiter has seen the outcome and
 * returned. A thread waits on one request at a time. */
static __thread uint32_t waiter;

/* The mean duration of this thread's recent waits for a request that was
 * its app's only one in flight. */
static __thread int64_t avg_wait_ns;

/* How long one sleep lasts before the waiter checks that the node still
 * runs (a stopped node completes nothing). */
#define SLEEP_NS 20000000L

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

static void sleep_on(uint32_t *w) {
#ifdef __linux__
  struct timespec t = {0, SLEEP_NS};
  syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, SLEEPING, &t, NULL, 0);
#else
  struct timespec t = {0, 50000};
  (void)w;
  nanosleep(&t, NULL);
#endif
}

void psb_waiter_wake(void *p, uint32_t outcome) {
  uint32_t *w = p;
  if (__atomic_exchange_n(w, outcome, __ATOMIC_RELEASE) == SLEEPING) {
#ifdef __linux__
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#endif
  }
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

/* sleep_until_done sleeps on w until it holds an outcome, or until the
 * node stops (then w is withdrawn and may still say SLEEPING). */
static void sleep_until_done(uint64_t handle, int timestamp, uint32_t *w) {
  for (;;) {
    uint32_t expect = WAITING;
    if (!__atomic_compare_exchange_n(w, &expect, SLEEPING, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) &&
        expect >= DONE) {
      return;
    }
    sleep_on(w);
    if (done(w)) {
      return;
    }
    if (psgo_app_wait_gone(handle)) {
      /* Nothing will complete the request: withdraw the waiter word
       * before leaving (if that fails, the outcome has been written). */
      psgo_app_wait_disarm(handle, timestamp);
      return;
    }
  }
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

char *ps_app_wait(uint64_t handle, int timestamp) {
  int64_t budget = __atomic_load_n(&psb_wait_spin_ns, __ATOMIC_RELAXED);
  int sleep_in_c = __atomic_load_n(&psb_wait_sleep_in_c, __ATOMIC_RELAXED);
  /* Spin only while this thread's waits have been short enough to end
   * within the spin: a spin that runs out is CPU taken from the rest. */
  int want_spin = budget > 0 && avg_wait_ns < budget;
  int64_t start = now_ns();
  char *err = NULL;
  if (budget < 0) {
    return psgo_app_wait(handle, timestamp); /* PS_WAIT_SPIN_US=-1 */
  }
  if (!want_spin && !sleep_in_c) {
    err = psgo_app_wait(handle, timestamp);
    if (budget > 0) {
      record(now_ns() - start, budget);
    }
    return err;
  }
  uint32_t *w = &waiter;
  __atomic_store_n(w, WAITING, __ATOMIC_RELAXED);
  /* Spin only for the app's one request in flight: with more, the replies
   * to the others need the CPU this thread would spin on. Where the sleep
   * is Go's, a request not alone is waited for right there. */
  int outstanding = psgo_app_wait_begin(handle, timestamp, w, !sleep_in_c, &err);
  if (outstanding == 0) {
    /* Not outstanding (completed, or never issued), or waited for in Go. */
    if (budget > 0) {
      record(now_ns() - start, budget);
    }
    return err;
  }
  if (!(outstanding == 1 && want_spin && spin(w, start + budget))) {
    if (sleep_in_c) {
      sleep_until_done(handle, timestamp, w);
    } else if (psgo_app_wait_disarm(handle, timestamp)) {
      err = psgo_app_wait(handle, timestamp);
      record(now_ns() - start, budget);
      return err;
    }
    /* else the outcome has been written (notify runs under the request
     * lock that disarm takes). */
  }
  if (budget > 0) {
    record(now_ns() - start, budget);
  }
  switch (__atomic_load_n(w, __ATOMIC_ACQUIRE)) {
    case DONE:
      return NULL;
    case CLOSED:
      /* The handle may be gone already: do not call into Go with it. */
      return closed_error();
  }
  /* Failed, or the node stopped: Go tells how. */
  return psgo_app_wait(handle, timestamp);
}

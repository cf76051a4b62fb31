#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shims.h"

/* The consumer's callbacks. Written once by ps_register_callbacks before any
 * app exists, then only read; the release/acquire pair on `registered`
 * orders the copy before any reader that sees the flag. */
static ps_callbacks callbacks;
static int registered;

void ps_register_callbacks(const ps_callbacks *cb) {
  ps_callbacks c;
  size_t n;
  if (cb == NULL) {
    return;
  }
  memset(&c, 0, sizeof c);
  /* A caller built against a smaller (older) struct leaves the tail NULL. */
  n = cb->size < sizeof c ? cb->size : sizeof c;
  memcpy(&c, cb, n);
  c.size = sizeof c;
  callbacks = c;
  __atomic_store_n(&registered, 1, __ATOMIC_RELEASE);
}

void ps_free(void *p) { free(p); }

/* How deep the calling thread is in callbacks from Go: calls into Go made
 * at depth 0 come from the host program's own threads (see cpushare.go). */
static __thread int callback_depth;

int psb_in_callback(void) { return callback_depth; }

#define CALLBACK(call) \
  do {                 \
    callback_depth++;  \
    call;              \
    callback_depth--;  \
  } while (0)

static const ps_callbacks *get(void) {
  return __atomic_load_n(&registered, __ATOMIC_ACQUIRE) ? &callbacks : NULL;
}

/* Reached only if a consumer creates apps without the C++ headers (which
 * register the callbacks first): say so instead of crashing. */
static void missing(const char *name) {
  fprintf(stderr,
          "elasticps: callback %s is not registered (call "
          "ps_register_callbacks first); the event is dropped\n",
          name);
}

void psb_on_simple(void *app, int is_request, int head, ps_cchar *body,
                   size_t body_len, int sender, int timestamp,
                   int customer_id) {
  const ps_callbacks *c = get();
  if (c == NULL || c->on_simple == NULL) {
    missing("on_simple");
    return;
  }
  CALLBACK(c->on_simple(app, is_request, head, body, body_len, sender,
                        timestamp, customer_id));
}

static void on_kv_request(void *server, const ps_kv_meta *meta,
                          ps_ckey *keys, size_t num_keys, ps_cvoid *vals,
                          size_t vals_bytes, ps_cint *lens, size_t num_lens,
                          uint64_t release) {
  const ps_callbacks *c = get();
  if (c == NULL || c->on_kv_request == NULL) {
    missing("on_kv_request");
    if (release != 0) {
      ps_release(release);
    }
    return;
  }
  CALLBACK(c->on_kv_request(server, meta, keys, num_keys, vals, vals_bytes,
                            lens, num_lens, release));
}

/* psb_kv_request calls on_kv_request with the meta's fields as arguments,
 * so that Go builds no struct it must pass by pointer (which would move it
 * to Go's heap, once per request). */
void psb_kv_request(void *server, int cmd, int push, int pull, int sender,
                    int timestamp, int customer_id, int data_type,
                    int priority, uint64_t key, uint64_t addr,
                    int val_len, int option, ps_ckey *keys,
                    size_t num_keys, ps_cvoid *vals, size_t vals_bytes,
                    ps_cint *lens, size_t num_lens, uint64_t release) {
  ps_kv_meta m;
  memset(&m, 0, sizeof m);
  m.cmd = cmd;
  m.push = push;
  m.pull = pull;
  m.sender = sender;
  m.timestamp = timestamp;
  m.customer_id = customer_id;
  m.data_type = data_type;
  m.priority = priority;
  m.key = key;
  m.addr = addr;
  m.val_len = val_len;
  m.option = option;
  on_kv_request(server, &m, keys, num_keys, vals, vals_bytes, lens, num_lens,
                release);
}

/* Responses whose arrays are all shorter than this are read during
 * ps_kv_server_response only; set by Go with the node's transport. */
static size_t lend_min = (size_t)-1;

void psb_set_lend_min(size_t n) { __atomic_store_n(&lend_min, n, __ATOMIC_RELAXED); }

size_t ps_kv_response_lend_min(void) { return __atomic_load_n(&lend_min, __ATOMIC_RELAXED); }

void psb_on_kv_done(void *ctx, int status, ps_cchar *err, size_t err_len,
                    ps_cvoid *vals, size_t vals_bytes, ps_cint *lens,
                    size_t num_lens) {
  const ps_callbacks *c = get();
  if (c == NULL || c->on_kv_done == NULL) {
    missing("on_kv_done");
    return;
  }
  CALLBACK(c->on_kv_done(ctx, status, err, err_len, vals, vals_bytes, lens,
                         num_lens));
}

void psb_on_message(void *customer, const ps_message *msg) {
  const ps_callbacks *c = get();
  if (c == NULL || c->on_message == NULL) {
    missing("on_message");
    return;
  }
  CALLBACK(c->on_message(customer, msg));
}

/* The migration callbacks fail with an error message (the move is then
 * aborted) rather than dropping the state. */
static char *missing_error(const char *name) {
  const char *fmt =
      "callback %s is not registered (a consumer built against headers "
      "without it?)";
  size_t n = strlen(fmt) + strlen(name);
  char *s = malloc(n);
  if (s != NULL) {
    snprintf(s, n, fmt, name);
  }
  return s;
}

char *psb_on_kv_export(void *server, uint64_t begin, uint64_t end,
                       void **state, size_t *state_len) {
  const ps_callbacks *c = get();
  if (c == NULL || c->on_kv_export == NULL) {
    return missing_error("on_kv_export");
  }
  char *err;
  CALLBACK(err = c->on_kv_export(server, begin, end, state, state_len));
  return err;
}

char *psb_on_kv_import(void *server, ps_cvoid *state, size_t state_len) {
  const ps_callbacks *c = get();
  if (c == NULL || c->on_kv_import == NULL) {
    return missing_error("on_kv_import");
  }
  char *err;
  CALLBACK(err = c->on_kv_import(server, state, state_len));
  return err;
}

void psb_free_kept(ps_kept_free free_kept, void *kept) {
  CALLBACK(free_kept(kept));
}

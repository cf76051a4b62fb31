/*
 * Calls from Go into the consumer's callbacks. cgo cannot call a C function
 * pointer directly, so each callback has a small C function that loads the
 * registered pointer and calls it.
 */
#ifndef ELASTICPS_CBRIDGE_SHIMS_H_
#define ELASTICPS_CBRIDGE_SHIMS_H_

#include "ps/internal/c_api.h"

void psb_on_simple(void *app, int is_request, int head, ps_cchar *body,
                   size_t body_len, int sender, int timestamp,
                   int customer_id);
void psb_kv_request(void *server, int cmd, int push, int pull, int sender,
                    int timestamp, int customer_id, int data_type,
                    int priority, uint64_t key, uint64_t addr,
                    int val_len, int option, ps_ckey *keys,
                    size_t num_keys, ps_cvoid *vals, size_t vals_bytes,
                    ps_cint *lens, size_t num_lens, uint64_t release);
void psb_set_lend_min(size_t n);
void psb_on_kv_done(void *ctx, int status, ps_cchar *err, size_t err_len,
                    ps_cvoid *vals, size_t vals_bytes, ps_cint *lens,
                    size_t num_lens);
void psb_on_message(void *customer, const ps_message *msg);
char *psb_on_kv_export(void *server, uint64_t begin, uint64_t end,
                       void **state, size_t *state_len);
char *psb_on_kv_import(void *server, ps_cvoid *state, size_t state_len);
void psb_free_kept(ps_kept_free free_kept, void *kept);
/* Non-zero while the calling thread runs a callback from Go. */
int psb_in_callback(void);

/* wait.c. A waiter word of ps_app_wait: WAITING, then how the request
 * ended: DONE (no error), FAILED (Wait asks Go for the error) or CLOSED
 * (the app was closed meanwhile). */
enum {
  PSB_WAIT_WAITING = 0,
  PSB_WAIT_DONE = 1,
  PSB_WAIT_FAILED = 2,
  PSB_WAIT_CLOSED = 3
};
/* Sets the waiter word to outcome. */
void psb_waiter_wake(void *waiter, uint32_t outcome);
extern int64_t psb_wait_spin_ns;

#endif

/*
 * C ABI of the elasticps bridge (libps.a / libps.so, built from Go).
 *
 * The C++ headers in include/ps are written entirely on top of these
 * functions; consumers normally never call them directly. The library holds
 * one node (the process-wide Postoffice of ps-lite) and any number of apps
 * (SimpleApp, KVWorker, KVServer, raw Customer), each named by an opaque
 * 64-bit handle.
 *
 * Conventions
 *  - Functions that can fail return a char* error message allocated with
 *    malloc, or NULL on success. Release it with ps_free.
 *  - Buffers passed in (keys, vals, lens, bodies, frames) are read during the
 *    call only, with one exception documented at ps_kv_worker_request: the
 *    buffers of a KVWorker operation with a completion context must stay
 *    valid and unchanged until its completion callback returns.
 *  - Buffers passed out through callbacks are valid only during the callback
 *    (copy what must outlive it), except those of a KV request delivered with
 *    a release token, which stay valid until ps_release is called.
 *  - Callbacks run on threads created by the library. A callback may call any
 *    function here, and may block, except that it must not close the app it
 *    was called for nor wait on a request of that same app (the app's
 *    messages are handled one at a time on one thread).
 *  - A callback must not let a C++ exception escape (the headers catch, log
 *    and abort, as ps-lite does for an uncaught exception in its threads).
 *
 * The const-qualified typedefs below exist so that the prototypes cgo
 * generates for the Go side (build/libps.h) are identical to these.
 */
#ifndef PS_INTERNAL_C_API_H_
#define PS_INTERNAL_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a function or struct below changes incompatibly. */
#define PS_CAPI_VERSION 2

/* Most data frames a message may carry (the transport's limit). */
#define PS_MAX_FRAMES 16

typedef const char ps_cchar;
typedef const void ps_cvoid;
typedef const uint64_t ps_ckey;
typedef const int ps_cint;

/* Node roles, with ps::Node::Role's values. */
enum {
  PS_ROLE_FROM_ENV = -1, /* take DMLC_ROLE */
  PS_ROLE_SERVER = 0,
  PS_ROLE_WORKER = 1,
  PS_ROLE_SCHEDULER = 2,
  PS_ROLE_JOINT = 3 /* BytePS fork: a server node and a worker node */
};

/* Status passed to on_kv_done. */
enum {
  PS_DONE_OK = 0,
  PS_DONE_ERROR = 1,    /* err holds the reason; the request is complete */
  PS_DONE_CANCELLED = 2 /* the app was closed first; do not run user code */
};

/* What the C++ Postoffice needs to know about this process's node. */
typedef struct ps_node_info {
  int role; /* PS_ROLE_* */
  int id;   /* node id, INT_MAX until registered */
  int customer_id;
  int port;
  int is_recovery;
  int ready; /* registered and connected (Start returned) */
  int num_workers;
  int num_servers;
  int verbose; /* PS_VERBOSE */
  char hostname[256];
} ps_node_info;

/* A KV request as a server sees it, and what Response needs to answer it. */
typedef struct ps_kv_meta {
  int cmd;
  int push;
  int pull;
  int sender;
  int timestamp;
  int customer_id;
  int data_type; /* ps::DataType of the values */
  int priority;
  /* The request's first key (0 without keys). With sender, customer_id
   * and timestamp it names the request: one worker operation may send a
   * server several requests (elastic mode routes parts of a server's key
   * range to other servers and back), all with one timestamp. */
  uint64_t key;
  /* The BytePS fork's request fields, as its KVWorker sent them (0 from a
   * worker that sets none, such as dmlc ps-lite's) and as a response
   * echoes them: the worker's buffer address (only the fork's RDMA vans
   * use it; elasticps workers send 0), the number of values (a push's, or
   * a pull's share of its destination; 0: a destination to be allocated),
   * and the fork's option. */
  uint64_t addr;
  int val_len;
  int option;
} ps_kv_meta;
typedef const ps_kv_meta ps_ckv_meta;

/* One KVWorker operation: Push (push=1), Pull (pull=1) or PushPull (both). */
/* One server's part of a KV request sliced by the consumer (a KVWorker's
 * set_slicer): the keys (and, for a push, values and optional lens) sent to
 * the server of rank `server`. The arrays are read as the request's own. */
typedef struct ps_kv_part {
  int server; /* rank: index into the server key ranges */
  ps_ckey *keys;
  size_t num_keys;
  ps_cvoid *vals;
  size_t vals_bytes;
  ps_cint *lens;
  size_t num_lens;
} ps_kv_part;

typedef struct ps_kv_request {
  int push;
  int pull;
  ps_ckey *keys; /* sorted ascending; repeats allowed */
  size_t num_keys;
  ps_cvoid *vals; /* push part; vals_bytes bytes */
  size_t vals_bytes;
  ps_cint *lens; /* optional: elements per key (sent with pushes) */
  size_t num_lens;
  int data_type; /* ps::DataType of the values */
  int cmd;
  int priority;
  int want_lens; /* pull: deliver the reply's lens to on_kv_done */
  /* Passed to on_kv_done when the operation completes; NULL means no
   * notification (allowed for pure pushes only). */
  void *done_ctx;
  /* Pull: when non-NULL, the reply's values are written straight into
   * these pull_dst_bytes bytes (a prefix of them, when the reply is
   * shorter), which must stay valid until the operation completes;
   * on_kv_done's vals then point to pull_dst. A longer reply fails the
   * operation. NULL: on_kv_done gets the values in library memory. */
  void *pull_dst;
  size_t pull_dst_bytes;
  /* With use_parts, the request is sent as these num_parts parts instead
   * of being sliced by the server key ranges (none: nothing is sent). A
   * pull's parts must share its keys out exactly once each, in key order
   * within a part; the reply is assembled in request key order. Refused in
   * an elastic job (PS_ELASTIC=1). */
  int use_parts;
  const ps_kv_part *parts;
  size_t num_parts;
} ps_kv_request;
typedef const ps_kv_request ps_ckv_request;

/* A raw ps-lite message (ps::Message), for ps::Customer and ps::Van::Send. */
typedef struct ps_message {
  int head;
  int app_id;
  int customer_id;
  int timestamp;
  int sender;
  int recver;
  int request;
  int push;
  int pull;
  int simple_app;
  int priority;
  ps_cchar *body;
  size_t body_len;
  int num_frames;
  ps_cvoid *frame_data[PS_MAX_FRAMES];
  size_t frame_size[PS_MAX_FRAMES];
  int frame_type[PS_MAX_FRAMES];
} ps_message;
typedef const ps_message ps_cmessage;

/* Frees what a caller lent the library (see ps_kv_server_response). */
typedef void (*ps_kept_free)(void *kept);

/* The functions the library calls back into the consumer's code. */
typedef struct ps_callbacks {
  size_t size; /* sizeof(ps_callbacks) */
  /* A SimpleApp request (is_request=1) or response for the app registered
   * with ctx `app`. */
  void (*on_simple)(void *app, int is_request, int head, ps_cchar *body,
                    size_t body_len, int sender, int timestamp,
                    int customer_id);
  /* A KV request for the server registered with ctx `server`. With
   * release == 0 the frames are views valid during the call. Otherwise
   * (large requests) the callee takes them over: they stay valid, and may
   * be modified, until it calls ps_release(release) exactly once. */
  void (*on_kv_request)(void *server, const ps_kv_meta *meta, ps_ckey *keys,
                        size_t num_keys, ps_cvoid *vals, size_t vals_bytes,
                        ps_cint *lens, size_t num_lens, uint64_t release);
  /* Completion of a KVWorker operation (ctx = its done_ctx), called exactly
   * once. For pulls, vals/lens are the assembled reply (views valid during
   * the call; lens only if want_lens). The request counts as finished, and
   * Wait returns, only after this returns. */
  void (*on_kv_done)(void *ctx, int status, ps_cchar *err, size_t err_len,
                     ps_cvoid *vals, size_t vals_bytes, ps_cint *lens,
                     size_t num_lens);
  /* A message for the raw customer registered with ctx `customer`. */
  void (*on_message)(void *customer, const ps_message *msg);
  /* Elastic hand-over of a KVServer's state, for servers that enabled it
   * with ps_kv_server_set_migration (ctx `server` as for on_kv_request).
   * Both run on a library thread, concurrently with on_kv_request for
   * other keys, and are all or nothing. on_kv_export serializes every key
   * of [begin, end) and forgets them: it returns NULL with *state set to
   * a malloc'd buffer of *state_len bytes (the library frees it), or a
   * malloc'd error message having kept every key. on_kv_import installs
   * such a state: NULL, or a malloc'd error having installed nothing. */
  char *(*on_kv_export)(void *server, uint64_t begin, uint64_t end,
                        void **state, size_t *state_len);
  char *(*on_kv_import)(void *server, ps_cvoid *state, size_t state_len);
} ps_callbacks;

#ifndef PS_CAPI_NO_PROTOTYPES

/* --- process --------------------------------------------------------- */

/* Installs the callbacks (copied). Call before creating any app. */
void ps_register_callbacks(const ps_callbacks *cb);
/* Releases memory returned by the library. */
void ps_free(void *p);
/* Gives back the buffers of a KV request delivered with this release token
 * (see on_kv_request). May be called from any thread. */
void ps_release(uint64_t release);
/* ps::Environment::Init: these values take precedence over getenv. A NULL
 * value removes the key. ps_env_clear removes all. */
void ps_env_set(ps_cchar *key, ps_cchar *value);
void ps_env_clear(void);
/* Logs one line of C++ code (dmlc/logging.h's LOG and CHECK) in the format
 * of the job's Go nodes. severity: 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL;
 * msg is len bytes, not necessarily NUL-terminated. */
void ps_log(int severity, ps_cchar *file, int line, ps_cchar *msg, size_t len);

/* --- the node (ps::Postoffice) --------------------------------------- */

/* Creates the node from the environment if it does not exist yet. role
 * (PS_ROLE_*) overrides DMLC_ROLE, as the BytePS fork's StartPS does. */
char *ps_node_init(int role);
/* ps::Start / StartAsync / StartPS: registers customer_id with the job and
 * blocks until every node has; then a barrier on all nodes if do_barrier. */
char *ps_node_start(int customer_id, int role, int do_barrier);
/* ps_node_start asking for rank (the BytePS fork's StartPS(..., rank, ...);
 * -1: none, DMLC_RANK if set); with DMLC_GROUP_SIZE > 1 instance i asks
 * for rank * DMLC_GROUP_SIZE + i. Every instance starts. */
char *ps_node_start_rank(int customer_id, int role, int rank, int do_barrier);
/* DMLC_GROUP_SIZE: the instances of each of the process's nodes (1 if
 * the node cannot be created). */
int ps_node_group_size(void);
/* ps::Finalize: optional barrier; customer 0 then stops the node. */
char *ps_node_finalize(int customer_id, int do_barrier);
/* Node slots (the slot argument below): PS_SLOT_MAIN is the process's
 * node (a JOINT process's server node), PS_SLOT_WORKER a JOINT process's
 * worker node and the main node in any other process. With
 * DMLC_GROUP_SIZE > 1, slot + 2*i names instance i of either. */
enum { PS_SLOT_MAIN = 0, PS_SLOT_WORKER = 1 };
/* Whether the process is JOINT (its nodes, or DMLC_ROLE before they
 * exist). */
int ps_node_is_joint(void);
/* ps::Postoffice::Barrier. */
char *ps_node_barrier(int slot, int customer_id, int group);
/* Fills *out, creating the node if needed. */
char *ps_node_info_get(int slot, ps_node_info *out);
/* Node ids of group (1-7) or of one node id: up to cap ids into ids, the
 * total into *count (-1 if group names nothing in this job). */
char *ps_node_group(int slot, int group, int *ids, int cap, int *count);
/* ps::Postoffice::GetServerKeyRanges: up to cap ranges, total in *count. */
char *ps_node_key_ranges(uint64_t *begins, uint64_t *ends, int cap,
                         int *count);
/* ps::Postoffice::GetDeadNodes(timeout_sec): up to cap ids; returns the
 * total (0 if there is no node). */
int ps_node_dead_nodes(int timeout_sec, int *ids, int cap);
/* ps::Van::GetTimestamp. */
int ps_node_next_timestamp(void);
/* ps::Van::Send of a data message; *bytes receives the bytes sent. */
char *ps_van_send(ps_cmessage *msg, int *bytes);

/* --- apps ------------------------------------------------------------ */

/* Creates an app and returns its handle. `app` is the ctx of on_simple;
 * `server` the ctx of on_kv_request; `customer` the ctx of on_message. */
char *ps_app_new_simple(int app_id, int customer_id, void *app,
                        uint64_t *handle);
char *ps_app_new_kv_worker(int app_id, int customer_id, void *app,
                           uint64_t *handle);
char *ps_app_new_kv_server(int app_id, void *app, void *server,
                           uint64_t *handle);
/* The two above on instance `instance` (0 to DMLC_GROUP_SIZE-1) of the
 * process's worker or server node. */
char *ps_app_new_kv_worker_instance(int app_id, int customer_id, int instance,
                                    void *app, uint64_t *handle);
char *ps_app_new_kv_server_instance(int app_id, int instance, void *app,
                                    void *server, uint64_t *handle);
char *ps_app_new_customer(int app_id, int customer_id, void *customer,
                          uint64_t *handle);
/* Unregisters the app and waits until none of its callbacks runs; then
 * reports every unfinished KVWorker operation as PS_DONE_CANCELLED. */
void ps_app_close(uint64_t handle);
/* Customer::WaitRequest: blocks until request ts has completed. Errors
 * already reported through on_kv_done are not repeated. For the app's
 * only request in flight it may first spin for up to PS_WAIT_SPIN_US
 * microseconds (see README.md, "Threads and callbacks"). */
char *ps_app_wait(uint64_t handle, int timestamp);
/* Customer::NewRequest / NumResponse / AddResponse. NumResponse returns -1
 * for a request that has completed. */
int ps_app_new_request(uint64_t handle, int group);
int ps_app_num_response(uint64_t handle, int timestamp);
void ps_app_add_response(uint64_t handle, int timestamp, int num);

/* SimpleApp::Request to every node of group; *timestamp receives the
 * request's timestamp (-1 if nothing was sent). */
char *ps_simple_request(uint64_t handle, int head, ps_cchar *body,
                        size_t body_len, int group, int *timestamp);
/* SimpleApp::Response to a request. */
char *ps_simple_response(uint64_t handle, int head, ps_cchar *body,
                         size_t body_len, int recver, int timestamp,
                         int customer_id);

/* KVWorker Push/Pull/PushPull. On success *timestamp is the operation's
 * timestamp and done_ctx (if any) will be passed to on_kv_done exactly once
 * -- possibly before this function returns, when there is nothing to send.
 * On error *timestamp is -1, nothing was sent and done_ctx is never used.
 * Lifetime: with done_ctx, keys, vals and lens are used without a copy
 * (sent by reference, as ps-lite's ZPush does) and must stay valid and
 * unchanged until on_kv_done returns; without, they are copied during the
 * call. */
char *ps_kv_worker_request(uint64_t handle, ps_ckv_request *req,
                           int *timestamp);
/* NULL when the worker may slice its own requests (use_parts), else why
 * not (an elastic job's routing table owns the key ranges). */
char *ps_kv_worker_slicer_allowed(uint64_t handle);
/* KVServer::Response to the request described by req (from on_kv_request);
 * may be called from any thread, once per request. With free_kept NULL the
 * arrays are read during the call only. Otherwise they may be sent by
 * reference, as ps-lite's ZeroMQ van does: the library calls
 * free_kept(kept) exactly once when it reads them no more (before
 * returning, or later from a library thread), and they must stay valid and
 * unchanged until then. */
char *ps_kv_server_response(uint64_t handle, ps_ckv_meta *req, ps_ckey *keys,
                            size_t num_keys, ps_cvoid *vals,
                            size_t vals_bytes, ps_cint *lens,
                            size_t num_lens, ps_kept_free free_kept,
                            void *kept);

/* The size from which ps_kv_server_response may send an array by
 * reference: when keys, vals and lens are each shorter, the library copies
 * them during the call and free_kept may be NULL at no cost (sending a
 * small array by reference costs more than copying it). Fixed once the
 * node has started; (size_t)-1 before. A plain C function: no call into
 * the Go runtime. */
size_t ps_kv_response_lend_min(void);

/* Elastic mode (PS_ELASTIC=1): with enable != 0 the server's state moves
 * between servers through on_kv_export / on_kv_import; with 0, through the
 * generic capture-and-install hand-over (the default). Without elastic
 * mode nothing ever moves and this does nothing. Any time after
 * ps_app_new_kv_server, before or after the node starts. */
char *ps_kv_server_set_migration(uint64_t handle, int enable);

#endif /* PS_CAPI_NO_PROTOTYPES */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PS_INTERNAL_C_API_H_ */

/*
 * Key-value apps: KVWorker pushes values to and pulls them from the
 * servers; KVServer handles those requests with a user handler.
 *
 * Keys are partitioned over the servers by GetServerKeyRanges() (server i
 * gets the keys in range i), or by a KVWorker's set_slicer. A request's
 * keys must be sorted ascending.
 * Values of key i are vals[i*k .. (i+1)*k) with k = vals.size()/keys.size(),
 * or, with lens, lens[i] consecutive values.
 */
#ifndef PS_KV_APP_H_
#define PS_KV_APP_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ps/base.h"
#include "ps/internal/bridge.h"
#include "ps/simple_app.h"

namespace ps {

/* A list of keys with their values and, optionally, value lengths. */
template <typename Val>
struct KVPairs {
  SArray<Key> keys;
  SArray<Val> vals;
  SArray<int> lens;  // elements per key; empty: all keys have the same
  int priority = 0;
};

/* A KV request as a server handler sees it; Response needs it back. */
struct KVMeta {
  int cmd;          // the worker's cmd argument
  bool push;        // the request carries values to store
  bool pull;        // the request wants values back (both: push-pull)
  int sender;       // the worker's node id
  int timestamp;    // the worker's request timestamp
  int customer_id;  // the worker's customer id
  // BytePS fork fields. key is the request's first key, as the fork's RDMA
  // vans set it (Response needs it unchanged: a worker operation may send
  // one server several requests, told apart by their first keys). addr,
  // val_len and option are what the worker sent (the fork's KVWorker, or
  // an elasticps one: addr 0, option 0) and Response echoes them: val_len
  // is the number of values of a push, or for a pull its share of the
  // worker's destination (0: to be allocated). A push from a worker that
  // sends none (dmlc ps-lite) has its own count.
  Key key = 0;
  uint64_t addr = 0;
  int val_len = 0;
  int option = 0;
};

namespace detail {

/* The DataType used for a KVWorker<Val>/KVServer<Val>'s values. The
 * library sizes elements by their tag, so a type without a tag of its own
 * (OTHER) is sent under the unsigned tag of its size; plain char stays
 * OTHER, as in ps-lite. */
template <typename Val>
inline int ValueTag() {
  DataType t = GetDataType<Val>();
  if (t != OTHER) return t;
  switch (sizeof(Val)) {
    case 1: return OTHER;
    case 2: return UINT16;
    case 4: return UINT32;
    case 8: return UINT64;
    default:
      LOG(FATAL) << "KVWorker/KVServer values must be 1, 2, 4 or 8 bytes "
                 << "(this type has " << sizeof(Val) << ")";
  }
  return OTHER;
}

}  // namespace detail

template <typename Val>
class KVWorker : public SimpleApp {
 public:
  using SimpleApp::obj_;

  /* Runs when an operation has completed: pushed values are stored at the
   * servers, or pulled values are in the destination. */
  using Callback = std::function<void()>;

  /* BytePS fork: pulls are written in place by an RDMA transport. Always
   * false here: pulled values are copied into the destination. */
  bool is_worker_zpull_ = false;

  /* Registers customer (app_id, customer_id); app_id must match the
   * servers'. instance_idx (BytePS fork) is the instance of the process's
   * worker node (DMLC_GROUP_SIZE), which talks to the same instance of
   * every server. */
  explicit KVWorker(int app_id, int customer_id, int instance_idx = 0)
      : SimpleApp(), tag_(detail::ValueTag<Val>()) {
    uint64_t handle = 0;
    detail::CheckOK(ps_app_new_kv_worker_instance(app_id, customer_id,
                                                  instance_idx,
                                                  simple_receiver(), &handle),
                    "KVWorker");
    obj_ = new Customer(detail::AdoptApp(), app_id, customer_id, handle);
  }

  /* Unregisters; operations still outstanding never call back. */
  virtual ~KVWorker() {
    delete obj_;
    obj_ = nullptr;
  }

  /* Pushes keys/vals (copied first). Returns the timestamp for Wait. */
  int Push(const std::vector<Key>& keys, const std::vector<Val>& vals,
           const std::vector<int>& lens = {}, int cmd = 0,
           const Callback& cb = nullptr, int priority = 0) {
    return ZPush(SArray<Key>(keys), SArray<Val>(vals), SArray<int>(lens), cmd,
                 cb, priority);
  }

  /* Pulls the values of keys into *vals (and their lengths into *lens).
   * An empty destination is resized; otherwise it must be large enough.
   * They are filled when Wait returns or cb runs. */
  int Pull(const std::vector<Key>& keys, std::vector<Val>* vals,
           std::vector<int>* lens = nullptr, int cmd = 0,
           const Callback& cb = nullptr, int priority = 0) {
    CHECK_NOTNULL(vals);
    SArray<Key> skeys(keys);
    return Issue(false, true, lens != nullptr,
                 new PullOp<std::vector<Val>, std::vector<int>>(
                     skeys, SArray<Val>(), SArray<int>(), vals, lens, cb),
                 cmd, priority);
  }

  /* Pushes vals and pulls the result into *outs in one round trip. *lens,
   * if given and non-empty, is sent with the push and receives the reply's
   * lengths. */
  int PushPull(const std::vector<Key>& keys, const std::vector<Val>& vals,
               std::vector<Val>* outs, std::vector<int>* lens = nullptr,
               int cmd = 0, const Callback& cb = nullptr, int priority = 0) {
    CHECK_NOTNULL(outs);
    if (outs->empty()) {
      outs->resize(vals.size());
    } else {
      CHECK_EQ(vals.size(), outs->size());
    }
    SArray<Key> skeys(keys);
    SArray<int> slens;
    if (lens != nullptr) slens = SArray<int>(*lens);
    return Issue(true, true, lens != nullptr,
                 new PullOp<std::vector<Val>, std::vector<int>>(
                     skeys, SArray<Val>(vals), slens, outs, lens, cb),
                 cmd, priority);
  }

  /* Blocks until operation timestamp has completed and its callback has
   * run. */
  void Wait(int timestamp) { obj_->WaitRequest(timestamp); }

  /* Push without copying: keys, vals and lens are sent as they are and
   * must stay unchanged until the operation completes (the operation keeps
   * a reference to them until then). */
  int ZPush(const SArray<Key>& keys, const SArray<Val>& vals,
            const SArray<int>& lens = {}, int cmd = 0,
            const Callback& cb = nullptr, int priority = 0) {
    return Issue(true, false, false, new PushOp(keys, vals, lens, cb), cmd,
                 priority);
  }

  /* Pull into *vals (and *lens) without an intermediate array. */
  int ZPull(const SArray<Key>& keys, SArray<Val>* vals,
            SArray<int>* lens = nullptr, int cmd = 0,
            const Callback& cb = nullptr, int priority = 0) {
    CHECK_NOTNULL(vals);
    return Issue(false, true, lens != nullptr,
                 new PullOp<SArray<Val>, SArray<int>>(
                     keys, SArray<Val>(), SArray<int>(), vals, lens, cb),
                 cmd, priority);
  }

  /* Push vals and pull the result into *outs (may be &vals). *lens, if
   * given and non-empty, is sent and receives the reply's lengths. */
  int ZPushPull(const SArray<Key>& keys, const SArray<Val>& vals,
                SArray<Val>* outs, SArray<int>* lens = nullptr, int cmd = 0,
                const Callback& cb = nullptr, int priority = 0) {
    CHECK_NOTNULL(outs);
    SArray<int> slens;
    if (lens != nullptr) slens = *lens;
    return Issue(true, true, lens != nullptr,
                 new PullOp<SArray<Val>, SArray<int>>(keys, vals, slens, outs,
                                                      lens, cb),
                 cmd, priority);
  }

  using SlicedKVs = std::vector<std::pair<bool, KVPairs<Val>>>;
  using Slicer = std::function<void(const KVPairs<Val>& send,
                                    const std::vector<Range>& ranges,
                                    SlicedKVs* sliced)>;

  /* A custom slicer decides which server gets which part of each later
   * Push/Pull: it gets the operation's keys (and, for a push, vals and
   * lens; a pull's vals are empty) and the server key ranges, and fills
   * sliced with one entry per server rank (first: send it; second: the
   * keys, vals and lens for that server). The parts are sent by reference
   * and kept until the operation completes. Unlike ps-lite, a part need
   * not be a contiguous run of keys: a pull's parts must share its keys
   * out exactly once each (in key order within a part), and the pulled
   * values arrive in request key order whichever server held them. A
   * null slicer restores slicing by GetServerKeyRanges(). Refused
   * (fatal) in an elastic job (PS_ELASTIC=1), whose routing table moves
   * key ranges between servers. */
  void set_slicer(const Slicer& slicer) {
    if (slicer) {
      detail::CheckOK(ps_kv_worker_slicer_allowed(obj_->bridge_handle()),
                      "KVWorker::set_slicer");
    }
    std::lock_guard<std::mutex> lk(slicer_mu_);
    slicer_ = slicer;
  }

 private:
  /* An operation's request: the library sends these arrays by reference
   * and may read them until the operation completes, so the operation
   * holds them until then. */
  class RequestOp : public detail::KVOp {
   public:
    RequestOp(const SArray<Key>& keys, const SArray<Val>& vals,
              const SArray<int>& lens, const Callback& cb)
        : keys_(keys), vals_(vals), lens_(lens), cb_(cb) {}
    SArray<Key> keys_;
    SArray<Val> vals_;
    SArray<int> lens_;
    SlicedKVs sliced_;  // set_slicer's parts, sent by reference

    /* Memory the library may write the pull reply into; nullptr: none. */
    virtual void* PullDst(size_t* bytes) {
      *bytes = 0;
      return nullptr;
    }

   protected:
    Callback cb_;
  };

  /* A push. */
  class PushOp : public RequestOp {
   public:
    PushOp(const SArray<Key>& keys, const SArray<Val>& vals,
           const SArray<int>& lens, const Callback& cb)
        : RequestOp(keys, vals, lens, cb) {}
    void Done(int status, const std::string&, const void*, size_t, const int*,
              size_t) override {
      // After a failure (already logged by the library) the callback still
      // runs, so that nothing waiting on it is stranded; ps-lite would have
      // aborted instead.
      if (status != PS_DONE_CANCELLED && this->cb_) this->cb_();
    }
  };

  /* A pull (or push-pull) into a destination C (SArray<Val> or
   * std::vector<Val>) and optional lengths D. */
  template <typename C, typename D>
  class PullOp : public RequestOp {
   public:
    PullOp(const SArray<Key>& keys, const SArray<Val>& push_vals,
           const SArray<int>& push_lens, C* vals, D* lens, const Callback& cb)
        : RequestOp(keys, push_vals, push_lens, cb), dst_(vals), dst_lens_(lens) {}
    void Done(int status, const std::string&, const void* vals,
              size_t vals_bytes, const int* lens, size_t num_lens) override {
      if (status == PS_DONE_CANCELLED) return;
      if (status == PS_DONE_OK) Fill(vals, vals_bytes, lens, num_lens);
      if (this->cb_) this->cb_();
    }

   private:
    // Copies the reply into the destination: an empty one is resized; a
    // larger one keeps its tail (BytePS compressed pulls return fewer
    // values than the buffer holds); a smaller one is an error, logged,
    // and left unchanged.
    void Fill(const void* vals, size_t vals_bytes, const int* lens,
              size_t num_lens) {
      if (vals_bytes % sizeof(Val) != 0) {
        LOG(ERROR) << "KVWorker pull: " << vals_bytes
                   << " bytes of values is not a whole number of "
                   << sizeof(Val) << "-byte values; destination unchanged";
        return;
      }
      size_t n = vals_bytes / sizeof(Val);
      if (dst_->empty()) {
        dst_->resize(n);
      } else if (dst_->size() < n) {
        LOG(ERROR) << "KVWorker pull: the servers returned " << n
                   << " values but the destination holds " << dst_->size()
                   << "; destination unchanged";
        return;
      }
      // Written in place already when the destination was sized (PullDst).
      if (n > 0 && vals != dst_->data()) memcpy(dst_->data(), vals, vals_bytes);
      if (dst_lens_ == nullptr) return;
      if (dst_lens_->empty()) {
        dst_lens_->resize(num_lens);
      } else if (dst_lens_->size() != num_lens) {
        LOG(ERROR) << "KVWorker pull: " << num_lens
                   << " lengths returned but the lens destination holds "
                   << dst_lens_->size() << "; lens unchanged";
        return;
      }
      if (num_lens > 0) {
        memcpy(dst_lens_->data(), lens, num_lens * sizeof(int));
      }
    }

    /* A sized destination receives the reply in place (no copy in Fill);
     * an empty one is sized by Fill. */
    void* PullDst(size_t* bytes) override {
      *bytes = dst_->size() * sizeof(Val);
      return dst_->empty() ? nullptr : dst_->data();
    }

    C* dst_;
    D* dst_lens_;
  };

  /* Hands one operation to the library, which owns op from here on (and
   * deletes it after Done) unless nothing was issued. */
  int Issue(bool push, bool pull, bool want_lens, RequestOp* op, int cmd,
            int priority) {
    ps_kv_request r;
    memset(&r, 0, sizeof(r));
    r.push = push;
    r.pull = pull;
    r.keys = op->keys_.data();
    r.num_keys = op->keys_.size();
    r.vals = op->vals_.data();
    r.vals_bytes = op->vals_.size() * sizeof(Val);
    r.lens = op->lens_.data();
    r.num_lens = op->lens_.size();
    r.data_type = tag_;
    r.cmd = cmd;
    r.priority = priority;
    r.want_lens = want_lens;
    r.done_ctx = static_cast<detail::KVOp*>(op);
    if (pull) r.pull_dst = op->PullDst(&r.pull_dst_bytes);
    std::vector<ps_kv_part> parts;
    if (Slice(push, op, &parts)) {
      r.use_parts = 1;
      r.parts = parts.data();
      r.num_parts = parts.size();
    }
    int ts = -1;
    char* err = ps_kv_worker_request(obj_->bridge_handle(), &r, &ts);
    // From here op may already be deleted (completed at once).
    if (ts < 0) {
      delete op;
      if (err == nullptr) LOG(FATAL) << "KVWorker: request not issued";
      detail::CheckOK(err, "KVWorker");
    }
    detail::LogIfError(err, "KVWorker");
    return ts;
  }

  /* Runs the custom slicer, if any, on op's request into op->sliced_
   * and lists the parts to send in *parts. */
  bool Slice(bool push, RequestOp* op, std::vector<ps_kv_part>* parts) {
    Slicer slicer;
    {
      std::lock_guard<std::mutex> lk(slicer_mu_);
      slicer = slicer_;
    }
    if (!slicer) return false;
    KVPairs<Val> send;
    send.keys = op->keys_;
    if (push) {
      send.vals = op->vals_;
      send.lens = op->lens_;
    }
    const std::vector<Range>& ranges =
        Postoffice::Get()->GetServerKeyRanges();
    slicer(send, ranges, &op->sliced_);
    CHECK_LE(op->sliced_.size(), ranges.size())
        << "KVWorker slicer: " << op->sliced_.size() << " parts for "
        << ranges.size() << " servers (sliced[i] is server rank i's part)";
    for (size_t i = 0; i < op->sliced_.size(); ++i) {
      const auto& s = op->sliced_[i];
      if (!s.first || s.second.keys.empty()) continue;
      ps_kv_part p;
      memset(&p, 0, sizeof(p));
      p.server = static_cast<int>(i);
      p.keys = s.second.keys.data();
      p.num_keys = s.second.keys.size();
      if (push) {
        p.vals = s.second.vals.data();
        p.vals_bytes = s.second.vals.size() * sizeof(Val);
        p.lens = s.second.lens.data();
        p.num_lens = s.second.lens.size();
      }
      parts->push_back(p);
    }
    return true;
  }

  int tag_;
  std::mutex slicer_mu_;
  Slicer slicer_;
};

template <typename Val>
struct KVServerDefaultHandle;

template <typename Val>
class KVServer : public SimpleApp, private detail::KVRequestReceiver {
 public:
  /* Registers the server of app_id (customer id == app id). is_scheduler
   * and instance_idx (BytePS fork) select the Postoffice: instance
   * instance_idx of the process's server node (DMLC_GROUP_SIZE). Its
   * requests name the worker's process as KVMeta::sender (instance 0's id),
   * as the fork's do. */
  explicit KVServer(int app_id, bool is_scheduler = false,
                    int instance_idx = 0)
      : SimpleApp(), instance_idx_(instance_idx),
        tag_(detail::ValueTag<Val>()) {
    (void)is_scheduler;
    uint64_t handle = 0;
    detail::CheckOK(
        ps_app_new_kv_server_instance(
            app_id, instance_idx, simple_receiver(),
            static_cast<detail::KVRequestReceiver*>(this), &handle),
        "KVServer");
    obj_ = new Customer(detail::AdoptApp(), app_id, app_id, handle);
  }

  /* Unregisters; no handler runs after this returns. */
  virtual ~KVServer() {
    {
      // Requests still waiting for a handler give up (see set_request_handle).
      std::lock_guard<std::mutex> lk(mu_);
      closing_ = true;
      handle_cv_.notify_all();
    }
    delete obj_;
    obj_ = nullptr;
  }

  using ReqHandle = std::function<void(const KVMeta& req_meta,
                                       const KVPairs<Val>& req_data,
                                       KVServer* server)>;

  /* The request handler. It runs on the server's receive thread, one
   * request at a time, and must make sure Response is called once per
   * request (it may be later, from any thread). Requests that arrive before
   * a handler is set wait for it. A KVServerDefaultHandle brings its own
   * migration handle (see set_migration_handle) unless one was set. */
  void set_request_handle(const ReqHandle& request_handle) {
    CHECK(request_handle) << "invalid request handle";
    std::lock_guard<std::mutex> lk(mu_);
    handle_ = std::make_shared<ReqHandle>(request_handle);
    default_store_ = handle_->template target<KVServerDefaultHandle<Val>>();
    if (!user_migration_) {
      migration_.reset();
      if (default_store_ != nullptr) migration_ = DefaultMigration(handle_);
      SetMigration();
    }
    handle_cv_.notify_all();
  }

  /* elasticps: serializes the server's state of every key in [begin, end)
   * -- the values and anything else kept per key (optimizer state such as
   * momentum, counters) -- and forgets those keys: the server no longer
   * serves them. */
  using ExportHandle = std::function<std::string(Key begin, Key end)>;
  /* elasticps: installs a state made by an ExportHandle (of this program,
   * on another server or on this one earlier). */
  using ImportHandle = std::function<void(const std::string& state)>;

  /* elasticps: the server's state hook, for elastic jobs (PS_ELASTIC=1).
   * export_handle hands a key range's state out of this server,
   * import_handle installs such a state; the library calls them
   *
   *  - to move a range (rebalancing, scale-out, scale-in: `elasticps ctl
   *    move`): the old owner exports, the new owner imports;
   *  - with PS_REPLICAS=k, to copy a range to a backup: the primary
   *    exports and at once imports the state back (it keeps serving the
   *    keys), the backup exports what it held of the range (its old copy,
   *    dropped) and imports the primary's. Pushes after the copy are
   *    applied on the backup by calling the request handler with them
   *    (their KVMeta's sender is this server's own node id, timestamp -1),
   *    and are answered to the worker only once every backup has: when
   *    the primary dies, a backup takes its ranges over and no
   *    acknowledged push is lost.
   *
   * Without a hook (or after set_migration_handle(nullptr, nullptr)) a
   * move carries values only, pulled through the request handler and
   * pushed into the new owner's -- which cannot carry state beside the
   * values nor bring keys back to a server that held them (such moves are
   * refused) -- and the server's ranges are not replicated: the first
   * request logs one warning saying so. A KVServerDefaultHandle has a hook
   * of its own unless one is set.
   *
   * Both run on a library thread, concurrently with the request handler
   * for other keys (never with a request for the keys they hand over,
   * which waits), and never two at once for overlapping keys: guard what
   * they share with the handler. They must not call Response, Wait or
   * anything else of this KVServer, nor wait for a request to arrive.
   * Each must be all or nothing: throw to fail, having kept every key
   * (export) or installed none (import); the move or copy is then undone
   * and nothing is lost. Export may be asked for keys the server never
   * held (return an empty state). With PS_REPLICAS, the request handler
   * must answer every push without waiting for other requests (a backup
   * applies forwarded pushes one at a time): a handler that merges each
   * round's pushes before answering cannot be replicated.
   *
   * Set them before Start (they may be set or changed any time; the
   * warning above reflects the handles at the first request). Without
   * PS_ELASTIC nothing moves and they are never called. */
  void set_migration_handle(const ExportHandle& export_handle,
                            const ImportHandle& import_handle) {
    CHECK_EQ(static_cast<bool>(export_handle),
             static_cast<bool>(import_handle))
        << "set both migration handles, or neither";
    std::lock_guard<std::mutex> lk(mu_);
    migration_.reset();
    user_migration_ = static_cast<bool>(export_handle);
    if (user_migration_) {
      migration_ = std::make_shared<Migration>();
      migration_->export_state = export_handle;
      migration_->import_state = import_handle;
    } else if (default_store_ != nullptr) {
      migration_ = DefaultMigration(handle_);
    }
    SetMigration();
  }

  /* Answers req with res (keys, vals and optional lens; empty for a push
   * acknowledgement). Thread-safe. As with ps-lite's ZeroMQ van, large
   * arrays are sent by reference: the response keeps its own copy of res's
   * SArrays (so memory they own stays alive) until the library has sent
   * them, and memory they merely view must stay unchanged until the worker
   * has the response. */
  void Response(const KVMeta& req, const KVPairs<Val>& res = KVPairs<Val>()) {
    ps_kv_meta m;
    memset(&m, 0, sizeof(m));
    m.cmd = req.cmd;
    m.push = req.push;
    m.pull = req.pull;
    m.sender = req.sender;
    m.timestamp = req.timestamp;
    m.customer_id = req.customer_id;
    m.data_type = tag_;
    m.key = req.key;
    m.addr = req.addr;
    m.val_len = req.val_len;
    m.option = req.option;
    // Arrays the library may read after the call are lent: the response
    // keeps a copy of res (its SArrays' memory) until FreeKept. Shorter
    // ones are copied during the call, and nothing is kept.
    const size_t lend_min = ps_kv_response_lend_min();
    const bool lend = res.keys.size() * sizeof(Key) >= lend_min ||
                      res.vals.size() * sizeof(Val) >= lend_min ||
                      res.lens.size() * sizeof(int) >= lend_min;
    KVPairs<Val>* kept = lend ? new KVPairs<Val>(res) : nullptr;
    const KVPairs<Val>& out = lend ? *kept : res;
    detail::LogIfError(
        ps_kv_server_response(obj_->bridge_handle(), &m, out.keys.data(),
                              out.keys.size(), out.vals.data(),
                              out.vals.size() * sizeof(Val), out.lens.data(),
                              out.lens.size(),
                              lend ? &KVServer::FreeKept : nullptr, kept),
        "KVServer::Response");
  }

  /* BytePS fork: the values of every later push from node worker_id (with
   * instance groups, the id of the worker instance that talks to this
   * server instance: GroupWorkerRankToInstanceID(rank, instance_idx_))
   * whose first key is keys[0] are received into vals instead of new
   * memory: the
   * handler's req_data.vals is then a view of vals (same data()), as the
   * fork's transports deliver them. The library copies them in once from
   * its receive buffer (no transport here writes into user memory). A push
   * with more values than vals holds is received into new memory, with a
   * warning (the fork aborts). Registering again replaces the buffer; vals
   * is shared, so it stays valid as long as the server needs it. lens and
   * cmd are accepted for the fork's signature and not used. Deprecated in
   * the fork in favour of RegisterRecvBufferWithRank. */
  void RegisterRecvBuffer(int worker_id, SArray<Key>& keys,
                          const SArray<Val>& vals,
                          const SArray<int>& lens = {}, int cmd = 0) {
    (void)lens;
    (void)cmd;
    CHECK(!keys.empty()) << "RegisterRecvBuffer needs the requests' first key";
    std::lock_guard<std::mutex> lk(mu_);
    recv_buffers_[std::make_pair(worker_id, keys[0])] = RecvBuffer{vals, false};
  }

  /* BytePS fork: RegisterRecvBuffer for the worker process of rank
   * worker_rank (with instance groups, its instance instance_idx_). */
  void RegisterRecvBufferWithRank(int worker_rank, SArray<Key>& keys,
                                  const SArray<Val>& vals,
                                  const SArray<int>& lens = {}, int cmd = 0) {
    RegisterRecvBuffer(InstanceWorkerID(worker_rank), keys, vals, lens, cmd);
  }

  int instance_idx_;  // BytePS fork

 private:
  /* The node id of instance instance_idx_ of the worker process of rank
   * worker_rank: the worker instance this server instance hears from. */
  int InstanceWorkerID(int worker_rank) const {
    return Postoffice::Get()->GroupWorkerRankToInstanceID(worker_rank,
                                                          instance_idx_);
  }

  /* Ends a response's hold on its arrays (see Response). */
  static void FreeKept(void* kept) { delete static_cast<KVPairs<Val>*>(kept); }

  void ReceiveKVRequest(
      const ps_kv_meta& m, const uint64_t* keys, size_t num_keys,
      const void* vals, size_t vals_bytes, const int* lens, size_t num_lens,
      const std::shared_ptr<detail::HeldBuffers>& held) override {
    KVMeta meta;
    meta.cmd = m.cmd;
    meta.push = m.push != 0;
    meta.pull = m.pull != 0;
    meta.sender = m.sender;
    meta.timestamp = m.timestamp;
    meta.customer_id = m.customer_id;
    meta.key = num_keys > 0 ? keys[0] : 0;
    meta.addr = m.addr;
    // the worker's count; a push from a worker that sends none (dmlc
    // ps-lite) gets its own
    meta.val_len = m.val_len != 0 || !meta.push
                       ? m.val_len
                       : static_cast<int>(vals_bytes / sizeof(Val));
    meta.option = m.option;

    if (vals_bytes % sizeof(Val) != 0) {
      LOG(ERROR) << "KVServer: a request from node " << m.sender << " has "
                 << vals_bytes << " bytes of values, not a whole number of "
                 << sizeof(Val) << "-byte values; the tail is dropped";
      vals_bytes -= vals_bytes % sizeof(Val);
    }
    KVPairs<Val> data;
    Adopt(keys, num_keys, vals, vals_bytes, lens, num_lens, m, held, &data);

    std::shared_ptr<ReqHandle> h;
    KVServerDefaultHandle<Val>* store = nullptr;
    {
      std::unique_lock<std::mutex> lk(mu_);
      while (!handle_ && !closing_) {
        if (!handle_cv_.wait_for(lk, std::chrono::seconds(10), [this] {
              return handle_ != nullptr || closing_;
            })) {
          LOG(WARNING) << "KVServer: requests are waiting for "
                       << "set_request_handle";
        }
      }
      h = handle_;
      store = default_store_;
    }
    if (!h) {
      LOG(WARNING) << "KVServer: a request from node " << m.sender
                   << " was dropped: the server was deleted before "
                   << "set_request_handle";
      return;
    }
    if (store != nullptr) {
      // the default handle's store is shared with its migration handle
      std::lock_guard<std::mutex> lk(store_mu_);
      (*h)(meta, data, this);
      return;
    }
    (*h)(meta, data, this);
  }

  struct Migration {
    ExportHandle export_state;
    ImportHandle import_state;
  };

  std::shared_ptr<Migration> CurrentMigration() {
    std::lock_guard<std::mutex> lk(mu_);
    return migration_;
  }

  std::string ExportState(uint64_t begin, uint64_t end) override {
    std::shared_ptr<Migration> m = CurrentMigration();
    if (!m) throw std::runtime_error("no migration handle is set");
    return m->export_state(begin, end);
  }

  void ImportState(const char* state, size_t len) override {
    std::shared_ptr<Migration> m = CurrentMigration();
    if (!m) throw std::runtime_error("no migration handle is set");
    m->import_state(std::string(state == nullptr ? "" : state, len));
  }

  /* Tells the library whether migration_ hands the state over. Caller
   * holds mu_. */
  void SetMigration() {
    detail::CheckOK(ps_kv_server_set_migration(obj_->bridge_handle(),
                                               migration_ ? 1 : 0),
                    "KVServer::set_migration_handle");
  }

  /* The migration handles of a KVServerDefaultHandle: its store's entries
   * (key, value) in [begin, end), as raw bytes. The handle (and so the
   * store) lives as long as h. */
  std::shared_ptr<Migration> DefaultMigration(
      const std::shared_ptr<ReqHandle>& h) {
    auto m = std::make_shared<Migration>();
    const size_t entry = sizeof(Key) + sizeof(Val);
    m->export_state = [this, h](Key begin, Key end) {
      std::lock_guard<std::mutex> lk(store_mu_);
      auto& store = h->template target<KVServerDefaultHandle<Val>>()->store;
      std::string out;
      for (auto it = store.begin(); it != store.end();) {
        if (it->first < begin || it->first >= end) {
          ++it;
          continue;
        }
        out.append(reinterpret_cast<const char*>(&it->first), sizeof(Key));
        out.append(reinterpret_cast<const char*>(&it->second), sizeof(Val));
        it = store.erase(it);
      }
      return out;
    };
    m->import_state = [this, h, entry](const std::string& state) {
      if (state.size() % entry != 0) {
        throw std::runtime_error(
            "KVServerDefaultHandle: a migrated state of " +
            std::to_string(state.size()) + " bytes is not a whole number of " +
            std::to_string(entry) + "-byte entries (servers of one job "
            "must run the same value type)");
      }
      std::lock_guard<std::mutex> lk(store_mu_);
      auto& store = h->template target<KVServerDefaultHandle<Val>>()->store;
      for (size_t off = 0; off < state.size(); off += entry) {
        Key k;
        Val v;
        memcpy(&k, state.data() + off, sizeof(Key));
        memcpy(&v, state.data() + off + sizeof(Key), sizeof(Val));
        store[k] = v;
      }
    };
    return m;
  }

  // Handlers commonly keep a request's arrays (MXNet and BytePS answer
  // later, BytePS even sums into the first request's values), so the arrays
  // must own their memory. Large requests come with held buffers: the
  // arrays share them (no copy). Small ones are the library's memory only
  // during the call: they are copied into one malloc'd block that the
  // three arrays share, each part 8-byte aligned so that the values can be
  // read as any type. Pushes for a registered receive buffer (BytePS fork)
  // are copied into it.
  void Adopt(const uint64_t* keys, size_t num_keys, const void* vals,
             size_t vals_bytes, const int* lens, size_t num_lens,
             const ps_kv_meta& m,
             const std::shared_ptr<detail::HeldBuffers>& held,
             KVPairs<Val>* data) {
    SArray<Val> registered;
    if (m.push && num_keys > 0) {
      std::lock_guard<std::mutex> lk(mu_);
      // m.sender names the worker's process; the buffers are registered
      // by the id of its instance that sent the push.
      const int from = InstanceWorkerID(Postoffice::IDtoRank(m.sender));
      auto it = recv_buffers_.find(std::make_pair(from, keys[0]));
      if (it != recv_buffers_.end() &&
          it->second.vals.size() * sizeof(Val) >= vals_bytes) {
        registered = it->second.vals;
      } else if (it != recv_buffers_.end() && !it->second.warned) {
        it->second.warned = true;
        LOG(WARNING) << "KVServer: a push from node " << from
                     << " for key " << keys[0] << " has "
                     << vals_bytes / sizeof(Val) << " values, more than its "
                     << "registered receive buffer holds ("
                     << it->second.vals.size() << "); such pushes are "
                     << "received into new memory (register a larger one)";
      }
    }
    if (held) {
      // The deleters keep held alive; the last one gives the buffers back.
      auto keep = [held](void*) {};
      if (num_keys > 0) {
        data->keys.reset(const_cast<Key*>(keys), num_keys, keep);
      }
      if (registered.data() != nullptr) {
        if (vals_bytes > 0) memcpy(registered.data(), vals, vals_bytes);
        data->vals = registered.segment(0, vals_bytes / sizeof(Val));
      } else if (vals_bytes > 0) {
        data->vals.reset(static_cast<Val*>(const_cast<void*>(vals)),
                         vals_bytes / sizeof(Val), keep);
      }
      if (num_lens > 0) {
        data->lens.reset(const_cast<int*>(lens), num_lens, keep);
      }
      return;
    }
    size_t kb = num_keys * sizeof(Key);
    size_t vb = registered.data() != nullptr ? 0 : vals_bytes;
    size_t lb = num_lens * sizeof(int);
    size_t voff = Align(kb), loff = Align(voff + vb), total = loff + lb;
    if (total == 0) return;
    char* block = static_cast<char*>(malloc(total));
    CHECK(block != nullptr) << "out of memory for a " << total
                            << "-byte request";
    SArray<char> all;
    all.reset(block, total, [](char* p) { free(p); });
    if (kb > 0) {
      memcpy(block, keys, kb);
      data->keys = SArray<Key>(all.segment(0, kb));
    }
    if (registered.data() != nullptr) {
      if (vals_bytes > 0) memcpy(registered.data(), vals, vals_bytes);
      data->vals = registered.segment(0, vals_bytes / sizeof(Val));
    } else if (vb > 0) {
      memcpy(block + voff, vals, vb);
      data->vals = SArray<Val>(all.segment(voff, voff + vb));
    }
    if (lb > 0) {
      memcpy(block + loff, lens, lb);
      data->lens = SArray<int>(all.segment(loff, loff + lb));
    }
  }

  static size_t Align(size_t n) { return (n + 7) & ~static_cast<size_t>(7); }

  std::mutex mu_;
  std::condition_variable handle_cv_;
  std::shared_ptr<ReqHandle> handle_;
  // handle_'s KVServerDefaultHandle, if it is one; its store is guarded by
  // store_mu_ (the request handler and the migration handles share it)
  KVServerDefaultHandle<Val>* default_store_ = nullptr;
  std::mutex store_mu_;
  std::shared_ptr<Migration> migration_;  // null: generic hand-over
  bool user_migration_ = false;           // set by set_migration_handle
  struct RecvBuffer {
    SArray<Val> vals;
    bool warned;  // a push too large for it was logged
  };
  // RegisterRecvBuffer's buffers by (worker instance node id, first key)
  std::map<std::pair<int, Key>, RecvBuffer> recv_buffers_;
  bool closing_ = false;
  int tag_;
};

/* A simple store: a push adds each key's value to the stored one, a pull
 * returns the stored values. One value per key. */
template <typename Val>
struct KVServerDefaultHandle {
  void operator()(const KVMeta& req_meta, const KVPairs<Val>& req_data,
                  KVServer<Val>* server) {
    size_t n = req_data.keys.size();
    KVPairs<Val> res;
    if (req_meta.push) {
      CHECK_EQ(n, req_data.vals.size()) << "one value per key";
    }
    if (req_meta.pull) {
      res.keys = req_data.keys;
      res.vals.resize(n);
    }
    for (size_t i = 0; i < n; ++i) {
      Val& stored = store[req_data.keys[i]];
      if (req_meta.push) stored += req_data.vals[i];
      if (req_meta.pull) res.vals[i] = stored;
    }
    server->Response(req_meta, res);
  }
  std::unordered_map<Key, Val> store;
};

}  // namespace ps
#endif  // PS_KV_APP_H_

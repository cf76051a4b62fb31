// An MXNet-style program: uses ps-lite the way MXNet's distributed kvstore
// does (spec sections 3.1 and 10), written from that description:
//  - settings injected with Environment::Init (DMLC_NUM_SERVER is then
//    removed from the process environment, so the library must read the
//    Init map), the role from Environment::Get()->find("DMLC_ROLE");
//  - servers: KVServer<char>(0) with a command handler installed through
//    static_cast<SimpleApp*> and a data handler; StartAsync, Barrier(0, 7)
//    unless recovering, run until the stop command, Finalize(0, true);
//  - scheduler: StartAsync, Barrier(0, 7), Finalize;
//  - workers: KVWorker<char>(0, customer id from a counter), StartAsync,
//    Barrier(cid, 7); rank 0 sends the sync-mode command; keys from
//    GetServerKeyRanges (small arrays on one server, big arrays split over
//    all servers with one len per server); ZPush / ZPull / ZPushPull with
//    callbacks (pull destinations allocated with new and deleted in the
//    callback), priorities, worker barriers (group 4), row-sparse requests
//    with a master key, duplicate keys and lens passed through unchecked;
//    Finalize(cid, true).
// Server timing follows MXNet's sync mode: the init push (rank 0) is
// answered at once, later pushes only when every worker has pushed the key,
// and push-pull replies carry the sum.
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

enum Command { kStopServer = 2, kSyncMode = 3, kSetMarker = 9 };
enum RequestType { kDefaultPushPull = 0, kRowSparsePushPull = 1 };
const int kFloat32 = 0;        // the dtype code of float values
const int kBigArrayBound = 1000;  // elements; larger arrays are split over all servers
const int kRowWidth = 2;        // floats per row of the row-sparse array

// MXNet packs (request type, dtype) into cmd with the Cantor pairing.
int EncodeCmd(int type, int dtype) { return ((type + dtype) * (type + dtype + 1)) / 2 + dtype; }
int DecodeType(int cmd) {
  int w = static_cast<int>(std::floor((std::sqrt(8.0 * cmd + 1) - 1) / 2));
  int dtype = cmd - (w * w + w) / 2;
  return w - dtype;
}

// Counts callbacks and lets a thread wait for a number of them.
class Pending {
 public:
  void Add(int n) {
    std::lock_guard<std::mutex> lk(mu_);
    left_ += n;
  }
  void Done() {
    std::lock_guard<std::mutex> lk(mu_);
    --left_;
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return left_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_ = 0;
};

// ---------------------------------------------------------------- server

class Server {
 public:
  Server() : ps_server_(new KVServer<char>(0)) {
    static_cast<SimpleApp*>(ps_server_)->set_request_handle(
        [this](const SimpleData& recved, SimpleApp* app) { CommandHandle(recved, app); });
    ps_server_->set_request_handle(
        [this](const KVMeta& meta, const KVPairs<char>& data, KVServer<char>* server) {
          DataHandle(meta, data, server);
        });
  }
  ~Server() { delete ps_server_; }

  void Run() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return stop_; });
  }
  std::string marker() {
    std::lock_guard<std::mutex> lk(mu_);
    return marker_;
  }

 private:
  struct KeyState {
    bool inited = false;
    std::vector<float> stored;
    std::vector<float> merged;
    std::vector<KVMeta> pending;
  };

  void CommandHandle(const SimpleData& recved, SimpleApp* app) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (recved.head == kStopServer) stop_ = true;
      if (recved.head == kSyncMode) sync_ = true;
      if (recved.head == kSetMarker) marker_ = recved.body;
    }
    app->Response(recved);
    cv_.notify_all();
  }

  static void Reply(KVServer<char>* server, const KVMeta& meta, Key key, const std::vector<float>& v) {
    KVPairs<char> res;
    res.keys = {key};
    int bytes = static_cast<int>(v.size() * sizeof(float));
    res.vals = SArray<char>(reinterpret_cast<char*>(const_cast<float*>(v.data())), bytes, false);
    res.lens = {bytes};
    server->Response(meta, res);
  }

  void DataHandle(const KVMeta& meta, const KVPairs<char>& req, KVServer<char>* server) {
    if (DecodeType(meta.cmd) == kRowSparsePushPull) {
      RowSparse(meta, req, server);
      return;
    }
    EXPECT(req.keys.size() == 1u) << "MXNet sends one key per server request, got " << req.keys.size();
    if (meta.push) {
      // MXNet's server needs exactly one len per key on every push,
      // push-pull included.
      EXPECT(req.lens.size() == 1u) << "lens " << req.lens.size();
      EXPECT(static_cast<size_t>(req.lens[0]) == req.vals.size()) << "len " << req.lens[0] << " vals " << req.vals.size();
    }
    Key key = req.keys[0];
    KeyState& st = store_[key];
    if (!meta.push) {
      EXPECT(st.inited) << "pull of uninitialised key " << key;
      Reply(server, meta, key, st.stored);
      return;
    }
    const float* v = reinterpret_cast<const float*>(req.vals.data());
    size_t n = req.vals.size() / sizeof(float);
    if (!st.inited) {
      EXPECT(!meta.pull) << "init must be a push";
      st.stored.assign(v, v + n);
      st.inited = true;
      server->Response(meta);
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      EXPECT(sync_) << "rank 0 sends the sync-mode command before pushing";
    }
    if (st.merged.empty()) st.merged.assign(n, 0.0f);
    EXPECT(st.merged.size() == n) << "push size changed";
    for (size_t i = 0; i < n; ++i) st.merged[i] += v[i];
    st.pending.push_back(meta);
    if (st.pending.size() < static_cast<size_t>(NumWorkers())) return;
    st.stored.swap(st.merged);
    st.merged.clear();
    for (const KVMeta& p : st.pending) {
      if (p.pull) {
        Reply(server, p, key, st.stored);
      } else {
        server->Response(p);
      }
    }
    st.pending.clear();
  }

  // Row-sparse requests: keys [master, master + row, ...] (the first row may
  // repeat the master key), lens[0] = 0.
  void RowSparse(const KVMeta& meta, const KVPairs<char>& req, KVServer<char>* server) {
    EXPECT(!req.keys.empty()) << "row-sparse request without keys";
    Key master = req.keys[0];
    for (size_t i = 1; i < req.keys.size(); ++i) {
      EXPECT(req.keys[i] >= req.keys[i - 1]) << "keys must be non-decreasing";
    }
    std::map<Key, std::vector<float>>& rows = rows_[master];
    if (meta.push) {
      EXPECT(req.lens.size() == req.keys.size()) << "row-sparse push lens";
      EXPECT(req.lens[0] == 0) << "master key carries no values";
      const float* v = reinterpret_cast<const float*>(req.vals.data());
      for (size_t i = 1; i < req.keys.size(); ++i) {
        EXPECT(req.lens[i] == static_cast<int>(kRowWidth * sizeof(float))) << "row len " << req.lens[i];
        std::vector<float>& row = rows[req.keys[i] - master];
        row.resize(kRowWidth, 0.0f);
        for (int j = 0; j < kRowWidth; ++j) row[j] += *v++;
      }
      server->Response(meta);
      return;
    }
    // Answer with lens in float elements, as MXNet does (not in bytes):
    // the library must pass them through.
    KVPairs<char> res;
    res.keys = req.keys;
    std::vector<int> lens(1, 0);
    std::vector<float> vals;
    for (size_t i = 1; i < req.keys.size(); ++i) {
      std::vector<float> row = rows[req.keys[i] - master];
      row.resize(kRowWidth, 0.0f);
      vals.insert(vals.end(), row.begin(), row.end());
      lens.push_back(kRowWidth);
    }
    res.lens = SArray<int>(lens);
    if (!vals.empty()) {
      res.vals.CopyFrom(reinterpret_cast<const char*>(vals.data()), vals.size() * sizeof(float));
    }
    server->Response(meta, res);
  }

  KVServer<char>* ps_server_;
  std::unordered_map<Key, KeyState> store_;  // touched by the handler thread only
  std::map<Key, std::map<Key, std::vector<float>>> rows_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool sync_ = false;
  std::string marker_;
};

// ---------------------------------------------------------------- worker

struct PSKV {
  SArray<Key> keys;
  SArray<int> lens;  // bytes per key
  int size = 0;      // total bytes
};

class Worker {
 public:
  Worker() {
    static int new_customer_id = 0;  // one customer per kvstore object, as MXNet
    customer_id_ = new_customer_id++;
    ps_worker_ = new KVWorker<char>(0, customer_id_);
    StartAsync(customer_id_, "mxnet\0");
    if (!Postoffice::Get()->is_recovery()) {
      Postoffice::Get()->Barrier(customer_id_, kWorkerGroup + kServerGroup + kScheduler);
    }
  }

  ~Worker() {
    Barrier();
    if (MyRank() == 0 && customer_id_ == 0) SendCommandToServers(kStopServer, "");
    Finalize(ps_worker_->get_customer()->customer_id(), true);
    delete ps_worker_;
  }

  void SendCommandToServers(int cmd, const std::string& body) {
    ps_worker_->Wait(ps_worker_->Request(cmd, body, kServerGroup));
  }
  void Barrier() { Postoffice::Get()->Barrier(customer_id_, kWorkerGroup); }

  // The ps keys of array `key` holding `elems` floats.
  PSKV EncodeKey(int key, int elems) {
    const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
    int ns = static_cast<int>(krs.size());
    PSKV pskv;
    pskv.size = elems * static_cast<int>(sizeof(float));
    if (elems < kBigArrayBound) {
      int server = (key * 9973) % ns;
      pskv.keys.push_back(krs[server].begin() + key);
      pskv.lens.push_back(pskv.size);
    } else {
      int done = 0;
      for (int i = 0; i < ns; ++i) {
        int end = static_cast<int>(std::round(static_cast<double>(elems) / ns * (i + 1)));
        pskv.keys.push_back(krs[i].begin() + key);
        pskv.lens.push_back((end - done) * static_cast<int>(sizeof(float)));
        done = end;
      }
    }
    return pskv;
  }

  void Push(const PSKV& pskv, std::vector<float>* data, int priority, Pending* p) {
    p->Add(1);
    SArray<char> vals(reinterpret_cast<char*>(data->data()), pskv.size, false);
    ps_worker_->ZPush(pskv.keys, vals, pskv.lens, EncodeCmd(kDefaultPushPull, kFloat32),
                      [p]() { p->Done(); }, priority);
  }

  void Pull(PSKV* pskv, std::vector<float>* data, int priority, Pending* p) {
    p->Add(1);
    auto vals = new SArray<char>(reinterpret_cast<char*>(data->data()), pskv->size, false);
    ps_worker_->ZPull(pskv->keys, vals, &pskv->lens, EncodeCmd(kDefaultPushPull, kFloat32),
                      [vals, p]() {
                        delete vals;
                        p->Done();
                      },
                      priority);
  }

  // As MXNet: the pushed array is also the destination, allocated with new
  // because it must outlive this call, and deleted by the callback.
  void PushPull(PSKV* pskv, std::vector<float>* data, Pending* p) {
    p->Add(1);
    auto vals = new SArray<char>(reinterpret_cast<char*>(data->data()), pskv->size, false);
    ps_worker_->ZPushPull(pskv->keys, *vals, vals, &pskv->lens, EncodeCmd(kDefaultPushPull, kFloat32),
                          [vals, p]() {
                            delete vals;
                            p->Done();
                          });
  }

  KVWorker<char>* ps_worker_;
  int customer_id_;
};

void Fill(std::vector<float>* v, float x) {
  for (float& f : *v) f = x;
}

void ExpectAll(const std::vector<float>& v, float x, const char* what) {
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT(v[i] == x) << what << ": element " << i << " is " << v[i] << ", expected " << x;
  }
}

void RunWorker() {
  Worker kv;
  const int rank = MyRank(), nw = NumWorkers();
  EXPECT(kv.ps_worker_->get_customer()->customer_id() == 0) << "first customer";
  if (rank == 0) {
    kv.SendCommandToServers(kSyncMode, "");
    kv.SendCommandToServers(kSetMarker, "hello");
  }

  const int kSmall = 3, kBig = 5, kRows = 11;
  const int small_elems = 100, big_elems = 2501;
  PSKV small = kv.EncodeKey(kSmall, small_elems);
  PSKV big = kv.EncodeKey(kBig, big_elems);
  EXPECT(small.keys.size() == 1u) << "small array on one server";
  EXPECT(big.keys.size() == static_cast<size_t>(NumServers())) << "big array on every server";
  std::vector<float> s(small_elems), b(big_elems);

  // Initialisation: rank 0 pushes the initial values.
  Pending p;
  if (rank == 0) {
    Fill(&s, 1.0f);
    Fill(&b, 2.0f);
    kv.Push(small, &s, 0, &p);
    kv.Push(big, &b, 0, &p);
    p.Wait();
  }
  kv.Barrier();
  Fill(&s, -1.0f);
  Fill(&b, -1.0f);
  kv.Pull(&small, &s, 0, &p);
  kv.Pull(&big, &b, 0, &p);
  p.Wait();
  ExpectAll(s, 1.0f, "initial small");
  ExpectAll(b, 2.0f, "initial big");

  // Sync-mode rounds: every worker pushes (rank + 1) * r; the servers answer
  // once all have pushed; the pull then sees the sum.
  const float tri = static_cast<float>(nw * (nw + 1) / 2);
  for (int r = 1; r <= 3; ++r) {
    Fill(&s, static_cast<float>((rank + 1) * r));
    Fill(&b, static_cast<float>((rank + 1) * r));
    kv.Push(small, &s, -kSmall, &p);  // P3 store style: per-key priorities
    kv.Push(big, &b, -kBig, &p);
    p.Wait();
    kv.Pull(&small, &s, -kSmall, &p);
    kv.Pull(&big, &b, -kBig, &p);
    p.Wait();
    ExpectAll(s, r * tri, "small after round");
    ExpectAll(b, r * tri, "big after round");
  }

  // Push-pull into the pushed buffer: the reply is the sum over workers.
  Fill(&s, static_cast<float>((rank + 1) * 4));
  Fill(&b, static_cast<float>((rank + 1) * 4));
  kv.PushPull(&small, &s, &p);
  kv.PushPull(&big, &b, &p);
  p.Wait();
  ExpectAll(s, 4 * tri, "small push-pull");
  ExpectAll(b, 4 * tri, "big push-pull");
  EXPECT(small.lens.size() == 1u && small.lens[0] == small_elems * 4) << "push-pull lens";

  // Row-sparse: master key first, the first row repeats it.
  const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
  Key master = krs[(kRows * 9973) % krs.size()].begin() + kRows;
  const int rs_cmd = EncodeCmd(kRowSparsePushPull, kFloat32);
  {
    SArray<Key> keys = {master, master + 0, master + 2};
    SArray<int> lens = {0, kRowWidth * 4, kRowWidth * 4};
    std::vector<float> rows(2 * kRowWidth, static_cast<float>(rank + 1));
    SArray<char> vals(reinterpret_cast<char*>(rows.data()), rows.size() * 4, false);
    kv.ps_worker_->Wait(kv.ps_worker_->ZPush(keys, vals, lens, rs_cmd));
    // The master key alone, with no values.
    kv.ps_worker_->Wait(kv.ps_worker_->ZPush(SArray<Key>{master}, SArray<char>(), SArray<int>{0}, rs_cmd));
  }
  kv.Barrier();
  {
    SArray<Key> keys = {master, master + 0, master + 1, master + 2};
    SArray<char> vals;
    SArray<int> lens;
    kv.ps_worker_->Wait(kv.ps_worker_->ZPull(keys, &vals, &lens, rs_cmd));
    EXPECT(lens.size() == 4u && lens[0] == 0 && lens[1] == kRowWidth && lens[2] == kRowWidth &&
           lens[3] == kRowWidth)
        << "row-sparse lens (in elements) passed through";
    EXPECT(vals.size() == 3 * kRowWidth * sizeof(float)) << "row-sparse pull " << vals.size() << " bytes";
    const float* f = reinterpret_cast<const float*>(vals.data());
    for (int j = 0; j < kRowWidth; ++j) {
      EXPECT(f[j] == tri) << "row 0";
      EXPECT(f[kRowWidth + j] == 0.0f) << "row 1 was never pushed";
      EXPECT(f[2 * kRowWidth + j] == tri) << "row 2";
    }
    SArray<char> none;
    SArray<int> none_lens;
    kv.ps_worker_->Wait(kv.ps_worker_->ZPull(SArray<Key>{master}, &none, &none_lens, rs_cmd));
    EXPECT(none.empty() && none_lens.size() == 1u && none_lens[0] == 0) << "master-only pull";
  }

  // get_num_dead_node: GetDeadNodes(timeout) within a group.
  std::vector<int> dead = Postoffice::Get()->GetDeadNodes(60);
  EXPECT(dead.empty()) << dead.size() << " dead nodes";
  EXPECT(Postoffice::Get()->GetNodeIDs(kServerGroup).size() == static_cast<size_t>(NumServers())) << "servers";
  std::printf("test_mxnet_style: worker %d OK\n", rank);
}

}  // namespace

int main() {
  // MXNet's MXInitPSEnv: settings through Environment::Init. Take them from
  // the launcher's environment, then remove one from the environment so that
  // only the Init map has it.
  std::unordered_map<std::string, std::string> envs;
  for (const char* k : {"DMLC_ROLE", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI",
                        "DMLC_PS_ROOT_PORT"}) {
    const char* v = std::getenv(k);
    if (v != nullptr) envs[k] = v;
  }
  envs["MXNET_TEST_MARKER"] = "42";
  Environment::Init(envs);
  unsetenv("DMLC_NUM_SERVER");
  EXPECT(std::string(Environment::Get()->find("MXNET_TEST_MARKER")) == "42") << "Init map";
  EXPECT(Environment::Get()->find("DMLC_NUM_SERVER") != nullptr) << "Init map wins over the environment";

  const char* role_str = Environment::Get()->find("DMLC_ROLE");
  std::string role = role_str == nullptr ? "worker" : role_str;
  if (role == "worker") {
    RunWorker();
    return 0;
  }
  // RunServer: also run by the scheduler, which has no KVServer.
  Server* server = role == "server" ? new Server() : nullptr;
  StartAsync(0, "mxnet_server\0");
  if (!Postoffice::Get()->is_recovery()) {
    Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup + kScheduler);
  }
  if (server != nullptr) server->Run();
  Finalize(0, true);
  if (server != nullptr) {
    EXPECT(server->marker() == "hello") << "command body '" << server->marker() << "'";
    delete server;
  }
  std::printf("test_mxnet_style: %s OK\n", role.c_str());
  return 0;
}

// A BytePS-style program: uses the BytePS fork's API generation the way
// BytePS master does (spec sections 3.2 and 10), written from that
// description:
//  - StartPS(0, role, -1 or 0, true, "byteps\0"), GetRole, Finalize(0, role,
//    true); the server program also runs on the scheduler, where its
//    KVServer<char>(0, false, 0) is attached to the scheduler;
//  - Postoffice::Get()->Barrier(0, 7) unless recovering;
//  - workers: KVWorker<char>(0, 0, 0); one key per request, ps key
//    krs[server].begin() + key with server = hash(key) % servers; a blocking
//    init push of every key (Wait(ZPush)); then rounds where a push thread
//    issues ZPush and, from its callback, hands the key to a pull thread
//    that issues ZPull into the same buffer;
//  - servers: init pushes held until every worker sent them (a barrier);
//    pushes summed and acknowledged at once; pulls held until every worker
//    pushed the key in the round; every response sent from an engine
//    thread, reusing one KVPairs per key (stable buffer addresses), pull
//    replies zero-copy from the store; one "compressed" key is answered with
//    fewer bytes than the worker's buffer holds; as BytePS, the first push
//    of a round is kept (the request's own arrays, beyond the handler call)
//    and the other pushes are summed into its values in place.
// The worker also runs against BytePS's own server (byteps/server/server.cc
// built with these headers and libps.a): with BYTEPS_REAL_SERVER=1 it does
// not expect the compressed key's half reply, which only this file's server
// sends.
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kNumKeys = 8;
const int kRounds = 5;
const int kCompressedKey = 0;  // answered with half of its bytes

size_t KeyBytes(int key) { return 4096 * static_cast<size_t>(1 + key * 5); }

// djb2, BytePS's default key hash.
int ServerOf(int key, int servers) {
  uint64_t h = 5381;
  std::string s = std::to_string(key);
  for (char c : s) h = h * 33 + static_cast<unsigned char>(c);
  return static_cast<int>(h % servers);
}

// A blocking queue of work items.
template <typename T>
class Queue {
 public:
  void Push(T v) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      q_.push_back(std::move(v));
    }
    cv_.notify_one();
  }
  T Pop() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return !q_.empty(); });
    T v = std::move(q_.front());
    q_.pop_front();
    return v;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> q_;
};

// ---------------------------------------------------------------- server

class BytePSServer {
 public:
  BytePSServer() : server_(new KVServer<char>(0, false, 0)), engine_([this] { EngineLoop(); }) {
    server_->set_request_handle(
        [this](const KVMeta& meta, const KVPairs<char>& data, KVServer<char>* s) { Handle(meta, data, s); });
  }

  ~BytePSServer() {
    engine_queue_.Push(Job{});  // stop
    engine_.join();
    delete server_;
  }

 private:
  struct KeyState {
    std::vector<float> store;  // the value all workers pulled last
    KVPairs<char> merged;      // the round's first push, summed into in place
    bool inited = false;
    std::vector<KVMeta> init_pushes;
    int pushes = 0;  // pushes received for the next round
    int round = 0;   // completed rounds; store holds round `round`
    std::vector<KVMeta> held_pulls;
    std::set<int> served;  // workers whose pull of round `round` was answered
    KVPairs<char> push_response;
    KVPairs<char> pull_response;
  };
  struct Job {
    bool stop = true;
    KVMeta meta;
    Key key = 0;
    bool pull = false;
  };

  void Handle(const KVMeta& meta, const KVPairs<char>& req, KVServer<char>*) {
    std::lock_guard<std::mutex> lk(mu_);
    EXPECT(req.keys.size() == 1u) << "BytePS sends one key per request";
    Key key = req.keys[0];
    KeyState& st = keys_[key];
    if (meta.push) {
      EXPECT(req.lens.size() == 1u && static_cast<size_t>(req.lens[0]) == req.vals.size())
          << "push lens";
      const float* v = reinterpret_cast<const float*>(req.vals.data());
      size_t n = req.vals.size() / sizeof(float);
      if (!st.inited) {
        // Init pushes: hold them until every worker sent one.
        if (st.store.empty()) st.store.assign(v, v + n);
        st.init_pushes.push_back(meta);
        if (st.init_pushes.size() < static_cast<size_t>(NumWorkers())) return;
        st.inited = true;
        for (const KVMeta& m : st.init_pushes) engine_queue_.Push(Job{false, m, key, false});
        st.init_pushes.clear();
        return;
      }
      if (st.merged.vals.empty()) {
        st.merged = req;  // keep the request's arrays (zero copy)
      } else {
        EXPECT(st.merged.vals.size() == req.vals.size()) << "push size changed";
        float* m = reinterpret_cast<float*>(st.merged.vals.data());
        for (size_t i = 0; i < n; ++i) m[i] += v[i];
      }
      engine_queue_.Push(Job{false, meta, key, false});
      if (++st.pushes < NumWorkers()) return;
      const float* m = reinterpret_cast<const float*>(st.merged.vals.data());
      st.store.assign(m, m + n);
      st.merged = KVPairs<char>();
      st.pushes = 0;
      st.round++;
      st.served.clear();
      for (const KVMeta& m : st.held_pulls) {
        st.served.insert(m.sender);
        engine_queue_.Push(Job{false, m, key, true});
      }
      st.held_pulls.clear();
      return;
    }
    EXPECT(st.inited) << "pull before init of key " << key;
    // A worker's pull is answered once per completed round: a worker that
    // already got this round's value waits for the next round (a faster
    // worker may have pushed for it already; the store still holds this
    // round until every worker has).
    if (st.round > 0 && st.served.count(meta.sender) == 0) {
      st.served.insert(meta.sender);
      engine_queue_.Push(Job{false, meta, key, true});
    } else {
      st.held_pulls.push_back(meta);
    }
  }

  // The engine thread answers requests, as BytePS's engine threads do.
  void EngineLoop() {
    for (;;) {
      Job job = engine_queue_.Pop();
      if (job.stop) return;
      std::lock_guard<std::mutex> lk(mu_);
      KeyState& st = keys_[job.key];
      if (!job.pull) {
        server_->Response(job.meta, st.push_response);  // reused, empty
        continue;
      }
      KVPairs<char>& res = st.pull_response;  // reused: stable addresses
      int bytes = static_cast<int>(st.store.size() * sizeof(float));
      Key user_key = job.key - Postoffice::Get()->GetServerKeyRanges()[MyRank()].begin();
      if (user_key == static_cast<Key>(kCompressedKey)) bytes /= 2;
      res.keys = {job.key};
      res.lens = {bytes};
      res.vals = SArray<char>(reinterpret_cast<char*>(st.store.data()), bytes, false);  // zero copy
      server_->Response(job.meta, res);
    }
  }

  std::mutex mu_;
  std::map<Key, KeyState> keys_;
  Queue<Job> engine_queue_;
  KVServer<char>* server_;
  std::thread engine_;  // after server_: the thread uses it
};

// ---------------------------------------------------------------- worker

void RunWorker() {
  StartPS(0, Node::WORKER, -1, true, "byteps\0");
  auto kv = new KVWorker<char>(0, 0, 0);
  EXPECT(!kv->is_worker_zpull_) << "no RDMA zero-copy pull over zmq";
  if (!Postoffice::Get()->is_recovery()) {
    Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup + kScheduler);
  }
  const int rank = MyRank(), nw = NumWorkers();
  const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
  EXPECT(krs.size() == static_cast<size_t>(NumServers())) << "one range per server";

  struct Tensor {
    Key pskey;
    size_t bytes;
    float* buf;  // page-aligned, stable for the whole run
    SArray<Key> keys;
    SArray<int> lens;
  };
  std::vector<Tensor> ts(kNumKeys);
  for (int k = 0; k < kNumKeys; ++k) {
    Tensor& t = ts[k];
    t.pskey = krs[ServerOf(k, static_cast<int>(krs.size()))].begin() + k;
    t.bytes = KeyBytes(k);
    void* p = nullptr;
    EXPECT(posix_memalign(&p, 4096, t.bytes) == 0) << "alloc";
    t.buf = static_cast<float*>(p);
    t.keys = {t.pskey};
    t.lens = {static_cast<int>(t.bytes)};
  }
  const int cmd = 0;

  // Init: a blocking push of every key (held by the servers until every
  // worker pushed it).
  for (Tensor& t : ts) {
    for (size_t i = 0; i < t.bytes / 4; ++i) t.buf[i] = 1.0f;
    kv->Wait(kv->ZPush(t.keys, SArray<char>(reinterpret_cast<char*>(t.buf), t.bytes, false), t.lens, cmd));
  }

  // Rounds: pushes from this thread, pulls from a pull thread started by the
  // push callbacks, both on the same buffers.
  Queue<int> pull_queue;
  std::mutex done_mu;
  std::condition_variable done_cv;
  int pulled = 0;
  std::thread puller([&]() {
    for (;;) {
      int k = pull_queue.Pop();
      if (k < 0) return;
      Tensor& t = ts[k];
      auto vals = new SArray<char>(reinterpret_cast<char*>(t.buf), t.bytes, false);
      kv->ZPull(t.keys, vals, &t.lens, cmd, [vals, &done_mu, &done_cv, &pulled]() {
        delete vals;
        std::lock_guard<std::mutex> lk(done_mu);
        ++pulled;
        done_cv.notify_all();
      });
    }
  });
  const float tri = static_cast<float>(nw * (nw + 1) / 2);
  const int compressed = compat::EnvInt("BYTEPS_REAL_SERVER", 0) ? -1 : kCompressedKey;
  for (int r = 1; r <= kRounds; ++r) {
    for (int k = 0; k < kNumKeys; ++k) {
      Tensor& t = ts[k];
      for (size_t i = 0; i < t.bytes / 4; ++i) t.buf[i] = static_cast<float>((rank + 1) * r);
      kv->ZPush(t.keys, SArray<char>(reinterpret_cast<char*>(t.buf), t.bytes, false), t.lens, cmd,
                [k, &pull_queue]() { pull_queue.Push(k); });
    }
    std::unique_lock<std::mutex> lk(done_mu);
    done_cv.wait(lk, [&] { return pulled == r * kNumKeys; });
    for (int k = 0; k < kNumKeys; ++k) {
      Tensor& t = ts[k];
      size_t n = t.bytes / 4, got = k == compressed ? n / 2 : n;
      EXPECT(t.lens.size() == 1u && t.lens[0] == static_cast<int>(got * 4)) << "key " << k << " lens " << t.lens[0];
      for (size_t i = 0; i < n; ++i) {
        // A compressed reply fills the front of the buffer; the rest keeps
        // what this worker pushed.
        float want = i < got ? r * tri : static_cast<float>((rank + 1) * r);
        EXPECT(t.buf[i] == want) << "round " << r << " key " << k << " element " << i << ": " << t.buf[i]
                                 << ", expected " << want;
      }
      t.lens = {static_cast<int>(t.bytes)};
    }
  }
  pull_queue.Push(-1);
  puller.join();

  Finalize(0, Node::WORKER, true);
  delete kv;
  for (Tensor& t : ts) free(t.buf);
  std::printf("test_byteps_style: worker %d OK\n", rank);
}

}  // namespace

int main() {
  Node::Role role = GetRole(compat::Env("DMLC_ROLE", "server"));
  if (role == Node::WORKER) {
    RunWorker();
    return 0;
  }
  // byteps_server(): servers and the scheduler.
  StartPS(0, role, role == Node::SCHEDULER ? 0 : -1, true, "byteps\0");
  EXPECT((Postoffice::GetScheduler() != nullptr) == (role == Node::SCHEDULER)) << "GetScheduler";
  EXPECT(Postoffice::GetServer() == Postoffice::Get()) << "one Postoffice per process";
  auto server = new BytePSServer();
  if (!Postoffice::Get()->is_recovery()) {
    Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup + kScheduler);
  }
  Finalize(0, role, true);
  delete server;
  std::printf("test_byteps_style: %s OK\n", role == Node::SCHEDULER ? "scheduler" : "server");
  return 0;
}

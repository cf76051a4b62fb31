// Scenario "elastic": C++ workers, written against the ps-lite API only,
// in an elastic job (PS_ELASTIC=1) whose scheduler is an elasticps process
// or this program and whose servers are either elasticps processes or this
// program. While
// the workers push, run.sh moves key ranges between the servers with
// `elasticps ctl move` (and may add a standby server and drain one); the
// workers then check that every push is in the sums, exactly. Keys are
// spread over every server range; values are small integers, so float sums
// are exact.
//
// ELASTIC_SERVER picks this program's server:
//   default   KVServerDefaultHandle, whose store moves by the migration
//             handle the header gives it;
//   fallback  the same store behind a handler of its own (a lambda), so
//             that it moves by the library's generic capture-and-install
//             hand-over, which cannot bring keys back to a server;
//   stateful  a handler that also counts each key's pushes (state beside
//             the values, which the generic hand-over would lose) and sets
//             its own migration handle; with ELASTIC_SYNC=1 it answers a
//             round's pushes only once every worker's has arrived, and
//             workers check the counts too.
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

// A pull with this cmd returns each key's push count instead of its value.
const int kCountCmd = 1;

// The stateful server: per key a value, a push count and, in synchronous
// mode, the round being merged.
class StatefulServer {
 public:
  StatefulServer(KVServer<float>* server, bool sync) : sync_(sync) {
    server->set_request_handle(
        [this](const KVMeta& m, const KVPairs<float>& d, KVServer<float>* s) {
          Handle(m, d, s);
        });
    server->set_migration_handle(
        [this](Key begin, Key end) { return Export(begin, end); },
        [this](const std::string& state) { Import(state); });
  }

 private:
  struct KeyState {
    float value = 0;
    float pushes = 0;
    float merge = 0;  // synchronous: this round's pushes so far
    int merged = 0;
  };
  // One request waiting for its keys' rounds to complete.
  struct Waiting {
    KVMeta meta;
    size_t left;
  };

  void Handle(const KVMeta& m, const KVPairs<float>& d, KVServer<float>* s) {
    std::lock_guard<std::mutex> lk(mu_);
    size_t n = d.keys.size();
    if (m.push) {
      EXPECT(d.vals.size() == n) << "one value per key";
      auto w = std::make_shared<Waiting>(Waiting{m, n});
      for (size_t i = 0; i < n; ++i) {
        KeyState& k = keys_[d.keys[i]];
        if (!sync_) {
          k.value += d.vals[i];
          k.pushes += 1;
          continue;
        }
        k.merge += d.vals[i];
        k.merged++;
        waiting_[d.keys[i]].push_back(w);
        if (k.merged == NumWorkers()) {
          k.value += k.merge;
          k.pushes += static_cast<float>(k.merged);
          k.merge = 0;
          k.merged = 0;
          for (auto& r : waiting_[d.keys[i]]) {
            if (--r->left == 0) s->Response(r->meta);
          }
          waiting_.erase(d.keys[i]);
        }
      }
      if (!sync_) s->Response(m);
      return;
    }
    KVPairs<float> res;
    res.keys = d.keys;
    res.vals.resize(n);
    for (size_t i = 0; i < n; ++i) {
      auto it = keys_.find(d.keys[i]);
      KeyState k = it == keys_.end() ? KeyState() : it->second;
      res.vals[i] = m.cmd == kCountCmd ? k.pushes : k.value;
    }
    s->Response(m, res);
  }

  // Entries (key, value, pushes), raw. A round still being merged cannot
  // move (the library never asks that: it exports once the keys' requests
  // are answered); refusing it keeps the keys here.
  std::string Export(Key begin, Key end) {
    std::lock_guard<std::mutex> lk(mu_);
    std::string out;
    for (const auto& e : keys_) {
      if (e.first < begin || e.first >= end) continue;
      if (e.second.merged != 0) {
        throw std::runtime_error("key " + std::to_string(e.first) +
                                 " has a round in progress");
      }
      Append(&out, e.first);
      Append(&out, e.second.value);
      Append(&out, e.second.pushes);
    }
    for (auto it = keys_.begin(); it != keys_.end();) {
      if (it->first >= begin && it->first < end) {
        it = keys_.erase(it);
      } else {
        ++it;
      }
    }
    exports_++;
    return out;
  }

  void Import(const std::string& state) {
    const size_t entry = sizeof(Key) + 2 * sizeof(float);
    if (state.size() % entry != 0) {
      throw std::runtime_error("state of " + std::to_string(state.size()) +
                               " bytes is not whole entries");
    }
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t off = 0; off < state.size(); off += entry) {
      Key k;
      std::memcpy(&k, state.data() + off, sizeof(k));
      if (keys_.count(k) != 0) {
        throw std::runtime_error("key " + std::to_string(k) +
                                 " is here already");
      }
    }
    for (size_t off = 0; off < state.size(); off += entry) {
      Key k;
      KeyState st;
      std::memcpy(&k, state.data() + off, sizeof(k));
      std::memcpy(&st.value, state.data() + off + sizeof(k), sizeof(float));
      std::memcpy(&st.pushes, state.data() + off + sizeof(k) + sizeof(float),
                  sizeof(float));
      keys_[k] = st;
    }
    imports_++;
  }

  template <typename T>
  static void Append(std::string* out, const T& v) {
    out->append(reinterpret_cast<const char*>(&v), sizeof(v));
  }

 public:
  int exports_ = 0, imports_ = 0;

 private:
  bool sync_;
  std::mutex mu_;
  std::unordered_map<Key, KeyState> keys_;
  std::unordered_map<Key, std::vector<std::shared_ptr<Waiting>>> waiting_;
};

int RunServer() {
  const std::string kind = compat::Env("ELASTIC_SERVER", "default");
  KVServer<float> server(0);
  std::unique_ptr<StatefulServer> stateful;
  if (kind == "stateful") {
    stateful.reset(new StatefulServer(&server, compat::EnvInt("ELASTIC_SYNC", 0) != 0));
  } else if (kind == "fallback") {
    KVServerDefaultHandle<float> store;
    server.set_request_handle(
        [store](const KVMeta& m, const KVPairs<float>& d,
                KVServer<float>* s) mutable { store(m, d, s); });
  } else {
    EXPECT(kind == "default") << "ELASTIC_SERVER=" << kind;
    server.set_request_handle(KVServerDefaultHandle<float>());
  }
  Start(0);
  const int rank = MyRank();
  std::printf("test_elastic: C++ %s server rank %d serving\n", kind.c_str(), rank);
  std::fflush(stdout);
  // a standby server stays until the scheduler releases it; a drained one
  // returns here once it has left the job
  Finalize(0, true);
  if (stateful) {
    std::printf("test_elastic: C++ server rank %d done (%d exports, %d imports)\n",
                rank, stateful->exports_, stateful->imports_);
  }
  return 0;
}

}  // namespace

int main() {
  if (IsScheduler()) {
    // as any ps-lite program's scheduler: the library runs the migration
    // coordinator, the balancer and the control API (elasticps ctl)
    Start(0);
    Finalize(0, true);
    return 0;
  }
  if (IsServer()) return RunServer();
  KVWorker<float> kv(0, 0);
  Start(0);
  const int rounds = compat::EnvInt("ELASTIC_ROUNDS", 600);
  const bool counts = compat::Env("ELASTIC_SERVER") == "stateful";
  std::vector<Key> keys;
  std::vector<float> vals;
  const std::vector<Range>& ranges = Postoffice::Get()->GetServerKeyRanges();
  for (size_t s = 0; s < ranges.size(); ++s) {
    for (int i = 0; i < 6; ++i) {
      keys.push_back(ranges[s].begin() + static_cast<Key>(i));
      vals.push_back(static_cast<float>(s * 10 + i + 1));
    }
  }
  for (int r = 0; r < rounds; ++r) {
    kv.Wait(kv.Push(keys, vals));
    if (r % 10 == 0) {
      std::vector<float> got;
      kv.Wait(kv.Pull(keys, &got));  // pulls during moves are redirected too
      EXPECT(got.size() == vals.size()) << "pulled " << got.size() << " values";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Postoffice::Get()->Barrier(0, kWorkerGroup);
  std::vector<float> got;
  kv.Wait(kv.Pull(keys, &got));
  EXPECT(got.size() == vals.size()) << "pulled " << got.size() << " values";
  for (size_t i = 0; i < vals.size(); ++i) {
    float want = vals[i] * rounds * NumWorkers();
    EXPECT(got[i] == want) << "key " << keys[i] << ": " << got[i] << ", want " << want;
  }
  if (counts) {
    // the server-side push counts moved with the values
    std::vector<float> n;
    kv.Wait(kv.Pull(keys, &n, nullptr, kCountCmd));
    EXPECT(n.size() == keys.size()) << "pulled " << n.size() << " counts";
    for (size_t i = 0; i < keys.size(); ++i) {
      float want = static_cast<float>(rounds * NumWorkers());
      EXPECT(n[i] == want) << "key " << keys[i] << ": " << n[i] << " pushes counted, want " << want;
    }
  }
  std::printf("test_elastic: worker rank %d OK (%d rounds, exact sums%s)\n", MyRank(), rounds,
              counts ? " and push counts" : "");
  Finalize(0, true);
  return 0;
}

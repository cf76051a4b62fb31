// Scenario "replicated": a job with replicated C++ servers (PS_ELASTIC=1,
// PS_REPLICAS=1) whose scheduler is an elasticps process. run.sh starts the
// servers itself, SIGKILLs one of them while the workers push (a backup
// takes its key ranges over), moves a key range with `elasticps ctl move`,
// then creates the file REPL_SIGNAL names; the workers stop pushing and
// check that every acknowledged push is in the sums exactly once.
//
// REPL_SERVER picks the server:
//   default   KVServerDefaultHandle, replicated through the state hook the
//             header gives it;
//   custom    an MXNet-style handler keeping its own std::unordered_map of
//             keys (values of any length, and a push count beside them),
//             replicated through its own state hook (set_migration_handle);
//             the workers check the push counts too;
//   nohook    the same handler without the state hook: it runs
//             unreplicated (the library says so once) and nothing is killed.
//
// Worker round t pushes c = t%3+1 to a key of its own in every server
// range and c times a fixed value to two keys every worker shares (values
// are small integers, so float sums are exact). After a barrier each
// worker pulls every key: its own keys hold the sum of its c, the shared
// keys their value times the sum over every worker's own key.
#include <sys/stat.h>

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

// The MXNet-style server: the handler keeps its own store (MXNet's
// KVStoreDistServer keeps an unordered_map of arrays), here a value array
// per key (its length given by the push's lens, one value without them)
// and the number of pushes applied to the key.
class CustomServer {
 public:
  CustomServer(KVServer<float>* server, bool hook) {
    server->set_request_handle(
        [this](const KVMeta& m, const KVPairs<float>& d, KVServer<float>* s) {
          Handle(m, d, s);
        });
    if (hook) {
      server->set_migration_handle(
          [this](Key begin, Key end) { return Export(begin, end); },
          [this](const std::string& state) { Import(state); });
    }
  }

 private:
  struct Entry {
    std::vector<float> value;
    float pushes = 0;
  };

  void Handle(const KVMeta& m, const KVPairs<float>& d, KVServer<float>* s) {
    const size_t n = d.keys.size();
    EXPECT(d.lens.empty() || d.lens.size() == n) << d.lens.size() << " lens for " << n << " keys";
    std::lock_guard<std::mutex> lk(mu_);
    if (m.push) {
      size_t off = 0;
      for (size_t i = 0; i < n; ++i) {
        const size_t len = d.lens.empty() ? 1 : static_cast<size_t>(d.lens[i]);
        EXPECT(off + len <= d.vals.size()) << "push of " << d.vals.size() << " values is short";
        Entry& e = store_[d.keys[i]];
        if (e.value.empty()) e.value.assign(len, 0);
        EXPECT(e.value.size() == len) << "key " << d.keys[i] << " has " << e.value.size()
                                      << " values, the push " << len;
        for (size_t j = 0; j < len; ++j) e.value[j] += d.vals[off + j];
        e.pushes += 1;
        off += len;
      }
      s->Response(m);
      return;
    }
    KVPairs<float> res;
    res.keys = d.keys;
    std::vector<float> vals;
    std::vector<int> lens;
    for (size_t i = 0; i < n; ++i) {
      auto it = store_.find(d.keys[i]);
      if (m.cmd == kCountCmd) {
        vals.push_back(it == store_.end() ? 0 : it->second.pushes);
        lens.push_back(1);
        continue;
      }
      std::vector<float> v = it == store_.end() ? std::vector<float>(1, 0) : it->second.value;
      vals.insert(vals.end(), v.begin(), v.end());
      lens.push_back(static_cast<int>(v.size()));
    }
    res.vals.CopyFrom(vals.data(), vals.size());
    res.lens.CopyFrom(lens.data(), lens.size());
    s->Response(m, res);
  }

  // Entries (key, pushes, length, values), raw; exported keys are dropped.
  std::string Export(Key begin, Key end) {
    std::lock_guard<std::mutex> lk(mu_);
    std::string out;
    for (auto it = store_.begin(); it != store_.end();) {
      if (it->first < begin || it->first >= end) {
        ++it;
        continue;
      }
      const uint32_t len = static_cast<uint32_t>(it->second.value.size());
      Append(&out, &it->first, sizeof(Key));
      Append(&out, &it->second.pushes, sizeof(float));
      Append(&out, &len, sizeof(len));
      Append(&out, it->second.value.data(), len * sizeof(float));
      it = store_.erase(it);
    }
    return out;
  }

  // All or nothing: the state is decoded in full before any key goes in.
  void Import(const std::string& state) {
    std::vector<std::pair<Key, Entry>> in;
    const char* p = state.data();
    const char* end = p + state.size();
    while (p < end) {
      Key k;
      Entry e;
      uint32_t len;
      if (end - p < static_cast<long>(sizeof(k) + sizeof(float) + sizeof(len))) {
        throw std::runtime_error("state truncated in an entry's header");
      }
      std::memcpy(&k, p, sizeof(k));
      std::memcpy(&e.pushes, p + sizeof(k), sizeof(float));
      std::memcpy(&len, p + sizeof(k) + sizeof(float), sizeof(len));
      p += sizeof(k) + sizeof(float) + sizeof(len);
      if (static_cast<size_t>(end - p) < len * sizeof(float)) {
        throw std::runtime_error("state truncated in key " + std::to_string(k) + "'s values");
      }
      e.value.resize(len);
      std::memcpy(e.value.data(), p, len * sizeof(float));
      p += len * sizeof(float);
      in.emplace_back(k, std::move(e));
    }
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& kv : in) {
      if (store_.count(kv.first) != 0) {
        throw std::runtime_error("key " + std::to_string(kv.first) + " is here already");
      }
    }
    for (auto& kv : in) store_[kv.first] = std::move(kv.second);
  }

  static void Append(std::string* out, const void* p, size_t n) {
    out->append(static_cast<const char*>(p), n);
  }

  std::mutex mu_;
  std::unordered_map<Key, Entry> store_;
};

int RunServer() {
  const std::string kind = compat::Env("REPL_SERVER", "default");
  KVServer<float> server(0);
  std::unique_ptr<CustomServer> custom;
  if (kind == "custom" || kind == "nohook") {
    custom.reset(new CustomServer(&server, kind == "custom"));
  } else {
    EXPECT(kind == "default") << "REPL_SERVER=" << kind;
    server.set_request_handle(KVServerDefaultHandle<float>());
  }
  Start(0);
  std::printf("test_replicated: C++ %s server rank %d serving\n", kind.c_str(), MyRank());
  std::fflush(stdout);
  Finalize(0, true);
  return 0;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

int RunWorker() {
  KVWorker<float> kv(0, 0);
  Start(0);
  const int me = MyRank(), workers = NumWorkers();
  const bool counts = compat::Env("REPL_SERVER", "default") != "default";
  const std::string signal = compat::Env("REPL_SIGNAL");
  EXPECT(!signal.empty()) << "REPL_SIGNAL is not set";
  // keys: two shared ones and one of this worker's own per server range
  // (sorted); all: every worker's, for the final pull
  std::vector<Key> keys, all;
  std::vector<float> base;
  const std::vector<Range>& ranges = Postoffice::Get()->GetServerKeyRanges();
  for (size_t s = 0; s < ranges.size(); ++s) {
    const Key b = ranges[s].begin();
    keys.insert(keys.end(), {b, b + 1, b + 10 + static_cast<Key>(me)});
    base.insert(base.end(), {static_cast<float>(s * 10 + 1), static_cast<float>(s * 10 + 2), 1});
    all.insert(all.end(), {b, b + 1});
    for (int i = 0; i < workers; ++i) all.push_back(b + 10 + static_cast<Key>(i));
  }
  float mine = 0;  // the sum of c over this worker's pushes
  int rounds = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (; !Exists(signal); ++rounds) {
    EXPECT(std::chrono::steady_clock::now() < deadline) << "no " << signal << " within 60s";
    if (rounds % 100 == 0) {
      std::printf("test_replicated: worker rank %d pushed %d rounds\n", me, rounds);
      std::fflush(stdout);
    }
    const float c = static_cast<float>(rounds % 3 + 1);
    std::vector<float> vals(base);
    for (float& v : vals) v *= c;
    kv.Wait(kv.Push(keys, vals));
    mine += c;
    if (rounds % 20 == 0) {
      std::vector<float> got;
      kv.Wait(kv.Pull(keys, &got));  // pulls go to the primaries, also after a failover
      EXPECT(got.size() == keys.size()) << "pulled " << got.size() << " values";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Postoffice::Get()->Barrier(0, kWorkerGroup);
  std::vector<float> got, n;
  kv.Wait(kv.Pull(all, &got));
  EXPECT(got.size() == all.size()) << "pulled " << got.size() << " values for " << all.size() << " keys";
  if (counts) {
    kv.Wait(kv.Pull(all, &n, nullptr, kCountCmd));
    EXPECT(n.size() == all.size()) << "pulled " << n.size() << " counts";
  }
  const size_t per = 2 + static_cast<size_t>(workers);
  for (size_t s = 0; s < ranges.size(); ++s) {
    const float* row = &got[s * per];
    EXPECT(row[2 + me] == mine) << "server range " << s << ": this worker's key holds " << row[2 + me]
                                << ", but its acknowledged pushes add up to " << mine;
    float total = 0, pushes = 0;
    for (int i = 0; i < workers; ++i) total += row[2 + i];
    for (size_t i = 0; i < 2; ++i) {
      const float want = base[3 * s + i] * total;
      EXPECT(row[i] == want) << "server range " << s << ", shared key " << i << ": " << row[i] << ", want "
                             << want << " (" << base[3 * s + i] << " times every worker's sum " << total << ")";
    }
    if (!counts) continue;
    const float* cnt = &n[s * per];
    EXPECT(cnt[2 + me] == static_cast<float>(rounds)) << "server range " << s << ": this worker's key counts "
                                                       << cnt[2 + me] << " pushes, want " << rounds;
    for (int i = 0; i < workers; ++i) pushes += cnt[2 + i];
    EXPECT(cnt[0] == pushes && cnt[1] == pushes) << "server range " << s << ": shared keys count " << cnt[0]
                                                 << " and " << cnt[1] << " pushes, want " << pushes;
  }
  std::printf("test_replicated: worker rank %d OK (%d rounds, exact sums%s)\n", me, rounds,
              counts ? " and push counts" : "");
  std::fflush(stdout);
  // the killed server is reported as lost here (logged): the exit status
  // is the program's
  Finalize(0, true);
  return 0;
}

}  // namespace

int main() {
  if (IsScheduler()) {
    // the scheduler runs the migration coordinator: an elasticps process
    EXPECT(false) << "run the scheduler with --scheduler-cmd 'elasticps scheduler'";
  }
  if (IsServer()) return RunServer();
  return RunWorker();
}

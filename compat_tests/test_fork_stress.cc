// The BytePS fork's request fields as its server handlers read them (spec
// 2.8, 5.4), in the job its tests/test_benchmark_stress.cc runs: a
// scheduler and joint processes (each a server and a worker), e.g.
//   elasticps local -s 0 -w 2 --env DMLC_NUM_SERVER=2
//     --worker-cmd "env DMLC_ROLE=joint ./test_fork_stress"
// KVWorker<char> / KVServer<char>, one key range per server, page-aligned
// buffers; FS_THREADS threads per process share one KVWorker. Each round a
// thread pushes two keys (lens {len, len}) to every server and pulls them
// back into a sized destination, every few rounds also into an empty one
// and across every server in one ZPull. The handler checks each request's
// KVMeta against what the fork's KVWorker sends: key is the first key,
// addr and option 0, val_len the number of values of a push, a pull's
// share of its destination, 0 for a destination to be allocated (cmd
// kEmptyDst marks those). Pulled bytes and lens are checked exactly.
// argv: bytes per key (default 4096), rounds (default 50).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kKeysPerRequest = 2;
const int kEmptyDst = 1;  // cmd of a pull whose destination is empty
int g_len = 4096;         // bytes per key

std::atomic<long> g_checked(0);  // requests whose KVMeta the handler checked

// page-aligned memory that lives as long as the process (the fork's test
// hands such buffers to SArray::reset with a no-op deleter)
char* Aligned(size_t n) {
  void* p = nullptr;
  EXPECT(posix_memalign(&p, static_cast<size_t>(sysconf(_SC_PAGESIZE)), n) == 0) << "posix_memalign";
  memset(p, 0, n);
  return static_cast<char*>(p);
}

template <typename T>
SArray<T> View(size_t n) {
  SArray<T> a;
  a.reset(reinterpret_cast<T*>(Aligned(n * sizeof(T))), n, [](T*) {});
  return a;
}

char Pattern(Key key, int round, int i) { return static_cast<char>(key * 13 + round * 7 + i); }

// The server side: each key's last pushed bytes.
class Store {
 public:
  void Handle(const KVMeta& m, const KVPairs<char>& req, KVServer<char>* server) {
    EXPECT(!req.keys.empty()) << "a request without keys";
    EXPECT(m.key == req.keys[0]) << "KVMeta.key " << m.key << ", first key " << req.keys[0];
    EXPECT(m.addr == 0) << "KVMeta.addr " << m.addr << " (an elasticps worker sends 0)";
    EXPECT(m.option == 0) << "KVMeta.option " << m.option;
    const int n = static_cast<int>(req.keys.size());
    if (m.push) {
      EXPECT(m.val_len == static_cast<int>(req.vals.size()))
          << "push val_len " << m.val_len << ", values " << req.vals.size();
      EXPECT(req.lens.size() == req.keys.size()) << req.lens.size() << " lens";
      std::lock_guard<std::mutex> lk(mu_);
      size_t off = 0;
      for (int i = 0; i < n; ++i) {
        EXPECT(req.lens[i] == g_len) << "key " << req.keys[i] << " len " << req.lens[i];
        vals_[req.keys[i]].assign(req.vals.data() + off, req.vals.data() + off + req.lens[i]);
        off += req.lens[i];
      }
      ++g_checked;
      server->Response(m);
      return;
    }
    const int want = m.cmd == kEmptyDst ? 0 : n * g_len;
    EXPECT(m.val_len == want) << "pull of " << n << " keys (cmd " << m.cmd << "): val_len " << m.val_len
                              << ", want " << want;
    KVPairs<char> res;
    res.keys = req.keys;
    res.vals.resize(static_cast<size_t>(n) * g_len);
    res.lens.resize(n);
    {
      std::lock_guard<std::mutex> lk(mu_);
      for (int i = 0; i < n; ++i) {
        auto it = vals_.find(req.keys[i]);
        EXPECT(it != vals_.end()) << "pull of key " << req.keys[i] << " before its push";
        memcpy(res.vals.data() + static_cast<size_t>(i) * g_len, it->second.data(), g_len);
        res.lens[i] = g_len;
      }
    }
    ++g_checked;
    server->Response(m, res);
  }

 private:
  std::mutex mu_;
  std::map<Key, std::vector<char>> vals_;
};

// The keys a thread owns on server s.
SArray<Key> KeysOf(const std::vector<Range>& krs, int s, int session) {
  SArray<Key> keys = View<Key>(kKeysPerRequest);
  for (int k = 0; k < kKeysPerRequest; ++k) keys[k] = krs[s].begin() + session * kKeysPerRequest + k;
  return keys;
}

void Check(const SArray<Key>& keys, const char* vals, size_t nvals, const SArray<int>& lens, int round,
           const char* what) {
  EXPECT(nvals == keys.size() * g_len) << what << ": " << nvals << " bytes";
  EXPECT(lens.size() == keys.size()) << what << ": " << lens.size() << " lens";
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT(lens[k] == g_len) << what << ": key " << keys[k] << " len " << lens[k];
    for (int i = 0; i < g_len; ++i) {
      EXPECT(vals[k * g_len + i] == Pattern(keys[k], round, i))
          << what << ": key " << keys[k] << " byte " << i << " round " << round;
    }
  }
}

void RunThread(KVWorker<char>* kv, int session, int rounds) {
  const std::vector<Range>& krs = Postoffice::GetWorker()->GetServerKeyRanges();
  const int ns = static_cast<int>(krs.size());
  std::vector<SArray<Key>> keys;
  std::vector<SArray<char>> vals, dsts;
  SArray<int> lens = View<int>(kKeysPerRequest);
  for (int k = 0; k < kKeysPerRequest; ++k) lens[k] = g_len;
  SArray<Key> all_keys = View<Key>(static_cast<size_t>(ns) * kKeysPerRequest);
  for (int s = 0; s < ns; ++s) {
    keys.push_back(KeysOf(krs, s, session));
    vals.push_back(View<char>(kKeysPerRequest * g_len));
    dsts.push_back(View<char>(kKeysPerRequest * g_len));
    for (int k = 0; k < kKeysPerRequest; ++k) all_keys[s * kKeysPerRequest + k] = keys[s][k];
  }
  for (int round = 0; round < rounds; ++round) {
    std::vector<int> ts;
    for (int s = 0; s < ns; ++s) {
      for (int k = 0; k < kKeysPerRequest; ++k) {
        for (int i = 0; i < g_len; ++i) vals[s][k * g_len + i] = Pattern(keys[s][k], round, i);
      }
      ts.push_back(kv->ZPush(keys[s], vals[s], lens));
    }
    for (int t : ts) kv->Wait(t);
    ts.clear();
    std::vector<SArray<int>> got_lens(ns);
    for (int s = 0; s < ns; ++s) ts.push_back(kv->ZPull(keys[s], &dsts[s], &got_lens[s]));
    for (int t : ts) kv->Wait(t);
    for (int s = 0; s < ns; ++s) Check(keys[s], dsts[s].data(), dsts[s].size(), got_lens[s], round, "ZPull");
    if (round % 5 != 0) continue;
    // a destination to be allocated: the request says val_len 0
    SArray<char> fresh;
    SArray<int> fresh_lens;
    kv->Wait(kv->ZPull(keys[0], &fresh, &fresh_lens, kEmptyDst));
    Check(keys[0], fresh.data(), fresh.size(), fresh_lens, round, "ZPull into an empty SArray");
    // one pull over every server: each request carries its server's share
    SArray<char> whole = View<char>(all_keys.size() * g_len);
    SArray<int> whole_lens;
    kv->Wait(kv->ZPull(all_keys, &whole, &whole_lens));
    Check(all_keys, whole.data(), whole.size(), whole_lens, round, "ZPull over every server");
    // std::vector destinations, sized and not
    std::vector<Key> vkeys(keys[ns - 1].begin(), keys[ns - 1].end());
    std::vector<char> vdst(kKeysPerRequest * g_len);
    std::vector<int> vlens;
    kv->Wait(kv->Pull(vkeys, &vdst, &vlens));
    Check(keys[ns - 1], vdst.data(), vdst.size(), SArray<int>(vlens), round, "Pull into a sized vector");
    std::vector<char> vempty;
    kv->Wait(kv->Pull(vkeys, &vempty, &vlens, kEmptyDst));
    Check(keys[ns - 1], vempty.data(), vempty.size(), SArray<int>(vlens), round, "Pull into an empty vector");
  }
}

}  // namespace

int main(int argc, char* argv[]) {
  g_len = argc > 1 ? atoi(argv[1]) : 4096;
  const int rounds = argc > 2 ? atoi(argv[2]) : 50;
  EXPECT(g_len > 0 && rounds > 0) << "argv: bytes per key, rounds";
  const Node::Role role = GetRole(compat::Env("DMLC_ROLE"));
  if (role != Node::JOINT) {
    EXPECT(role == Node::SCHEDULER) << "run joint processes and a scheduler";
    StartPS(0, role, -1, true);
    Finalize(0, role, true);
    std::printf("test_fork_stress: scheduler done\n");
    return 0;
  }
  StartPS(0, role, -1, true);
  Store store;
  KVServer<char>* server = new KVServer<char>(0);
  server->set_request_handle(
      [&store](const KVMeta& m, const KVPairs<char>& req, KVServer<char>* s) { store.Handle(m, req, s); });
  KVWorker<char> kv(0, 0);
  const int threads = compat::EnvInt("FS_THREADS", 2);
  const int rank = Postoffice::GetWorker()->my_rank();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back(RunThread, &kv, rank * threads + t, rounds);
  for (auto& t : ts) t.join();
  // every process's requests have been answered before any server stops
  Postoffice::GetWorker()->Barrier(0, kWorkerGroup);
  EXPECT(g_checked.load() > 0) << "this process's server saw no request";
  std::printf("test_fork_stress: worker rank %d: %d threads x %d rounds exact; this server checked %ld requests\n",
              rank, threads, rounds, g_checked.load());
  Finalize(0, role, true);
  delete server;
  return 0;
}

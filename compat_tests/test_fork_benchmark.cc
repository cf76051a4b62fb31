// The BytePS fork's benchmark program, as its API is used (spec section 7,
// test_benchmark), with exact checks instead of timings:
//  - StartPS(0, GetRole(DMLC_ROLE), -1, true), Finalize(0, role, true);
//  - servers: KVServer<char>(0, false, 0) whose handler expects one key
//    per request with lens[0] == vals.size(); with ENABLE_RECV_BUFFER=1
//    they register a receive buffer per worker rank and key
//    (RegisterRecvBufferWithRank) and check that each push arrives in it,
//    then meet the workers at a Barrier(0, kWorkerGroup + kServerGroup);
//  - workers: KVWorker<char>(0, 0, 0), NUM_KEY_PER_SERVER keys per server
//    (key k on server k % servers, ps key krs[server].begin() + k),
//    page-aligned buffers, one blocking init push per key, then
//    argv[3] = mode: 0 push then pull (argv[2] = repeat rounds of a
//    blocking ZPush, then of a blocking ZPull, of the first key of every
//    server), 1 push and pull, 2 push only, 3 pull only (TOTAL_DURATION
//    rounds of ZPush/ZPull of every key, waited for at the round's end).
// argv[1] = value bytes per key (a multiple of 4). Values are int32 (sums
// exact): worker r pushes (r + 1) * (k + 1) + e as element e of key k; the
// servers sum. A pull is checked exactly where no push can run alongside
// it, and every key is pulled and checked once more at the end.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

enum Mode { kPushThenPull = 0, kPushPull = 1, kPushOnly = 2, kPullOnly = 3 };

int len_bytes = 4096;
int repeat = 3;
Mode mode = kPushPull;
int keys_per_server = 2;
int rounds = 3;
bool recv_buffer = false;

char* PageAligned(size_t n) {
  void* p = nullptr;
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT(posix_memalign(&p, page, (n + page - 1) / page * page) == 0) << n;
  memset(p, 0, n);
  return static_cast<char*>(p);
}

int NumKeys() { return NumServers() * keys_per_server; }

// How many times each worker pushes key k in the whole run.
int PushesOf(int k) {
  switch (mode) {
    case kPushThenPull: return 1 + (k < NumServers() ? repeat : 0);
    case kPushPull:
    case kPushOnly: return 1 + rounds;
    default: return 1;
  }
}

// The sum the servers hold for element e of key k once every worker has
// pushed it p times.
int32_t Expected(int k, int e, int p) {
  int w = NumWorkers();
  return p * ((k + 1) * w * (w + 1) / 2 + w * e);
}

// ---------------------------------------------------------------- server

class Server {
 public:
  Server() : server_(new KVServer<char>(0, false, 0)) {
    server_->set_request_handle(
        [this](const KVMeta& m, const KVPairs<char>& d, KVServer<char>* s) { Handle(m, d, s); });
    if (!recv_buffer) return;
    const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
    for (int r = 0; r < NumWorkers(); ++r) {
      for (int k = MyRank(); k < NumKeys(); k += NumServers()) {
        SArray<Key> keys;
        keys.push_back(krs[MyRank()].begin() + k);
        SArray<char> vals(PageAligned(len_bytes), len_bytes, true);
        SArray<int> lens;
        lens.push_back(len_bytes);
        server_->RegisterRecvBufferWithRank(r, keys, vals, lens);
        registered_[std::make_pair(Postoffice::WorkerRankToID(r), keys[0])] = vals;
      }
    }
    Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup);
  }
  ~Server() { delete server_; }

 private:
  void Handle(const KVMeta& meta, const KVPairs<char>& req, KVServer<char>* s) {
    std::lock_guard<std::mutex> lk(mu_);
    EXPECT(req.keys.size() == 1u) << "one key per request, got " << req.keys.size();
    Key key = req.keys[0];
    std::vector<int32_t>& store = store_[key];
    if (meta.push) {
      EXPECT(req.lens.size() == 1u && req.lens[0] == static_cast<int>(req.vals.size()))
          << "push lens of key " << key;
      EXPECT(req.vals.size() == static_cast<size_t>(len_bytes)) << req.vals.size();
      if (recv_buffer) {
        auto it = registered_.find(std::make_pair(meta.sender, key));
        EXPECT(it != registered_.end()) << "no buffer for " << meta.sender << "/" << key;
        EXPECT(req.vals.data() == it->second.data())
            << "the push from " << meta.sender << " for key " << key << " is not in its registered buffer";
      }
      const int32_t* v = reinterpret_cast<const int32_t*>(req.vals.data());
      size_t n = req.vals.size() / sizeof(int32_t);
      if (store.empty()) store.assign(n, 0);
      for (size_t i = 0; i < n; ++i) store[i] += v[i];
      s->Response(meta);
      return;
    }
    EXPECT(!store.empty()) << "pull of key " << key << " before any push";
    KVPairs<char> res;
    res.keys = req.keys;
    res.vals.CopyFrom(reinterpret_cast<const char*>(store.data()), store.size() * sizeof(int32_t));
    res.lens.push_back(static_cast<int>(res.vals.size()));
    s->Response(meta, res);
  }

  KVServer<char>* server_;
  std::mutex mu_;
  std::map<Key, std::vector<int32_t>> store_;
  std::map<std::pair<int, Key>, SArray<char>> registered_;
};

// ---------------------------------------------------------------- worker

struct KeyBufs {
  SArray<Key> keys;
  SArray<char> vals;  // what this worker pushes
  SArray<int> lens;
  SArray<char> pulled;  // where its pulls land
  SArray<int> pulled_lens;
};

// Checks a pull of key k that no push ran alongside: p pushes of it by
// every worker.
void CheckPulled(const KeyBufs& b, int k, int p, const char* where) {
  EXPECT(b.pulled.size() == static_cast<size_t>(len_bytes)) << where << ": " << b.pulled.size();
  EXPECT(b.pulled_lens.size() == 1u && b.pulled_lens[0] == len_bytes) << where << ": lens of key " << k;
  const int32_t* v = reinterpret_cast<const int32_t*>(b.pulled.data());
  for (int e = 0; e < len_bytes / 4; ++e) {
    EXPECT(v[e] == Expected(k, e, p)) << where << ": key " << k << " element " << e << ": " << v[e]
                                      << " != " << Expected(k, e, p);
  }
}

void RunWorker() {
  KVWorker<char> kv(0, 0, 0);
  const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
  EXPECT(static_cast<int>(krs.size()) == NumServers()) << krs.size();
  int rank = MyRank();
  std::vector<KeyBufs> bufs(NumKeys());
  for (int k = 0; k < NumKeys(); ++k) {
    KeyBufs& b = bufs[k];
    b.keys.push_back(krs[k % NumServers()].begin() + k);
    b.vals = SArray<char>(PageAligned(len_bytes), len_bytes, true);
    int32_t* v = reinterpret_cast<int32_t*>(b.vals.data());
    for (int e = 0; e < len_bytes / 4; ++e) v[e] = (rank + 1) * (k + 1) + e;
    b.lens.push_back(len_bytes);
    b.pulled = SArray<char>(PageAligned(len_bytes), len_bytes, true);
    b.pulled_lens.push_back(0);
  }
  if (recv_buffer) Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup);

  for (int k = 0; k < NumKeys(); ++k) {
    kv.Wait(kv.ZPush(bufs[k].keys, bufs[k].vals, bufs[k].lens));
  }
  Postoffice::Get()->Barrier(0, kWorkerGroup);  // every init push is in

  switch (mode) {
    case kPushThenPull:
      for (int i = 0; i < repeat; ++i) {
        for (int s = 0; s < NumServers(); ++s) kv.Wait(kv.ZPush(bufs[s].keys, bufs[s].vals, bufs[s].lens));
      }
      Postoffice::Get()->Barrier(0, kWorkerGroup);
      for (int i = 0; i < repeat; ++i) {
        for (int s = 0; s < NumServers(); ++s) {
          KeyBufs& b = bufs[s];
          const char* at = b.pulled.data();
          kv.Wait(kv.ZPull(b.keys, &b.pulled, &b.pulled_lens));
          EXPECT(b.pulled.data() == at) << "the pull did not land in its buffer";
          CheckPulled(b, s, PushesOf(s), "mode 0 pull");
        }
      }
      break;
    case kPushPull:
    case kPushOnly:
    case kPullOnly:
      for (int r = 0; r < rounds; ++r) {
        std::vector<int> ts;
        for (int k = 0; k < NumKeys(); ++k) {
          KeyBufs& b = bufs[k];
          if (mode != kPullOnly) ts.push_back(kv.ZPush(b.keys, b.vals, b.lens));
          if (mode != kPushOnly) ts.push_back(kv.ZPull(b.keys, &b.pulled, &b.pulled_lens));
        }
        for (int t : ts) kv.Wait(t);
        if (mode == kPullOnly) {
          for (int k = 0; k < NumKeys(); ++k) CheckPulled(bufs[k], k, 1, "mode 3 pull");
        }
      }
      break;
  }

  Postoffice::Get()->Barrier(0, kWorkerGroup);  // every push is in
  for (int k = 0; k < NumKeys(); ++k) {
    kv.Wait(kv.ZPull(bufs[k].keys, &bufs[k].pulled, &bufs[k].pulled_lens));
    CheckPulled(bufs[k], k, PushesOf(k), "final pull");
  }
  printf("worker %d: mode %d, %d keys of %d bytes, sums exact\n", rank, mode, NumKeys(), len_bytes);
}

}  // namespace

int main(int argc, char* argv[]) {
  if (argc > 1) len_bytes = atoi(argv[1]);
  if (argc > 2) repeat = atoi(argv[2]);
  if (argc > 3) mode = static_cast<Mode>(atoi(argv[3]));
  EXPECT(len_bytes > 0 && len_bytes % 4 == 0) << "value bytes must be a positive multiple of 4: " << len_bytes;
  EXPECT(mode >= kPushThenPull && mode <= kPullOnly) << "mode must be 0 to 3: " << mode;
  keys_per_server = compat::EnvInt("NUM_KEY_PER_SERVER", 2);
  rounds = compat::EnvInt("TOTAL_DURATION", 3);
  recv_buffer = compat::EnvInt("ENABLE_RECV_BUFFER", 0) != 0;

  Node::Role role = GetRole(compat::Env("DMLC_ROLE", "worker"));
  StartPS(0, role, -1, true);
  if (IsServer()) {
    Server server;
    Finalize(0, role, true);
    return 0;
  }
  if (!IsScheduler()) RunWorker();
  Finalize(0, role, true);
  return 0;
}

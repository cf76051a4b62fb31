// KVServer::RegisterRecvBuffer / RegisterRecvBufferWithRank (BytePS fork,
// spec sections 2.8 and 2.10), with the fork's API generation (StartPS,
// KVWorker<char>(0, 0, 0), KVServer<char>(0, false, 0)):
//  - each server registers a receive buffer per worker and key of its own
//    (by rank for even worker ranks, by node id, the deprecated form, for
//    odd ones) and meets the workers at Barrier(0, kWorkerGroup +
//    kServerGroup), as the fork's benchmark does;
//  - every push of a registered (worker, key) arrives in that buffer: the
//    handler's req_data.vals.data() is the buffer's, and the buffer holds
//    exactly what the worker sent in that round;
//  - a key without a buffer arrives in new memory, and so does a push
//    larger than its buffer (with one warning), its values intact;
//  - pulls land in the worker's sized destination (same data()), with the
//    exact sums the server kept.
// Values are int32: worker r pushes (t + 1) * (r + 1) * (k + 1) + e in
// round t as element e of key k.
#include <stdlib.h>
#include <string.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kRounds = 3;
const int kKeysPerServer = 3;  // key 0 of each server: no buffer; key 1: too small
const int kInts = 1024;        // int32 values per push

int NumKeys() { return NumServers() * kKeysPerServer; }
int ServerOf(int k) { return k % NumServers(); }
int Slot(int k) { return k / NumServers(); }  // 0: unregistered, 1: too small, 2+: registered

int32_t Pushed(int t, int r, int k, int e) { return (t + 1) * (r + 1) * (k + 1) + e; }

Key PsKey(int k) { return Postoffice::Get()->GetServerKeyRanges()[ServerOf(k)].begin() + k; }

// ---------------------------------------------------------------- server

class Server {
 public:
  Server() : server_(new KVServer<char>(0, false, 0)) {
    server_->set_request_handle(
        [this](const KVMeta& m, const KVPairs<char>& d, KVServer<char>* s) { Handle(m, d, s); });
    for (int r = 0; r < NumWorkers(); ++r) {
      for (int k = MyRank(); k < NumKeys(); k += NumServers()) {
        if (Slot(k) == 0) continue;
        SArray<Key> keys;
        keys.push_back(PsKey(k));
        size_t bytes = Slot(k) == 1 ? kInts * 2 : kInts * 4;  // slot 1: half of a push
        SArray<char> vals(bytes, 0);
        SArray<int> lens;
        lens.push_back(static_cast<int>(bytes));
        int id = Postoffice::WorkerRankToID(r);
        if (r % 2 == 0) {
          server_->RegisterRecvBufferWithRank(r, keys, vals, lens);
        } else {
          server_->RegisterRecvBuffer(id, keys, vals, lens);
        }
        registered_[std::make_pair(id, keys[0])] = vals;
      }
    }
    Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup);
  }

  ~Server() { delete server_; }

  // Once every worker is done: what arrived where.
  void Check() {
    std::lock_guard<std::mutex> lk(mu_);
    int mine = 0;
    for (int k = MyRank(); k < NumKeys(); k += NumServers()) ++mine;
    EXPECT(in_buffer_ == (mine - 2) * NumWorkers() * kRounds)
        << in_buffer_ << " pushes arrived in registered buffers";
    EXPECT(elsewhere_ == 2 * NumWorkers() * kRounds) << elsewhere_ << " pushes arrived in new memory";
    printf("server %d: %d pushes in registered buffers, exact\n", MyRank(), in_buffer_);
  }

 private:
  void Handle(const KVMeta& meta, const KVPairs<char>& req, KVServer<char>* s) {
    std::lock_guard<std::mutex> lk(mu_);
    EXPECT(req.keys.size() == 1u) << req.keys.size();
    Key key = req.keys[0];
    int k = static_cast<int>(key - Postoffice::Get()->GetServerKeyRanges()[MyRank()].begin());
    std::vector<int32_t>& store = store_[key];
    if (!meta.push) {
      KVPairs<char> res;
      res.keys = req.keys;
      res.vals.CopyFrom(reinterpret_cast<const char*>(store.data()), store.size() * 4);
      res.lens.push_back(static_cast<int>(res.vals.size()));
      s->Response(meta, res);
      return;
    }
    EXPECT(req.vals.size() == kInts * 4u) << req.vals.size();
    auto it = registered_.find(std::make_pair(meta.sender, key));
    if (Slot(k) >= 2) {
      EXPECT(it != registered_.end()) << "no buffer for " << meta.sender;
      EXPECT(req.vals.data() == it->second.data())
          << "the push of key " << k << " from node " << meta.sender << " is not in its registered buffer";
      ++in_buffer_;
    } else {
      EXPECT(it == registered_.end() || req.vals.data() != it->second.data())
          << "a push larger than its buffer landed in it";
      ++elsewhere_;
    }
    // the values are the worker's, whichever memory they are in; the
    // round is this (worker, key)'s push count
    int r = Postoffice::IDtoRank(meta.sender);
    int t = rounds_[std::make_pair(meta.sender, key)]++;
    const int32_t* v = reinterpret_cast<const int32_t*>(req.vals.data());
    if (store.empty()) store.assign(kInts, 0);
    for (int e = 0; e < kInts; ++e) {
      EXPECT(v[e] == Pushed(t, r, k, e)) << "key " << k << " from rank " << r << " round " << t << " element " << e;
      store[e] += v[e];
    }
    s->Response(meta);
  }

  KVServer<char>* server_;
  std::mutex mu_;
  std::map<std::pair<int, Key>, SArray<char>> registered_;
  std::map<std::pair<int, Key>, int> rounds_;
  std::map<Key, std::vector<int32_t>> store_;
  int in_buffer_ = 0, elsewhere_ = 0;
};

// ---------------------------------------------------------------- worker

void RunWorker() {
  KVWorker<char> kv(0, 0, 0);
  Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup);  // buffers registered
  int me = MyRank();
  std::vector<SArray<Key>> keys(NumKeys());
  std::vector<SArray<char>> vals(NumKeys());
  std::vector<SArray<int>> lens(NumKeys());
  for (int k = 0; k < NumKeys(); ++k) {
    keys[k].push_back(PsKey(k));
    vals[k] = SArray<char>(kInts * 4, 0);
    lens[k].push_back(kInts * 4);
  }
  for (int t = 0; t < kRounds; ++t) {
    std::vector<int> ts;
    for (int k = 0; k < NumKeys(); ++k) {
      // a fresh array per round: the last one may still be sent
      vals[k] = SArray<char>(kInts * 4, 0);
      int32_t* v = reinterpret_cast<int32_t*>(vals[k].data());
      for (int e = 0; e < kInts; ++e) v[e] = Pushed(t, me, k, e);
      ts.push_back(kv.ZPush(keys[k], vals[k], lens[k]));
    }
    for (int x : ts) kv.Wait(x);
  }
  Postoffice::Get()->Barrier(0, kWorkerGroup);  // every push is in
  int w = NumWorkers(), tri = w * (w + 1) / 2;
  for (int k = 0; k < NumKeys(); ++k) {
    SArray<char> dst(kInts * 4, 0);
    SArray<int> dlens;
    const char* at = dst.data();
    kv.Wait(kv.ZPull(keys[k], &dst, &dlens));
    EXPECT(dst.data() == at && dst.size() == kInts * 4u) << "the pull did not land in its buffer";
    EXPECT(dlens.size() == 1u && dlens[0] == kInts * 4) << "pulled lens";
    const int32_t* v = reinterpret_cast<const int32_t*>(dst.data());
    for (int e = 0; e < kInts; ++e) {
      // sum over rounds t and ranks r of (t+1)(r+1)(k+1) + e
      int32_t want = (kRounds * (kRounds + 1) / 2) * tri * (k + 1) + kRounds * w * e;
      EXPECT(v[e] == want) << "key " << k << " element " << e << ": " << v[e] << " != " << want;
    }
  }
  printf("worker %d: pulls exact\n", me);
  Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup);
}

}  // namespace

int main() {
  Node::Role role = GetRole(compat::Env("DMLC_ROLE", "worker"));
  StartPS(0, role, -1, true);
  if (IsServer()) {
    Server* server = new Server();
    Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup);  // the workers are done
    server->Check();
    Finalize(0, role, true);
    delete server;
    return 0;
  }
  if (!IsScheduler()) RunWorker();
  Finalize(0, role, true);
  return 0;
}

// KVWorker::set_slicer (spec section 2.8): a slicer with ps-lite's
// signature sends key k to server k % num_servers, not by key range, and
// decides which server gets what:
//  - every worker pushes the same keys (some from each server's range, so
//    that slicing by range would send them elsewhere) ROUNDS times, with
//    and without lens; the servers record every key they are sent, and at
//    the end each checks it got exactly the keys k % num_servers == its
//    rank, each exactly workers * ROUNDS times;
//  - pulls go through the slicer too, and return the exact sums in request
//    key order, lens included;
//  - a slicer that sends nothing completes the operation at once;
//  - set_slicer(nullptr) restores slicing by range.
// Uses the dmlc API generation (Start / Finalize(customer, barrier)).
#include <map>
#include <mutex>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kRounds = 4;
const Key kLensBase = 1000;  // keys pushed with lens: kLensBase + i

// Keys: 0..5 (all in server 0's range) and the first two of every other
// server's range; and kLensBase.. for the lens pushes.
std::vector<Key> TestKeys() {
  const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
  std::vector<Key> keys = {0, 1, 2, 3, 4, 5};
  for (size_t s = 1; s < krs.size(); ++s) {
    keys.push_back(krs[s].begin());
    keys.push_back(krs[s].begin() + 1);
  }
  return keys;
}

std::vector<Key> LensKeys() { return {kLensBase, kLensBase + 1, kLensBase + 2, kLensBase + 3, kLensBase + 5}; }

int Owner(Key k) { return static_cast<int>(k % static_cast<Key>(NumServers())); }

// The slicer: key k to server k % servers, values and lens alongside.
void ModSlicer(const KVPairs<int>& send, const std::vector<Range>& ranges,
               KVWorker<int>::SlicedKVs* sliced) {
  size_t n = ranges.size();
  sliced->assign(n, {false, KVPairs<int>()});
  size_t per = send.lens.empty() && !send.keys.empty() ? send.vals.size() / send.keys.size() : 0;
  size_t off = 0;
  for (size_t i = 0; i < send.keys.size(); ++i) {
    auto& part = (*sliced)[send.keys[i] % n];
    part.first = true;
    part.second.keys.push_back(send.keys[i]);
    size_t len = send.lens.empty() ? per : static_cast<size_t>(send.lens[i]);
    if (!send.lens.empty()) part.second.lens.push_back(send.lens[i]);
    for (size_t j = 0; j < len && off + j < send.vals.size(); ++j) {
      part.second.vals.push_back(send.vals[off + j]);
    }
    off += len;
  }
}

// ---------------------------------------------------------------- server

const int kLensCmd = 1;  // requests with lens; the others use the default handle

std::mutex mu;
std::map<Key, int> pushed;                   // key -> times this server was sent it
std::map<Key, std::vector<int>> lens_store;  // kLensCmd values

void RunServer() {
  auto* server = new KVServer<int>(0);
  KVServerDefaultHandle<int> store;
  server->set_request_handle([&store](const KVMeta& meta, const KVPairs<int>& req, KVServer<int>* s) {
    std::unique_lock<std::mutex> lk(mu);
    if (meta.push) {
      for (Key k : req.keys) pushed[k]++;
    }
    if (meta.cmd != kLensCmd) {
      lk.unlock();
      store(meta, req, s);
      return;
    }
    KVPairs<int> res;
    if (meta.push) {
      EXPECT(req.lens.size() == req.keys.size()) << "lens of a lens push";
      size_t off = 0;
      for (size_t i = 0; i < req.keys.size(); ++i) {
        auto& v = lens_store[req.keys[i]];
        size_t n = static_cast<size_t>(req.lens[i]);
        if (v.empty()) v.assign(n, 0);
        EXPECT(v.size() == n) << "key " << req.keys[i] << " changed length";
        for (size_t j = 0; j < n; ++j) v[j] += req.vals[off + j];
        off += n;
      }
      EXPECT(off == req.vals.size()) << "lens do not cover the values";
    } else {
      res.keys = req.keys;
      for (Key k : req.keys) {
        auto& v = lens_store[k];
        for (int x : v) res.vals.push_back(x);
        res.lens.push_back(static_cast<int>(v.size()));
      }
    }
    lk.unlock();
    s->Response(meta, res);
  });
  Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup);  // the workers are done

  std::lock_guard<std::mutex> lk(mu);
  int me = MyRank();
  std::map<Key, int> want;
  for (Key k : TestKeys()) {
    if (Owner(k) == me) want[k] = NumWorkers() * (kRounds + 1);  // + the push-pull
  }
  for (Key k : LensKeys()) {
    if (Owner(k) == me) want[k] = NumWorkers();
  }
  for (const auto& kv : pushed) {
    EXPECT(want.count(kv.first) == 1) << "server " << me << " was sent key " << kv.first
                                      << ", which the slicer gives server " << Owner(kv.first);
    EXPECT(kv.second == want[kv.first]) << "server " << me << " was sent key " << kv.first << " "
                                        << kv.second << " times, expected " << want[kv.first];
  }
  EXPECT(pushed.size() == want.size()) << "server " << me << " was sent " << pushed.size()
                                       << " distinct keys, expected " << want.size();
  printf("server %d: was sent exactly the slicer's %zu keys\n", me, want.size());
}

// ---------------------------------------------------------------- worker

void RunWorker() {
  KVWorker<int> kv(0, 0);
  kv.set_slicer(ModSlicer);
  const int w = NumWorkers(), me = MyRank(), tri = w * (w + 1) / 2;
  std::vector<Key> keys = TestKeys();
  std::vector<int> vals;
  for (size_t i = 0; i < keys.size(); ++i) vals.push_back((me + 1) * static_cast<int>(i + 1));

  std::vector<int> ts;
  for (int r = 0; r < kRounds; ++r) ts.push_back(kv.Push(keys, vals));
  for (int t : ts) kv.Wait(t);
  Postoffice::Get()->Barrier(0, kWorkerGroup);
  std::vector<int> out;
  kv.Wait(kv.Pull(keys, &out));
  EXPECT(out.size() == keys.size()) << out.size();
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT(out[i] == kRounds * tri * static_cast<int>(i + 1))
        << "key " << keys[i] << ": " << out[i] << " != " << kRounds * tri * static_cast<int>(i + 1);
  }
  Postoffice::Get()->Barrier(0, kWorkerGroup);  // every worker has pulled

  std::vector<int> pp;
  kv.Wait(kv.PushPull(keys, vals, &pp));
  EXPECT(pp.size() == keys.size()) << pp.size();
  for (size_t i = 0; i < keys.size(); ++i) {
    // at least this worker's push-pull and at most every worker's
    int lo = kRounds * tri * static_cast<int>(i + 1) + vals[i];
    int hi = (kRounds + 1) * tri * static_cast<int>(i + 1);
    EXPECT(pp[i] >= lo && pp[i] <= hi) << "push-pull key " << keys[i] << ": " << pp[i];
  }

  // lens: 1 + i % 3 values per key
  std::vector<Key> lkeys = LensKeys();
  std::vector<int> lvals, lens;
  for (size_t i = 0; i < lkeys.size(); ++i) {
    lens.push_back(1 + static_cast<int>(i % 3));
    for (int j = 0; j < lens.back(); ++j) lvals.push_back((me + 1) * (100 + static_cast<int>(i) * 10 + j));
  }
  kv.Wait(kv.Push(lkeys, lvals, lens, kLensCmd));

  // a slicer that sends nothing: the operation completes at once
  bool ran = false;
  kv.set_slicer([](const KVPairs<int>&, const std::vector<Range>& ranges, KVWorker<int>::SlicedKVs* sliced) {
    sliced->assign(ranges.size(), {false, KVPairs<int>()});
  });
  kv.Wait(kv.Push(keys, vals, {}, 0, [&ran] { ran = true; }));
  EXPECT(ran) << "the callback of an operation sent nowhere";
  kv.set_slicer(ModSlicer);
  Postoffice::Get()->Barrier(0, kWorkerGroup);  // every push is in

  std::vector<int> lout, lgot;
  kv.Wait(kv.Pull(lkeys, &lout, &lgot, kLensCmd));
  EXPECT(lgot == lens) << "pulled lens";
  size_t off = 0;
  for (size_t i = 0; i < lkeys.size(); ++i) {
    for (int j = 0; j < lens[i]; ++j, ++off) {
      int want = tri * (100 + static_cast<int>(i) * 10 + j);
      EXPECT(off < lout.size() && lout[off] == want) << "lens key " << lkeys[i] << " element " << j;
    }
  }
  EXPECT(off == lout.size()) << lout.size();

  // null: slicing by range again (pulls are not counted by the servers)
  kv.set_slicer(nullptr);
  std::vector<int> ranged;
  kv.Wait(kv.Pull(keys, &ranged));
  // by range: the range's server answers, which holds the key only if the
  // slicer sent it there too (the default handle answers 0 otherwise)
  const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
  for (size_t i = 0; i < keys.size(); ++i) {
    int by_range = 0;
    while (keys[i] >= krs[by_range].end()) ++by_range;
    int want = by_range == Owner(keys[i]) ? (kRounds + 1) * tri * static_cast<int>(i + 1) : 0;
    EXPECT(ranged[i] == want) << "by range, key " << keys[i] << ": " << ranged[i] << " != " << want;
  }
  Postoffice::Get()->Barrier(0, kWorkerGroup + kServerGroup);
  printf("worker %d: sliced push/pull exact\n", me);
}

}  // namespace

int main() {
  Start(0);
  if (IsServer()) {
    RunServer();
  } else if (IsWorker()) {
    RunWorker();
  }
  Finalize(0, true);
  return 0;
}

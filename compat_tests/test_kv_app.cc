// Scenario "test_kv_app" (spec section 7), with exact checks:
//  A. upstream's sequence on app 0 with KVServerDefaultHandle<float>: 10000
//     keys, 50 pipelined Push (at most 10 in flight), Pull, 50 PushPull;
//  B. the zero-copy API (ZPush / ZPull / ZPushPull on SArrays), callbacks
//     running before Wait returns, pulls into empty and pre-sized arrays,
//     and an operation with no keys;
//  C. values of different lengths (lens) and cmd pass-through on app 1,
//     whose server stores any number of values per key.
// Values are small integers, so every float sum is exact. Keys of worker r
// are offset by r: the workers' keys never collide, and each worker can
// check its own sums.
#include <atomic>
#include <cstdlib>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kCmd = 42;

// A store with any number of values per key: pushes add element-wise (the
// first push of a key sets its length), pulls return values with lens.
struct LensStore {
  std::unordered_map<Key, std::vector<float>> data;

  void operator()(const KVMeta& meta, const KVPairs<float>& req, KVServer<float>* server) {
    EXPECT(meta.cmd == kCmd) << "cmd " << meta.cmd;
    size_t n = req.keys.size();
    if (meta.push) {
      std::vector<int> lens(n);
      if (!req.lens.empty()) {
        EXPECT(req.lens.size() == n) << req.lens.size() << " lens for " << n << " keys";
        size_t total = 0;
        for (size_t i = 0; i < n; ++i) total += lens[i] = req.lens[i];
        EXPECT(total == req.vals.size()) << "lens sum " << total << " vals " << req.vals.size();
      } else {
        EXPECT(n > 0 && req.vals.size() % n == 0) << req.vals.size() << " vals for " << n << " keys";
        for (size_t i = 0; i < n; ++i) lens[i] = static_cast<int>(req.vals.size() / n);
      }
      size_t off = 0;
      for (size_t i = 0; i < n; ++i) {
        std::vector<float>& v = data[req.keys[i]];
        if (v.empty()) v.assign(lens[i], 0);
        EXPECT(v.size() == static_cast<size_t>(lens[i])) << "key length changed";
        for (int j = 0; j < lens[i]; ++j) v[j] += req.vals[off + j];
        off += lens[i];
      }
    }
    KVPairs<float> res;
    if (meta.pull) {
      std::vector<float> vals;
      std::vector<int> lens;
      for (size_t i = 0; i < n; ++i) {
        const std::vector<float>& v = data[req.keys[i]];
        vals.insert(vals.end(), v.begin(), v.end());
        lens.push_back(static_cast<int>(v.size()));
      }
      res.keys = req.keys;
      res.vals = SArray<float>(vals);
      res.lens = SArray<int>(lens);
    }
    server->Response(meta, res);
  }
};

void StartServer() {
  if (!IsServer()) return;
  auto server0 = new KVServer<float>(0);
  server0->set_request_handle(KVServerDefaultHandle<float>());
  auto server1 = new KVServer<float>(1);
  server1->set_request_handle(LensStore());
  RegisterExitCallback([server0, server1]() {
    delete server0;
    delete server1;
  });
}

std::vector<Key> MakeKeys(int num, int offset) {
  std::vector<Key> keys(num);
  for (int i = 0; i < num; ++i) keys[i] = kMaxKey / num * i + offset;
  return keys;
}

// A: upstream's test_kv_app, with exact comparisons.
void PartA(KVWorker<float>* kv, int rank) {
  const int num = 10000, repeat = 50;
  std::vector<Key> keys = MakeKeys(num, rank);
  std::vector<float> vals(num);
  srand(rank + 7);
  for (int i = 0; i < num; ++i) vals[i] = static_cast<float>(rand() % 1000);

  std::vector<int> ts;
  for (int i = 0; i < repeat; ++i) {
    ts.push_back(kv->Push(keys, vals));
    if (i >= 10) kv->Wait(ts[i - 10]);  // at most 10 in flight
  }
  for (int t : ts) kv->Wait(t);

  std::vector<float> rets;
  kv->Wait(kv->Pull(keys, &rets));
  EXPECT(rets.size() == static_cast<size_t>(num)) << "pulled " << rets.size();
  for (int i = 0; i < num; ++i) {
    EXPECT(rets[i] == vals[i] * repeat) << "key " << i << ": pulled " << rets[i] << ", expected " << vals[i] * repeat;
  }

  std::vector<float> outs;
  for (int i = 0; i < repeat; ++i) {
    kv->Wait(kv->PushPull(keys, vals, &outs));
    if (i == 0) {
      for (int j = 0; j < num; ++j) {
        EXPECT(outs[j] == vals[j] * (repeat + 1)) << "first push-pull, key " << j;
      }
    }
  }
  for (int i = 0; i < num; ++i) {
    EXPECT(outs[i] == vals[i] * 2 * repeat) << "key " << i << ": push-pull " << outs[i] << ", expected " << vals[i] * 2 * repeat;
  }
}

// B: the zero-copy API and callbacks.
void PartB(KVWorker<float>* kv, int rank) {
  const int num = 1000;
  SArray<Key> keys(MakeKeys(num, rank + 1000));
  SArray<float> vals(num);
  for (int i = 0; i < num; ++i) vals[i] = static_cast<float>(i % 13 + rank);

  std::atomic<int> called(0);
  int ts = kv->ZPush(keys, vals, {}, 0, [&called]() { ++called; });
  kv->Wait(ts);
  EXPECT(called == 1) << "push callback ran " << called << " times before Wait returned";

  // A pre-sized destination is filled before the callback runs.
  SArray<float> dst(num, -1.0f);
  bool seen = false;
  kv->Wait(kv->ZPull(keys, &dst, nullptr, 0, [&]() {
    for (int i = 0; i < num; ++i) {
      EXPECT(dst[i] == vals[i]) << "in the pull callback, key " << i << ": " << dst[i];
    }
    seen = true;
  }));
  EXPECT(seen) << "pull callback did not run before Wait returned";

  // An empty destination is resized.
  SArray<float> empty;
  kv->Wait(kv->ZPull(keys, &empty));
  EXPECT(empty.size() == static_cast<size_t>(num)) << "resized to " << empty.size();
  for (int i = 0; i < num; ++i) EXPECT(empty[i] == vals[i]) << "key " << i;

  // ZPushPull into the array that was pushed (MXNet does this).
  SArray<float> both;
  both.CopyFrom(vals);
  kv->Wait(kv->ZPushPull(keys, both, &both));
  for (int i = 0; i < num; ++i) EXPECT(both[i] == 2 * vals[i]) << "push-pull key " << i;

  // No keys: nothing to send; the callback still runs, and Wait returns.
  std::atomic<int> nothing(0);
  ts = kv->ZPush(SArray<Key>(), SArray<float>(), {}, 0, [&nothing]() { ++nothing; });
  kv->Wait(ts);
  EXPECT(nothing == 1) << "empty push callback ran " << nothing << " times";

  // Many pulls in flight at once, each into its own array.
  const int inflight = 16;
  std::vector<SArray<float>> many(inflight);
  std::vector<int> tss;
  for (int i = 0; i < inflight; ++i) tss.push_back(kv->ZPull(keys, &many[i]));
  for (int t : tss) kv->Wait(t);
  for (int i = 0; i < inflight; ++i) {
    EXPECT(many[i].size() == static_cast<size_t>(num)) << "pull " << i;
    for (int j = 0; j < num; ++j) EXPECT(many[i][j] == 2 * vals[j]) << "pull " << i << " key " << j;
  }
}

// C: per-key lengths, and cmd.
void PartC(KVWorker<float>* kv, int rank) {
  const int num = 1000, repeat = 10;
  std::vector<Key> keys = MakeKeys(num, rank);
  std::vector<int> lens(num);
  std::vector<float> vals;
  for (int i = 0; i < num; ++i) {
    lens[i] = 1 + i % 4;
    for (int j = 0; j < lens[i]; ++j) vals.push_back(static_cast<float>((vals.size() % 97) + rank));
  }

  std::vector<int> ts;
  for (int i = 0; i < repeat; ++i) {
    ts.push_back(kv->Push(keys, vals, lens, kCmd));
    if (i >= 4) kv->Wait(ts[i - 4]);
  }
  for (int t : ts) kv->Wait(t);

  std::vector<float> rets;
  std::vector<int> rlens;
  kv->Wait(kv->Pull(keys, &rets, &rlens, kCmd));
  EXPECT(rlens == lens) << "pulled lens differ";
  EXPECT(rets.size() == vals.size()) << "pulled " << rets.size() << " values, expected " << vals.size();
  for (size_t i = 0; i < vals.size(); ++i) {
    EXPECT(rets[i] == vals[i] * repeat) << "value " << i << ": " << rets[i];
  }

  // PushPull sends lens and receives the reply's.
  std::vector<float> outs;
  std::vector<int> olens = lens;
  kv->Wait(kv->PushPull(keys, vals, &outs, &olens, kCmd));
  EXPECT(olens == lens) << "push-pull lens differ";
  for (size_t i = 0; i < vals.size(); ++i) {
    EXPECT(outs[i] == vals[i] * (repeat + 1)) << "push-pull value " << i;
  }

  // Lens into a pre-sized SArray.
  SArray<Key> skeys(keys);
  SArray<float> svals;
  SArray<int> slens(num, 0);
  kv->Wait(kv->ZPull(skeys, &svals, &slens, kCmd));
  for (int i = 0; i < num; ++i) EXPECT(slens[i] == lens[i]) << "lens " << i;

  // Without lens: the values split evenly over the keys.
  std::vector<Key> keys2 = MakeKeys(num, rank + 2000);
  std::vector<float> vals2(num * 3);
  for (size_t i = 0; i < vals2.size(); ++i) vals2[i] = static_cast<float>(i % 7);
  kv->Wait(kv->Push(keys2, vals2, {}, kCmd));
  std::vector<float> rets2;
  std::vector<int> rlens2;
  kv->Wait(kv->Pull(keys2, &rets2, &rlens2, kCmd));
  EXPECT(rets2 == vals2) << "even split";
  EXPECT(rlens2 == std::vector<int>(num, 3)) << "even split lens";
}

void RunWorker() {
  if (!IsWorker()) return;
  int rank = MyRank();
  KVWorker<float> kv0(0, 0);
  KVWorker<float> kv1(1, 0);
  PartA(&kv0, rank);
  PartB(&kv0, rank);
  PartC(&kv1, rank);
  std::printf("test_kv_app: worker %d OK\n", rank);
}

}  // namespace

int main() {
  Start(0);
  StartServer();
  RunWorker();
  Finalize(0, true);
  return 0;
}

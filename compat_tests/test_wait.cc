// Scenario "test_wait": every way KVWorker::Wait can end, with exact
// checks. The bridge's Wait spins in C while the request is the app's only
// one in flight and recent waits were short (PS_WAIT_SPIN_US), and blocks
// in the library otherwise, so each path is taken on purpose:
//  A. one request at a time (the spin), 200 pushes then a pull, exact sum;
//  B. 16 requests in flight waited for newest first (no spin), exact sum;
//  C. a request that fails (a pull into a destination too small for the
//     reply): Wait returns, the callback ran once, the destination is
//     unchanged;
//  D. Wait on a completed request, and on a timestamp never issued;
//  E. a request its server never answers, waited for on another thread
//     while the node stops: Wait returns.
// Values are small integers, so every float sum is exact. Each worker uses
// its own keys.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kIgnore = 99;  // cmd the app 1 servers never answer

void StartServers() {
  if (!IsServer()) return;
  auto* store = new KVServer<float>(0);
  store->set_request_handle(KVServerDefaultHandle<float>());
  auto* silent = new KVServer<float>(1);
  silent->set_request_handle([](const KVMeta& meta, const KVPairs<float>&,
                                KVServer<float>* server) {
    if (meta.cmd == kIgnore) return;  // E: never answered
    server->Response(meta);
  });
  RegisterExitCallback([store, silent]() {
    delete store;
    delete silent;
  });
}

Key KeyOf(int rank, int i) {
  // Spread over the whole key space, so that every server holds some.
  const Key span = kMaxKey / 64;
  return static_cast<Key>(i) * span + static_cast<Key>(rank);
}

void RunWorker() {
  const int rank = MyRank();
  KVWorker<float> kv(0, 0);
  std::vector<Key> keys;
  for (int i = 0; i < 64; i += 8) keys.push_back(KeyOf(rank, i));
  const size_t n = keys.size();

  // A: one at a time.
  const int kRounds = 200;
  std::vector<float> ones(n, 1);
  for (int i = 0; i < kRounds; ++i) kv.Wait(kv.Push(keys, ones));
  std::vector<float> got;
  kv.Wait(kv.Pull(keys, &got));
  EXPECT(got.size() == n) << got.size();
  for (size_t i = 0; i < n; ++i) EXPECT(got[i] == kRounds) << "key " << i << ": " << got[i];

  // B: 16 in flight, newest first.
  std::vector<int> ts;
  std::vector<float> twos(n, 2);
  for (int i = 0; i < 16; ++i) ts.push_back(kv.Push(keys, twos));
  for (int i = 15; i >= 0; --i) kv.Wait(ts[i]);
  got.clear();
  kv.Wait(kv.Pull(keys, &got));
  for (size_t i = 0; i < n; ++i) EXPECT(got[i] == kRounds + 32) << "key " << i << ": " << got[i];

  // C: the reply holds n values, the destination n-1.
  std::vector<float> small(n - 1, -5);
  int calls = 0;
  int bad = kv.Pull(keys, &small, nullptr, 0, [&calls]() { ++calls; });
  kv.Wait(bad);
  EXPECT(calls == 1) << "callback of the failed pull ran " << calls << " times";
  for (float v : small) EXPECT(v == -5) << "destination changed by a failed pull: " << v;

  // D: again, and a timestamp never issued (logged, returns).
  kv.Wait(bad);
  kv.Wait(ts[3]);
  kv.Wait(1 << 30);

  // E: app 1's servers never answer cmd kIgnore.
  KVWorker<float> silent(1, 1);
  std::vector<Key> one = {KeyOf(rank, 0)};
  std::vector<float> val = {1};
  silent.Wait(silent.Push(one, val));  // answered: the app works
  int lost = silent.Push(one, val, {}, kIgnore);
  std::atomic<bool> returned(false);
  std::thread waiter([&]() {
    silent.Wait(lost);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT(!returned) << "Wait returned for a request nobody answered";
  // Every node stops (the barrier first); the waiter must then return.
  Finalize(0, true);
  waiter.join();
  EXPECT(returned);
}

}  // namespace

int main() {
  Start(0);
  StartServers();
  if (IsWorker()) {
    RunWorker();
    return 0;
  }
  Finalize(0, true);
  return 0;
}

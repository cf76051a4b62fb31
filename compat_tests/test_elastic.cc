// Scenario "elastic": C++ workers, written against the ps-lite API only,
// in an elastic job (PS_ELASTIC=1) whose scheduler is an elasticps process
// and whose servers are either elasticps processes or this program (a
// KVServer with KVServerDefaultHandle, whose state moves by the bridge's
// generic capture-and-install hand-over). While the workers push, run.sh moves key ranges
// between the servers with `elasticps ctl move`; the workers then check
// that every push is in the sums, exactly. Keys are spread over every
// server range; values are small integers, so float sums are exact.
#include <chrono>
#include <thread>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

int main() {
  if (IsScheduler()) {
    // the scheduler runs the migration coordinator: an elasticps process
    EXPECT(false) << "run the scheduler with --scheduler-cmd 'elasticps scheduler'";
  }
  if (IsServer()) {
    KVServer<float> server(0);
    server.set_request_handle(KVServerDefaultHandle<float>());
    Start(0);
    std::printf("test_elastic: C++ server rank %d serving\n", MyRank());
    Finalize(0, true);
    return 0;
  }
  KVWorker<float> kv(0, 0);
  Start(0);
  const int rounds = compat::EnvInt("ELASTIC_ROUNDS", 600);
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
  std::printf("test_elastic: worker rank %d OK (%d rounds, exact sums)\n", MyRank(), rounds);
  Finalize(0, true);
  return 0;
}

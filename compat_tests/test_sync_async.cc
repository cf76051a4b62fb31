// Scenario "test_sync_async": an unchanged MXNet dist_async-style program
// (each iteration: push a gradient without waiting, then pull and wait)
// against C++ servers with ps-lite's default sum store, which apply every
// push at once. Synchronization comes from the environment alone
// (PS_SYNC_MODE=ssp or fluent with PS_PAUSE_PROB=1, PS_STALENESS=s): the
// servers delay pulls, nothing in the program knows.
//
// Two workers; worker 1 is a straggler (it sleeps after each iteration, as
// FluentPS's experiments inject stragglers). Worker r pushes 1000^r to
// every key, so a pulled value tells how many pushes of each worker it
// includes. Checks, for worker r's pull of iteration t: it includes its own
// t pushes exactly, and at least t - s of the other worker's (the bound);
// every pull is answered.
#include <unistd.h>

#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

int main() {
  Start(0);
  if (IsServer()) {
    auto server = new KVServer<float>(0);
    server->set_request_handle(KVServerDefaultHandle<float>());
    RegisterExitCallback([server]() { delete server; });
  }
  if (IsWorker()) {
    EXPECT(NumWorkers() == 2) << "this scenario needs 2 workers, got " << NumWorkers();
    const std::string mode = compat::Env("PS_SYNC_MODE");
    EXPECT(mode == "ssp" || mode == "fluent") << "run with PS_SYNC_MODE=ssp or fluent, got " << mode;
    const int s = compat::EnvInt("PS_STALENESS", 3);
    const int rank = MyRank();
    const int iters = 30;
    KVWorker<float> kv(0, 0);
    std::vector<Key> keys;
    for (const Range& r : Postoffice::Get()->GetServerKeyRanges()) {
      keys.push_back(r.begin());
      keys.push_back(r.begin() + 5);
    }
    const float mine = rank == 0 ? 1 : 1000;
    std::vector<float> grad(keys.size(), mine);
    for (int t = 1; t <= iters; ++t) {
      kv.Push(keys, grad);  // not waited, as MXNet's async kvstore
      std::vector<float> got;
      kv.Wait(kv.Pull(keys, &got));
      EXPECT(got.size() == keys.size()) << got.size() << " values";
      for (size_t i = 0; i < keys.size(); ++i) {
        int v = static_cast<int>(got[i]);
        int own = rank == 0 ? v % 1000 : v / 1000;
        int other = rank == 0 ? v / 1000 : v % 1000;
        EXPECT(static_cast<float>(v) == got[i]) << "pulled " << got[i];
        EXPECT(own == t) << "worker " << rank << " iteration " << t << " key " << keys[i] << ": its own pushes " << own;
        EXPECT(other >= t - s) << mode << " s=" << s << ": worker " << rank << " iteration " << t << " key " << keys[i]
                               << " pulled with only " << other << " pushes of the other worker (gap " << t - other << ")";
      }
      if (rank == 1) usleep(5000);
    }
    std::printf("SYNC OK worker %d: %d iterations under %s, s=%d\n", rank, iters, mode.c_str(), s);
  }
  Finalize(0, true);
  return 0;
}

// Every role in one ps-lite program: workers push the same values 50 times,
// wait for each other, pull, and check exact sums (small integers).
#include <iostream>
#include <vector>
#include "ps/ps.h"

int main() {
  ps::Start(0);
  if (ps::IsServer()) {
    auto* server = new ps::KVServer<float>(0);
    server->set_request_handle(ps::KVServerDefaultHandle<float>());
    ps::RegisterExitCallback([server] { delete server; });
  }
  if (ps::IsWorker()) {
    ps::KVWorker<float> kv(0, 0);
    const int n = 10, rounds = 50;
    std::vector<ps::Key> keys(n);
    std::vector<float> vals(n), got;
    for (int i = 0; i < n; ++i) keys[i] = ps::kMaxKey / n * i, vals[i] = i;
    for (int r = 0; r < rounds; ++r) kv.Wait(kv.Push(keys, vals));
    ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
    kv.Wait(kv.Pull(keys, &got));
    for (int i = 0; i < n; ++i)
      if (got[i] != vals[i] * rounds * ps::NumWorkers()) return 1;
    std::cout << "worker " << ps::MyRank() << ": " << n << " keys exact\n";
  }
  ps::Finalize(0, true);
}

// fork_kv is a KV node written against the BytePS fork of ps-lite
// (bytedance/ps-lite), for the mixed jobs of e2e/fork_interop_test.go.
// scripts/build-fork.sh compiles it next to the fork's own test programs.
//
// It runs in the role DMLC_ROLE names. A server sums what is pushed
// (KVServerDefaultHandle); a worker does what the Go worker of the e2e
// tests does (kvRounds in e2e/nodes_test.go), so that either can be mixed
// with the other: on each server's range it pushes five keys r.begin+7i
// with the value 100s+i+1 in 20 rounds, waits, meets the other workers at
// a barrier, pulls, and checks that every key holds exactly
// value * 20 * workers before printing "KV OK".
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ps/ps.h"

using namespace ps;

static int RunWorker() {
  const int rounds = 20;
  Postoffice* po = Postoffice::GetWorker();
  KVWorker<float> kv(0, 0);
  std::vector<Key> keys;
  std::vector<float> vals;
  const std::vector<Range>& ranges = po->GetServerKeyRanges();
  for (size_t s = 0; s < ranges.size(); ++s) {
    for (int i = 0; i < 5; ++i) {
      keys.push_back(ranges[s].begin() + static_cast<Key>(i * 7));
      vals.push_back(static_cast<float>(s * 100 + i + 1));
    }
  }
  // The fork's Pull takes SArrays only; ZPush/ZPull share the arrays.
  SArray<Key> skeys(keys);
  SArray<float> svals(vals);
  std::vector<int> pending;
  for (int r = 0; r < rounds; ++r) pending.push_back(kv.ZPush(skeys, svals));
  for (int ts : pending) kv.Wait(ts);
  po->Barrier(0, kWorkerGroup);
  SArray<float> got;
  kv.Wait(kv.ZPull(skeys, &got));
  if (got.size() != keys.size()) {
    fprintf(stderr, "fork_kv: pulled %zu values for %zu keys\n", got.size(), keys.size());
    return 1;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    float want = vals[i] * rounds * po->num_workers();
    if (got[i] != want) {
      fprintf(stderr, "fork_kv: key %llu: pulled %g, want %g\n",
              static_cast<unsigned long long>(keys[i]), got[i], want);
      return 1;
    }
  }
  printf("KV OK rank %d: %zu keys on %zu servers (fork)\n", po->my_rank(), keys.size(), ranges.size());
  fflush(stdout);
  return 0;
}

int main(int argc, char* argv[]) {
  const char* role_env = getenv("DMLC_ROLE");
  if (role_env == nullptr) {
    fprintf(stderr, "fork_kv: DMLC_ROLE is not set: run it as a node of a ps-lite job\n");
    return 2;
  }
  Node::Role role = GetRole(role_env);
  // The server's KVServer exists before the start barrier: a worker
  // released first may push at once, and the fork's receive thread aborts
  // when a push waits 5 s for its customer (while the barrier's release
  // waits behind it). Init is what StartPS does first; it is idempotent.
  KVServer<float>* server = nullptr;
  if (role == Node::SERVER) {
    Postoffice::Init(role);
    server = new KVServer<float>(0);
    server->set_request_handle(KVServerDefaultHandle<float>());
  }
  StartPS(0, role, -1, true, argv[0]);
  int rc = role == Node::WORKER ? RunWorker() : 0;
  Finalize(0, role, true);
  delete server;
  return rc;
}

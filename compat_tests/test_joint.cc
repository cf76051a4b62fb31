// The BytePS fork's JOINT role (spec sections 2.6, 2.8, 2.10): one process
// is a server and a worker, started by StartPS(0, JOINT, ...) or
// DMLC_ROLE=joint. Its server node is Postoffice::Get() / GetServer(), its
// worker node GetWorker(); DMLC_NUM_SERVER and DMLC_NUM_WORKER count the
// process in both. Run as a scheduler plus joint processes, e.g.
//   elasticps local -s 0 -w 2 --env DMLC_NUM_SERVER=2
//     --worker-cmd "env DMLC_ROLE=joint ./test_joint"
// as the fork's tests/test_benchmark_stress.cc sets its job up. Every
// worker pushes (rank+1) to keys on every server; all pull the exact sum.
// JOINT_ROUNDS sets how often it pushes (default 1) and
// JOINT_ROUND_SLEEP_MS a pause after each push, for a job that runs while
// its scheduler is restarted ("pushed N rounds" every 100).
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kKeysPerServer = 3;

void RunJoint() {
  StartPS(0, Node::JOINT, -1, true);
  Postoffice* server = Postoffice::GetServer();
  Postoffice* worker = Postoffice::GetWorker();
  EXPECT(server == Postoffice::Get()) << "Get() is the server node";
  EXPECT(server != worker) << "a JOINT process has two nodes";
  EXPECT(server->is_server() && !server->is_worker()) << "GetServer() is a server";
  EXPECT(worker->is_worker() && !worker->is_server()) << "GetWorker() is a worker";
  const int ns = NumServers(), nw = worker->num_workers();
  EXPECT(ns == compat::EnvInt("DMLC_NUM_SERVER", -1)) << ns << " servers";
  EXPECT(nw == compat::EnvInt("DMLC_NUM_WORKER", -1)) << nw << " workers";
  EXPECT(worker->van()->my_node().id == Postoffice::WorkerRankToID(worker->my_rank())) << "worker id";
  EXPECT(server->van()->my_node().id == Postoffice::ServerRankToID(server->my_rank())) << "server id";
  EXPECT(worker->van()->my_node().port != server->van()->my_node().port) << "one port per node";
  EXPECT(worker->GetNodeIDs(kWorkerGroup).size() == static_cast<size_t>(nw)) << "worker group";
  EXPECT(server->GetNodeIDs(kServerGroup).size() == static_cast<size_t>(ns)) << "server group";

  KVServer<float>* kvs = new KVServer<float>(0);
  kvs->set_request_handle(KVServerDefaultHandle<float>());
  KVWorker<float>* kv = new KVWorker<float>(0, 0);
  const int rank = worker->my_rank();
  const std::vector<Range>& krs = worker->GetServerKeyRanges();
  std::vector<Key> keys;
  for (int s = 0; s < ns; ++s) {
    for (int k = 0; k < kKeysPerServer; ++k) keys.push_back(krs[s].begin() + k);
  }
  std::vector<float> vals(keys.size(), static_cast<float>(rank + 1));
  const int rounds = compat::EnvInt("JOINT_ROUNDS", 1);
  const int pause_ms = compat::EnvInt("JOINT_ROUND_SLEEP_MS", 0);
  for (int r = 1; r <= rounds; ++r) {
    kv->Wait(kv->Push(keys, vals));
    if (r % 100 == 0) std::printf("pushed %d rounds\n", r), std::fflush(stdout);
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  worker->Barrier(0, kWorkerGroup);
  std::vector<float> got;
  kv->Wait(kv->Pull(keys, &got));
  const float want = static_cast<float>(rounds * nw * (nw + 1) / 2);
  EXPECT(got.size() == keys.size()) << "pulled " << got.size() << " values";
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT(got[i] == want) << "key " << keys[i] << ": " << got[i] << ", want " << want;
  }
  std::printf("test_joint: worker rank %d server rank %d: exact sums (%g)\n", rank, server->my_rank(), want);
  // both nodes take part in the final barrier
  Finalize(0, Node::JOINT, true);
  delete kv;
  delete kvs;
}

}  // namespace

int main() {
  const Node::Role role = GetRole(compat::Env("DMLC_ROLE"));
  if (role == Node::JOINT) {
    RunJoint();
  } else {
    EXPECT(role == Node::SCHEDULER) << "run joint processes and a scheduler";
    StartPS(0, role, -1, true);
    EXPECT(Postoffice::GetWorker() == Postoffice::Get()) << "one node in a scheduler";
    Finalize(0, role, true);
  }
  std::printf("test_joint: %s done\n", compat::Env("DMLC_ROLE").c_str());
  return 0;
}

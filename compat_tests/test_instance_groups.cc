// Instance groups of the BytePS fork's API (DMLC_GROUP_SIZE=n > 1), with
// exact sums:
//  - StartPS(0, GetRole(DMLC_ROLE), rank, true) with rank DMLC_RANK (which
//    elasticps local sets to the launch index); Finalize(0, role, true);
//  - every instance i has rank rank*n+i (GetServer(i)/GetWorker(i)
//    my_rank()), MyRank() is the process's rank, NumServers() and
//    NumWorkers() count processes;
//  - servers: KVServer<int>(0, false, i) for every instance, each summing
//    into its own store; KVMeta::sender is the worker's process id
//    (WorkerRankToID(process rank)), whichever instance sent it;
//  - workers: one thread per instance, KVWorker<int>(0, 0, i), pushes
//    (i + 1) * 1000 + (rank + 1) * (k + 1) for key k, ROUNDS times, to 2 keys
//    per server; then a Barrier(0, kWorkerGroup) of the processes (instance
//    0) and every instance pulls and checks its own plane's sums exactly;
//    IG_ROUNDS sets ROUNDS (default 4) and IG_ROUND_SLEEP_MS a pause after
//    each round, for a job that runs while its scheduler is restarted
//    (instance 0 says "pushed N rounds" every 100);
//  - every server instance registers a receive buffer for each worker
//    process (RegisterRecvBufferWithRank(p), or RegisterRecvBuffer with
//    the id of the worker instance that talks to it), before a
//    Barrier(0, kWorkerGroup + kServerGroup), and every push arrives in
//    its buffer.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kKeysPerServer = 2;

struct Store {
  std::mutex mu;
  std::map<Key, int> sums;
};

int Value(int instance, int rank, int k) { return (instance + 1) * 1000 + (rank + 1) * (k + 1); }

}  // namespace

int main() {
  const int n = compat::EnvInt("DMLC_GROUP_SIZE", 1);
  const int rank = compat::EnvInt("DMLC_RANK", -1);
  const int kRounds = compat::EnvInt("IG_ROUNDS", 4);
  const int pause_ms = compat::EnvInt("IG_ROUND_SLEEP_MS", 0);
  Node::Role role = GetRole(compat::Env("DMLC_ROLE"));
  StartPS(0, role, role == Node::SCHEDULER ? -1 : rank, true);
  if (role != Node::SCHEDULER) {
    EXPECT(Postoffice::Get()->group_size() == n) << Postoffice::Get()->group_size();
    EXPECT(MyRank() == rank) << MyRank() << " vs " << rank;
    for (int i = 0; i < n; ++i) {
      Postoffice* po = role == Node::SERVER ? Postoffice::GetServer(i) : Postoffice::GetWorker(i);
      EXPECT(po->my_rank() == rank * n + i) << "instance " << i << ": " << po->my_rank();
      EXPECT(po->num_servers() == NumServers());
    }
  }
  const int num_workers = NumWorkers(), num_servers = NumServers();
  std::vector<Store> stores(n);
  std::vector<KVServer<int>*> servers;
  std::atomic<int> bad_senders(0), unbuffered(0);
  // bufs[i][p]: server instance i's receive buffer for worker process p
  std::vector<std::vector<SArray<int>>> bufs(n, std::vector<SArray<int>>(num_workers));
  if (role == Node::SERVER) {
    for (int i = 0; i < n; ++i) {
      auto* srv = new KVServer<int>(0, false, i);
      Store* st = &stores[i];
      std::vector<SArray<int>>* mine = &bufs[i];
      SArray<Key> first(1, Postoffice::GetServer(i)->GetServerKeyRanges()[rank].begin());
      for (int p = 0; p < num_workers; ++p) {
        (*mine)[p] = SArray<int>(kKeysPerServer);
        SArray<int> lens(1, kKeysPerServer);
        if ((p + i) % 2 == 0) {
          srv->RegisterRecvBufferWithRank(p, first, (*mine)[p], lens);
        } else {
          srv->RegisterRecvBuffer(Postoffice::Get()->GroupWorkerRankToInstanceID(p, i), first, (*mine)[p], lens);
        }
      }
      srv->set_request_handle([st, mine, &bad_senders, &unbuffered, num_workers](
                                  const KVMeta& meta, const KVPairs<int>& data, KVServer<int>* s) {
        int from = -1;
        for (int p = 0; p < num_workers; ++p)
          if (meta.sender == Postoffice::WorkerRankToID(p)) from = p;
        if (from < 0) bad_senders++;
        if (meta.push && (from < 0 || data.vals.data() != (*mine)[from].data())) unbuffered++;
        KVPairs<int> res;
        std::lock_guard<std::mutex> lk(st->mu);
        if (meta.push) {
          for (size_t j = 0; j < data.keys.size(); ++j) st->sums[data.keys[j]] += data.vals[j];
        } else {
          res.keys = data.keys;
          res.vals.resize(data.keys.size());
          for (size_t j = 0; j < data.keys.size(); ++j) res.vals[j] = st->sums[data.keys[j]];
        }
        s->Response(meta, res);
      });
      servers.push_back(srv);
    }
    Postoffice::GetServer(0)->Barrier(0, kWorkerGroup + kServerGroup);  // buffers registered
  }
  if (role == Node::WORKER) {
    const auto& krs = Postoffice::Get()->GetServerKeyRanges();
    std::vector<Key> keys;
    for (int s = 0; s < num_servers; ++s)
      for (int k = 0; k < kKeysPerServer; ++k) keys.push_back(krs[s].begin() + k);
    std::vector<KVWorker<int>*> kvs;
    for (int i = 0; i < n; ++i) kvs.push_back(new KVWorker<int>(0, 0, i));
    Postoffice::GetWorker(0)->Barrier(0, kWorkerGroup + kServerGroup);  // the servers' buffers
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        std::vector<int> vals;
        for (size_t k = 0; k < keys.size(); ++k) vals.push_back(Value(i, rank, k));
        for (int r = 1; r <= kRounds; ++r) {
          kvs[i]->Wait(kvs[i]->Push(keys, vals));
          if (i == 0 && r % 100 == 0) std::printf("pushed %d rounds\n", r), std::fflush(stdout);
          if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
        }
      });
    }
    for (auto& t : threads) t.join();
    Postoffice::GetWorker(0)->Barrier(0, kWorkerGroup);  // every process pushed
    threads.clear();
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        std::vector<int> got;
        kvs[i]->Wait(kvs[i]->Pull(keys, &got));
        EXPECT(got.size() == keys.size()) << got.size();
        for (size_t k = 0; k < keys.size(); ++k) {
          int want = 0;
          for (int p = 0; p < num_workers; ++p) want += kRounds * Value(i, p, k);
          EXPECT(got[k] == want) << "instance " << i << " key " << k << ": " << got[k] << " want " << want;
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto* kv : kvs) delete kv;
    std::printf("exact sums after %d rounds\n", kRounds);
    std::fflush(stdout);
  }
  Finalize(0, role, true);
  EXPECT(bad_senders.load() == 0) << bad_senders.load() << " requests named no worker process as sender";
  EXPECT(unbuffered.load() == 0) << unbuffered.load() << " pushes were not received into their registered buffer";
  for (auto* s : servers) delete s;
  return 0;
}

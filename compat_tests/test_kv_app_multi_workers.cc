// Scenario "test_kv_app_multi_workers" (spec section 7): one worker
// process runs two threads; each registers its own customer with
// Start(customer_id), uses KVWorker(0, customer_id) and finalizes its
// customer. Launched with DMLC_NUM_WORKER=2 and a single worker process
// (elasticps local --worker-procs 1): the two customers count as the two
// workers.
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

static void RunWorker(int customer_id) {
  Start(customer_id);
  KVWorker<float> kv(0, customer_id);
  EXPECT(kv.get_customer()->customer_id() == customer_id) << "customer id";
  EXPECT(NumWorkers() == 2) << NumWorkers() << " workers";

  const int num = 10000, repeat = 50;
  std::vector<Key> keys(num);
  std::vector<float> vals(num);
  srand(customer_id + 7);
  for (int i = 0; i < num; ++i) {
    keys[i] = kMaxKey / num * i + customer_id;  // disjoint per customer
    vals[i] = static_cast<float>(rand() % 1000);
  }
  std::vector<int> ts;
  for (int i = 0; i < repeat; ++i) {
    ts.push_back(kv.Push(keys, vals));
    if (i >= 10) kv.Wait(ts[i - 10]);
  }
  for (int t : ts) kv.Wait(t);

  std::vector<float> rets;
  kv.Wait(kv.Pull(keys, &rets));
  std::vector<float> outs;
  for (int i = 0; i < repeat; ++i) kv.Wait(kv.PushPull(keys, vals, &outs));
  for (int i = 0; i < num; ++i) {
    EXPECT(rets[i] == vals[i] * repeat) << "customer " << customer_id << " key " << i << ": " << rets[i];
    EXPECT(outs[i] == vals[i] * 2 * repeat) << "customer " << customer_id << " key " << i << ": " << outs[i];
  }
  std::printf("test_kv_app_multi_workers: customer %d OK\n", customer_id);
  Finalize(customer_id, true);
}

int main() {
  if (compat::Env("DMLC_ROLE") != "worker") {
    Start(0);
    KVServer<float>* server = nullptr;
    if (IsServer()) {
      server = new KVServer<float>(0);
      server->set_request_handle(KVServerDefaultHandle<float>());
    }
    Finalize(0, true);
    delete server;
    return 0;
  }
  EXPECT(compat::EnvInt("DMLC_NUM_WORKER", 0) == 2) << "launch with DMLC_NUM_WORKER=2 and one worker process";
  std::thread t0(RunWorker, 0);
  std::thread t1(RunWorker, 1);
  t0.join();
  t1.join();
  return 0;
}

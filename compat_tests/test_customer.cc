// The low-level API: a ps::Customer with its own receive handle, and
// messages built by hand and sent with Postoffice::Get()->van()->Send —
// how an application other than SimpleApp / KVWorker / KVServer is written
// on ps-lite. Workers send each server a request with a data frame; the
// servers answer with the frame doubled; the workers' customers count the
// responses (NewRequest / WaitRequest).
#include <atomic>
#include <mutex>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kApp = 5;
std::atomic<int> requests(0);
std::atomic<int> responses(0);

// Server side: answer every request with its values doubled.
void OnServerMessage(const Message& msg) {
  EXPECT(msg.meta.request) << "servers get requests only";
  EXPECT(msg.meta.app_id == kApp) << "app " << msg.meta.app_id;
  EXPECT(msg.data.size() == 1u) << msg.data.size() << " frames";
  EXPECT(msg.meta.data_type.size() == 1u && msg.meta.data_type[0] == INT32) << "frame type";
  EXPECT(msg.meta.head == 17 && msg.meta.body == "double") << "head/body";
  SArray<int> in(msg.data[0]);
  SArray<int> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = 2 * in[i];
  Message res;
  res.meta.app_id = kApp;
  res.meta.customer_id = msg.meta.customer_id;
  res.meta.timestamp = msg.meta.timestamp;
  res.meta.request = false;
  res.meta.head = msg.meta.head;
  res.meta.recver = msg.meta.sender;
  res.AddData(out);
  ++requests;
  EXPECT(Postoffice::Get()->van()->Send(res) > 0) << "send response";
}

}  // namespace

int main() {
  Start(0);
  if (IsServer()) {
    Customer server(kApp, kApp, OnServerMessage);  // servers: customer id == app id
    Postoffice::Get()->Barrier(0, kServerGroup + kWorkerGroup);  // all customers exist
    Postoffice::Get()->Barrier(0, kServerGroup + kWorkerGroup);  // workers are done
    EXPECT(requests == 10 * NumWorkers()) << requests << " requests";
  } else if (IsWorker()) {
    std::mutex mu;
    std::vector<int> sums;
    Customer* self = nullptr;
    Customer client(kApp, 0, [&](const Message& msg) {
      EXPECT(!msg.meta.request) << "workers get responses only";
      EXPECT(msg.meta.customer_id == 0) << "customer " << msg.meta.customer_id;
      SArray<int> v(msg.data[0]);
      int s = 0;
      for (int x : v) s += x;
      std::lock_guard<std::mutex> lk(mu);
      sums.push_back(s);
      ++responses;
    });
    self = &client;
    EXPECT(Postoffice::Get()->GetCustomer(kApp, 0) == self) << "GetCustomer";
    Postoffice::Get()->Barrier(0, kServerGroup + kWorkerGroup);
    for (int round = 0; round < 10; ++round) {
      int ts = client.NewRequest(kServerGroup);
      for (int server : Postoffice::Get()->GetNodeIDs(kServerGroup)) {
        Message msg;
        msg.meta.app_id = kApp;
        msg.meta.customer_id = 0;
        msg.meta.timestamp = ts;
        msg.meta.request = true;
        msg.meta.head = 17;
        msg.meta.body = "double";
        msg.meta.recver = server;
        msg.AddData(SArray<int>{1, 2, 3, MyRank()});
        EXPECT(Postoffice::Get()->van()->Send(msg) > 0) << "send request";
      }
      client.WaitRequest(ts);
    }
    EXPECT(responses == 10 * NumServers()) << responses << " responses";
    for (int s : sums) EXPECT(s == 2 * (6 + MyRank())) << "sum " << s;
    Postoffice::Get()->Barrier(0, kServerGroup + kWorkerGroup);
  }
  Finalize(0, true);
  std::printf("test_customer: OK\n");
  return 0;
}

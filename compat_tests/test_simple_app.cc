// Scenario "test_simple_app" (spec section 7): the scheduler sends 100
// requests (head 1, body "test") to all nodes, itself included; every
// process must handle exactly 100, and the scheduler must get every
// response before its Waits return.
#include <atomic>
#include <string>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

static std::atomic<int> handled(0);
static std::atomic<int> responses(0);

int main() {
  const int n = 100;
  Start(0);
  SimpleApp app(0, 0);
  app.set_request_handle([](const SimpleData& req, SimpleApp* a) {
    EXPECT(req.head == 1) << "head " << req.head;
    EXPECT(req.body == "test") << "body '" << req.body << "'";
    EXPECT(req.sender == kScheduler) << "sender " << req.sender;
    ++handled;  // before answering: the answer may release the final barrier
    a->Response(req, "ack");
  });
  app.set_response_handle([](const SimpleData& res, SimpleApp*) {
    EXPECT(res.head == 1) << "response head " << res.head;
    EXPECT(res.body == "ack") << "response body '" << res.body << "'";
    ++responses;
  });

  const int group = kScheduler + kServerGroup + kWorkerGroup;
  if (IsScheduler()) {
    const int nodes = static_cast<int>(Postoffice::Get()->GetNodeIDs(group).size());
    std::vector<int> ts;
    for (int i = 0; i < n; ++i) ts.push_back(app.Request(1, "test", group));
    for (size_t i = 0; i < ts.size(); ++i) {
      EXPECT(i == 0 || ts[i] > ts[i - 1]) << "timestamps increase";
      app.Wait(ts[i]);
    }
    // Wait returns only after the response handler ran for every answer.
    EXPECT(responses == n * nodes) << responses << " responses, expected " << n * nodes;
  }

  Finalize(0, true);
  EXPECT(handled == n) << "handled " << handled << " requests, expected " << n;
  std::printf("test_simple_app: handled %d requests OK\n", handled.load());
  return 0;
}

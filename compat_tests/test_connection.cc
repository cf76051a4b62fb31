// Scenario "test_connection" (spec section 7): every role starts with a
// barrier and finalizes with one. Also checks what a started node reports
// about the job: counts, role, rank, groups and key ranges.
#include <set>
#include <string>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

int main() {
  Start(0);

  const std::string role = compat::Env("DMLC_ROLE");
  const int nw = compat::EnvInt("DMLC_NUM_WORKER", -1);
  const int ns = compat::EnvInt("DMLC_NUM_SERVER", -1);
  EXPECT(NumWorkers() == nw) << NumWorkers() << " workers, expected " << nw;
  EXPECT(NumServers() == ns) << NumServers() << " servers, expected " << ns;
  EXPECT(IsWorker() == (role == "worker")) << "role " << role;
  EXPECT(IsServer() == (role == "server")) << "role " << role;
  EXPECT(IsScheduler() == (role == "scheduler")) << "role " << role;

  Postoffice* po = Postoffice::Get();
  const Node& me = po->van()->my_node();
  if (IsScheduler()) {
    EXPECT(me.id == kScheduler) << "scheduler id " << me.id;
    EXPECT(MyRank() == 0) << "scheduler rank " << MyRank();
  } else if (IsServer()) {
    EXPECT(me.id == Postoffice::ServerRankToID(MyRank())) << "id " << me.id;
    EXPECT(MyRank() >= 0 && MyRank() < ns) << "rank " << MyRank();
  } else {
    EXPECT(me.id == Postoffice::WorkerRankToID(MyRank())) << "id " << me.id;
    EXPECT(MyRank() >= 0 && MyRank() < nw) << "rank " << MyRank();
  }
  EXPECT(!po->is_recovery()) << "a fresh node is not a recovery";
  if (!IsScheduler()) {
    // ps-lite publishes the assigned rank in the process environment.
    EXPECT(compat::EnvInt("DMLC_RANK", -1) == MyRank()) << "DMLC_RANK=" << compat::Env("DMLC_RANK");
  }

  // Groups: workers first, then servers, then the scheduler.
  const std::vector<int>& all = po->GetNodeIDs(kScheduler + kServerGroup + kWorkerGroup);
  EXPECT(all.size() == static_cast<size_t>(nw + ns + 1)) << all.size() << " ids in group 7";
  for (int r = 0; r < nw; ++r) {
    EXPECT(all[r] == Postoffice::WorkerRankToID(r)) << "group 7 entry " << r;
  }
  for (int r = 0; r < ns; ++r) {
    EXPECT(all[nw + r] == Postoffice::ServerRankToID(r)) << "group 7 entry " << nw + r;
  }
  EXPECT(all.back() == kScheduler) << "scheduler last";
  EXPECT(po->GetNodeIDs(kServerGroup).size() == static_cast<size_t>(ns)) << "server group";
  EXPECT(po->GetNodeIDs(kWorkerGroup).size() == static_cast<size_t>(nw)) << "worker group";
  EXPECT(po->GetNodeIDs(kScheduler).size() == 1u) << "scheduler group";
  EXPECT(po->GetNodeIDs(me.id).size() == 1u && po->GetNodeIDs(me.id)[0] == me.id) << "own id";

  // Key ranges: ns equal ranges of [0, kMaxKey).
  const std::vector<Range>& krs = po->GetServerKeyRanges();
  EXPECT(krs.size() == static_cast<size_t>(ns)) << krs.size() << " ranges";
  for (int i = 0; i < ns; ++i) {
    EXPECT(krs[i].begin() == kMaxKey / ns * i) << "range " << i << " begin";
    EXPECT(krs[i].end() == kMaxKey / ns * (i + 1)) << "range " << i << " end";
  }
  EXPECT(po->GetDeadNodes(60).empty()) << "no dead nodes without heartbeats";

  const int rank = MyRank();
  Finalize(0, true);
  std::printf("test_connection: %s rank %d OK\n", role.c_str(), rank);
  return 0;
}

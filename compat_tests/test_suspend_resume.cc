// BytePS's elastic suspend/resume (spec sections 2.8 and 2.10): every
// process of the job calls Finalize(0, role, true), and later StartPS again
// in the same process with other DMLC_NUM_WORKER / DMLC_NUM_SERVER values.
//
// Run with `elasticps local -s S -w W`: the job starts with W-1 workers
// (the worker with ELASTICPS_LOCAL_INDEX W-1 waits), all of them suspend,
// and it resumes with W workers. The servers' store lives in the process,
// so it survives the suspension: after phase p every worker pulls
// sum over q <= p of (q+1) * (1 + ... + W_q), exactly.
//
// Between the phases every non-scheduler waits for the file SR_SIGNAL,
// which the scheduler creates once its own Finalize has returned (a node
// that restarted sooner would register with the scheduler that is leaving).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

const int kKeysPerServer = 4;
const int kLen = 64;

// The servers' store: kept across the suspension, by key offset within
// the server's range (the scheduler may give a server another rank when
// the job resumes; every range receives the same values).
std::mutex store_mu;
std::map<Key, std::vector<float>> store;
Key range_begin = 0;  // of this server's range in the current phase

void Handle(const KVMeta& meta, const KVPairs<float>& req, KVServer<float>* server) {
  KVPairs<float> res;
  std::lock_guard<std::mutex> lk(store_mu);
  size_t n = req.keys.size();
  if (meta.push) {
    EXPECT(req.vals.size() == n * kLen) << "push of " << req.vals.size() << " values";
    for (size_t i = 0; i < n; ++i) {
      std::vector<float>& v = store[req.keys[i] - range_begin];
      v.resize(kLen);
      for (int j = 0; j < kLen; ++j) v[j] += req.vals[i * kLen + j];
    }
  } else {
    res.keys = req.keys;
    res.vals.resize(n * kLen);
    for (size_t i = 0; i < n; ++i) {
      std::vector<float>& v = store[req.keys[i] - range_begin];
      v.resize(kLen);
      for (int j = 0; j < kLen; ++j) res.vals[i * kLen + j] = v[j];
    }
  }
  server->Response(meta, res);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

void WaitForSignal(const std::string& path) {
  for (int i = 0; !Exists(path); ++i) {
    EXPECT(i < 60000) << "no resume signal " << path << " within 60 s";
    usleep(1000);
  }
}

void RunWorker(int phase) {
  KVWorker<float> kv(0, 0, 0);
  const int rank = MyRank(), nw = NumWorkers(), ns = NumServers();
  const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
  EXPECT(krs.size() == static_cast<size_t>(ns)) << "ranges " << krs.size() << " for " << ns << " servers";
  std::vector<Key> keys;
  for (int s = 0; s < ns; ++s) {
    for (int k = 0; k < kKeysPerServer; ++k) keys.push_back(krs[s].begin() + k);
  }
  std::vector<float> vals(keys.size() * kLen, static_cast<float>((rank + 1) * (phase + 1)));
  kv.Wait(kv.Push(keys, vals));
  // every worker's push is in before anyone pulls
  Postoffice::Get()->Barrier(0, kWorkerGroup);
  std::vector<float> got;
  kv.Wait(kv.Pull(keys, &got));
  float want = 0;
  for (int q = 0; q <= phase; ++q) {
    int w = q == phase ? nw : compat::EnvInt("DMLC_NUM_WORKER", 0) - 1;
    want += static_cast<float>((q + 1) * w * (w + 1) / 2);
  }
  EXPECT(got.size() == vals.size()) << "pulled " << got.size() << " values";
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT(got[i] == want) << "phase " << phase << " value " << i << ": " << got[i] << ", want " << want;
  }
  std::printf("test_suspend_resume: phase %d worker rank %d of %d: exact sums (%g)\n", phase, rank, nw, want);
}

}  // namespace

int main() {
  const Node::Role role = GetRole(compat::Env("DMLC_ROLE"));
  const int total = compat::EnvInt("DMLC_NUM_WORKER", 0);
  const int index = compat::EnvInt("ELASTICPS_LOCAL_INDEX", 0);
  const std::string signal = compat::Env("SR_SIGNAL");
  EXPECT(total >= 2) << "run with 2 workers or more";
  EXPECT(!signal.empty()) << "set SR_SIGNAL to a path that does not exist yet";
  const int workers[2] = {total - 1, total};
  for (int phase = 0; phase < 2; ++phase) {
    if (phase == 1 && role != Node::SCHEDULER) WaitForSignal(signal);
    if (role == Node::WORKER && index >= workers[phase]) continue;  // joins later
    // resume(num_workers, ...) in BytePS: new counts, then StartPS again
    setenv("DMLC_NUM_WORKER", std::to_string(workers[phase]).c_str(), 1);
    StartPS(0, role, -1, true);
    EXPECT(NumWorkers() == workers[phase]) << "phase " << phase << ": " << NumWorkers() << " workers";
    if (role == Node::WORKER) {
      RunWorker(phase);
      Finalize(0, role, true);
    } else if (role == Node::SERVER) {
      {
        std::lock_guard<std::mutex> lk(store_mu);
        range_begin = Postoffice::Get()->GetServerKeyRanges()[MyRank()].begin();
      }
      KVServer<float>* server = new KVServer<float>(0);
      server->set_request_handle(Handle);
      Finalize(0, role, true);
      delete server;
    } else {
      Finalize(0, role, true);
      if (phase == 0) {
        FILE* f = std::fopen(signal.c_str(), "w");
        EXPECT(f != nullptr) << "cannot create " << signal;
        std::fclose(f);
      }
    }
  }
  std::printf("test_suspend_resume: %s done\n", compat::Env("DMLC_ROLE").c_str());
  return 0;
}

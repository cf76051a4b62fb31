// Throughput benchmark in the style of the reference harness (spec section
// 8): KVWorker<char>, one key per server, each value split evenly over all
// servers; sequential push and pull (Wait after every operation) and
// pipelined ones (8 in flight), per value size. Prints one line per size
// and checks that the last pull returns what was pushed.
//
// BENCH_SIZES (bytes, comma-separated; default 4096,262144,4194304) and
// BENCH_ITERS (default 50) tune it.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

// Keeps the last value pushed to each key; pulls return it.
struct Store {
  std::unordered_map<Key, std::vector<char>> data;
  void operator()(const KVMeta& meta, const KVPairs<char>& req, KVServer<char>* server) {
    KVPairs<char> res;
    if (meta.push) {
      EXPECT(req.keys.size() == 1u) << "one key per server";
      data[req.keys[0]].assign(req.vals.data(), req.vals.data() + req.vals.size());
    } else {
      std::vector<char>& v = data[req.keys[0]];
      res.keys = req.keys;
      res.vals = SArray<char>(v.data(), v.size(), false);  // zero copy: sent during Response
      res.lens = {static_cast<int>(v.size())};
    }
    server->Response(meta, res);
  }
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<size_t> Sizes() {
  std::vector<size_t> sizes;
  std::stringstream ss(compat::Env("BENCH_SIZES", "4096,262144,4194304"));
  std::string item;
  while (std::getline(ss, item, ',')) sizes.push_back(std::strtoull(item.c_str(), nullptr, 10));
  return sizes;
}

void Bench(KVWorker<char>* kv, size_t size, int iters) {
  const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
  size_t ns = krs.size();
  SArray<Key> keys;
  SArray<int> lens;
  size_t done = 0;
  for (size_t i = 0; i < ns; ++i) {
    size_t end = size * (i + 1) / ns;
    keys.push_back(krs[i].begin() + size * 64 + MyRank());  // per size and worker
    lens.push_back(static_cast<int>(end - done));
    done = end;
  }
  std::vector<char> buf(size);
  for (size_t i = 0; i < size; ++i) buf[i] = static_cast<char>(i * 7 + MyRank());
  SArray<char> vals(buf.data(), size, false);
  std::vector<char> out(size);
  SArray<char> dst(out.data(), size, false);

  kv->Wait(kv->ZPush(keys, vals, lens));  // warm up, and create the key

  double t0 = Now();
  for (int i = 0; i < iters; ++i) kv->Wait(kv->ZPush(keys, vals, lens));
  double push_seq = Now() - t0;

  t0 = Now();
  for (int i = 0; i < iters; ++i) kv->Wait(kv->ZPull(keys, &dst));
  double pull_seq = Now() - t0;

  const int depth = 8;
  std::vector<int> ts;
  t0 = Now();
  for (int i = 0; i < iters; ++i) {
    ts.push_back(kv->ZPush(keys, vals, lens));
    if (i >= depth) kv->Wait(ts[i - depth]);
  }
  for (int t : ts) kv->Wait(t);
  double push_pipe = Now() - t0;

  ts.clear();
  std::vector<SArray<char>> dsts(depth);
  t0 = Now();
  for (int i = 0; i < iters; ++i) {
    if (i >= depth) kv->Wait(ts[i - depth]);
    ts.push_back(kv->ZPull(keys, &dsts[i % depth]));
  }
  for (int t : ts) kv->Wait(t);
  double pull_pipe = Now() - t0;

  EXPECT(std::memcmp(out.data(), buf.data(), size) == 0) << "pulled bytes differ from pushed ones";
  double mb = static_cast<double>(size) * iters / 1e6;
  std::printf(
      "bench worker=%d servers=%zu size=%zu: push_seq %.1f MB/s (%.0f us)  pull_seq %.1f MB/s (%.0f us)  "
      "push_pipe %.1f MB/s  pull_pipe %.1f MB/s\n",
      MyRank(), ns, size, mb / push_seq, push_seq / iters * 1e6, mb / pull_seq, pull_seq / iters * 1e6,
      mb / push_pipe, mb / pull_pipe);
  std::fflush(stdout);
}

}  // namespace

int main() {
  Start(0);
  KVServer<char>* server = nullptr;
  if (IsServer()) {
    server = new KVServer<char>(0);
    server->set_request_handle(Store());
  }
  if (IsWorker()) {
    KVWorker<char> kv(0, 0);
    int iters = compat::EnvInt("BENCH_ITERS", 50);
    for (size_t size : Sizes()) Bench(&kv, size, iters);
  }
  Finalize(0, true);
  delete server;
  return 0;
}

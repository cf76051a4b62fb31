// The transport benchmark's node program in C++: the same matrix as
// elasticps's own bench nodes, so that
//
//   elasticps bench --cxx compat_tests/build/test_benchmark
//
// measures every cell with Go-native servers and workers and again with
// this program (KVServer<char> / KVWorker<char>) as servers and workers, in
// the same run, and prints the ratio. It uses ps-lite's API only: built
// against dmlc ps-lite instead of the bridge, it measures ps-lite itself
// (--cxx ps-lite=PATH).
//
// The plan comes from the parent (ELASTICPS_BENCH_CELLS "size op mode,...",
// ELASTICPS_BENCH_DURATION_NS, ELASTICPS_BENCH_OPS, ELASTICPS_BENCH_DEPTH);
// results go to stdout in the Go nodes' format (one JSON line per cell,
// latencies in the same log-linear histogram). Server replies carry a byte
// pattern that workers check once per pull cell, so a fast wrong answer
// fails the run instead of winning it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

struct Cell {
  size_t size;
  bool push;
  bool pipe;
  std::string name;
};

std::vector<Cell> Cells() {
  std::vector<Cell> cells;
  std::stringstream ss(compat::Env("ELASTICPS_BENCH_CELLS"));
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::stringstream is(item);
    Cell c;
    std::string op, mode;
    is >> c.size >> op >> mode;
    EXPECT(!is.fail() && c.size > 0 && (op == "push" || op == "pull") && (mode == "seq" || mode == "pipe"))
        << "bad cell '" << item << "' in ELASTICPS_BENCH_CELLS (this program is started by 'elasticps bench --cxx')";
    c.push = op == "push";
    c.pipe = mode == "pipe";
    c.name = item;
    cells.push_back(c);
  }
  EXPECT(!cells.empty()) << "ELASTICPS_BENCH_CELLS is empty (this program is started by 'elasticps bench --cxx')";
  return cells;
}

// The byte at offset i of every pull reply.
char Pattern(size_t i) { return static_cast<char>(i * 7 + 3); }

// Answers at once: a push with an empty ack, a pull with cmd bytes of the
// pattern from a buffer built once.
struct Handler {
  std::vector<char>* vals;
  void operator()(const KVMeta& meta, const KVPairs<char>& req, KVServer<char>* server) {
    KVPairs<char> res;
    if (meta.pull) {
      EXPECT(meta.cmd >= 0 && static_cast<size_t>(meta.cmd) <= vals->size())
          << "pull of " << meta.cmd << " bytes, more than the plan's largest";
      res.keys = req.keys;
      res.vals = SArray<char>(vals->data(), meta.cmd, false);  // read during Response
    }
    server->Response(meta, res);
  }
};

int64_t NowNS() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Log-linear histogram, bucket for bucket the bench's own (bench_stats.go).
struct Hist {
  std::map<int, int64_t> counts;
  int64_t sum = 0, n = 0;
  void Add(int64_t ns) {
    counts[Bucket(ns)]++;
    sum += ns;
    n++;
  }
  static int Bucket(int64_t ns) {
    const int sub = 4;
    if (ns < (1 << sub)) return ns < 0 ? 0 : static_cast<int>(ns);
    uint64_t u = static_cast<uint64_t>(ns);
    int e = 63 - __builtin_clzll(u) - sub;
    return (e + 1) << sub | static_cast<int>((u >> e) & ((1u << sub) - 1));
  }
};

class Run {
 public:
  Run(KVWorker<char>* kv, const Cell& cell, int depth) : kv_(kv), cell_(cell) {
    const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
    for (const Range& r : krs) keys_.push_back(r.begin());  // one key per server
    part_ = static_cast<int>(cell.size / krs.size());
    slots_ = cell.pipe ? (depth > 0 ? depth : 1) : 1;
    if (cell.push) {
      src_.resize(cell.size);
      for (size_t i = 0; i < cell.size; ++i) src_[i] = static_cast<char>(i);
      vals_ = SArray<char>(src_.data(), src_.size(), false);
    } else {
      bufs_.resize(slots_);
      for (int i = 0; i < slots_; ++i) {
        bufs_[i].assign(static_cast<size_t>(part_) * keys_.size(), 0);
        dsts_.push_back(SArray<char>(bufs_[i].data(), bufs_[i].size(), false));
      }
    }
  }

  // Issues ops operations (or, with ops 0, as many as fit in dur_ns) and
  // records each one's latency in h, when given.
  void Do(int ops, int64_t dur_ns, Hist* h) {
    std::vector<int> ts(slots_);
    std::vector<int64_t> start(slots_);
    int64_t deadline = NowNS() + dur_ns;
    int issued = 0, done = 0;
    auto more = [&]() { return ops > 0 ? issued < ops : NowNS() < deadline; };
    while (issued < slots_ && more()) {
      start[issued] = NowNS();
      ts[issued] = Issue(issued);
      issued++;
    }
    while (done < issued) {
      int slot = done % slots_;
      kv_->Wait(ts[slot]);
      if (h != nullptr) h->Add(NowNS() - start[slot]);
      done++;
      if (more()) {
        start[slot] = NowNS();
        ts[slot] = Issue(slot);
        issued++;
      }
    }
  }

  // Checks the last pull's bytes against the servers' pattern.
  void Check() const {
    if (cell_.push) return;
    for (size_t k = 0; k < keys_.size(); ++k) {
      for (int i = 0; i < part_; ++i) {
        char got = bufs_[0][k * part_ + i];
        EXPECT(got == Pattern(i)) << "cell " << cell_.name << ": byte " << i << " of server " << k
                                  << "'s reply is " << int(got) << ", want " << int(Pattern(i));
      }
    }
  }

 private:
  int Issue(int slot) {
    if (cell_.push) return kv_->ZPush(keys_, vals_, SArray<int>(), part_);
    return kv_->ZPull(keys_, &dsts_[slot], nullptr, part_);
  }

  KVWorker<char>* kv_;
  Cell cell_;
  SArray<Key> keys_;
  int part_ = 0;
  int slots_ = 1;
  std::vector<char> src_;
  SArray<char> vals_;
  std::vector<std::vector<char>> bufs_;
  std::vector<SArray<char>> dsts_;
};

void Report(size_t cell_index, const Cell& cell, int64_t elapsed, const Hist& h) {
  std::ostringstream os;
  os << "ELASTICPS_BENCH_RESULT {\"cell\":" << cell_index << ",\"rank\":" << MyRank() << ",\"ops\":" << h.n
     << ",\"bytes\":" << h.n * static_cast<int64_t>(cell.size) << ",\"elapsed_ns\":" << elapsed << ",\"hist\":[";
  bool first = true;
  for (const auto& bc : h.counts) {
    os << (first ? "" : ",") << "[" << bc.first << "," << bc.second << "]";
    first = false;
  }
  os << "],\"sum_ns\":" << h.sum << "}\n";
  std::string s = os.str();
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

void Worker(const std::vector<Cell>& cells) {
  KVWorker<char> kv(0, 0);
  int ops = compat::EnvInt("ELASTICPS_BENCH_OPS", 0);
  int depth = compat::EnvInt("ELASTICPS_BENCH_DEPTH", 8);
  int64_t dur = std::atoll(compat::Env("ELASTICPS_BENCH_DURATION_NS", "1000000000").c_str());
  for (size_t i = 0; i < cells.size(); ++i) {
    if (MyRank() == 0) {
      std::printf("ELASTICPS_BENCH_PROGRESS %zu %zu %s\n", i + 1, cells.size(), cells[i].name.c_str());
      std::fflush(stdout);
    }
    Run r(&kv, cells[i], depth);
    r.Do(ops / 10 > 3 ? ops / 10 : 3, 0, nullptr);  // warm up
    Postoffice::Get()->Barrier(0, kWorkerGroup);
    Hist h;
    int64_t t0 = NowNS();
    r.Do(ops, dur, &h);
    int64_t elapsed = NowNS() - t0;
    r.Check();
    Report(i, cells[i], elapsed, h);
    Postoffice::Get()->Barrier(0, kWorkerGroup);
  }
}

}  // namespace

int main() {
  std::vector<Cell> cells = Cells();
  Start(0);
  KVServer<char>* server = nullptr;
  std::vector<char> reply;
  if (IsServer()) {
    size_t largest = 0;
    int ns = Postoffice::Get()->num_servers();
    for (const Cell& c : cells) largest = std::max(largest, c.size / ns);
    reply.resize(largest);
    for (size_t i = 0; i < largest; ++i) reply[i] = Pattern(i);
    server = new KVServer<char>(0);
    server->set_request_handle(Handler{&reply});
  }
  // dmlc ps-lite aborts on a request that arrives before the handler is
  // set: workers start once every server has one.
  Postoffice::Get()->Barrier(0, kServerGroup + kWorkerGroup);
  if (IsWorker()) Worker(cells);
  Finalize(0, true);
  delete server;
  return 0;
}

// The BytePS fork's IPC benchmark program (spec section 7,
// test_ipc_benchmark), as its API is used, with bounded rounds and exact
// checks instead of an endless loop of timings:
//  - main sets BYTEPS_LOCAL_SIZE=1 and BYTEPS_ENABLE_IPC=1 with setenv
//    before StartPS(0, role, -1, true) (here without overwriting, so that
//    a run can turn IPC off); the bridge must read them through its own
//    getenv, as the Go runtime keeps a copy of the environment;
//  - every worker keeps each key's value in a POSIX shared-memory segment
//    of its own ("BytePS_ShM_<pid>_<key>": shm_open, ftruncate, mmap),
//    pushes it from there and pulls into it (ZPush / ZPull with char
//    values, one key per request, lens[0] == vals.size()), and unmaps and
//    unlinks every segment after Finalize;
//  - servers: KVServer<char>(0) whose handler decodes the key against its
//    own range (key - krs[MyRank()].begin(), keys encoded as i << 16).
// Key i lives on server i % servers. Values are int32 (sums exact): worker
// r pushes (r + 1) * (i + 1) + e as element e of key i, once as the fork's
// init push and then once per round; after each round's pushes the
// workers meet at a barrier, pull every key into its segment and check
// it, and meet again before the next round's pushes.
// argv[1] = value bytes per key (a multiple of 4, at most
// BYTEPS_PARTITION_BYTES); NUM_KEY_PER_SERVER keys per server (default
// 4); ROUNDS rounds (default 5).
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

int len_bytes = 65536;
int keys_per_server = 4;
int rounds = 5;

Key EncodeKey(int i) { return static_cast<Key>(i) << 16; }

int NumKeys() { return NumServers() * keys_per_server; }

// The sum the servers hold for element e of key i after p pushes of it by
// every worker.
int32_t Expected(int i, int e, int p) {
  int w = NumWorkers();
  return p * ((i + 1) * w * (w + 1) / 2 + w * e);
}

// ---------------------------------------------------------------- server

class Server {
 public:
  Server() : server_(new KVServer<char>(0)) {
    server_->set_request_handle(
        [this](const KVMeta& m, const KVPairs<char>& d, KVServer<char>* s) { Handle(m, d, s); });
  }
  ~Server() { delete server_; }

 private:
  void Handle(const KVMeta& meta, const KVPairs<char>& req, KVServer<char>* s) {
    std::lock_guard<std::mutex> lk(mu_);
    EXPECT(req.keys.size() == 1u) << "one key per request, got " << req.keys.size();
    const Range& mine = Postoffice::Get()->GetServerKeyRanges()[MyRank()];
    EXPECT(req.keys[0] >= mine.begin() && req.keys[0] < mine.end())
        << "key " << req.keys[0] << " is not in server " << MyRank() << "'s range";
    Key key = req.keys[0] - mine.begin();
    std::vector<int32_t>& store = store_[key];
    if (meta.push) {
      EXPECT(req.lens.size() == 1u && req.lens[0] == static_cast<int>(req.vals.size()))
          << "push lens of key " << key;
      EXPECT(req.vals.size() == static_cast<size_t>(len_bytes)) << req.vals.size();
      const int32_t* v = reinterpret_cast<const int32_t*>(req.vals.data());
      size_t n = req.vals.size() / sizeof(int32_t);
      if (store.empty()) store.assign(n, 0);
      for (size_t i = 0; i < n; ++i) store[i] += v[i];
      KVPairs<char> res;  // the fork's empty push response
      s->Response(meta, res);
      return;
    }
    EXPECT(!store.empty()) << "pull of key " << key << " before any push";
    KVPairs<char> res;
    res.keys = req.keys;
    res.vals.CopyFrom(reinterpret_cast<const char*>(store.data()), store.size() * sizeof(int32_t));
    res.lens.push_back(static_cast<int>(res.vals.size()));
    s->Response(meta, res);
  }

  KVServer<char>* server_;
  std::mutex mu_;
  std::map<Key, std::vector<int32_t>> store_;
};

// ---------------------------------------------------------------- worker

struct Segment {
  std::string name;
  char* addr = nullptr;
  size_t size = 0;
};

std::vector<Segment> segments;

char* OpenSharedMemory(Key key, size_t size) {
  Segment s;
  s.name = "BytePS_ShM_" + std::to_string(getpid()) + "_" + std::to_string(key);
  s.size = size;
  int fd = shm_open(s.name.c_str(), O_CREAT | O_RDWR, 0600);
  EXPECT(fd >= 0) << "shm_open " << s.name << ": " << strerror(errno);
  EXPECT(ftruncate(fd, size) == 0) << "ftruncate " << s.name << ": " << strerror(errno);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  EXPECT(p != MAP_FAILED) << "mmap " << s.name << ": " << strerror(errno);
  close(fd);
  s.addr = static_cast<char*>(p);
  segments.push_back(s);
  return s.addr;
}

void ReleaseSharedMemory() {
  for (const Segment& s : segments) {
    EXPECT(munmap(s.addr, s.size) == 0) << s.name << ": " << strerror(errno);
    EXPECT(shm_unlink(s.name.c_str()) == 0) << s.name << ": " << strerror(errno);
    int fd = shm_open(s.name.c_str(), O_RDONLY, 0);
    EXPECT(fd < 0 && errno == ENOENT) << s.name << " is still there after shm_unlink";
  }
}

struct KeyBufs {
  SArray<Key> keys;
  SArray<char> vals;  // the key's segment: pushed from, pulled into
  SArray<int> lens;
};

void Fill(KeyBufs& b, int rank, int i) {
  int32_t* v = reinterpret_cast<int32_t*>(b.vals.data());
  for (int e = 0; e < len_bytes / 4; ++e) v[e] = (rank + 1) * (i + 1) + e;
}

void Check(const KeyBufs& b, int i, int p, const char* seg) {
  EXPECT(b.vals.size() == static_cast<size_t>(len_bytes)) << b.vals.size();
  EXPECT(b.vals.data() == seg) << "the pull of key " << i << " did not land in its shared-memory segment";
  EXPECT(b.lens.size() == 1u && b.lens[0] == len_bytes) << "lens of key " << i;
  const int32_t* v = reinterpret_cast<const int32_t*>(b.vals.data());
  for (int e = 0; e < len_bytes / 4; ++e) {
    EXPECT(v[e] == Expected(i, e, p)) << "key " << i << " element " << e << " after " << p
                                      << " pushes: " << v[e] << " != " << Expected(i, e, p);
  }
}

void RunWorker() {
  KVWorker<char> kv(0, 0);
  const std::vector<Range>& krs = Postoffice::Get()->GetServerKeyRanges();
  EXPECT(static_cast<int>(krs.size()) == NumServers()) << krs.size();
  int rank = MyRank();
  std::vector<KeyBufs> bufs(NumKeys());
  std::vector<char*> segs(NumKeys());
  for (int i = 0; i < NumKeys(); ++i) {
    KeyBufs& b = bufs[i];
    segs[i] = OpenSharedMemory(EncodeKey(i), len_bytes);
    b.vals.reset(segs[i], len_bytes, [](void*) {});
    b.keys.push_back(krs[i % NumServers()].begin() + EncodeKey(i));
    b.lens.push_back(len_bytes);
    Fill(b, rank, i);
    kv.Wait(kv.ZPush(b.keys, b.vals, b.lens));  // the fork's init push
  }
  auto start = std::chrono::steady_clock::now();
  for (int r = 1; r <= rounds; ++r) {
    std::vector<int> ts;
    for (int i = 0; i < NumKeys(); ++i) {
      Fill(bufs[i], rank, i);  // the last pull overwrote the segment
      ts.push_back(kv.ZPush(bufs[i].keys, bufs[i].vals, bufs[i].lens));
    }
    for (int t : ts) kv.Wait(t);
    Postoffice::Get()->Barrier(0, kWorkerGroup);  // every push of round r is in
    ts.clear();
    for (int i = 0; i < NumKeys(); ++i) ts.push_back(kv.ZPull(bufs[i].keys, &bufs[i].vals, &bufs[i].lens));
    for (int t : ts) kv.Wait(t);
    for (int i = 0; i < NumKeys(); ++i) Check(bufs[i], i, r + 1, segs[i]);
    Postoffice::Get()->Barrier(0, kWorkerGroup);  // every pull of round r is done
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  printf("worker %d: %d keys of %d bytes in shared memory, %d rounds, sums exact; goodput %.2f Gbps\n", rank,
         NumKeys(), len_bytes, rounds, 8.0 * 2 * len_bytes * NumKeys() * rounds / secs / 1e9);
}

}  // namespace

int main(int argc, char* argv[]) {
  setenv("BYTEPS_LOCAL_SIZE", "1", 1);
  setenv("BYTEPS_ENABLE_IPC", "1", 0);
  if (argc > 1) len_bytes = atoi(argv[1]);
  EXPECT(len_bytes > 0 && len_bytes % 4 == 0) << "value bytes must be a positive multiple of 4: " << len_bytes;
  int partition = compat::EnvInt("BYTEPS_PARTITION_BYTES", 4096000);
  EXPECT(len_bytes <= partition) << "tensor partition is not supported in this program: " << len_bytes
                                 << " bytes > BYTEPS_PARTITION_BYTES=" << partition;
  keys_per_server = compat::EnvInt("NUM_KEY_PER_SERVER", 4);
  rounds = compat::EnvInt("ROUNDS", 5);

  Node::Role role = GetRole(compat::Env("DMLC_ROLE", "worker"));
  StartPS(0, role, -1, true);
  if (IsServer()) {
    Server server;
    Finalize(0, role, true);
    return 0;
  }
  if (!IsScheduler()) RunWorker();
  Finalize(0, role, true);
  ReleaseSharedMemory();
  return 0;
}

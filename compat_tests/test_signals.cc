// A host with its own signal handlers: SIGINT and SIGTERM handlers installed
// with sigaction (SA_ONSTACK, as README.md asks of hosts) after the library
// has started its runtime. Every process keeps signalling itself while the
// job does KV traffic: each signal must reach the host's handler, and no
// node may lose its receive loop (a blocking receive interrupted by a
// signal must be retried).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common.h"
#include "ps/ps.h"

using namespace ps;

namespace {

volatile sig_atomic_t got_int = 0;
volatile sig_atomic_t got_term = 0;

void OnSignal(int sig) {
  if (sig == SIGINT) got_int = got_int + 1;
  if (sig == SIGTERM) got_term = got_term + 1;
}

void Install(int sig) {
  struct sigaction sa;
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  EXPECT(sigaction(sig, &sa, nullptr) == 0) << "sigaction";
}

// Sends `count` signals to this process, alternating SIGINT and SIGTERM,
// each after the previous one was handled (pending signals coalesce).
void Signaller(int count, std::atomic<bool>* stop) {
  for (int i = 0; i < count && !*stop; ++i) {
    bool term = i % 2 == 1;
    int before = term ? got_term : got_int;
    kill(getpid(), term ? SIGTERM : SIGINT);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((term ? got_term : got_int) == before) {
      EXPECT(std::chrono::steady_clock::now() < deadline) << "signal " << i << " never reached the handler";
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

int main() {
  Install(SIGINT);
  Install(SIGTERM);
  const int signals = 200;
  std::atomic<bool> stop(false);
  std::thread sig(Signaller, signals, &stop);

  Start(0);
  KVServer<float>* server = nullptr;
  if (IsServer()) {
    server = new KVServer<float>(0);
    server->set_request_handle(KVServerDefaultHandle<float>());
  }
  if (IsWorker()) {
    KVWorker<float> kv(0, 0);
    const int num = 1000, repeat = 300;
    std::vector<Key> keys(num);
    std::vector<float> vals(num);
    for (int i = 0; i < num; ++i) {
      keys[i] = kMaxKey / num * i + MyRank();
      vals[i] = static_cast<float>(i % 10);
    }
    for (int r = 1; r <= repeat; ++r) {
      kv.Wait(kv.Push(keys, vals));
      std::vector<float> out;
      kv.Wait(kv.Pull(keys, &out));
      for (int i = 0; i < num; ++i) EXPECT(out[i] == vals[i] * r) << "round " << r << " key " << i;
    }
  }
  sig.join();
  EXPECT(got_int + got_term == signals) << got_int << " SIGINT + " << got_term << " SIGTERM handled, sent " << signals;
  Finalize(0, true);
  delete server;
  std::printf("test_signals: %d signals handled OK\n", signals);
  return 0;
}

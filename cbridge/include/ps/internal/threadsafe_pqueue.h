/*
 * ps::ThreadsafePQueue: a blocking queue of Messages, higher
 * meta.priority first and first-in first-out among equal priorities. Not
 * used by the bridge itself (the library orders each customer's messages
 * the same way); kept for code written against ps-lite's utilities.
 */
#ifndef PS_INTERNAL_THREADSAFE_PQUEUE_H_
#define PS_INTERNAL_THREADSAFE_PQUEUE_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <queue>
#include <utility>
#include <vector>

#include "ps/base.h"
#include "ps/internal/message.h"

namespace ps {

class ThreadsafePQueue {
 public:
  ThreadsafePQueue() {}
  ~ThreadsafePQueue() {}

  void Push(Message value) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push(Entry{std::move(value), seq_++});
    }
    cond_.notify_all();
  }

  void WaitAndPop(Message* value) {
    std::unique_lock<std::mutex> lk(mu_);
    cond_.wait(lk, [this] { return !queue_.empty(); });
    *value = queue_.top().msg;
    queue_.pop();
  }

 private:
  struct Entry {
    Message msg;
    uint64_t seq;  // arrival order, to keep equal priorities FIFO
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.msg.meta.priority != b.msg.meta.priority) {
        return a.msg.meta.priority < b.msg.meta.priority;
      }
      return a.seq > b.seq;
    }
  };
  std::mutex mu_;
  std::priority_queue<Entry, std::vector<Entry>, Later> queue_;
  std::condition_variable cond_;
  uint64_t seq_ = 0;
};

}  // namespace ps
#endif  // PS_INTERNAL_THREADSAFE_PQUEUE_H_

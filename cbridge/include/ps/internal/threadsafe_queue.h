/*
 * ps::ThreadsafeQueue<T>: an unbounded FIFO for handing values between
 * threads. Not used by the bridge itself; kept for code written against
 * ps-lite's utilities.
 */
#ifndef PS_INTERNAL_THREADSAFE_QUEUE_H_
#define PS_INTERNAL_THREADSAFE_QUEUE_H_

#include <condition_variable>
#include <mutex>
#include <queue>
#include <utility>

#include "ps/base.h"

namespace ps {

template <typename T>
class ThreadsafeQueue {
 public:
  ThreadsafeQueue() {}
  ~ThreadsafeQueue() {}

  /* Appends value and wakes a waiting consumer. */
  void Push(T value) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push(std::move(value));
    }
    cond_.notify_all();
  }

  /* Blocks until a value is available and moves the oldest into *value. */
  void WaitAndPop(T* value) {
    std::unique_lock<std::mutex> lk(mu_);
    cond_.wait(lk, [this] { return !queue_.empty(); });
    *value = std::move(queue_.front());
    queue_.pop();
  }

  /* Moves the oldest value into *value if there is one. */
  bool TryPop(T* value) {
    std::lock_guard<std::mutex> lk(mu_);
    if (queue_.empty()) return false;
    *value = std::move(queue_.front());
    queue_.pop();
    return true;
  }

  size_t Size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return queue_.size();
  }

 private:
  mutable std::mutex mu_;
  std::queue<T> queue_;
  std::condition_variable cond_;
};

}  // namespace ps
#endif  // PS_INTERNAL_THREADSAFE_QUEUE_H_
